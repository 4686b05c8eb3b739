"""Match log lines against the rule table, join node diagnostics, rank the root cause first.

Public API: `diagnose_text` (one log's text) and `diagnose_path` (a log file, or a run
directory collected as `<dir>/<host>/logs/*.log` + `<dir>/<host>/diag/*`).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from clusterctl.diagnose import logformat as fmt
from clusterctl.diagnose.logformat import LogLine, RootCause
from clusterctl.diagnose.rules import (CASCADE_PATTERNS, CONTEXT_PATTERNS, PEER_LOST_PATTERNS, RULES, SUSPICIOUS,
                                       UNKNOWN_FIX, Rule, render_fix, required_literals, template_values)
from clusterctl.models import Finding

ROOT_CAUSE_BONUS = 15  # the rank torchrun names as "first observed failure"
FIRST_IN_TIME_BONUS = 10  # scaled down for later failures
JOIN_BONUS = 20  # node diagnostics agree with the log
CASCADE_PENALTY = 20  # the line itself reads as a consequence
DIAG_ONLY_PENALTY = 25  # a node diagnostic alone (e.g. an old dmesg OOM line)
WEAK_SCORE = 45  # below this, a finding is a consequence or a warning, not a diagnosis
TINY_SHM = 64 << 20
FABRIC_NOT_READY = re.compile(r"Fabric\s*\n\s*State\s*:\s*(In Progress|Not Started|Failure\S*)")
VERSION_ENV = {"NCCL": "NCCL_VERSION", "torch": "PYTORCH_VERSION", "CUDA": "CUDA_VERSION"}
EVIDENCE_MAX = 600
RANK_FILE = re.compile(r"(?P<host>.+)-r(?P<rank>\d+)\.log$")
AGENT_FILE = re.compile(r"(?P<host>.+)-agent\.log$")
SUSPICIOUS_HINTS = re.compile(r"error|exception|traceback|fail|fatal|killed|abort|segmentation")
EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Exception)\b")
PREFILTERED = tuple((rule, pattern, keys) for rule in RULES
                    for pattern, keys in zip(rule.compiled, rule.keywords))
KEYWORDS = tuple(sorted({key for _, _, keys in PREFILTERED if keys for key in keys}))
ALWAYS_TRIED = any(keys is None for _, _, keys in PREFILTERED)


@dataclass
class Event:
    rule: Rule
    line: LogLine
    evidence: str
    values: dict = field(default_factory=dict)
    source: str = ""
    bonus: float = 0.0
    score: float = 0.0

    @property
    def cause(self) -> str:
        return self.rule.cause


@dataclass
class Scan:
    """Everything read from one log or one run directory."""

    lines: list[LogLine] = field(default_factory=list)
    roots: list[RootCause] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    context: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)  # host -> {"gpus": .., "shm_bytes": .., ...}


# --------------------------------------------------------------------------- public API


def diagnose_text(text: str, host: Optional[str] = None, rank: Optional[int] = None,
                  source: Optional[str] = None) -> list[Finding]:
    """Findings for one log's text, most likely root cause first (never empty)."""
    host, rank = _identity_from_name(source, host, rank)
    scan = Scan()
    _scan_text(scan, text, host, rank, source or "", fmt.guess_year(text))
    scan.context.update(_context_from_text(text))
    return _rank_findings(scan)


def diagnose_path(path: Path) -> list[Finding]:
    """Findings for a log file or a collected run directory, most likely root cause first."""
    path = Path(path)
    if not path.is_dir():
        return diagnose_text(_read(path), source=str(path))
    scan = Scan()
    texts = {file: _read(file) for file in _log_files(path)}
    year = fmt.guess_year("\n".join(texts.values()))
    for file, text in texts.items():
        host, rank = _identity_from_name(file.name, _host_dir(path, file), None)
        _scan_text(scan, text, host, rank, str(file.relative_to(path)), year)
        scan.context.update({k: v for k, v in _context_from_text(text).items() if k not in scan.context})
    scan.context.update(_manifest_context(path / "manifest.json"))
    scan.nodes = _node_diagnostics(path)
    _join_node_diagnostics(scan)
    return _rank_findings(scan)


# --------------------------------------------------------------------------- reading


def _read(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _log_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".log", ".txt"))


def _host_dir(root: Path, file: Path) -> Optional[str]:
    parts = file.relative_to(root).parts
    return parts[0] if len(parts) > 1 and (root / parts[0]).is_dir() else None


