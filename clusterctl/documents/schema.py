"""A document type (a dataclass) -> its JSON Schema (draft 2020-12). Pure.

The types say what users may rely on (CONTRACT.md: "minimum; more keys welcome"): every
declared field has its type, a field without a default is required, and further keys are
allowed. A field's `metadata={"doc": ...}` becomes its description. Nested dataclasses become
`$defs`, referenced where used, so a shape shared by several documents (a finding) is
declared once.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from clusterctl.documents.convert import key_of

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_SCALARS = {str: {"type": "string"}, bool: {"type": "boolean"}, int: {"type": "integer"},
            float: {"type": "number"}, type(None): {"type": "null"}, Any: {}, object: {}}


def schema_of(document: type, schema_id: str) -> dict:
    """The JSON Schema of `document`, with `$id` `schema_id`."""
    defs: dict[str, dict] = {}
    root = _object(document, defs)
    out = {"$schema": DIALECT, "$id": schema_id, "title": document.__name__, **root}
    if defs:
        out["$defs"] = dict(sorted(defs.items()))
    return out


def _object(cls: type, defs: dict) -> dict:
    hints = typing.get_type_hints(cls)
    properties, required = {}, []
    for f in dataclasses.fields(cls):
        prop = _type(hints[f.name], defs)
        if f.metadata.get("doc"):
            prop = {"description": f.metadata["doc"], **prop}
        properties[key_of(f)] = prop
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(key_of(f))
    out: dict = {"type": "object"}
    if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):  # dataclass' generated doc
        out["description"] = " ".join(cls.__doc__.split())
    out["properties"] = properties
    if required:
        out["required"] = required
    return out


def _type(hint, defs: dict) -> dict:
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    if dataclasses.is_dataclass(hint):
        if hint.__name__ not in defs:
            defs[hint.__name__] = {}  # a placeholder first: a type may refer to itself
            defs[hint.__name__] = _object(hint, defs)
        return {"$ref": f"#/$defs/{hint.__name__}"}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [_type(a, defs) for a in args]
        simple = [o["type"] for o in options if set(o) == {"type"}]
        return {"type": simple} if len(simple) == len(options) else {"anyOf": options}
    if origin in (list, tuple):
        items = args[0] if args else Any
        return {"type": "array", "items": _type(items, defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type(args[1], defs)}
    raise TypeError(f"no JSON Schema for {hint!r}")
