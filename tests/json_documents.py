"""Every `--json` document the test suite makes clusterctl print, and every run record it writes,
checked against its published schema (docs/schemas/, generated from clusterctl/documents/).

`watch()` (a session fixture of conftest.py) wraps the CLI's two seams for the whole session: the
parser (which command this is) and emit_json (the document, as printed), and State.write_json
(run.json); Cli.finish checks the documents of clusterctl subprocesses. A document that breaks its
schema fails the test that made it."""
from __future__ import annotations

import contextlib
import io
import json
import sys
import threading
from functools import lru_cache
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schemas"
_CURRENT = threading.local()  # the command that thread's main() runs


@lru_cache(maxsize=None)
def _validator(file: str):
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads((SCHEMAS / file).read_text()))


def check(schema_name: str, document, what: str) -> None:
    """Raise AssertionError naming every place `document` breaks docs/schemas/<schema_name>.json."""
    errors = [x for e in _validator(f"{schema_name}.json").iter_errors(document) for x in _nearest(e)]
    if errors:
        lines = [f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}" for e in errors[:10]]
        raise AssertionError(f"{what} breaks docs/schemas/{schema_name}.json:\n" + "\n".join(lines))


def _nearest(error) -> list:
    """The errors of the shape `document` meant to have: one of several (anyOf: the command's documents,
    then ErrorDocument) fails as a whole; name what is wrong with the error shape when it has an error,
    else with the nearest of the others."""
    if not error.context:
        return [error]
    branches: dict[int, list] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    last = len(error.validator_value) - 1  # ErrorDocument
    if isinstance(error.instance, dict) and "error" in error.instance and last in branches:
        chosen = branches[last]
    else:
        others = [b for i, b in branches.items() if i != last] or list(branches.values())
        # the shape whose top level the document fits (its errors the deepest), then the fewest errors
        chosen = min(others, key=lambda b: (-min(len(e.absolute_path) for e in b), len(b)))
    return [x for sub in chosen for x in _nearest(sub)]


def check_command_output(command: str, text: str) -> None:
    if not (SCHEMAS / f"{command}.json").exists():
        raise AssertionError(f"no schema for `clusterctl {command} --json`: declare its document in "
                             "clusterctl/documents/commands.py (COMMANDS), then run `python -m clusterctl.documents`")
    check(command, json.loads(text), f"`clusterctl {command} --json`")


@contextlib.contextmanager
def watch():
    import clusterctl.cli as cli
    import clusterctl.render as render
    from clusterctl.state import State

    build_parser, emit_json, write_json = cli.build_parser, render.emit_json, State.write_json

    def parser_that_remembers_the_command(*args, **kwargs):
        parser = build_parser(*args, **kwargs)
        parse_args = parser.parse_args

        def parse(argv=None, namespace=None):
            args = parse_args(argv, namespace)
            _CURRENT.command = args.command
            return args

        parser.parse_args = parse
        return parser

    def emit_and_check(document, stream=None):
        printed = io.StringIO()
        emit_json(document, printed)
        (stream or sys.stdout).write(printed.getvalue())
        command = getattr(_CURRENT, "command", None)
        if command:
            check_command_output(command, printed.getvalue())

    def write_and_check(self, path, data):
        write_json(self, path, data)
        if Path(path).name == "run.json":
            check("run-record", json.loads(Path(path).read_text()), f"the run record {path}")

    cli.build_parser, render.emit_json, State.write_json = (parser_that_remembers_the_command, emit_and_check,
                                                          write_and_check)
    try:
        yield
    finally:
        cli.build_parser, render.emit_json, State.write_json = build_parser, emit_json, write_json
