"""One way to run a node program for one command (issue 47): `node.inline_argv`, `python -I -S -c TEXT`
with the program and the files it imports in TEXT. Found in the code, not listed by hand: an AST walk over
every module outside clusterctl/node/ for (1) each read of a node program's text or file (`source`,
`program`, `inline_program`), (2) a python fed its program on stdin (`python -` in an argv or a shell
script), (3) a python given `-c` text in an argv or a shell script. Each must be the one runner or be named
below with why it is another thing (a file shipped into a run dir for a process that outlives the
command; a snippet of the stage's own that is no node program)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "clusterctl"

# module:place (the top-level function or assignment it is in): why
READS_ALLOWED = {
    "run/supervision.py:*": "the agent, its health watch, healer and straggler watch: shipped into the node's "
                            "0700 run dir and started from there for the run's life (they outlive any command)",
    "plan/metrics_sampler.py:*": "the metrics sampler: shipped into the run dir, started by the wrapper as the job's peer",
    "plan/launch_plan.py:replica_programs": "an attached run's checkpoint copier (node_replica.py and what it imports): "
                                             "shipped into the run's files dir, started by the wrapper beside the ranks",
    "plan/launcher_mpirun.py:*": "mpirun's gate and what it imports: shipped beside it for the job's launch",
    "backends/nccl_test.py:*": "the nccl-test benchmark: shipped as the job's own rank program",
    "registry/relay.py:RELAY": "the relay's inline text (node_relay.py with listener.py): it runs inside a shell "
                               "pipeline (docker save | relay), as `python3 -I -S -c \"$2\"`",
}
# python given text with -c that is no node program: a snippet of the stage that sends it
SNIPPETS_ALLOWED = {
    "preflight/probe.py:_connect_from_workers": "the rendezvous probe's listener and connect snippets",
    "preflight/facts/host.py:versions_command": "the preflight's version snippet",
    "backends/health_check.py:*": "`health check`'s GPU burn snippet, run as the job",
    "k8s/manifests.py:*": "the Ray driver in a pod's command, not on a node over SSH",
    "sandbox/sshd.py:*": "the rehearsal sandbox's banner probe, on this machine",
    "registry/relay.py:_RECEIVE": "loadcheck.CHECK, the receiver's check of the image stream (a stage program)",
    "registry/relay.py:_PIPE": "loadcheck.CHECK, as in _RECEIVE",
}
STDIN_PYTHON = re.compile(r"\bpython3?\s+(-[A-Za-z]+\s+)*-(\s|$)")
C_PYTHON = re.compile(r"\bpython3?\s+((?:-[A-Za-z]+\s+)*)-c\s")


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("node/"):
            yield rel, ast.parse(path.read_text())


def _places(tree):
    """(place name, node) for every node under each top-level statement."""
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            name = top.name
        elif isinstance(top, (ast.Assign, ast.AnnAssign)):
            targets = top.targets if isinstance(top, ast.Assign) else [top.target]
            name = next((t.id for t in targets if isinstance(t, ast.Name)), "?")
        else:
            name = "?"
        for node in ast.walk(top):
            yield name, node


def _python_like(node) -> bool:
    text = ast.unparse(node)
    return "python" in text or text == "sys.executable"


def found():
    """(kind, module:place, line, what) of every way a program reaches a python outside the one runner."""
    out = []
    for rel, tree in _modules():
        for place, node in _places(tree):
            where = f"{rel}:{place}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "source", "program", "inline_program"):
                out.append(("read", where, node.lineno, ast.unparse(node)[:80]))
            elif isinstance(node, (ast.Tuple, ast.List)) and node.elts and _python_like(node.elts[0]):
                words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                if "-" in words:
                    out.append(("stdin", where, node.lineno, ast.unparse(node)[:80]))
                elif "-c" in words:
                    out.append(("-c", where, node.lineno, ast.unparse(node)[:80]))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if STDIN_PYTHON.search(node.value):
                    out.append(("stdin", where, node.lineno, node.value[:80]))
                for flags in C_PYTHON.findall(node.value):
                    if flags.split() != ["-I", "-S"]:
                        out.append(("-c", where, node.lineno, node.value[:80]))
    return out


def _allowed(table, where) -> bool:
    return where in table or where.split(":")[0] + ":*" in table


def test_every_node_program_runs_through_the_one_runner_or_is_named_with_why():
    bad = [f"clusterctl/{where} line {line}: {kind}: {what}" for kind, where, line, what in found()
           if kind == "stdin" or (kind == "read" and not _allowed(READS_ALLOWED, where))
           or (kind == "-c" and not _allowed(SNIPPETS_ALLOWED, where))]
    assert not bad, ("a node program is run another way than node.inline_argv (`python -I -S -c TEXT`): use it, or "
                     "name the place here with why it is no node program run for one command:\n" + "\n".join(bad))


def test_every_allowance_still_names_something_found():
    places = {where for _, where, _, _ in found()}
    modules = {where.split(":")[0] for where in places}
    stale = [key for key in (*READS_ALLOWED, *SNIPPETS_ALLOWED)
             if (key.endswith(":*") and key.split(":")[0] not in modules) or (not key.endswith(":*") and key not in places)]
    assert not stale, stale


def test_the_walk_sees_a_program_on_stdin_and_an_ad_hoc_dash_c():
    probe = ast.parse('A = ("python3", "-", "op")\nB = "docker save x | python3 -c \\"$2\\" send"\n'
                      'C = "python3 -I -S -c \\"$1\\" recv"\ndef f():\n    return source("leases.py")\n')
    kinds = []
    for place, node in _places(probe):
        if isinstance(node, ast.Tuple) and _python_like(node.elts[0]) and "-" in [e.value for e in node.elts]:
            kinds.append(("stdin", place))
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            kinds += [("-c", place) for flags in C_PYTHON.findall(node.value) if flags.split() != ["-I", "-S"]]
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "source":
            kinds.append(("read", place))
    assert kinds == [("stdin", "A"), ("-c", "B"), ("read", "f")]
