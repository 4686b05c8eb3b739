"""Diagnosing a run directory written by `clusterctl collect-logs` (or any directory of logs).

Layout: `<dir>/<host>/logs/<host>-agent.log` and `<host>-r<rank>.log`, `<dir>/<host>/diag/*` (the node
at collection time), `<host>/outputs/logs/<run>/<host>/agent.exit` (torchrun's exit code), and
`manifest.json`. The run's exit codes decide first: a run that succeeded is not a failure, whatever
its logs contain (collect-logs and `diagnose DIR` agree). Node diagnostics join the log evidence of
the same host: a SIGKILL plus the kernel's OOM line, "No space left" plus a 64 MiB /dev/shm, an
Xid or ECC errors, the container's OOMKilled flag, different images/NCCL versions across hosts.
"""
from __future__ import annotations

from dataclasses import replace

import json
import re
from pathlib import Path
from typing import Optional

from clusterctl.diagnose import logformat as fmt
from clusterctl.diagnose import nodediag
from clusterctl.diagnose.matching import EVIDENCE_MAX, Event, Scan, context_from_text, rank_findings
from clusterctl.diagnose.logformat import LogLine
from clusterctl.diagnose.reader import LogInputError, read_log
from clusterctl.diagnose.rules import RULE_OF, Signal
from clusterctl.models import Finding

TINY_SHM = 64 << 20
DIAG_ALONE = 0.6  # a node diagnostic with no log line of the same cause on that host (e.g. an old OOM)
FABRIC_NOT_READY = re.compile(r"Fabric\s*\n\s*State\s*:\s*(In Progress|Not Started|Failure\S*)")
VERSION_ENV = {"NCCL": "NCCL_VERSION", "torch": "PYTORCH_VERSION", "CUDA": "CUDA_VERSION"}
DIAG_SIGNALS = {name: Signal(f"(node diagnostic: {name})", weight) for name, weight in (
    ("dmesg OOM kill", .9), ("container OOMKilled", .95), ("container exit 137", .6), ("Xid", .9),
    ("ECC", .9), ("fabric state", .9), ("NIC not on node", .9), ("versions differ", .9),
    ("tiny shm", .995))}  # the log line and the node together: stronger than the line alone
# evidence that already combines the log with the node (or several nodes): never discounted as "alone"
SELF_STANDING = {DIAG_SIGNALS[name] for name in ("NIC not on node", "versions differ", "tiny shm")}


def diagnose_run_dir(root: Path, record: Optional[dict] = None) -> list[Finding]:
    if run_succeeded(root, record):
        return []
    files = log_files(root)
    if not files and not list(root.glob("*/diag")):
        raise LogInputError("no logs in this directory (no *.log or *.txt files, no <host>/diag/)", where=str(root),
                            fix="give a log file, or a directory written by `clusterctl collect-logs`")
    scan = Scan()
    texts = {}
    for file in files:
        try:
            texts[file] = read_log(file)
        except LogInputError:
            continue  # one empty or binary file among the logs is not the run's failure
    year = fmt.guess_year("\n".join(texts.values()))
    for file, text in texts.items():
        host, rank = fmt.identity_from_name(file.name, host_dir(root, file), None)
        scan.add_text(text, host, rank, str(file.relative_to(root)), year)
    scan.context.update(manifest_context(root / "manifest.json"))
    scan.nodes = node_diagnostics(root)
    join_node_diagnostics(scan)
    from clusterctl.diagnose.hang import with_hang_evidence  # the stacks and flight-recorder dumps of a hang

    findings = with_hang_evidence(root, rank_findings(scan))
    return first_failure_first(findings, record if record is not None else _read_json(root / "run.json"))


def first_failure_first(findings: list[Finding], record: Optional[dict]) -> list[Finding]:
    """The controller saw which rank failed first (the run record's first_failure); the logs of the
    others only show the cascade. Findings on that host come first, and an `unknown` there takes
    the recorded host and rank."""
    first = record.get("first_failure") if isinstance(record, dict) else None
    host = first.get("host") if isinstance(first, dict) else None
    if not host or not findings:
        return findings
    ordered = sorted(findings, key=lambda f: f.host != host)
    top = ordered[0]
    if top.host != host and top.cause == "unknown":
        ordered[0] = replace(top, host=host, rank=first.get("rank"))
    return ordered


