"""The layering of clusterctl, read from the code itself (ast over clusterctl/**.py): the story order
(clusterctl/documents/architecture.py's STORY, the one place it is written; docs/architecture.md shows
it), the size of modules and commands, who may import paramiko/docker/fabric, and where threads and
clocks may live.

The story: a unit (a package such as `plan`, or a top-level module such as `models`) imports only units
before it, or itself. So a stage imports no later stage, no stage imports backends/, the session (api/)
or a command, `node/` imports nothing outside itself, and no two packages import each other.

The import graph counts every `import`/`from ... import` (at module level or inside a function: a
lazy import closes a loop all the same; not those under `if TYPE_CHECKING:`, which never run) and
every `importlib.import_module("clusterctl....")` whose target is a string (an f-string counts as
every module under its constant prefix: `f"clusterctl.commands.{name}"` may load any command).
Importing `a.b.c` is an edge to `a.b.c` only (Python runs the packages' `__init__` first, but a
package that imports its own parts would otherwise be a loop with each of them).

What counts as a thread or a clock (allowed only in ALLOWED_CLOCKS, below):
- creating a thread or a pool: calling `threading.Thread`/`Timer`, importing `concurrent.futures`,
  `_thread`, `multiprocessing` or `asyncio`;
- sleeping: calling `time.sleep` (however imported);
- a clock loop: a `while` whose condition reads a clock (`time.monotonic`, `time.time`,
  `time.perf_counter`) or waits (`x.wait(...)`, `x.join(...)`): a deadline or poll loop.
Not counted: a `threading.Lock`/`Event` (they make threads safe, they start none), reading a
clock to measure a duration, one bounded `wait(timeout)` on something the executor runs, and any
`sleep` inside a string (a shell script or a node program shipped as text runs on the node).

Each failure names the module and the offending line.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest

from clusterctl.documents.architecture import FACE, ORDER, STORY, unit_of

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clusterctl"
MAX_LINES = 450
MAX_TOP_LEVEL = 10
FOREIGN_LIBRARIES = ("paramiko", "docker", "fabric")

# Where threads and clocks may live, and why:
ALLOWED_CLOCKS = {
    # the engine: the pool, the connections' retry, Background, Streams, and the clock every
    # stage waits with (ticks, wait_until, attempts, Ticker)
    "clusterctl.executor": "the engine",
    # the I/O edge: paramiko's transport runs a reader thread per connection (and its keepalive),
    # a ProxyCommand or a local command is a pipe someone must read while the other end writes;
    # these are the libraries' and the OS's threads, owned where the library is
    "clusterctl.transport": "the I/O edge",
    # the rehearsal cluster: it starts local daemons (sshd, dockerd, slurmd) in namespaces on this
    # machine and waits for them to answer; it is the tests' and the demo's harness, on no run's path
    "clusterctl.sandbox": "the rehearsal cluster (test infrastructure)",
}
# Programs that run on the nodes as their own processes (shipped there and started with python,
# standard library or torch only) say so with a module-level `RUNS_ON_NODES = True`: their
# threads and clocks are that process's own, never the controller's. They live in clusterctl/node/.
NODE_PROGRAM_MARKER = "RUNS_ON_NODES"
# The commands are checked on their own (test_commands_hold_no_thread_or_clock_of_their_own), with a
# message that says where their waits go instead.
THINNED_BY_THE_SESSION_BRANCH = ("clusterctl.commands",)
MAX_COMMAND_LINES = 70  # "none over ~60 lines": parse arguments, call the session or a flow, render

_CLOCK_READS = {"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns"}
_THREAD_MODULES = ("concurrent.futures", "concurrent", "_thread", "multiprocessing", "asyncio")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    lines: int
    imports: list[Edge] = field(default_factory=list)

    def where(self, line: int) -> str:
        return f"{self.name} ({self.path.relative_to(ROOT)}:{line})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if module.path.name != "__init__.py":
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _importlib_targets(node: ast.Call) -> list[str]:
    """`importlib.import_module("a.b")` -> ["a.b"]; an f-string -> its constant prefix + "*"."""
    func = ast.unparse(node.func)
    if not func.endswith("import_module") or not node.args:
        return []
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return [arg.values[0].value + "*"]
    return []


@lru_cache(maxsize=None)
def modules() -> dict[str, Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        found[_module_name(path)] = Module(_module_name(path), path, ast.parse(text, str(path)), len(text.splitlines()))
    for module in found.values():
        module.imports = list(_imports_of(module, found))
    return found


def _imports_of(module: Module, known: dict[str, Module]):
    skipped = _type_checking_nodes(module.tree)
    for node in ast.walk(module.tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(module.name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield Edge(module.name, submodule if submodule in known else base, node.lineno)
        elif isinstance(node, ast.Call):
            for target in _importlib_targets(node):
                if target.endswith("*"):
                    for name in known:
                        if name.startswith(target[:-1]) and name != target[:-1].rstrip("."):
                            yield Edge(module.name, name, node.lineno)
                else:
                    yield Edge(module.name, target, node.lineno)


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _internal_graph() -> dict[str, list[Edge]]:
    known = modules()
    return {name: [e for e in m.imports if e.target in known and e.target != name] for name, m in known.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module."""
    return _strongly_connected({name: sorted({e.target for e in edges}) for name, edges in _internal_graph().items()})


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe_cycle(component: list[str]) -> str:
    members, known = set(component), modules()
    links = sorted({f"  {known[e.source].where(e.line)} imports {e.target}"
                    for name in component for e in _internal_graph()[name] if e.target in members})
    return "an import loop between " + ", ".join(component) + ":\n" + "\n".join(links)


