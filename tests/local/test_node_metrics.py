"""The node metrics sampler (node/node_metrics.py) run for real on this machine, started by the ranks'
real wrapper (plan/wrapper.py) as on a node: GPU numbers from the 4x H100 stand-in (the captured query,
tests/fixtures/hardware/h100x4_metrics), none on a node without nvidia-smi, and nothing of it left once
torchrun ended."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from clusterctl.plan import wrapper as agent
from clusterctl.models import Host, Inventory, JobSpec, RendezvousSpec
from clusterctl.plan import metrics_sampler as sampling
from clusterctl.observe import summary
from clusterctl.observe.metrics_file import read_file

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "hardware" / "h100x4_metrics" / "bin"


def _inventory(every: float) -> Inventory:
    return Inventory(name="t", hosts=(Host("n1", "127.0.0.1"),), rendezvous=RendezvousSpec(port=1),
                     job=JobSpec(command=("job",), nproc_per_node=1, outputs="/out", metrics_every=every))


def _processes_naming(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and "pytest" not in cmdline:
            found.append(cmdline)
    return found


def _run_job(tmp_path: Path, every: float, path: str, job: tuple) -> Path:
    """The wrapper started as start_command starts it, the sampler shipped beside the run dirs; waits for
    torchrun's end (agent.exit) and for the wrapper's own end."""
    run_dir = tmp_path / "logs" / "RUN" / "n1"
    files = run_dir.parent / ".files"
    files.mkdir(parents=True)
    for name, data in sampling.shipped(_inventory(every)).items():
        (files / name).write_bytes(data)
    inventory = _inventory(every)
    assert subprocess.run(agent.write_env_command(inventory, str(run_dir), ()).argv, input=b"", timeout=30).returncode == 0
    wrapper = subprocess.run(agent.start_command(inventory, str(run_dir), job).argv, timeout=30,
                             env=dict(os.environ, PATH=path))
    assert wrapper.returncode == 0
    deadline = time.monotonic() + 60
    while not (run_dir / "agent.exit").exists() or _processes_naming(str(run_dir)):
        assert time.monotonic() < deadline, f"still running: {_processes_naming(str(run_dir))}"
        time.sleep(0.1)
    return run_dir


def _lines(path: Path) -> list[dict]:
    """The file's lines as the sampler wrote them (every one a whole JSON object)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_gpu_node_samples_every_gpu_through_one_looping_nvidia_smi_and_leaves_nothing_behind(tmp_path):
    run_dir = _run_job(tmp_path, 0.2, f"{STANDIN}:{os.environ['PATH']}", ("sleep", "3"))
    samples = _lines(run_dir / "metrics.jsonl")
    assert len(samples) >= 2, (run_dir / "metrics.log").read_text() if (run_dir / "metrics.log").exists() else ""
    assert all(s["host"] == "n1" and len(s["gpus"]) == 4 for s in samples)
    assert [g["power_w"] for g in samples[-1]["gpus"]] == [686.02, 670.39, 695.29, 683.13]
    assert samples[0]["mem_total_mb"] > 0 and 0.0 <= samples[-1]["cpu_pct"] <= 100.0
    deadline = time.monotonic() + 30  # the looping nvidia-smi ends with the sampler
    while _processes_naming(f"{STANDIN}/nvidia-smi"):
        assert time.monotonic() < deadline, _processes_naming(f"{STANDIN}/nvidia-smi")
        time.sleep(0.1)
    assert summary.summarise(read_file(run_dir / "metrics.jsonl", "n1")[0])["gpu_util_pct"] == {"mean": 100.0, "max": 100.0}


def test_a_node_without_nvidia_smi_samples_cpu_and_memory_with_no_gpus(tmp_path):
    assert shutil.which("nvidia-smi", path="/usr/bin:/bin") is None
    run_dir = _run_job(tmp_path, 0.2, "/usr/bin:/bin", ("sleep", "2"))
    samples = _lines(run_dir / "metrics.jsonl")
    assert samples and all(s["gpus"] == [] and "gpu_error" not in s for s in samples)


def test_metrics_every_0_starts_no_sampler(tmp_path):
    run_dir = _run_job(tmp_path, 0, os.environ["PATH"], ("sleep", "1"))
    assert not (run_dir / "metrics.jsonl").exists()
    assert sampling.sampler_args(_inventory(0))[1] == ""
