"""Hundreds of nodes (issue 21): what the controller costs, and what each rehearsal node costs.

    python3 bench/scale.py --nodes 64,128,240      (as root; `python bench/run.py --only scale` runs it)

For each node count: a sandbox of N SSH-only nodes (network namespaces, one sshd each), then
`clusterctl exec true`, `clusterctl check`, `clusterctl run --plan`, `clusterctl up` and `run --plan`
again (now from the facts `up` learned) against it, each a fresh
process, sampled every 20 ms from /proc: peak RSS, peak threads, peak open descriptors, its wall
time and CPU time; beside `exec`, its peers on the same nodes: N OpenSSH clients started at once
(the floor), `ansible -m raw` with 50 forks and `pdsh -f 256` (both through one ssh_config, as in
bench/fanout.py). What one node costs at rest is read off the machine before and after the sandbox
came up (MemAvailable) and off the sshd processes (their RSS). With --docker N: the journey (`up`
cold and warm, `run`, `collect-logs`, `down`) at N Docker nodes. Results: bench/results.json
("scale", "scale_docker").
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (WORK, rusage_children, clean, clusterctl_argv, clusterctl_env, ensure_bench_venv,  # noqa: E402
                    fresh_dir, load, log, save, ssh_options, timed, timed_parallel)


def _proc_status(pid: int) -> tuple[int, int]:
    """(RSS in kB, threads) of a live process; (0, 0) once it is gone."""
    rss = threads = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    except (OSError, ValueError):
        pass
    return rss, threads


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def sampled(argv, env, timeout: float = 900.0) -> dict:
    """Run `argv` to the end; its wall time, exit status and peaks of RSS, threads and descriptors."""
    WORK.mkdir(parents=True, exist_ok=True)
    cpu_before = rusage_children()
    started = time.perf_counter()
    proc = subprocess.Popen([str(a) for a in argv], env=env, cwd=WORK, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    peak = {"rss_mb": 0.0, "threads": 0, "fds": 0}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            rss, threads = _proc_status(proc.pid)
            peak["rss_mb"] = max(peak["rss_mb"], rss / 1024)
            peak["threads"] = max(peak["threads"], threads)
            peak["fds"] = max(peak["fds"], _open_fds(proc.pid))
            done.wait(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
        rc = 124
    wall = time.perf_counter() - started
    done.set()
    watcher.join()
    cpu = sum(after - before for after, before in zip(rusage_children(), cpu_before))
    return {"wall": round(wall, 3), "cpu_s": round(cpu, 3), "rc": rc, **{k: round(v, 1) for k, v in peak.items()},
            "error": err.decode(errors="replace")[-400:] if rc not in (0, 1) else ""}


def mem_available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_busy_cores(seconds: float = 5.0) -> float:
    """How many of the machine's cores were busy, on average, over `seconds` (/proc/stat)."""
    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait

    (total0, idle0), _ = read(), time.sleep(seconds)
    total1, idle1 = read()
    return round((1 - (idle1 - idle0) / max(1, total1 - total0)) * (os.cpu_count() or 1), 3)


def sshd_rss_mb() -> list[float]:
    sizes = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/comm").read_text().strip() == "sshd":
                sizes.append(_proc_status(int(entry))[0] / 1024)
        except OSError:
            continue
    return sizes


def measure(n: int, reps: int) -> dict:
    from clusterctl.sandbox import down, up

    log(f"scale: {n} SSH-only nodes")
    busy_before, before = cpu_busy_cores(), mem_available_mb()
    sandbox = up(n)
    time.sleep(2)  # let the nodes settle before reading the machine
    sshds = sshd_rss_mb()
    mem_per_node = round((before - mem_available_mb()) / n, 2)
    cpu_per_node = round(max(0.0, cpu_busy_cores() - busy_before) / n * 1000, 3)  # milli-cores
    result = {"nodes": n, "node_cost": {"mem_mb_per_node": mem_per_node, "cpu_millicores_per_node": cpu_per_node,
                                        "sshd_rss_mb": round(statistics.median(sshds), 2) if sshds else None}}
    work = fresh_dir(WORK / f"scale-{n}")
    env = clusterctl_env(work / "state")
    prompt = work / "prompt.txt"
    prompt.write_text("a prompt\n")
    inventory = str(sandbox.inventory_path)
    # then `up` (its preflight probes every node; what the planner needs of it is kept), and the plan
    # again: from the facts `up` learned, after one light read per node (node2 fails up's checks: probed)
    commands = {"exec true": ("exec", "-i", inventory, "true"), "check": ("check", "-i", inventory),
                "run --plan": ("run", "-i", inventory, "--plan", str(prompt)), "up": ("up", inventory),
                "run --plan (facts from up)": ("run", "-i", inventory, "--plan", str(prompt))}
    ssh = ["ssh", *ssh_options(sandbox.identity_file, sandbox.known_hosts)]
    floor = [[*ssh, "-p", str(node.ssh_port), f"{node.ssh_user}@{node.listen_address}", "true"]
             for node in sandbox.nodes if not node.behind_bastion]
    try:
        for label, args in commands.items():
            result[label] = [sampled(clusterctl_argv(*args), env) for _ in range(reps)]
            best = min(result[label], key=lambda s: s["wall"])
            log(f"  {label}: {best['wall']:.2f}s rc {best['rc']}, peak {best['rss_mb']:.0f} MB RSS, "
                f"{best['threads']} threads, {best['fds']} fds")
        result["parallel ssh"] = [timed_parallel(floor, timeout=600) for _ in range(reps)]
        result["parallel ssh nodes"] = len(floor)
        log(f"  parallel ssh ({len(floor)} clients): {min(s['wall'] for s in result['parallel ssh']):.2f}s")
        result.update(peers_of_exec(sandbox, work, reps))
        return result
    finally:
        down(sandbox.state_dir)


