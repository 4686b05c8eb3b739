"""The `--json` documents and the run record, declared once as types (commands.py, parts.py); their
JSON Schemas (schema.py) are published in docs/schemas/ (`python -m clusterctl.documents`)."""
from __future__ import annotations

import json
from pathlib import Path

from clusterctl.documents.commands import COMMANDS, RECORDS, ErrorDocument
from clusterctl.documents.schema import DIALECT, schema_of

SCHEMA_BASE = "https://clusterctl.dev/schemas/"  # the $id prefix: names, not addresses fetched


def schema_file(name: str) -> str:
    return f"{name}.json"


def command_schema(command: str) -> dict:
    """What `clusterctl COMMAND --json` prints: one of the command's documents, or an ErrorDocument."""
    return _schema((*COMMANDS[command], ErrorDocument), schema_file(command), f"clusterctl {command} --json")


def record_schema(name: str) -> dict:
    return _schema((RECORDS[name],), schema_file(name), name)


def _schema(types: tuple[type, ...], file: str, title: str) -> dict:
    defs: dict = {}
    refs = []
    for kind in types:
        part = schema_of(kind, "")
        defs.update(part.pop("$defs", {}))
        defs[kind.__name__] = {k: v for k, v in part.items() if k not in ("$schema", "$id", "title")}
        refs.append({"$ref": f"#/$defs/{kind.__name__}"})
    root = refs[0] if len(refs) == 1 else {"anyOf": refs}
    return {"$schema": DIALECT, "$id": SCHEMA_BASE + file, "title": title, **root, "$defs": dict(sorted(defs.items()))}


def all_schemas() -> dict[str, dict]:
    """File name -> schema, for every command and record."""
    out = {schema_file(c): command_schema(c) for c in COMMANDS}
    out.update({schema_file(r): record_schema(r) for r in RECORDS})
    return out


def schema_text(schema: dict) -> str:
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema into `directory`, removing the .json files no document has any more."""
    directory.mkdir(parents=True, exist_ok=True)
    schemas = all_schemas()
    for stale in directory.glob("*.json"):
        if stale.name not in schemas:
            stale.unlink()
    written = []
    for name, schema in schemas.items():
        path = directory / name
        path.write_text(schema_text(schema), encoding="utf-8")
        written.append(path)
    return written