# --------------------------------------------------------------------------- the run's outcome


def run_succeeded(root: Path, record: Optional[dict]) -> bool:
    """True when the run record, or else every node's agent.exit, says the run exited 0."""
    record = record if record is not None else _read_json(root / "run.json")
    if isinstance(record, dict) and record.get("exit_code") is not None:
        nodes = record.get("nodes") or {}
        lost = any(isinstance(n, dict) and n.get("lost") for n in nodes.values())
        return record.get("exit_code") == 0 and not lost
    codes = [p.read_text(errors="replace").strip() for p in root.rglob("agent.exit") if p.is_file()]
    return bool(codes) and all(code == "0" for code in codes)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- files


def log_files(root: Path) -> list[Path]:
    """The collected per-rank and agent logs when the layout is collect-logs'; else every *.log/*.txt."""
    collected = sorted(p for p in root.glob("*/logs/*.log") if p.is_file())
    if collected:
        return collected + sorted(p for p in root.glob("*.log") if p.is_file())
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".log", ".txt")
                  and "diag" not in p.relative_to(root).parts[:-1])


def host_dir(root: Path, file: Path) -> Optional[str]:
    parts = file.relative_to(root).parts
    return parts[0] if len(parts) > 1 and (root / parts[0]).is_dir() else None


def manifest_context(path: Path) -> dict:
    data = _read_json(path)
    data = data if isinstance(data, dict) else {}
    keys = {"nproc_per_node": "nproc", "world_size": "world", "run_id": "run_id"}
    return {short: str(data[key]) for key, short in keys.items() if data.get(key) not in (None, "", "auto")}


def node_diagnostics(root: Path) -> dict:
    """host -> what its diag/ files say (GPUs, driver, /dev/shm size, env, NICs, image, fabric, kernel, ECC)."""
    nodes = {}
    for diag in sorted(root.glob("*/diag")):
        files = {p.name: p.read_text(errors="replace") for p in diag.iterdir() if p.is_file()}
        smi, dmesg = files.get("nvidia-smi-q.txt", ""), files.get("dmesg.txt", "")
        inspect = files.get("docker-inspect.json", "")
        env = fmt.env_vars(files.get("env.txt", ""))
        shm = fmt.shm_size_bytes(files.get("df-shm.txt", "")) or fmt.docker_shm_bytes(inspect)
        nodes[diag.parent.name] = {
            **{k: v for k, v in context_from_text(smi).items() if k in ("gpus", "driver")},
            **_visible_gpus(env.get("CUDA_VISIBLE_DEVICES")),
            "shm_bytes": shm, "shm_size": fmt.human_bytes(shm) if shm else None, "env": env,
            "ifaces": fmt.interface_names(files.get("ip-addr.txt", "")),
            "image": fmt.docker_image_id(inspect), "fabric": FABRIC_NOT_READY.search(smi),
            "oom_kills": nodediag.oom_kills(dmesg), "xids": nodediag.xids(dmesg),
            "ecc": nodediag.ecc_state(smi), "container": nodediag.container_state(inspect) if inspect else None,
        }
    return nodes


def _visible_gpus(cuda_visible_devices: Optional[str]) -> dict:
    """The GPUs CUDA_VISIBLE_DEVICES leaves to the ranks, which is what "invalid device ordinal" is about."""
    if cuda_visible_devices is None or cuda_visible_devices.strip().lower() in ("", "all"):
        return {}
    return {"gpus": str(len([d for d in cuda_visible_devices.split(",") if d.strip()]))}


# --------------------------------------------------------------------------- joins


