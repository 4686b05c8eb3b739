"""Everything that runs on a node as its own process: the standard library only (torch too for the
rank-side benchmark), because nothing of clusterctl is installed where the ranks run.

The controller ships these files by name into a run's directory on every node (`program(name)` and
`source(name)` read them; each file keeps the name it has on the node, which the node-side scripts
and earlier runs' directories use too) and imports them where it needs their contracts. Nothing here
imports anything outside `clusterctl/node/`; the programs shipped together (the agent with its healer
and its health watch) import each other as files beside each other on the node, by plain name.
Each program says so with a module-level `RUNS_ON_NODES = True`: its threads and clocks are that
process's own, never the controller's.

Runs that outlive the controller: `node_agent.py` is a supervisor on the master node and a keeper per
node, talking signed HTTP on the cluster network, holding the leases, failing fast, ending with the
run (run/supervision.py starts them: `run --detach`, a hang-up). Node programs shipped as text (the
registry relay, the stack sampler's script, shell wrappers) are strings to the controller and live
with the stage that ships them.

The run's engine (`engine.py` with `heal_policy.py`): the one code that decides a run's fate (fail fast,
lost node, timeout, stall, heal), hosted by the controller in-process when attached and by the master
node's supervisor when detached. `straggler_verdict.py`: the rank the others wait for, named from
per-rank samples (the controller's straggler watch imports it; detached, each keeper's `node_stragglers.py`
samples its node's ranks with py-spy and the supervisor's engine judges); `waits_verdict.py`: the same from torch's
flight recorder over NCCL (`collective_waits.py` reads each rank's dump, CPU and GPU tenants on its node). `layout.py`: every path of a
run, on a node and in a collected bundle. `listener.py`: the one discipline of every port clusterctl
opens on a node (the supervisor, the mpirun gate, the image relay, which carries its text): a deadline
per request, slots per address that a newcomer never lacks, handshakes side by side. `leases.py`: the
GPU leases a node holds for every operator's runs (issue 48), run by `up`, `run` and `status` and shipped
beside the keeper, which releases its run's leases as the run ends.

A node program the controller runs for one command (run_files.py, leases.py, node_archive.py,
node_relay.py) goes one way, `inline_argv`: `python -I -S -c TEXT`, the text holding the program and the
files it imports, made modules of their names (`inline_program`)."""
from __future__ import annotations

import functools
from pathlib import Path

HERE = Path(__file__).resolve().parent


def program(name: str) -> Path:
    """The file of a node program (`node_agent.py`, ...), as the controller ships it."""
    return HERE / name


def source(name: str) -> bytes:
    """The bytes of a node program, as shipped to the nodes."""
    return program(name).read_bytes()


INLINE = ("-I", "-S", "-c")  # no environment variable, user site or working directory of the node changes what runs


@functools.lru_cache(maxsize=16)
def inline_program(names: tuple, main: str, argv0: bool = False) -> str:
    """One `python -c` text that runs node program `main` with the files `names` beside it (each made the
    module of its name, in that order: each imports only those before it), its `main(argv)` called with
    the arguments (`argv0`: with sys.argv[0] first). The program travels in the command itself: nothing
    is executed from a directory the job or another user can write (issue 47)."""
    loads = "".join(f"_load({name!r}, {source(name + '.py').decode()!r})\n" for name in (*names, main))
    return ("import sys, types\n"
            "def _load(name, text):\n"
            "    module = types.ModuleType(name)\n"
            "    module.__file__ = name + '.py'\n"
            "    sys.modules[name] = module\n"
            "    exec(compile(text, name + '.py', 'exec'), module.__dict__)\n"
            + loads + f"sys.exit(sys.modules[{main!r}].main(sys.argv{'' if argv0 else '[1:]'}))\n")


def inline_argv(python: str, names: tuple, main: str, *args: str, argv0: bool = False) -> tuple:
    """The one way the controller runs a node program for the length of one command (run_files, leases,
    collect's archiver, the image relay): `python -I -S -c <inline_program> ARGS`. Not over stdin (which
    stays the program's own: a relay's key, an upload) and never from a file on the node
    (tests/unit/test_node_programs.py finds every other way in the code and fails on it)."""
    return (python, *INLINE, inline_program(tuple(names), main, argv0), *args)