def _through_cli(component: list[str]) -> bool:
    return "clusterctl.cli" in component


# --------------------------------------------------------------------------- size


def test_there_are_at_most_ten_top_level_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} modules directly in clusterctl/ (at most {MAX_TOP_LEVEL}): {top}"


def test_no_module_is_over_450_lines():
    long = [f"{m.path.relative_to(ROOT)}:{m.lines}: {m.lines} lines (at most {MAX_LINES}): split it by job"
            for m in modules().values() if m.lines > MAX_LINES]
    assert not long, "\n".join(long)


def test_every_command_is_thin():
    long = [f"{m.path.relative_to(ROOT)}: {m.lines} lines (at most {MAX_COMMAND_LINES}): move the flow into "
            "api/, backends/ or a stage" for m in modules().values()
            if _inside(m.name, "clusterctl.commands") and m.lines > MAX_COMMAND_LINES]
    assert not long, "\n".join(long)


# --------------------------------------------------------------------------- the story


def _story_where(unit: str) -> str:
    return f"{unit} (place {ORDER.index(unit) + 1} of {len(ORDER)})"


def _edges_between_units():
    for module in modules().values():
        for edge in module.imports:
            if edge.target in modules() and unit_of(edge.target) != unit_of(module.name):
                yield module, edge


def test_every_package_and_top_level_module_has_a_place_in_the_story():
    units = {unit_of(name) for name in modules()}
    missing = sorted(units - set(ORDER))
    assert not missing, ("place them in STORY (clusterctl/documents/architecture.py), after everything they "
                         f"import: {missing}")
    assert len(ORDER) == len(set(ORDER)), "a unit is placed twice in STORY"


def test_a_unit_imports_no_later_unit_of_the_story():
    bad = sorted({f"{m.where(e.line)} imports {e.target}: {_story_where(unit_of(e.target))} comes after "
                  f"{_story_where(unit_of(m.name))}" for m, e in _edges_between_units()
                  if unit_of(e.target) in ORDER and unit_of(m.name) in ORDER
                  and ORDER.index(unit_of(e.target)) > ORDER.index(unit_of(m.name))})
    assert not bad, ("a stage imports no later stage (move the code to where it belongs, or the shared value "
                     "down to the ground):\n" + "\n".join(bad))


def test_no_stage_imports_backends_the_session_or_a_command():
    below_the_face = ORDER[:ORDER.index(FACE[0])]
    bad = sorted({f"{m.where(e.line)} imports {e.target}" for m, e in _edges_between_units()
                  if unit_of(m.name) in below_the_face and unit_of(e.target) in FACE})
    assert not bad, "\n".join(bad)


def test_node_imports_nothing_outside_itself():
    bad = sorted({f"{m.where(e.line)} imports {e.target}" for m in modules().values() if unit_of(m.name) == "node"
                  for e in m.imports if _inside(e.target, "clusterctl") and not _inside(e.target, "clusterctl.node")})
    assert not bad, "clusterctl/node/ runs on the nodes, where nothing of clusterctl is installed:\n" + "\n".join(bad)


