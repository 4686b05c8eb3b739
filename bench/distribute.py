"""Image distribution (issue 22): a cold `up` of an image of incompressible data, every node pulling
from the registry (`container.distribute: registry`) against peers (`peers`), side by side.

    python3 bench/distribute.py --nodes 4,8,16,32 --size-mb 200 --rate 200mbit --skip-registry-from 32   (as root)

For each node count: a Docker sandbox of N nodes; an image `198.18.0.1:5000/bench/blob:1` = the
sandbox's base image plus one layer of SIZE MB from os.urandom, built on node1's engine and pushed to
the sandbox registry. The registry's link is limited with `tc tbf` on the management bridge (egress
of this machine, where the registry runs, towards every node), and an iptables counter on OUTPUT
counts every byte this machine sends the nodes (registry and controller alike). Each round removes
the container and the image from every node, then times a cold `clusterctl up` in each mode; a
one-node cold `up` (registry) gives the floor. Then the image update: every node holds the image,
node1 builds and pushes it plus one layer of UPDATE_MB, and `up` of the update (peers) counts the
bytes sent node to node (only the new layer should move). Results: bench/results.json ("distribute").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import WORK, clusterctl_argv, clusterctl_env, fresh_dir, load, log, save, timed  # noqa: E402

IMAGE = "198.18.0.1:5000/bench/blob:1"
UPDATE = "198.18.0.1:5000/bench/blob:2"  # IMAGE plus one more layer: the image update
COUNTER = ["-s", "198.18.0.1", "-d", "198.18.0.0/24", "-m", "comment", "--comment", "clusterctl-bench-distribute"]


def _run(argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=True, **kw)


def build_image(sandbox, size_mb: int, base: str = "", tag: str = IMAGE) -> None:
    """`base` (the sandbox's image) plus one layer of SIZE MB of random data, built on node1 and pushed."""
    node1 = sandbox.node("node1")
    with tempfile.TemporaryDirectory() as context:
        with open(Path(context) / "blob", "wb") as f:
            for _ in range(size_mb):
                f.write(os.urandom(1 << 20))
        (Path(context) / "Dockerfile").write_text(f"FROM {base or sandbox.image}\nCOPY blob /blob-{tag[-1]}\n")
        _run(["docker", "-H", node1.docker_host, "build", "-q", "-t", tag, context], timeout=900)
    _run(["docker", "-H", node1.docker_host, "push", tag], timeout=900)


def clear_nodes(sandbox) -> None:
    for node in sandbox.nodes:
        docker = ["docker", "-H", node.docker_host]
        subprocess.run([*docker, "rm", "-f", "cc-sandbox"], capture_output=True, timeout=120)
        subprocess.run([*docker, "rmi", "-f", IMAGE], capture_output=True, timeout=120)


def limit(rate: str) -> None:
    subprocess.run(["tc", "qdisc", "del", "dev", "cc-br", "root"], capture_output=True)
    if rate:
        _run(["tc", "qdisc", "add", "dev", "cc-br", "root", "tbf", "rate", rate, "burst", "256kb", "latency", "400ms"])


def counter_bytes() -> int:
    listing = _run(["iptables", "-L", "OUTPUT", "-v", "-x", "-n"]).stdout
    return sum(int(line.split()[1]) for line in listing.splitlines() if "clusterctl-bench-distribute" in line)


def inventory_for(sandbox, mode: str, path: Path, nodes=None, image: str = IMAGE) -> Path:
    import yaml

    doc = yaml.safe_load(Path(sandbox.inventory_path).read_text())
    doc["container"].update(image=image, distribute=mode, pull="missing")
    if nodes:
        doc["hosts"] = [h for h in doc["hosts"] if h["name"] in nodes]
    path.write_text(yaml.safe_dump(doc))
    return path


def cold_up(sandbox, inventory: Path, state: Path, cold: bool = True) -> dict:
    if cold:
        clear_nodes(sandbox)
    before = counter_bytes()
    sample = timed(clusterctl_argv("up", inventory, "--json"), env=clusterctl_env(state), timeout=1800)
    sample["control_bytes"] = counter_bytes() - before
    try:
        document = json.loads(sample.pop("_stdout", b"").decode() or "{}")
    except ValueError:
        document = {}
    hosts = document.get("hosts") or {}
    sample["sources"] = {name: (host.get("distribute") or {}).get("source") for name, host in hosts.items()}
    sample["peer_bytes"] = sum((host.get("distribute") or {}).get("bytes") or 0 for host in hosts.values()
                               if str((host.get("distribute") or {}).get("source")).startswith("peer:"))
    return sample


# --in-memory: the sandbox (every engine's data root, the registry) on a tmpfs, so that the nodes' image
# loads do not queue on this machine's one disk as 16 real nodes' loads would not (each has its own)
MEMORY_ROOT = Path("/var/tmp/clusterctl-bench-tmpfs")


def measure(n: int, size_mb: int, rate: str, reps: int, update_mb: int = 0, registry: bool = True,
            in_memory: bool = False) -> dict:
    if not in_memory:
        return _measure(n, size_mb, rate, reps, update_mb, registry, None)
    MEMORY_ROOT.mkdir(parents=True, exist_ok=True)
    _run(["mount", "-t", "tmpfs", "-o", f"size={max(4, n)}g,mode=755", "cc-bench", str(MEMORY_ROOT)])
    try:
        return dict(_measure(n, size_mb, rate, reps, update_mb, registry, MEMORY_ROOT / "sandbox"), in_memory=True)
    finally:
        subprocess.run(["umount", "-l", str(MEMORY_ROOT)], capture_output=True)


def _measure(n: int, size_mb: int, rate: str, reps: int, update_mb: int, registry: bool,
             state_dir: Optional[Path]) -> dict:
    from clusterctl.sandbox import down, up

    where = f", on a tmpfs at {state_dir}" if state_dir else ""
    log(f"distribute: {n} docker nodes, {size_mb} MB image, registry link {rate or 'unlimited'}{where}")
    sandbox = up(n, docker=True, **({"state_dir": state_dir} if state_dir else {}))
    work = fresh_dir(WORK / f"distribute-{n}")
    subprocess.run(["iptables", "-D", "OUTPUT", *COUNTER, "-j", "ACCEPT"], capture_output=True)
    _run(["iptables", "-I", "OUTPUT", *COUNTER, "-j", "ACCEPT"])
    try:
        build_image(sandbox, size_mb)
        limit(rate)
        result = {"nodes": n, "size_mb": size_mb, "rate": rate, "one_node": [], "registry": [], "peers": []}
        one = inventory_for(sandbox, "registry", work / "one.yaml", nodes=["node1"])
        for rep in range(reps):
            modes = ("peers", "registry") if rep % 2 else ("registry", "peers")
            for mode in modes if registry else ("peers",):
                sample = cold_up(sandbox, inventory_for(sandbox, mode, work / f"{mode}.yaml"), work / f"state-{mode}")
                log(f"  {mode}: {sample['wall']:.1f}s, {sample['control_bytes'] / 1e6:.0f} MB from this machine, "
                    f"rc {sample['rc']}")
                result[mode].append(sample)
            sample = cold_up(sandbox, one, work / "state-one")
            log(f"  one node: {sample['wall']:.1f}s")
            result["one_node"].append(sample)
        if update_mb:  # every node holds IMAGE; node1 builds the update: what moves is the new layer
            cold_up(sandbox, inventory_for(sandbox, "peers", work / "peers.yaml"), work / "state-peers")
            build_image(sandbox, update_mb, base=IMAGE, tag=UPDATE)
            sample = cold_up(sandbox, inventory_for(sandbox, "peers", work / "update.yaml", image=UPDATE),
                             work / "state-peers", cold=False)
            sample["update_mb"] = update_mb
            log(f"  update (+{update_mb} MB): {sample['wall']:.1f}s, {sample['peer_bytes'] / 1e6:.0f} MB node to node")
            result["update"] = sample
            for node in sandbox.nodes:
                subprocess.run(["docker", "-H", node.docker_host, "rmi", "-f", UPDATE], capture_output=True, timeout=120)
        return result
    finally:
        limit("")
        subprocess.run(["iptables", "-D", "OUTPUT", *COUNTER, "-j", "ACCEPT"], capture_output=True)
        down(sandbox.state_dir)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="4,8", help="comma-separated node counts (default 4,8)")
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--rate", default="200mbit", help="the registry link's rate for tc tbf ('' for none)")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--update-mb", type=int, default=20, help="then an image update of this many MB (0: none)")
    parser.add_argument("--skip-registry-from", type=int, default=0,
                        help="from this many nodes, time peers only (every node pulling takes N x a pull)")
    parser.add_argument("--in-memory", action="store_true",
                        help="the sandbox on a tmpfs (no shared disk); results under distribute_in_memory")
    args = parser.parse_args(argv)
    results = load()
    block = results.setdefault("distribute_in_memory" if args.in_memory else "distribute", {})
    for n in [int(x) for x in args.nodes.split(",") if x.strip()]:
        block[str(n)] = measure(n, args.size_mb, args.rate, args.reps, args.update_mb,
                                registry=not (args.skip_registry_from and n >= args.skip_registry_from),
                                in_memory=args.in_memory)
        block[str(n)]["measured"] = time.strftime("%Y-%m-%d %H:%M")
        save(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
