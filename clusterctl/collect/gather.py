"""Gathering a run (`clusterctl collect-logs`): its logs, outputs and node diagnostics, then the diagnosis.

Layout under DEST (default ./logs/<run-id>/):
  <host>/logs/<host>-agent.log, <host>-r<rank>.log   torchrun's and each global rank's output
  <host>/diag/*.txt|json                              the node at collection time
  <host>/outputs/...                                  what the run wrote (paths naming the run id)
  outputs/...                                         the same, once, when outputs are shared by all nodes
  <host>/outputs/logs/<run-id>/<host>/metrics.jsonl   the node's metrics samples (node/node_metrics.py, docs/metrics.md)
  run.json                                            the run record (as in .clusterctl/runs/<run-id>/), "metrics":
                                                      each node's mean/max (observe/summary.py)
  manifest.json                                       the run id, and every file with size and sha256
"""
from __future__ import annotations

import json
import secrets as random_tokens
import time
from pathlib import Path
from typing import Optional

from clusterctl.errors import UsageError
from clusterctl.node import layout
from clusterctl.outcome import Outcome, any_unreachable, hosts_document


def collect_run(app, run_id: str, record: dict, inventory, dest: Optional[Path] = None,
                compress: bool = False) -> Outcome:
    """The run's logs, outputs and node diagnostics into `dest` (default ./logs/<run-id>), then the diagnosis."""
    from clusterctl.collect import fetch
    from clusterctl.diagnose.engine import diagnose
    from clusterctl.executor import Background, Event, for_each_host, run_commands
    from clusterctl.models import HostResult, HostStatus, secret_values
    from clusterctl.observe.summary import with_metrics
    from clusterctl.transport import split_batch

    dest = (dest or Path("logs") / run_id).resolve()
    try:
        dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise UsageError(f"cannot create {dest}: {exc.strerror}", where="--dest", fix="choose a writable directory")
    fetch.keep_freed_buffers()
    manifest = fetch.read_manifest(dest)
    digests: dict = {}  # sha256 of each unpacked file, computed while it was written
    secrets = secret_values(inventory)
    ranks = first_ranks(record)
    hosts = [h for h in inventory.hosts if h.name in ranks]
    started = time.monotonic()
    surveys, shared, failed = _survey(app, inventory, hosts, run_id)
    owner = hosts[0].name if shared else None

    def action(transport, host):
        try:
            return _collect_host(transport, host, inventory, run_id, dest, manifest, secrets, ranks[host.name],
                                 fetch_outputs=(owner in (None, host.name)), shared=shared,
                                 digests=digests, earlier=int(record.get("attempt") or 1) - 1,
                                 compress=compress, on_event=app.renderer.on_event)
        except OSError as exc:  # the local disk (full, read-only, quota): say so, not "internal error"
            message = fetch.local_write_failure(dest, exc)
            if message is None:
                raise
            return HostResult(host.name, HostStatus.FAILED, message)

    reached = [h for h in hosts if h.name in surveys]
    # the nodes' state at collection time, read on a second channel while the files stream
    diagnostics = Background(reached, lambda t, h: run_commands(t, h, [fetch.diag_command(inventory)]),
                             app.connections)
    results = {**failed, **for_each_host(reached, action, app.connections)}
    results = {h.name: results[h.name] for h in hosts}
    diagnostics.wait(fetch.DIAG_TIMEOUT_S + 10)
    app.renderer.stop_progress()
    try:
        for name, diag in list(diagnostics.results.items()):
            if diag.succeeded:
                _write_diagnostics(dest / name, fetch.with_container_env(split_batch(diag.stdout)), secrets)
        record = with_metrics(app.state, run_id, record, dest, [h.name for h in hosts])  # issue 41: per node mean/max
        # the directory carries its run record, so `diagnose DEST` reads it anywhere (another
        # machine, another state dir) and knows which rank the controller saw fail first
        # sorted, as the local record is: a second collect writes the same bytes
        text = json.dumps(record, indent=2, sort_keys=True)
        fetch.write_file(dest / "run.json", fetch.mask_values(text.encode(), secrets))
        manifest["run_id"] = run_id
        files = _finish_manifest(dest, manifest, digests)
    except OSError as exc:
        message = fetch.local_write_failure(dest, exc)
        if message is None:
            raise
        app.renderer.hosts_table(f"collect-logs {run_id} -> {dest}", results, extra_columns=("files", "bytes"))
        app.renderer.error(message)

        return Outcome({**hosts_document(results, run_id=run_id, dest=str(dest)), "ok": False, "error": message})
    findings = diagnose(dest, record=record).findings  # [] when the record says the run succeeded
    app.renderer.hosts_table(f"collect-logs {run_id} -> {dest}", results, extra_columns=("files", "bytes"))
    app.renderer.findings(findings)
    app.renderer.on_event(Event("note", text=f"{files} files in {time.monotonic() - started:.1f}s under {dest}"))
    ok = all(r.succeeded for r in results.values())

    document = hosts_document(results, run_id=run_id, dest=str(dest), files=files, shared_outputs=shared,
                              findings=[f.to_json() for f in findings])
    document["ok"] = ok
    return Outcome(document, unreachable=any_unreachable(results))



