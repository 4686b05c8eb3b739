"""Every process `clusterctl run` starts on a node until its first rank runs (issue 52: the launch's fixed
cost per node), with the CPU each spent (its own and its reaped children's, from wait4): one `connection:
local` run of tests/fixtures/jobs/tiny.py (2 ranks, holding 3 s), in this process, by the phase (`run --json`)
it started in, each command labelled by what it is
(`python3 -I -S -c` node programs by program and operation: `run_files:stage`, `leases:take`; shell
scripts by their first words). What is started detached (the wrapper's ranks, the output stream, alive
until the end) is counted by its start, its CPU not (bench/cpu_account.py accounts for it). `--tree DIR`:
the clusterctl to import (a copy from before: `git archive BASE clusterctl | tar -x -C DIR`).

    python3 bench/launch_starts.py [--tree DIR] [--runs 3] [--detach]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_rows: list = []
_lock = threading.Lock()
_t0 = time.time()


def label(args) -> str:
    argv = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
    for i, arg in enumerate(argv[:-1]):
        if arg == "-c" and "def _load" in argv[i + 1]:  # a node program run inline (node.inline_argv)
            found = re.search(r"sys\.modules\['(\w+)'\]\.main", argv[i + 1])
            return f"{found.group(1) if found else '?'}:{argv[i + 2] if i + 2 < len(argv) else ''}"
        if arg == "-c":
            words = argv[i + 1].split()
            section = re.search(r"@@@clusterctl-section (\w+)", argv[i + 1])
            return f"{Path(argv[0]).name} -c " + (f"[facts: {section.group(1)} ...]" if section else " ".join(words[:2])[:24])
    return " ".join(Path(a).name if n == 0 else a for n, a in enumerate(argv[:2]))


def _watch_processes() -> None:
    """Every Popen: when it started; at its reaping, its CPU (wait4's rusage: itself and what it reaped)."""
    init = subprocess.Popen.__init__

    def started(self, args, *rest, **kw):
        self._bench_t = time.time() - _t0
        init(self, args, *rest, **kw)

    def reaped(self, flags):
        try:
            pid, status, usage = os.wait4(self.pid, flags)
        except ChildProcessError:
            return self.pid, 0
        if pid:
            with _lock:
                _rows.append((self._bench_t, usage.ru_utime + usage.ru_stime, label(self.args)))
        return pid, status

    subprocess.Popen.__init__, subprocess.Popen._try_wait = started, reaped


def one_run(work: Path, detach: bool = False) -> dict:
    from clusterctl.cli import main

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    inventory = work / "inventory.yaml"
    inventory.write_text(f"""name: starts-{os.getpid()}-{time.time_ns()}
hosts:
  - {{name: local, connection: local}}
rendezvous: {{port: {port}}}
job:
  command: [{REPO / 'tests' / 'fixtures' / 'jobs' / 'tiny.py'}]
  args: [--out, "{{outputs}}/ranks", --sleep, "3"]
  nproc_per_node: 2
  outputs: {work / 'outputs'}
checks: {{ib: off}}
""")
    (work / "prompt.txt").write_text("hello\n")
    from clusterctl.run.phases import process_started

    del _rows[:]
    global _t0
    _t0 = process_started()  # `phases` count from this process's start
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", "--json", *(["--detach"] if detach else []), "-i", str(inventory), str(work / "prompt.txt")],
                    env={**os.environ, "CLUSTERCTL_STATE": str(work / "state")})
    phases = json.loads(out.getvalue() or "{}").get("phases") or {}
    if detach:  # everything until `run --detach` returned (its hand-over), then the run stopped
        phases = {"probe": phases.get("probe", 0.0), "launch": phases.get("launch", 0.0), "first_rank": time.time() - _t0}
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["stop", "-i", str(inventory)], env={**os.environ, "CLUSTERCTL_STATE": str(work / "state")})
    starts = {}
    for at, cpu, what in sorted(_rows):
        phase = next((name for name in PHASES if at <= phases.get(name, float("inf"))), "after")
        count, spent = starts.get((phase, what), (0, 0.0))
        starts[(phase, what)] = (count + 1, spent + cpu)
    return {"exit": code, "starts": starts}


PHASES = ("probe", "launch", "first_rank")  # run --json's phases: a process counts in the first it started before


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="what `clusterctl run` starts on a node until its first rank")
    parser.add_argument("--tree", type=Path, default=REPO, help="the directory holding the clusterctl/ to measure")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--detach", action="store_true", help="`run --detach`: to its return (the hand-over "
                                                                "counted as `first_rank`)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.tree.resolve()))
    import clusterctl

    print(f"clusterctl from {Path(clusterctl.__file__).parent}", file=sys.stderr)
    _watch_processes()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(one_run(Path(tmp), args.detach))
    kinds = sorted({k for run in runs for k in run["starts"] if k[0] != "after"}, key=lambda k: (PHASES.index(k[0]), k[1]))
    print(f"| phase | started on the node (median of {len(runs)} runs) | count | CPU, ms |\n|---|---|---|---|")
    for phase, kind in kinds:
        counts = [run["starts"].get((phase, kind), (0, 0.0)) for run in runs]
        print(f"| {phase} | `{kind}` | {statistics.median(c for c, _ in counts):g} | "
              f"{statistics.median(s for _, s in counts) * 1000:.0f} |")
    total = [(sum(c for (p, _), (c, _) in run["starts"].items() if p != "after"),
              sum(s for (p, _), (_, s) in run["starts"].items() if p != "after")) for run in runs]
    print(f"| to the first rank | all | {statistics.median(c for c, _ in total):g} | "
          f"{statistics.median(s for _, s in total) * 1000:.0f} |")
    print(f"exits {[run['exit'] for run in runs]}", file=sys.stderr)
    return 0 if all(run["exit"] == 0 for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
