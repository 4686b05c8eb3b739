"""The straggler watch's analysis on a GPU machine (issue 37), without SSH: torchrun of gpu_job.py with
clusterctl's marker environment, clusterctl's node script (watch/sampler.py, --nonblocking) in rounds as
the watch runs it (5 samples 1 s apart, then 15), watch/stragglers.py on the window after each round.
Usage: python harness.py LABEL NPROC SAMPLE(0|1) [gpu_job.py args...]; prints one JSON line."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from clusterctl.watch import sampler, stragglers  # noqa: E402


class _Named:
    name = "gpu"


def main() -> None:
    label, nproc, sample, job_args = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
    env = {**os.environ, "CLUSTERCTL_CLUSTER": "gpu", "CLUSTERCTL_HOST": "local", "CLUSTERCTL_RUN_ID": label}
    log = open(f"/tmp/{label}.log", "w")
    started = time.monotonic()
    ranks = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", nproc,
                              str(Path(__file__).with_name("gpu_job.py")), *job_args], env=env, stdout=log,
                             stderr=subprocess.STDOUT)
    window, named, rounds = [], None, 0
    while sample and ranks.poll() is None:
        count = 5 if len(window) < 20 else 15
        command = sampler.sample_command(_Named(), "local", label, samples=count, interval_s=1.0, nonblocking=True)
        done = subprocess.run(list(command.argv), input=command.stdin, capture_output=True, timeout=120)
        node = sampler.parse_node_output(done.stdout.decode(), "local")
        rounds += 1
        window = (window + [list(s) for s in node.samples])[-stragglers.WINDOW:]
        found = stragglers.find(window, None, time.monotonic() - started)
        if found and named is None:
            named = found
    ranks.wait()
    log.close()
    text = Path(f"/tmp/{label}.log").read_text()
    steps = [float(line.rsplit(" ", 1)[1].rstrip("s")) for line in text.splitlines() if " mean step " in line]
    print(json.dumps({"label": label, "rounds": rounds, "named": named.to_json() if named else None,
                      "named_line": named.line() if named else None,
                      "last_tally": {f"{h} r{r}": [t.read, t.waiting, t.singled_out]
                                     for (h, r), t in stragglers.tally(window).items()},
                      "mean_step_s": steps, "exit": ranks.returncode, "tail": text[-600:] if ranks.returncode else ""}))


if __name__ == "__main__":
    main()
