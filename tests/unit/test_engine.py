"""The run's engine is the only code that decides a run's fate (issue 46): its entry points, and a scan
that fails when the controller grows a decision of its own again (node/engine.py, node/heal_policy.py)."""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from clusterctl.node import engine, heal_policy

PACKAGE = Path(engine.__file__).resolve().parents[1]

# What drives the engine and what it answers: attached (run/runner.py, backends/healing.py) and
# detached (node/node_agent.py's supervisor, its keepers) call these and nothing else of it.
ENTRY_POINTS = {
    engine.Attempt: ("beat", "tick", "hang", "document"),
    engine.Engine: ("beat", "tick", "document"),
}
POLICY = ("decide", "verdict", "failure_of", "leave_out", "backoff_of", "launch_values", "substitute",
          "attempt_env", "latest_checkpoint")

# The names a decision is made of: a module that hosts the engine defining one of them (a function,
# a class, a module constant) holds a second copy.
DECISIONS = {"verdict", "replan", "decide", "leave_out", "cause_of", "response_of", "backoff_of", "launch_values",
             "substitute", "TABLE", "CAUSES", "BACKOFF_S", "SETTLE_S", "NEVER_SEEN_S", "DRAIN_S", "Verdict",
             "Decision", "Supervisor", "Healer"}
# The controller's modules that host the engine: none compares a clock with a window of the run.
HOSTS = ("clusterctl/run/runner.py", "clusterctl/backends/healing.py", "clusterctl/backends/run_flow.py",
         "clusterctl/run/supervision.py", "clusterctl/heal/detached.py", "clusterctl/ground/healing.py")
NODE_HOSTS = ("clusterctl/node/node_agent.py", "clusterctl/node/node_healing.py")  # the master node's host, the keepers
WINDOWS = re.compile(r"lost_after|timeout_s$|stall_timeout|last_seen|first_failure_at|restarts|min_nodes")


@lru_cache(maxsize=None)
def _parsed(where: str) -> ast.Module:
    """One of HOSTS or NODE_HOSTS, parsed once for every test (a host that moved fails here, by name)."""
    return ast.parse((PACKAGE.parent / where).read_text())


def _defined(tree: ast.Module) -> list[tuple[str, int]]:
    """The module's own names: its functions, classes and constants."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append((node.name, node.lineno))
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names += [(t.id, node.lineno) for t in targets if isinstance(t, ast.Name)]
    return names


def _named(node: ast.AST) -> list[str]:
    return [n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(node)
            if isinstance(n, (ast.Attribute, ast.Name))]


def test_the_engine_has_its_entry_points():
    for cls, methods in ENTRY_POINTS.items():
        assert all(callable(getattr(cls, m, None)) for m in methods), cls
    assert all(callable(getattr(heal_policy, name, None)) for name in POLICY)


def test_no_decision_is_defined_outside_the_engine():
    bad = [f"{where}:{line}: {name}" for where in HOSTS + NODE_HOSTS
           for name, line in _defined(_parsed(where)) if name in DECISIONS]
    assert not bad, "a decision about a run's fate belongs to node/engine.py or node/heal_policy.py:\n" + "\n".join(bad)


def test_the_controller_compares_no_clock_with_a_window_of_the_run():
    bad = []
    for where in HOSTS:
        bad += [f"{where}:{node.lineno}" for node in ast.walk(_parsed(where)) if isinstance(node, ast.Compare)
                and not all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)  # "not given" is no decision
                and any(WINDOWS.search(name) for name in _named(node))]
    assert not bad, "the engine decides lost nodes, timeouts, stalls and restarts:\n" + "\n".join(bad)


def test_the_scan_sees_a_decision_grown_again():
    tree = ast.parse("def replan(a):\n    pass\nif now - node.last_seen > self.lost_after_s:\n    pass\n")
    assert ("replan", 1) in _defined(tree)
    assert any(isinstance(n, ast.Compare) and any(WINDOWS.search(x) for x in _named(n)) for n in ast.walk(tree))
