"""collect-logs throughput: 3 nodes x 200 MB of random (incompressible) data vs parallel scp.

The sandbox's outputs directory is ONE directory of the machine, shared by every node
like an NFS mount, so two layouts are measured:

- shared: `<outputs>/<run_id>-blob-<node>.bin`. clusterctl sees that the outputs are
  shared (a probe file) and fetches them once, through the first node: one stream of
  600 MB. Competitors: one scp of the three files from that node (the same single
  stream), and three scps at once, one per node.
- per node: `<outputs>/logs/<run_id>/<node>/blob.bin`, the node's own run directory,
  which collect-logs fetches from each node (what a cluster without shared storage
  looks like). Competitors: three `scp -r` of those directories at once (the goal's
  figure), and one `scp -r` naming all three (which copies them one after another).

Every round starts from an empty destination. Throughput is blob bytes / wall time of
the whole command (process start, listing, transfer, unpacking, manifest, diagnosis).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from common import (BEFORE, BEFORE_LABEL, WORK, clusterctl_argv, clusterctl_env, fresh_dir, log, rounds, timed,
                    timed_parallel, write_ssh_config)

BLOB_MB = 200


def write_blob(path: Path, mb: int = BLOB_MB) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        subprocess.run(["head", "-c", f"{mb}M", "/dev/urandom"], stdout=handle, check=True)


def _ssh_config(sandbox) -> Path:
    """Every node as the inventory reaches it (user, port, bastion), for scp -F."""
    return write_ssh_config(sandbox, fresh_dir(WORK / "collect-ssh") / "ssh_config")


def scp_argv(sandbox, node, sources: list[str], dest: Path, recursive: bool = False) -> list[str]:
    return ["scp", "-q", *(["-r"] if recursive else []), "-F", str(_ssh_config(sandbox)),
            *(f"{node.name}:{s}" for s in sources), str(dest)]


def _scp_hosts_argv(sandbox, hosts, dirs, dest: Path) -> list[str]:
    """One scp command naming every node's directory: scp copies them one after another."""
    return ["scp", "-q", "-r", "-F", str(_ssh_config(sandbox)), *(f"{n.name}:{d}" for n, d in zip(hosts, dirs)),
            str(dest)]


def _dest(work: Path, name: str) -> Path:
    return fresh_dir(work / name)


def measure(sandbox, state_dir: Path, run_id: str, reps: int, nodes: int = 3) -> dict:
    hosts = sandbox.nodes[:nodes]
    outputs = Path(sandbox.shared_outputs)
    work = fresh_dir(WORK / "collect")
    limit = ",".join(n.name for n in hosts)
    results = {"nodes": nodes, "blob_mb": BLOB_MB, "bytes": nodes * BLOB_MB << 20, "run_id": run_id}

    def clusterctl_collect(before: bool = False) -> dict:
        dest = _dest(work, "cc")
        try:
            return timed(clusterctl_argv("collect-logs", "--run", run_id, "--limit", limit, "--dest", dest),
                         env=clusterctl_env(state_dir, before=before))
        finally:
            shutil.rmtree(dest, ignore_errors=True)

    before = {BEFORE_LABEL: lambda: clusterctl_collect(before=True)} if BEFORE else {}

    def scp(parallel_argvs) -> dict:
        try:
            return timed_parallel(parallel_argvs)
        finally:
            for i in range(nodes):
                shutil.rmtree(work / f"scp{i}", ignore_errors=True)

    # shared outputs: fetched once by clusterctl
    blobs = [outputs / f"{run_id}-blob-{n.name}.bin" for n in hosts]
    log(f"collect (shared outputs): writing {nodes} x {BLOB_MB} MB")
    for blob in blobs:
        write_blob(blob)
    try:
        log(f"collect (shared outputs), {reps} rounds")
        results["shared"] = {"samples": rounds(reps, {
            "clusterctl collect-logs": clusterctl_collect,
            **before,
            "scp, 1 stream": lambda: scp([scp_argv(sandbox, hosts[0], [str(b) for b in blobs], _dest(work, "scp0"))]),
            "scp, parallel": lambda: scp([scp_argv(sandbox, n, [str(b)], _dest(work, f"scp{i}"))
                                          for i, (n, b) in enumerate(zip(hosts, blobs))]),
        })}
    finally:
        for blob in blobs:
            blob.unlink(missing_ok=True)

    # per node: each node's own run directory
    dirs = [outputs / "logs" / run_id / n.name for n in hosts]
    log(f"collect (per-node directories): writing {nodes} x {BLOB_MB} MB")
    for d in dirs:
        write_blob(d / "blob.bin")
    try:
        log(f"collect (per-node directories), {reps} rounds")
        results["per_node"] = {"samples": rounds(reps, {
            "clusterctl collect-logs": clusterctl_collect,
            **before,
            "scp -r, parallel": lambda: scp([scp_argv(sandbox, n, [str(d)], _dest(work, f"scp{i}"), recursive=True)
                                            for i, (n, d) in enumerate(zip(hosts, dirs))]),
            "scp -r, one command": lambda: scp([_scp_hosts_argv(sandbox, hosts, dirs, _dest(work, "scp0"))]),
        })}
    finally:
        for d in dirs:
            (d / "blob.bin").unlink(missing_ok=True)
    return results