def _identity_from_name(name: Optional[str], host: Optional[str], rank: Optional[int]):
    base = Path(name).name if name else ""
    match = RANK_FILE.match(base) or AGENT_FILE.match(base)
    if match:
        host = host or match.group("host")
        if rank is None and "rank" in match.groupdict():
            rank = int(match.group("rank"))
    return host, rank


def _context_from_text(text: str) -> dict:
    found, lowered = {}, text.lower()
    for key, patterns in CONTEXT_PATTERNS.items():
        for pattern in patterns:
            keys = required_literals(pattern.pattern)
            match = None if keys and not any(k in lowered for k in keys) else pattern.search(text)
            if match:
                found[key] = match.group(1)
                break
    return found


def _manifest_context(path: Path) -> dict:
    try:
        data = json.loads(_read(path)) if path.is_file() else {}
    except ValueError:
        return {}
    data = data if isinstance(data, dict) else {}
    keys = {"nproc_per_node": "nproc", "world_size": "world", "run_id": "run_id"}
    return {short: str(data[key]) for key, short in keys.items() if data.get(key) not in (None, "", "auto")}


# --------------------------------------------------------------------------- matching


def _scan_text(scan: Scan, text: str, host, rank, source: str, year: int) -> None:
    lines, roots = fmt.parse_lines(text, host, rank, year)
    scan.lines.extend(lines)
    scan.roots.extend(roots)
    scan.events.extend(_match_lines(lines, source))


def _match_lines(lines: list[LogLine], source: str) -> list[Event]:
    events = []
    for index, line in enumerate(lines):
        event = _match_one(line, line.text, source)
        if event is None and index + 1 < len(lines):
            event = _match_wrapped(line, lines[index + 1], source)
        if event is not None:
            events.append(event)
    return events


def _match_one(line: LogLine, text: str, source: str, boundary: int = -1) -> Optional[Event]:
    lowered = text.lower()
    present = {key for key in KEYWORDS if key in lowered}
    if not present and not ALWAYS_TRIED:
        return None
    best = None
    for rule, pattern, keys in PREFILTERED:
        if (keys is not None and present.isdisjoint(keys)) or \
                (best is not None and rule.priority <= best[0].priority):
            continue
        match = pattern.search(text)
        if match and (boundary < 0 or match.start() < boundary < match.end()):
            best = (rule, match)
    if best is None:
        return None
    rule, match = best
    values = {k: v for k, v in match.groupdict().items() if v}
    line = fmt.with_rank(line, int(values["rank"]) if "rank" in values else None)
    return Event(rule, line, text.strip()[:EVIDENCE_MAX], values, source)


def _match_wrapped(line: LogLine, following: LogLine, source: str) -> Optional[Event]:
    """A message the terminal or the logger wrapped onto the next, indented or lower-case, line."""
    bare = following.raw.strip() == following.text  # no prefix or timestamp of its own
    if not bare or not (following.raw[:1].isspace() or (following.text[:1].islower() and len(line.raw) >= 60)):
        return None
    for glue in (" ", ""):
        joined = line.text.rstrip() + glue + following.text.strip()
        event = _match_one(line, joined, source, boundary=len(line.text.rstrip()) + len(glue))
        if event is not None:
            return event
    return None


# --------------------------------------------------------------------------- node diagnostics


def _node_diagnostics(root: Path) -> dict:
    """host -> what its diag/ files say (GPUs, driver, /dev/shm size, env, NICs, image, fabric state)."""
    nodes = {}
    for diag in sorted(root.glob("*/diag")):
        files = {p.name: _read(p) for p in diag.iterdir() if p.is_file()}
        smi = files.get("nvidia-smi-q.txt", "")
        inspect = files.get("docker-inspect.json", "")
        env = fmt.env_vars(files.get("env.txt", ""))
        nodes[diag.parent.name] = {
            **{k: v for k, v in _context_from_text(smi).items() if k in ("gpus", "driver")},
            **_visible_gpus(env.get("CUDA_VISIBLE_DEVICES")),
            "shm_bytes": fmt.shm_size_bytes(files.get("df-shm.txt", "")) or fmt.docker_shm_bytes(inspect),
            "env": env,
            "ifaces": fmt.interface_names(files.get("ip-addr.txt", "")),
            "image": fmt.docker_image_id(inspect),
            "fabric": FABRIC_NOT_READY.search(smi),
        }
    return nodes


def _visible_gpus(cuda_visible_devices: Optional[str]) -> dict:
    """The GPUs the container's CUDA_VISIBLE_DEVICES leaves to the ranks, which is what an
    "invalid device ordinal" is about, however many nvidia-smi attaches ({} when unset)."""
    if cuda_visible_devices is None or cuda_visible_devices.strip().lower() in ("", "all"):
        return {}
    return {"gpus": str(len([d for d in cuda_visible_devices.split(",") if d.strip()]))}