def test_no_two_packages_import_each_other_even_lazily():
    graph: dict[str, set[str]] = {}
    lines: dict[tuple[str, str], list[str]] = {}
    for m, e in _edges_between_units():
        graph.setdefault(unit_of(m.name), set()).add(unit_of(e.target))
        lines.setdefault((unit_of(m.name), unit_of(e.target)), []).append(f"{m.where(e.line)} imports {e.target}")
    loops = []
    for component in _strongly_connected({u: sorted(graph.get(u, ())) for u in set(graph) | set(ORDER)}):
        links = [line for a in component for b in component for line in sorted(lines.get((a, b), []))]
        loops.append("a package loop between " + ", ".join(component) + ":\n  " + "\n  ".join(links))
    assert not loops, "\n".join(loops)


def test_the_story_reads_as_the_architecture_says():
    stages = next(t.units for t in STORY if t.name == "stages")
    assert stages.index("inventory") < stages.index("plan") < stages.index("preflight") < stages.index("run")
    assert ORDER[0] == "node" and ORDER[-1] == "__main__"


# --------------------------------------------------------------------------- module loops


def test_no_two_modules_import_each_other_even_through_importlib():
    loops = [_describe_cycle(c) for c in _cycles() if not _through_cli(c)]
    assert not loops, "\n".join(loops)


def test_no_command_imports_the_cli_that_loads_it():
    loops = [_describe_cycle(c) for c in _cycles() if _through_cli(c)]
    assert not loops, "\n".join(loops)


def test_the_graph_sees_imports_made_through_importlib():
    targets = {e.target for e in modules()["clusterctl.modules"].imports}
    assert "clusterctl.modules.docker" in targets


# --------------------------------------------------------------------------- layers


def _offending_imports(module: Module, forbidden) -> list[str]:
    return sorted({f"{module.where(e.line)} imports {e.target}" for e in module.imports if forbidden(e.target)})


def _commands() -> list[Module]:
    return [m for name, m in modules().items()
            if name.startswith("clusterctl.commands.") and m.path.name != "__init__.py"]


def test_no_command_imports_the_executor_or_transport():
    bad = [line for m in _commands() for line in _offending_imports(
        m, lambda t: _inside(t, "clusterctl.executor") or _inside(t, "clusterctl.transport"))]
    assert not bad, "commands reach nodes through the session:\n" + "\n".join(bad)


def test_no_command_imports_another_command():
    bad = [line for m in _commands() for line in _offending_imports(
        m, lambda t, own=m.name: t.startswith("clusterctl.commands.") and t != own)]
    assert not bad, "\n".join(bad)


def test_paramiko_docker_and_fabric_are_imported_only_by_transport():
    bad = [line for m in modules().values() if not _inside(m.name, "clusterctl.transport")
           for line in _offending_imports(m, lambda t: t.split(".")[0] in FOREIGN_LIBRARIES)]
    assert not bad, "only clusterctl/transport/ imports " + "/".join(FOREIGN_LIBRARIES) + ":\n" + "\n".join(bad)


# --------------------------------------------------------------------------- threads and clocks


def _is_node_program(module: Module) -> bool:
    return any(isinstance(node, ast.Assign) and any(getattr(t, "id", None) == NODE_PROGRAM_MARKER for t in node.targets)
               for node in module.tree.body)


def _names_from(module: Module, source: str) -> dict[str, str]:
    """local name -> attribute for `from <source> import x [as y]`."""
    return {a.asname or a.name: a.name for n in ast.walk(module.tree)
            if isinstance(n, ast.ImportFrom) and n.module == source and not n.level for a in n.names}


def _called(call: ast.Call, module_name: str, attributes, local: dict[str, str]) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id == module_name and func.attr in attributes
    return isinstance(func, ast.Name) and local.get(func.id) in attributes


def threads_and_clocks(module: Module) -> list[str]:
    """Every place in `module` that starts a thread or a pool, sleeps, or loops on a clock."""
    from_time, from_threading = _names_from(module, "time"), _names_from(module, "threading")
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(_inside(n, m) for n in names for m in _THREAD_MODULES):
                found.append(f"{module.where(node.lineno)}: imports {', '.join(names)} (threads or a pool)")
        elif isinstance(node, ast.Call):
            if _called(node, "threading", {"Thread", "Timer"}, from_threading):
                found.append(f"{module.where(node.lineno)}: starts a thread ({ast.unparse(node.func)})")
            elif _called(node, "time", {"sleep"}, from_time):
                found.append(f"{module.where(node.lineno)}: sleeps ({ast.unparse(node)})")
        elif isinstance(node, ast.While) and _clock_in(node.test, from_time):
            found.append(f"{module.where(node.lineno)}: a clock loop (while {ast.unparse(node.test)[:80]})")
    return found


