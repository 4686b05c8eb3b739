"""An object -> its JSON document, by the document type's declared fields. Pure.

`to_json` methods of objects whose attributes carry a document's fields under the same names
return `as_document(DocType, self)`: the keys are the type's, so the JSON and its published
schema cannot drift apart. A field whose JSON key is no Python name (`class`) says its key in
its metadata (parts.doc(..., key="class"))."""
from __future__ import annotations

import dataclasses
import enum


def as_document(kind: type, source) -> dict:
    """`kind`'s fields, read from `source`'s attributes of the same names, as JSON values."""
    fields = dataclasses.fields(kind)
    values = {f.name: plain(getattr(source, f.name)) for f in fields}
    kind(**values)  # every declared field is there (a missing or extra one raises here, not in a user's parser)
    return {key_of(f): values[f.name] for f in fields}


def key_of(field: dataclasses.Field) -> str:
    """The field's key in the JSON document: its name, or the key its metadata names."""
    return field.metadata.get("key", field.name)


def plain(value):
    """Enums as their values, tuples as lists, nested documents as dicts."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key_of(f): plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value