ANSIBLE_FORKS = 50  # the setting: far above Ansible's default 5, as a team with hundreds of nodes sets it
PDSH_FANOUT = 256


def peers_of_exec(sandbox, work: Path, reps: int) -> dict:
    """`true` on every node by Ansible (raw, 50 forks) and pdsh (-f 256), every node reached through
    one ssh_config (the bastion's nodes through it); Ansible at most twice (it is the slow one)."""
    import shutil

    from fanout import Ansible, pdsh_argv

    out = {}
    ansible = Ansible(ensure_bench_venv(), sandbox, work)
    out["ansible raw"] = [clean(ansible.raw(ANSIBLE_FORKS)) for _ in range(min(reps, 2))]
    log(f"  ansible -m raw (forks {ANSIBLE_FORKS}): {min(s['wall'] for s in out['ansible raw']):.2f}s "
        f"rc {out['ansible raw'][0]['rc']}")
    if shutil.which("pdsh"):
        argv, env = pdsh_argv(sandbox, ansible.ssh_config)
        argv = [argv[0], "-f", str(PDSH_FANOUT), *argv[1:]]
        out["pdsh"] = [clean(timed(argv, env=env)) for _ in range(reps)]
        log(f"  pdsh -f {PDSH_FANOUT}: {min(s['wall'] for s in out['pdsh']):.2f}s rc {out['pdsh'][0]['rc']}")
    return out


# A rank that only says who it is: the journey's cost at many Docker nodes is clusterctl's and
# torchrun's, not the job's (64 ranks importing torch would not fit beside 64 engines on 2 cores).
HELLO = """import os, sys, time
print("rank %s of %s on %s" % (os.environ.get("RANK"), os.environ.get("WORLD_SIZE"), os.uname().nodename), flush=True)
time.sleep(1)
"""


def measure_docker(n: int) -> dict:
    """The journey at N Docker nodes: cold `up`, warm `up`, `run` of a one-rank-per-node job, `collect-logs`,
    `down`, each sampled as above."""
    import yaml

    from clusterctl.sandbox import down, up

    log(f"scale: {n} Docker nodes")
    before = mem_available_mb()
    sandbox = up(n, docker=True)
    time.sleep(2)
    result = {"nodes": n, "node_cost": {"mem_mb_per_node": round((before - mem_available_mb()) / n, 2)}}
    work = fresh_dir(WORK / f"scale-docker-{n}")
    env = clusterctl_env(work / "state")
    (Path(sandbox.shared_outputs) / "hello.py").write_text(HELLO)
    doc = yaml.safe_load(Path(sandbox.inventory_path).read_text())
    doc["job"].update(command=["/workspace/output/hello.py"], args=[], nproc_per_node=1)
    doc["job"].pop("world_size_divides", None)
    inventory = work / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    prompt = work / "prompt.txt"
    prompt.write_text("a prompt\n")
    steps = {"up (cold)": ("up", str(inventory)), "up (warm)": ("up", str(inventory)),
             "run": ("run", "-i", str(inventory), str(prompt)),
             "collect-logs": ("collect-logs", "-i", str(inventory), "--dest", str(work / "collected")),
             "down": ("down", "-i", str(inventory))}
    try:
        for label, args in steps.items():
            result[label] = [sampled(clusterctl_argv(*args), env, timeout=1800)]
            sample = result[label][0]
            log(f"  {label}: {sample['wall']:.2f}s rc {sample['rc']}, peak {sample['rss_mb']:.0f} MB RSS, "
                f"{sample['threads']} threads, {sample['fds']} fds {sample['error'][-200:]}")
        return result
    finally:
        down(sandbox.state_dir)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="64,128,240", help="comma-separated SSH-only node counts ('' for none)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--docker", default="", help="comma-separated Docker node counts for the journey (e.g. 4,16,64)")
    args = parser.parse_args(argv)
    results = load()
    for n in [int(x) for x in args.docker.split(",") if x.strip()]:
        results.setdefault("scale_docker", {})[str(n)] = measure_docker(n)
        results["scale_docker"][str(n)]["measured"] = time.strftime("%Y-%m-%d %H:%M")
        save(results)
    block = results.setdefault("scale", {})
    for n in [int(x) for x in args.nodes.split(",") if x.strip()]:
        block[str(n)] = measure(n, args.reps)
        block[str(n)]["measured"] = time.strftime("%Y-%m-%d %H:%M")
        save(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