def _survey(app, inventory, hosts, run_id: str):
    """One round trip per node before any transfer: its files, which nodes' run directories it
    sees, and its diagnostics. job.outputs is one filesystem on all nodes when every node sees
    every node's run directory. When that evidence is incomplete (a node wrote none), a probe file
    written on the first node decides (two more round trips). Returns ({host: Survey}, shared,
    {host: failed result})."""
    from clusterctl.collect import fetch
    from clusterctl.executor import for_each_host
    from clusterctl.models import HostResult, HostStatus

    base, container = fetch.where_files_are(inventory, inventory.job.outputs)
    run_dirs = {h.name: layout.node_run_relative(run_id, h.name) for h in hosts}
    surveys = {}

    def survey(transport, host):
        command = fetch.survey_command(base, container, list(run_dirs.values()))
        surveys[host.name] = fetch.parse_survey(transport.run(command).stdout)
        return HostResult(host.name, HostStatus.OK)

    failed = {name: r for name, r in for_each_host(hosts, survey, app.connections).items() if not r.succeeded}
    reached = [h for h in hosts if h.name in surveys]
    shared = _shared_by_run_dirs(reached, surveys, run_dirs)
    if shared is None:
        shared = _shared_by_probe(app, reached, base, container)
    return surveys, shared, failed


def _shared_by_run_dirs(hosts, surveys, run_dirs) -> "bool | None":
    """True: every node sees every node's run directory; False: each sees only its own; None: unclear."""
    if len(hosts) < 2:
        return False
    dirs = {run_dirs[h.name] for h in hosts}
    seen = {h.name: surveys[h.name].run_dirs & dirs for h in hosts}
    if any(run_dirs[h.name] not in seen[h.name] for h in hosts):
        return None  # a node without its run directory proves nothing either way
    if all(seen[h.name] == dirs for h in hosts):
        return True
    if all(seen[h.name] == {run_dirs[h.name]} for h in hosts):
        return False
    return None


def _shared_by_probe(app, hosts, base: str, container) -> bool:
    """A probe file written on the first node: shared when every other node sees it."""
    from clusterctl.collect import fetch
    from clusterctl.executor import for_each_host, run_commands

    if len(hosts) < 2:
        return False
    probe = f"{base}/.clusterctl-shared-{random_tokens.token_hex(6)}"

    def run(command):
        return lambda transport, host: run_commands(transport, host, [command])

    made = for_each_host(hosts[:1], run(fetch.probe_command(probe, container)), app.connections)
    if not made[hosts[0].name].succeeded:
        return False
    test = fetch.in_place(("test", "-e", probe), container)
    seen = for_each_host(hosts[1:], run(test), app.connections)
    for_each_host(hosts[:1], run(fetch.probe_command(probe, container, remove=True)), app.connections)
    return all(r.succeeded for r in seen.values())


def first_ranks(record: dict) -> dict:
    """host -> its first global rank (its logs are named from it): the final topology's, then, for a host
    a run that healed itself left out, its place in the last attempt it ran in (node index x ranks a node)."""
    from clusterctl.watch.failures import first_ranks_of

    ranks = first_ranks_of(record["topology"])
    per_node = record.get("nproc_per_node")
    if not isinstance(per_node, int):
        first = (record["topology"] or [{}])[0].get("ranks") or [0, 0]
        per_node = first[-1] - first[0] + 1
    for attempt in reversed(record.get("attempts") or []):
        for index, host in enumerate(attempt.get("hosts") or []):
            ranks.setdefault(host, index * per_node)
    return ranks


