"""What every benchmark shares: timed child processes, alternating rounds, the bench venv.

A sample is one run of one competitor: wall seconds, the CPU seconds its processes used
(`getrusage(RUSAGE_CHILDREN)` deltas, so every waited-for descendant counts), and its exit
status. Competitors of one measurement run in the same rounds, in a rotating order, so
that machine noise hits all of them alike.
"""
from __future__ import annotations

import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
VENV = BENCH / ".venv"  # ansible-core and matplotlib, kept apart from clusterctl's environment
WORK = BENCH / "work"  # scratch: state dirs, inventories, collected files (gitignored)
RESULTS = BENCH / "results.json"
PY = sys.executable
# A copy of clusterctl from before the performance fixes (`--before DIR`, e.g. from
# `git archive <commit> clusterctl | tar -x -C DIR`, plus what it needed besides in DIR/deps:
# `pip install --target DIR/deps fabric`): measured as one more competitor.
BEFORE: Optional[Path] = Path(os.environ["BENCH_BEFORE"]) if os.environ.get("BENCH_BEFORE") else None
BEFORE_LABEL = "clusterctl (before fixes)"
BENCH_PACKAGES = ("ansible-core", "matplotlib")
# This checkout's clusterctl, not what the venv's editable install points at (another worktree's, when
# the bench runs from a git worktree): first on this process's path and on every clusterctl it starts.
if str(REPO) not in sys.path[:2]:
    sys.path.insert(1, str(REPO))