def _join_node_diagnostics(scan: Scan) -> None:
    _join_oom(scan)
    _join_shm(scan)
    for host, node in scan.nodes.items():
        scan.events.extend(_nic_events(host, node))
        if node["fabric"]:
            said = f"nvidia-smi -q: Fabric State: {node['fabric'].group(1)}"
            scan.events.append(_diag_event("fabricmanager", host, said, driver=node.get("driver")))
    scan.events.extend(_version_events(scan))
    for event in scan.events:
        if "/diag/" in f"/{event.source}" and event.bonus < JOIN_BONUS:
            event.bonus -= DIAG_ONLY_PENALTY


def _join_oom(scan: Scan) -> None:
    """A rank killed by SIGKILL + the kernel's OOM line on the same node = oom_killed, both quoted."""
    kernel = {e.line.host: e for e in scan.events if e.cause == "oom_killed" and "/diag/" in f"/{e.source}"}
    for event in scan.events:
        oom = kernel.get(event.line.host)
        if oom and event.cause == "oom_killed" and re.search(r"SIGKILL|-9\b|signal: Killed", event.evidence):
            event.rule, event.bonus = oom.rule, event.bonus + JOIN_BONUS
            event.evidence = f"{event.evidence} | dmesg: {oom.evidence}"[:EVIDENCE_MAX]


def _join_shm(scan: Scan) -> None:
    """A tiny /dev/shm + 'No space left on device' on that node = shm_too_small with the size."""
    tiny = {h: n["shm_bytes"] for h, n in scan.nodes.items() if n["shm_bytes"] and n["shm_bytes"] <= TINY_SHM}
    matched = {e.line.host for e in scan.events if e.cause == "shm_too_small"}
    shm_rule = next(rule for rule in RULES if rule.cause == "shm_too_small")
    for line in scan.lines:
        if line.host in tiny and line.host not in matched and "No space left on device" in line.text:
            scan.events.append(Event(shm_rule, line, line.text[:EVIDENCE_MAX]))
            matched.add(line.host)
    for event in scan.events:
        if event.cause == "shm_too_small" and event.line.host in tiny:
            size = fmt.human_bytes(tiny[event.line.host])
            event.values["shm_size"] = size
            event.evidence = f"{event.evidence} | df /dev/shm: {size}"[:EVIDENCE_MAX]
            event.bonus += JOIN_BONUS


def _nic_events(host: str, node: dict) -> list[Event]:
    events = []
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        wanted = node["env"].get(var, "")
        names = [n for n in wanted.lstrip("=").split(",") if n and not wanted.startswith("^")]
        if names and node["ifaces"] and not any(i.startswith(n) for n in names for i in node["ifaces"]):
            evidence = f"env {var}={wanted}; interfaces: {', '.join(sorted(node['ifaces']))}"
            events.append(_diag_event("nic_mismatch", host, evidence, iface=wanted, bonus=JOIN_BONUS))
    return events


def _version_events(scan: Scan) -> list[Event]:
    """Different NCCL/torch versions or container images across hosts."""
    seen: dict[str, dict[str, set]] = {}  # component -> version -> hosts
    for line in scan.lines:
        match = CONTEXT_PATTERNS["nccl_version"][0].search(line.text) if "NCCL version" in line.text else None
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
            events.append(_diag_event("version_mismatch", None, said, versions=said, bonus=JOIN_BONUS))
    return events


def _diag_event(cause: str, host: Optional[str], evidence: str, bonus: float = 0.0, **values) -> Event:
    rule = next(rule for rule in RULES if rule.cause == cause)
    return Event(rule, LogLine(evidence, evidence, 0, host=host), evidence, values, "", bonus)


# --------------------------------------------------------------------------- ranking


def _rank_findings(scan: Scan) -> list[Finding]:
    if not scan.events:
        return [_unknown(scan)]
    _score(scan)
    groups: dict[tuple, list[Event]] = {}
    for event in scan.events:
        groups.setdefault((event.cause, event.line.host), []).append(event)
    findings = sorted((_finding(events, scan) for events in groups.values()), key=lambda f: -f.score)
    if findings[0].score < WEAK_SCORE:  # only cascades/warnings matched: an unmatched exception may be the cause
        unknown = _unknown(scan, exceptions_only=True)
        findings = ([unknown] if unknown.evidence else []) + findings
    return findings


