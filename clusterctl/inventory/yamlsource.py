"""Safe, bounded YAML loading that remembers where every key came from.

`load_yaml` returns plain Python data (dict, list, str, int, float, bool, None) and a
`Locator` that maps a key path such as `("hosts", 1, "address")` to `file:line`. It is
shared by the inventory and playbook loaders, so the error class is a parameter: every
problem (syntax, a file too big, an alias bomb, a duplicate key, a non-plain tag) is
raised as `error_cls(what, where="file:line:col", fix=...)`.

Why not `yaml.safe_load`: it forgets line numbers, silently keeps the last of two
duplicate keys, and expands aliases without bound (a "billion laughs" file of a few
hundred bytes builds a structure of 10^9 nodes).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn, Optional, Union

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from clusterctl.errors import ClusterctlError

MAX_BYTES = 1 << 20  # 1 MiB: an inventory or playbook is a few KiB
MAX_NODES = 10_000  # nodes built, alias expansions included
MAX_DEPTH = 64

KeyPath = tuple  # of str (mapping keys) and int (sequence indices)

_TAG = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_TAG + t for t in ("null", "bool", "int", "float", "str", "timestamp")}
_MERGE_TAG = _TAG + "merge"

# problem text from PyYAML -> what to do about it
_SYNTAX_FIXES = (
    ("'\\t'", "YAML indentation must use spaces: replace the tab characters with spaces"),
    ("mapping values are not allowed",
     "a value contains ': ' or the indentation is off: quote the value or align the keys"),
    ("could not find expected ':'", "a key lacks its ':' or a quoted string is not closed"),
    ("did not find expected key", "the indentation is inconsistent: keys of one mapping must start in the same column"),
    ("expected <block end>", "the indentation is inconsistent: keys of one mapping must start in the same column"),
    ("did not find expected '-'", "items of one list must start with '-' in the same column"),
    ("found undefined alias", "define the anchor (&name) before using the alias (*name)"),
    ("found duplicate anchor", "give each anchor (&name) a different name"),
    ("expected a single document", "keep one document per file: remove the '---' separators"),
    ("found unexpected end of stream", "a quoted string or a [ ] / { } is not closed"),
    ("found unknown escape character", "in double quotes, write backslashes as \\\\ or use single quotes"),
)
_DEFAULT_SYNTAX_FIX = "fix the YAML syntax at that position (check indentation, quoting and brackets)"


class YamlError(ClusterctlError):
    """A YAML file could not be read safely (used when the caller names no error class)."""


def format_key_path(path: KeyPath) -> str:
    """("hosts", 1, "address") -> "hosts[1].address"."""
    text = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text


class Locator:
    """Where each key path of a loaded document is: its line, column and display label."""

    def __init__(self, source_name: str):
        self.source_name = source_name
        self._positions: dict[KeyPath, tuple[int, int]] = {}
        self._labels: dict[KeyPath, str] = {}
        self._raw: dict[KeyPath, str] = {}

    def record(self, path: KeyPath, line: int, col: int = 1, *, label: Optional[str] = None,
               raw: Optional[str] = None) -> None:
        """Remember that `path` is at `line:col` (1-based); `label` replaces its key path in messages."""
        self._positions[tuple(path)] = (line, col)
        if label is not None:
            self._labels[tuple(path)] = label
        if raw is not None:
            self._raw[tuple(path)] = raw

    def remember_raw(self, path: KeyPath, raw: str) -> None:
        self._raw.setdefault(tuple(path), raw)

    def position(self, path: KeyPath) -> Optional[tuple[int, int]]:
        """(line, col) of `path`, or of its nearest recorded parent; None if nothing is recorded."""
        path = tuple(path)
        for end in range(len(path), -1, -1):
            if path[:end] in self._positions:
                return self._positions[path[:end]]
        return None

    def line(self, path: KeyPath) -> Optional[int]:
        pos = self.position(path)
        return pos[0] if pos else None

    def where(self, path: KeyPath = ()) -> str:
        """"file:line" of the key or item at `path` (or of its nearest parent)."""
        line = self.line(path)
        return f"{self.source_name}:{line}" if line else self.source_name

    def label(self, path: KeyPath) -> str:
        """How to name `path` to the user: its key path, or the label a converter recorded."""
        path = tuple(path)
        for end in range(len(path), 0, -1):
            if path[:end] in self._labels:
                rest = format_key_path(path[end:])
                base = self._labels[path[:end]]
                return f"{base}.{rest}" if rest and not rest.startswith("[") else base + rest
        return format_key_path(path)

    def raw(self, path: KeyPath) -> Optional[str]:
        """The source text of a non-string scalar (so `010` stays "010", not 8)."""
        return self._raw.get(tuple(path))


def raise_at(error_cls: type, source_name: str, line: Optional[int], col: Optional[int], problem: str,
             fix: str) -> NoReturn:
    """Raise `error_cls(problem, where="file:line:col", fix)`; line/col are 1-based."""
    where = source_name
    if line:
        where += f":{line}" + (f":{col}" if col else "")
    raise error_cls(problem, where=where, fix=fix)


def raise_from_yaml_error(exc: yaml.YAMLError, source_name: str, error_cls: type, text: str = "") -> NoReturn:
    """Turn a PyYAML exception into `error_cls` with "file:line:col" and a fix."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text[: exc.position].count("\n") + 1 if text else None
        raise_at(error_cls, source_name, line, None, f"unreadable character: {exc.reason}",
                 "save the file as UTF-8 text without control characters")
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    if context:
        problem = f"{problem} ({context})"
    fix = next((f for key, f in _SYNTAX_FIXES if key in problem), _DEFAULT_SYNTAX_FIX)
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
    raise_at(error_cls, source_name, line, col, f"malformed YAML: {problem}", fix)