def join_node_diagnostics(scan: Scan) -> None:
    diag: list[Event] = []
    for host, node in scan.nodes.items():
        diag += _kernel_events(host, node) + _nic_events(host, node)
        if node["fabric"]:
            diag.append(_event("fabricmanager", "fabric state", host,
                               f"nvidia-smi -q: Fabric State: {node['fabric'].group(1)}", driver=node.get("driver")))
        if node["ecc"].bad:
            diag.append(_event("ecc_error", "ECC", host, f"nvidia-smi -q: {node['ecc'].describe()}"))
    diag += _shm_events(scan) + _version_events(scan)
    for event in diag:
        same = [e for e in scan.events if e.cause == event.cause and e.line.host == event.line.host]
        if same:  # the log and the node agree: quote both, the log line first
            strongest = max(same, key=lambda e: e.weight)
            strongest.evidence = event.evidence = f"{strongest.evidence} | {event.evidence}"[:EVIDENCE_MAX]
        elif event.signal not in SELF_STANDING:
            event.factor = DIAG_ALONE
    scan.events.extend(diag)


def _kernel_events(host: str, node: dict) -> list[Event]:
    events = []
    if node["oom_kills"]:
        kill = node["oom_kills"][-1]
        events.append(_event("oom_killed", "dmesg OOM kill", host, f"dmesg: {kill.line}"))
    state = node["container"]
    if state is not None and state.oom_killed:
        events.append(_event("oom_killed", "container OOMKilled", host, state.describe()))
    elif state is not None and state.exit_code == 137:
        events.append(_event("killed_by_signal", "container exit 137", host, state.describe()))
    for xid in node["xids"][-1:]:
        events.append(_event("gpu_xid", "Xid", host, f"dmesg: {xid.line}", xid=xid.xid))
    return events


def _shm_events(scan: Scan) -> list[Event]:
    """A tiny /dev/shm on a node whose log says "No space left on device": shm_too_small, with the size."""
    events = []
    for host, node in scan.nodes.items():
        if not node["shm_bytes"] or node["shm_bytes"] > TINY_SHM:
            continue
        said = [line for line in scan.lines if line.host == host and "No space left on device" in line.text]
        if said:  # the host's "No space left" is /dev/shm, not a disk
            for event in scan.events:
                if event.cause == "disk_full" and event.line.host == host:
                    event.factor = 0.4
        if said or any(e.cause == "shm_too_small" and e.line.host == host for e in scan.events):
            line = said[0] if said else None
            text = f"{line.text} | df /dev/shm: {node['shm_size']}" if line else f"df /dev/shm: {node['shm_size']}"
            events.append(_event("shm_too_small", "tiny shm", host, text, line=line, shm_size=node["shm_size"]))
    return events


def _nic_events(host: str, node: dict) -> list[Event]:
    events = []
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        wanted = node["env"].get(var, "")
        names = [n for n in wanted.lstrip("=").split(",") if n and not wanted.startswith("^")]
        if names and node["ifaces"] and not any(i.startswith(n) for n in names for i in node["ifaces"]):
            evidence = f"env {var}={wanted}; interfaces: {', '.join(sorted(node['ifaces']))}"
            events.append(_event("nic_mismatch", "NIC not on node", host, evidence, iface=wanted))
    return events


def _version_events(scan: Scan) -> list[Event]:
    """Different NCCL/torch versions or container images across hosts."""
    seen: dict[str, dict[str, set]] = {}  # component -> version -> hosts
    pattern = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
    for line in scan.lines:
        match = pattern.search(line.text) if "NCCL version" in line.text else None
        if match and line.host:
            seen.setdefault("NCCL", {}).setdefault(match.group(1), set()).add(line.host)
    for host, node in scan.nodes.items():
        found = {name: node["env"].get(var) for name, var in VERSION_ENV.items()} | {"image": node["image"]}
        for name, version in found.items():
            if version:
                seen.setdefault(name, {}).setdefault(version, set()).add(host)
    events = []
    for name, versions in seen.items():
        if len(versions) > 1:
            said = "; ".join(f"{name} {v} on {', '.join(sorted(h))}" for v, h in sorted(versions.items()))
            events.append(_event("version_mismatch", "versions differ", None, said, versions=said))
    return events


def _event(cause: str, signal: str, host: Optional[str], evidence: str, line: Optional[LogLine] = None,
           **values) -> Event:
    line = line or LogLine(evidence, evidence, 0, host=host)
    return Event(RULE_OF[cause], DIAG_SIGNALS[signal], line, evidence[:EVIDENCE_MAX],
                 {k: v for k, v in values.items() if v is not None}, "diag")
