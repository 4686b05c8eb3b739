"""CPU a node pays per poll of an attached run (issue 47): the no-follow layer's `python3 -I -S -c` poll
(node/run_files.py through plan/node_files.py) against the shell poll it replaced, each run N times on a
run dir of this machine; CPU of the children (user + system) per poll.

    python bench/poll_cost.py [N]
"""
from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clusterctl.plan import node_files  # noqa: E402

SHELL_POLL = ('{ echo > "$1/lease"; } 2>/dev/null; if [ -e "$1/agent.exit" ]; then s=; [ -e "$1/stopped" ] && '
              's=" stopped"; echo "exit $(cat "$1/agent.exit")$s"; else echo running; fi')  # before issue 47


def cpu_ms(argv, times: int) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(times):
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / times * 1000


def main() -> None:
    times = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "outputs" / "logs" / "r1" / "node1"
        run_dir.mkdir(parents=True)
        (run_dir / "lease").touch()
        print(f"| poll | CPU per poll, ms ({times} polls) |\n|---|---|")
        print(f"| shell (before issue 47) | {cpu_ms(('sh', '-c', SHELL_POLL, 'poll', str(run_dir)), times):.1f} |")
        print(f"| `python3 -I` (no -S) | {cpu_ms([a for a in node_files.argv('python3', 'poll', str(run_dir)) if a != '-S'], times):.1f} |")
        print(f"| `python3 -I -S -c` layer | {cpu_ms(node_files.argv('python3', 'poll', str(run_dir)), times):.1f} |")
        print(f"| `python3 -I -S -c pass` (the interpreter's start alone) | {cpu_ms(('python3', '-I', '-S', '-c', 'pass'), times):.1f} |")


if __name__ == "__main__":
    main()