def log(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- samples


def rusage_children() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


def _sample(wall: float, before: tuple, rcs: Sequence[int], errors: Sequence[str]) -> dict:
    user, system = (a - b for a, b in zip(rusage_children(), before))
    sample = {"wall": round(wall, 4), "user": round(user, 4), "sys": round(system, 4),
              "rc": next((rc for rc in rcs if rc != 0), 0)}
    if sample["rc"] != 0:
        sample["err"] = next((e for e, rc in zip(errors, rcs) if rc != 0), "")[-600:]
    return sample


def timed(argv: Sequence[str], env: Optional[Mapping[str, str]] = None, cwd: Optional[Path] = None,
          timeout: float = 600.0) -> dict:
    """Run one command to completion; its wall time, CPU time (with all its children) and exit status."""
    before = rusage_children()
    started = time.perf_counter()
    if cwd is None:  # not the checkout: `python -m` puts the cwd first on sys.path, ahead of PYTHONPATH
        WORK.mkdir(parents=True, exist_ok=True)
        cwd = WORK
    try:
        done = subprocess.run([str(a) for a in argv], env=dict(env) if env else None, cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        rc, err, out = done.returncode, done.stderr.decode(errors="replace"), done.stdout
    except subprocess.TimeoutExpired as exc:
        rc, err, out = 124, f"timed out after {timeout:g}s", exc.stdout or b""
    sample = _sample(time.perf_counter() - started, before, [rc], [err or out.decode(errors="replace")])
    sample["_stdout"] = out
    return sample


def timed_parallel(argvs: Sequence[Sequence[str]], env: Optional[Mapping[str, str]] = None,
                   timeout: float = 600.0) -> dict:
    """Start every command at once and wait for all: the wall time of the slowest."""
    before = rusage_children()
    started = time.perf_counter()
    procs = [subprocess.Popen([str(a) for a in argv], env=dict(env) if env else None, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for argv in argvs]
    rcs, errors = [], []
    deadline = started + timeout
    for proc in procs:
        try:
            _out, err = proc.communicate(timeout=max(0.1, deadline - time.perf_counter()))
            rcs.append(proc.returncode)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
            rcs.append(124)
        errors.append(err.decode(errors="replace"))
    return _sample(time.perf_counter() - started, before, rcs, errors)


def clean(sample: dict) -> dict:
    return {k: v for k, v in sample.items() if not k.startswith("_")}


def rounds(n: int, competitors: Mapping[str, Callable[[], dict]],
           between: Optional[Callable[[str], None]] = None) -> dict[str, list[dict]]:
    """n rounds; every competitor once per round, the order rotating each round."""
    names = list(competitors)
    samples: dict[str, list[dict]] = {name: [] for name in names}
    for index in range(n):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            sample = clean(competitors[name]())
            samples[name].append(sample)
            if sample["rc"] != 0:
                log(f"  {name}: exit {sample['rc']}: {sample.get('err', '').strip()[-300:]}")
            if between:
                between(name)
        log(f"  round {index + 1}/{n}: " + ", ".join(
            f"{name} {samples[name][-1]['wall']:.2f}s" for name in names))
    return samples


def summary(samples: Sequence[dict]) -> dict:
    """Median wall and CPU over successful samples (all samples when none succeeded)."""
    good = [s for s in samples if s["rc"] == 0] or list(samples)
    walls = [s["wall"] for s in good]
    cpu = [s["user"] + s["sys"] for s in good]
    return {"n": len(good), "failed": len(samples) - len([s for s in samples if s["rc"] == 0]),
            "median": statistics.median(walls) if walls else None, "min": min(walls) if walls else None,
            "max": max(walls) if walls else None, "cpu": statistics.median(cpu) if cpu else None}


# --------------------------------------------------------------------------- tools


def ensure_bench_venv() -> Path:
    """bench/.venv with ansible-core and matplotlib (pip, once); returns its bin directory."""
    bin_dir = VENV / "bin"
    if not (bin_dir / "ansible").exists() or not _has_matplotlib(bin_dir / "python"):
        log(f"installing {', '.join(BENCH_PACKAGES)} into {VENV}")
        if not (bin_dir / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", *BENCH_PACKAGES], check=True)
    return bin_dir


def _has_matplotlib(python: Path) -> bool:
    return python.exists() and subprocess.run([str(python), "-c", "import matplotlib"],
                                              capture_output=True).returncode == 0


def compile_sources() -> None:
    """Bytecode for clusterctl (and the before-fixes copy), even where PYTHONDONTWRITEBYTECODE is set."""
    import compileall

    for tree in [REPO / "clusterctl"] + ([BEFORE / "clusterctl"] if BEFORE else []):
        compileall.compile_dir(str(tree), quiet=1)


_compiled: list = []


def clusterctl_env(state_dir: Path, before: bool = False) -> dict:
    """The environment of a clusterctl the bench starts: this checkout's (or with `before`, BEFORE's),
    its modules compiled first (compile_sources), as an installed clusterctl's are."""
    if not _compiled:
        compile_sources()
        _compiled.append(True)
    env = dict(os.environ, CLUSTERCTL_STATE=str(state_dir), NO_COLOR="1", COLUMNS="120")
    env.pop("CLUSTERCTL_SSH_CONFIG", None)
    env.pop("BENCH_BEFORE", None)
    # ahead of the editable install's finder; DIR/deps: what that version needed besides
    trees = (BEFORE, BEFORE / "deps") if before else (REPO,)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in trees if p.is_dir())
    return env


def clusterctl_argv(*args: str) -> list[str]:
    return [PY, "-m", "clusterctl", *map(str, args)]


def write_ssh_config(sandbox, path: Path) -> Path:
    """An ssh_config naming every node as its inventory reaches it (user, port, the bastion), so
    that every competitor reaches the same nodes the same way: `ssh -F PATH node3`."""
    common = ["  IdentityFile {key}", "  IdentitiesOnly yes", "  BatchMode yes", "  StrictHostKeyChecking yes",
              "  UserKnownHostsFile {known}", "  GlobalKnownHostsFile /dev/null"]
    common = [line.format(key=sandbox.identity_file, known=sandbox.known_hosts) for line in common]
    lines = []
    if sandbox.bastion is not None:
        lines += ["Host bastion", f"  HostName {sandbox.bastion.address}", "  User root", *common]
    for node in sandbox.nodes:
        lines += [f"Host {node.name}", f"  HostName {node.listen_address}", f"  User {node.ssh_user}",
                  f"  Port {node.ssh_port}", *(["  ProxyJump bastion"] if node.behind_bastion else []), *common]
    path.write_text("\n".join(lines) + "\n")
    return path


def ssh_options(key: Path, known_hosts: Path) -> list[str]:
    """Host-key checking on, against the sandbox's known_hosts; the sandbox key only."""
    return ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-i", str(key)]


# --------------------------------------------------------------------------- the machine


def _first_line(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    text = (done.stdout + done.stderr).strip()
    return text.splitlines()[0] if text else "not found"


def machine() -> dict:
    """What the numbers were measured on."""
    model = "unknown"
    lscpu = _first_line(["sh", "-c", "lscpu | grep -m1 'Model name'"])
    if ":" in lscpu:
        model = lscpu.split(":", 1)[1].strip()
    mem_kb = 0
    try:
        match = re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
        mem_kb = int(match.group(1)) if match else 0
    except OSError:
        pass
    bin_dir = VENV / "bin"
    ansible = _first_line([str(bin_dir / "ansible"), "--version"])
    import paramiko

    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kb / (1 << 20), 1),
        "kernel": platform.release(),
        "os": _first_line(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "python": platform.python_version(),
        "openssh": _first_line(["ssh", "-V"]),
        "ansible_core": ansible.replace("ansible [core ", "").rstrip("]"),
        "pdsh": _first_line(["sh", "-c", "dpkg-query -W -f '${Version}' pdsh"]),
        "paramiko": paramiko.__version__,
        "docker": _first_line(["dockerd", "--version"]),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def save(results: dict) -> None:
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


def load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