def _score(scan: Scan) -> None:
    root_ranks = {root.rank for root in scan.roots if root.rank is not None}
    stamps = sorted({e.line.ts for e in scan.events if e.line.ts is not None})
    order = {stamp: index for index, stamp in enumerate(stamps)}
    for event in scan.events:
        event.score = event.rule.priority + event.bonus
        if event.line.rank is not None and event.line.rank in root_ranks:
            event.score += ROOT_CAUSE_BONUS
        if event.line.ts is not None and len(stamps) > 1:
            event.score += FIRST_IN_TIME_BONUS * (1 - order[event.line.ts] / len(stamps))
        if any(p.search(event.evidence) for p in CASCADE_PATTERNS):
            event.score -= CASCADE_PENALTY


def _finding(events: list[Event], scan: Scan) -> Finding:
    best = max(events, key=lambda e: (e.score, bool(EXCEPTION_LINE.match(e.evidence)), -(e.line.ts or 0),
                                      len(e.evidence)))
    root_ranks = {root.rank for root in scan.roots}
    ranks = [e.line.rank for e in events if e.line.rank is not None]
    named = [r for r in ranks if r in root_ranks]
    rank = named[0] if named else (min(ranks) if ranks else None)
    host = best.line.host
    values = {**scan.context, **_node_values(scan.nodes.get(host)), **best.values,
              "host": host, "rank": rank}
    fix = render_fix(best.rule.fix, template_values(values))
    return Finding(best.cause, best.evidence, fix, host=host, rank=rank, score=round(best.score, 2))


def _node_values(node: Optional[dict]) -> dict:
    if not node:
        return {}
    return {k: node[k] for k in ("gpus", "driver") if node.get(k)}


def _unknown(scan: Scan, exceptions_only: bool = False) -> Finding:
    """Nothing (convincing) matched: quote the most suspicious lines, of the root-cause rank if named.

    An exception that is not a cascade (someone else's crash seen from here) wins, from the
    root-cause rank first, then from any rank: torchrun's "first observed failure" is often
    a rank that merely lost its peer a moment before the real culprit's error was recorded.
    """
    # Every agent names its own "first observed failure": the earliest wins, and on a tie (the
    # times have 1 s resolution) the one whose rank did not just lose a peer.
    root = min(scan.roots, key=lambda r: (r.fields.get("time", ""), _lost_a_peer(scan, r)), default=None)
    lines = [line for line in scan.lines if root is None or root.rank is None or line.rank == root.rank]
    own = _suspicious_lines(lines, True) or _suspicious_lines(scan.lines, True)
    picked = own
    if not own and not exceptions_only:
        near = [line for line in scan.lines if root is not None and line.host == root.host]
        picked = _suspicious_lines(lines) or _suspicious_lines(near) or _suspicious_lines(scan.lines)
    first = picked[0] if picked else None
    evidence = " | ".join(line.text for line in picked)[:EVIDENCE_MAX]
    if not own and root is not None and root.rank is not None:
        # No exception of its own anywhere (e.g. a rank that called sys.exit(1)): the quoted
        # lines may be its peers' tracebacks, so name the rank torchrun saw fail first.
        return Finding("unknown", evidence, UNKNOWN_FIX, host=root.host, rank=root.rank, score=0.0)
    if first is not None and first.rank is not None:
        rank = first.rank
    else:
        rank = root.rank if root and root.rank is not None else None
    host = first.host if first else (root.host if root else None)
    return Finding("unknown", evidence, UNKNOWN_FIX, host=host, rank=rank, score=WEAK_SCORE if own else 0.0)


def _lost_a_peer(scan: Scan, root: RootCause) -> bool:
    return any(p.search(line.text) for line in scan.lines if line.rank == root.rank and line.host == root.host
               for p in PEER_LOST_PATTERNS)


def _suspicious_lines(lines: list[LogLine], exceptions_only: bool = False, limit: int = 3) -> list[LogLine]:
    """Exception lines (a traceback's last line) first, then other error-looking lines, cascade last."""
    def weight(line: LogLine) -> tuple:
        exception = bool(EXCEPTION_LINE.match(line.text))
        cascade = any(p.search(line.text) for p in CASCADE_PATTERNS)
        return (cascade, not exception, line.ts or 0, line.number)
    candidates = [line for line in lines if SUSPICIOUS_HINTS.search(line.text.lower())
                  and SUSPICIOUS.search(line.text) and not line.text.startswith("File ")]
    if exceptions_only:
        candidates = [line for line in candidates if weight(line)[:2] == (False, False)
                      and _match_one(line, line.text, "") is None]
    unique = {line.text: line for line in sorted(candidates, key=weight, reverse=True)}
    return sorted(unique.values(), key=weight)[:limit]