def read_text(path: Union[str, os.PathLike], error_cls: type = YamlError, max_bytes: int = MAX_BYTES,
              what: str = "file") -> str:
    """Read a UTF-8 text file of at most `max_bytes`; every failure becomes `error_cls`."""
    name = str(path)
    try:
        size = os.stat(path).st_size
        if os.path.isdir(path):
            raise error_cls(f"{what} {name} is a directory", where=name, fix=f"give the path of the {what} itself")
        if size > max_bytes:
            raise error_cls(f"{what} is too large ({size} bytes; the limit is {max_bytes})", where=name,
                            fix=f"give the right {what}: a {what} is a few KiB; split or trim it")
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise error_cls(f"{what} not found: {name}", where=name,
                        fix=f"check the path (relative paths start at {os.getcwd()})") from None
    except PermissionError:
        raise error_cls(f"{what} is not readable: {name}", where=name,
                        fix=f"make it readable by this user (chmod u+r {name})") from None
    except OSError as exc:
        raise error_cls(f"cannot read {what} {name}: {exc.strerror or exc}", where=name,
                        fix=f"check that {name} is a readable regular file") from None
    return decode_text(data, name, error_cls, max_bytes)


def decode_text(data: bytes, source_name: str, error_cls: type, max_bytes: int = MAX_BYTES) -> str:
    if len(data) > max_bytes:
        raise error_cls(f"file is too large (over {max_bytes} bytes)", where=source_name,
                        fix="a configuration file is a few KiB: split or trim it")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise_at(error_cls, source_name, line, None, f"not UTF-8 text (byte 0x{data[exc.start]:02x})",
                 "save the file as UTF-8")


def load_yaml(source: Union[str, bytes, os.PathLike], source_name: Optional[str] = None, *,
              error_cls: type = YamlError, max_bytes: int = MAX_BYTES,
              max_nodes: int = MAX_NODES) -> tuple[Any, Locator]:
    """Parse one YAML document safely; return (plain data, Locator).

    `source` is a path (`pathlib.Path`/os.PathLike, or a one-line `str` that names an existing
    file or ends in .yaml/.yml) or else the YAML text itself (`str`/`bytes`); `source_name`
    names it in messages (default: the path, or "<text>").
    """
    if isinstance(source, str) and "\n" not in source and (
            source.endswith((".yaml", ".yml")) or os.path.isfile(source)):
        source = Path(source)
    if isinstance(source, os.PathLike):
        name = source_name or str(source)
        text = read_text(source, error_cls, max_bytes)
    else:
        name = source_name or "<text>"
        data = source if isinstance(source, bytes) else source.encode("utf-8")
        text = decode_text(data, name, error_cls, max_bytes)
    return parse_yaml(text, name, error_cls=error_cls, max_nodes=max_nodes)


def parse_yaml(text: str, source_name: str, *, error_cls: type = YamlError,
               max_nodes: int = MAX_NODES) -> tuple[Any, Locator]:
    """Like `load_yaml` for text already read."""
    loader = None
    try:
        loader = _BoundedLoader(text, max_nodes)
        root = loader.get_single_node()
    except _TooManyNodes as exc:
        _too_many(error_cls, source_name, exc.line, max_nodes)
    except RecursionError:
        raise_at(error_cls, source_name, None, None, "nesting is too deep to be a configuration file",
                 f"keep mappings and lists at most {MAX_DEPTH} levels deep")
    except yaml.YAMLError as exc:
        raise_from_yaml_error(exc, source_name, error_cls, text)
    finally:
        if loader is not None:
            loader.dispose()
    locator = Locator(source_name)
    if root is None:
        return None, locator
    locator.record((), root.start_mark.line + 1, root.start_mark.column + 1)
    return _Builder(locator, error_cls, max_nodes).build(root, (), 0), locator


# ------------------------------------------------------------------------- internals


class _TooManyNodes(Exception):
    def __init__(self, line: int):
        super().__init__(line)
        self.line = line