def _clock_in(test: ast.expr, from_time: dict[str, str]) -> bool:
    for call in (n for n in ast.walk(test) if isinstance(n, ast.Call)):
        if _called(call, "time", _CLOCK_READS, from_time):
            return True
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("wait", "join"):
            return True
    return False


def _allowed_clocks(module: Module) -> bool:
    return any(_inside(module.name, place) for place in ALLOWED_CLOCKS) or _is_node_program(module)


def test_threads_sleeps_and_clock_loops_live_only_in_the_executor_the_io_edge_and_node_programs():
    bad = [line for m in modules().values()
           if not _allowed_clocks(m) and not any(_inside(m.name, p) for p in THINNED_BY_THE_SESSION_BRANCH)
           for line in threads_and_clocks(m)]
    assert not bad, "waits go through clusterctl.executor (ticks, wait_until, attempts, Background):\n" + "\n".join(bad)


def test_commands_hold_no_thread_or_clock_of_their_own():
    bad = [line for m in modules().values() if any(_inside(m.name, p) for p in THINNED_BY_THE_SESSION_BRANCH)
           for line in threads_and_clocks(m)]
    assert not bad, "\n".join(bad)


def test_node_programs_import_nothing_of_clusterctl_only_each_other_as_files_beside_them():
    """They are shipped side by side (the agent, its engine and heal, its health watch)."""
    programs = {name for name, m in modules().items() if _is_node_program(m)}
    bad = [f"{m.where(e.line)} imports {e.target}" for m in modules().values() if _is_node_program(m)
           for e in m.imports if _inside(e.target, "clusterctl") and e.target not in programs]
    assert not bad, f"a module marked {NODE_PROGRAM_MARKER} runs alone on the nodes:\n" + "\n".join(bad)


def test_every_node_program_lives_in_node():
    bad = [m.where(1) for m in modules().values() if _is_node_program(m) and unit_of(m.name) != "node"]
    assert not bad, f"a module marked {NODE_PROGRAM_MARKER} belongs in clusterctl/node/:\n" + "\n".join(bad)


def test_the_node_programs_are_the_ones_shipped_to_the_nodes():
    marked = sorted(name for name, m in modules().items() if _is_node_program(m))
    assert marked == ["clusterctl.node.allreduce_bench", "clusterctl.node.checkpoint_copies",
                      "clusterctl.node.checkpoint_replica", "clusterctl.node.checkpoint_wire", "clusterctl.node.collective_waits",
                      "clusterctl.node.engine", "clusterctl.node.follow_files",
                      "clusterctl.node.heal_policy", "clusterctl.node.layout", "clusterctl.node.leases",
                      "clusterctl.node.listener", "clusterctl.node.node_agent", "clusterctl.node.node_archive",
                      "clusterctl.node.node_healing",
                      "clusterctl.node.node_health", "clusterctl.node.node_metrics", "clusterctl.node.node_mpi_gate",
                      "clusterctl.node.node_relay", "clusterctl.node.node_replica", "clusterctl.node.node_stragglers", "clusterctl.node.rank_output",
                          "clusterctl.node.rank_procs",
                      "clusterctl.node.run_files", "clusterctl.node.safe_files",
                      "clusterctl.node.straggler_verdict", "clusterctl.node.waits_verdict"]


def test_the_clock_rule_sees_a_sleep_a_thread_and_two_clock_loops():
    source = ("import threading, time\nfrom time import sleep as nap\n"
              "def f(e):\n    threading.Thread(target=f).start()\n    nap(1)\n"
              "    while time.monotonic() < 3:\n        pass\n    while not e.wait(0.5):\n        pass\n"
              "    threading.Lock()\n    time.monotonic()\n    s = 'sleep 1'\n")
    probe = Module("probe", PACKAGE / "probe.py", ast.parse(source), 0)
    assert sorted(line.split(": ", 1)[1].split(" (")[0] for line in threads_and_clocks(probe)) == [
        "a clock loop", "a clock loop", "sleeps", "starts a thread"]