def _collect_host(transport, host, inventory, run_id, dest, manifest, secrets, first_rank, fetch_outputs,
                  shared, compress, on_event, digests=None, earlier: int = 0):
    from clusterctl.collect import arrange, fetch
    from clusterctl.executor import Event
    from clusterctl.models import HostResult, HostStatus
    from clusterctl.collect.tarstream import DamagedStream

    base, container = fetch.where_files_are(inventory, inventory.job.outputs)
    run_dir = layout.node_run_relative(run_id, host.name)
    known = manifest["remote"].setdefault(host.name, {})
    host_dir = dest / host.name
    done = [0]

    def on_bytes(count: int) -> None:
        done[0] += count
        on_event(Event("progress", host.name, data={"key": f"collect:{host.name}", "description": host.name,
                                                    "completed": done[0], "total": None}))

    staging = host_dir / "outputs"

    def unpack(stream):
        try:
            return fetch.extract_stream(stream, staging, secrets, digests, compressed=compress)
        except DamagedStream as exc:  # judged after the exit status: the node's own failure explains it better
            return exc

    # every node finds the run's outputs too; with shared outputs only the first one sends them
    # a run that healed itself: each earlier attempt's run dir, set aside as RUN_DIR.attempt-N
    roots = [run_dir, *(f"{run_dir}.attempt-{n}" for n in range(1, earlier + 1))]
    command = fetch.archive_command(base, roots, container, inventory.job.python, run_id if fetch_outputs else "",
                                    known, compress)
    try:  # unpacked while it arrives: no archive written to disk and read back, sha256 on the way
        result, unpacked = transport.run_reading(command, unpack, on_bytes)
    except OSError as exc:
        message = fetch.local_write_failure(dest, exc)
        if message is None:
            raise
        return HostResult(host.name, HostStatus.FAILED, message)
    report = fetch.parse_report(result.stderr)
    if not result.ok or not report.done:
        return HostResult(host.name, HostStatus.FAILED, f"archiving {base} on the node failed: "
                          f"{report.errors or result.stderr.strip()[-300:]}" + (" (timed out)" if result.timed_out else ""))
    if isinstance(unpacked, DamagedStream):
        return HostResult(host.name, HostStatus.FAILED, f"the tar stream from the node is damaged: {unpacked}")
    written, refused = unpacked
    for sent in report.sent:
        known[sent.path] = [sent.size, sent.mtime]
    if refused:
        return HostResult(host.name, HostStatus.FAILED, "; ".join(refused[:5]), data={"files": len(written)})
    if report.cut:  # what came is kept (and known): the next collect sends only the rest
        return HostResult(host.name, HostStatus.FAILED, f"{len(report.sent)} file(s) collected, not all: {report.cut}; "
                          "run `clusterctl collect-logs` again for the rest (it sends only what it lacks)",
                          data={"files": len(report.sent), "bytes": done[0], **fetch.archive_details(report)})
    arrange.arrange_logs(host_dir, run_id, host.name, first_rank)
    if shared and fetch_outputs:
        arrange.move_shared_outputs(host_dir, dest)
    return HostResult(host.name, HostStatus.CHANGED if report.sent else HostStatus.OK, fetch.archive_summary(report),
                      data={"files": len(report.sent), "bytes": done[0], **fetch.archive_details(report)})


def _write_diagnostics(host_dir: Path, sections: dict, secrets: set) -> None:
    from clusterctl.collect import fetch

    diag = host_dir / "diag"
    diag.mkdir(parents=True, exist_ok=True)
    for name, text in sections.items():
        if name == "env.txt":
            text = fetch.mask_env_listing(text)
        fetch.write_file(diag / name, fetch.mask_values(text.encode(), secrets))


def _finish_manifest(dest: Path, manifest: dict, digests: dict) -> int:
    from clusterctl.collect import fetch

    files = {}
    for path in sorted(p for p in dest.rglob("*") if p.is_file() and p.name != fetch.MANIFEST
                       and not p.name.endswith((".part", ".cc-part", ".tmp"))):
        rel = str(path.relative_to(dest))
        old = manifest["files"].get(rel)
        stat = path.stat()
        if old and old.get("size") == stat.st_size and old.get("mtime") == stat.st_mtime:
            files[rel] = old
        else:
            files[rel] = {"size": stat.st_size, "mtime": stat.st_mtime, "sha256": fetch.known_sha256(path, stat, digests)}
    manifest["files"] = files
    fetch.write_manifest(dest, manifest)
    return len(files)