def _too_many(error_cls: type, source_name: str, line: Optional[int], max_nodes: int) -> NoReturn:
    raise_at(error_cls, source_name, line, None,
             f"document expands to more than {max_nodes} nodes (an alias/anchor bomb or a runaway file)",
             "remove the nested aliases (*name) that multiply the document, or split the file")


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses to compose more than `max_nodes` nodes."""

    def __init__(self, text: str, max_nodes: int):
        super().__init__(text)
        self._composed = 0
        self._max_nodes = max_nodes

    def compose_node(self, parent, index):  # noqa: D401 - PyYAML hook
        self._composed += 1
        if self._composed > self._max_nodes:
            raise _TooManyNodes(self.peek_event().start_mark.line + 1)
        return super().compose_node(parent, index)


class _Builder:
    """Node graph -> plain data, recording positions, refusing bombs, cycles and odd tags."""

    def __init__(self, locator: Locator, error_cls: type, max_nodes: int):
        self.locator = locator
        self.error_cls = error_cls
        self.max_nodes = max_nodes
        self.visited = 0
        self.active: set[int] = set()  # ids of collection nodes being built (cycle check)
        self.scalars = yaml.constructor.SafeConstructor()

    def fail(self, node: Node, problem: str, fix: str) -> NoReturn:
        mark = node.start_mark
        raise_at(self.error_cls, self.locator.source_name, mark.line + 1, mark.column + 1, problem, fix)

    def build(self, node: Node, path: KeyPath, depth: int) -> Any:
        self.visited += 1
        if self.visited > self.max_nodes:
            line = self.locator.line(path[:1]) if path else None  # the top-level key that explodes
            _too_many(self.error_cls, self.locator.source_name, line or node.start_mark.line + 1, self.max_nodes)
        if depth > MAX_DEPTH:
            self.fail(node, "nesting is too deep to be a configuration file",
                      f"keep mappings and lists at most {MAX_DEPTH} levels deep")
        if isinstance(node, ScalarNode):
            return self.scalar(node, path)
        if id(node) in self.active:
            self.fail(node, "recursive alias: a node contains itself",
                      "an alias (*name) must not refer to its own parent")
        self.active.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                return self.sequence(node, path, depth)
            return self.mapping(node, path, depth)
        finally:
            self.active.discard(id(node))

    def check_tag(self, node: Node, allowed: set) -> None:
        if node.tag not in allowed:
            tag = node.tag.replace(_TAG, "!!")
            self.fail(node, f"unsupported YAML tag {tag}: only plain values, lists and mappings are allowed",
                      f"remove the tag {tag} and write the value as plain YAML")

    def scalar(self, node: ScalarNode, path: KeyPath) -> Any:
        self.check_tag(node, _SCALAR_TAGS)
        try:
            value = self.scalars.construct_object(node)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            self.fail(node, f"invalid {node.tag.replace(_TAG, '')} value {node.value!r}: {exc}",
                      "quote the value to keep it as text")
        if not isinstance(value, str) and path:
            self.locator.remember_raw(path, node.value)
        return value

    def sequence(self, node: SequenceNode, path: KeyPath, depth: int) -> list:
        self.check_tag(node, {_TAG + "seq"})
        items = []
        for index, child in enumerate(node.value):
            item_path = path + (index,)
            self.locator.record(item_path, child.start_mark.line + 1, child.start_mark.column + 1)
            items.append(self.build(child, item_path, depth + 1))
        return items

    def mapping(self, node: MappingNode, path: KeyPath, depth: int) -> dict:
        self.check_tag(node, {_TAG + "map"})
        result = self.merged(node, path, depth)
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.key(key_node, path, depth)
            line = key_node.start_mark.line + 1
            if key in first_line:
                self.fail(key_node, f"duplicate key '{key}' (lines {first_line[key]} and {line})",
                          f"keep one '{key}:' in this mapping: the second would silently replace the first")
            first_line[key] = line
            self.locator.record(path + (key,), line, key_node.start_mark.column + 1)
            result[key] = self.build(value_node, path + (key,), depth + 1)
        return result

    def key(self, key_node: Node, path: KeyPath, depth: int) -> Any:
        if not isinstance(key_node, ScalarNode):
            self.fail(key_node, "a mapping key must be a plain value, not a list or mapping",
                      "write the key as plain text (e.g. `name:`)")
        return self.build(key_node, (), depth + 1)

    def merged(self, node: MappingNode, path: KeyPath, depth: int) -> dict:
        """Entries from `<<: *anchor` merge keys; earlier sources win, explicit keys win over all."""
        result: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                continue
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in reversed(sources):
                if not isinstance(source, MappingNode):
                    self.fail(source, "a merge key (<<) needs a mapping or a list of mappings",
                              "write `<<: *anchor` where &anchor names a mapping")
                for key, value in self.build(source, path, depth + 1).items():
                    result[key] = value
        return result


__all__ = [
    "Locator", "YamlError", "format_key_path", "load_yaml", "parse_yaml", "raise_at",
    "raise_from_yaml_error", "read_text", "decode_text", "MAX_BYTES", "MAX_NODES",
]
