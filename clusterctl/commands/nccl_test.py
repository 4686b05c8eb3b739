"""`clusterctl nccl-test`: all-reduce connectivity, small sizes, full sweep; node pairs.

The test runs through the same path as `clusterctl run` (node facts, topology.plan,
JobRunner: one static rendezvous, lease, poll, fail fast, streamed rank logs), with an
inventory copy whose job is the rank-side benchmark, clusterctl/nccltest/
allreduce_bench.py. That file is shipped to every node by the runner (`files`), so the
nodes need nothing of clusterctl, only torch. Rank 0 writes its records to a result
file in its run dir, which is read back after the run; the same records stream live.
Every test is recorded like a run (`.clusterctl/runs/<id>/run.json`), so
`clusterctl collect-logs` and `diagnose` work on a failed one.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Optional

from clusterctl.app import add_cluster_options
from clusterctl.outcome import Outcome
from clusterctl.errors import StateError, UsageError

RESULT_FILE = "nccltest.jsonl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--max-size", default=None, metavar="SIZE",
                        help="largest message, e.g. 1G (default: 1G on GPUs, 64M on CPUs)")
    parser.add_argument("--min-size", default="8", metavar="SIZE", help="smallest message (default 8)")
    parser.add_argument("--iters", type=int, default=20, metavar="N", help="timed all_reduce calls per size (default 20)")
    parser.add_argument("--warmup", type=int, default=5, metavar="N", help="untimed calls before each size (default 5)")
    parser.add_argument("--stage", choices=("connect", "small", "full"), default="full",
                        help="stop after this stage: connect (init + one all_reduce), small (8 B..1 MiB), full")
    parser.add_argument("--pairs", action="store_true",
                        help="test every pair of nodes as its own 2-node job, rank the pairs, name the slowest node")
    parser.add_argument("--connect-timeout", type=float, default=60.0, metavar="S",
                        help="seconds for the ranks to connect; also each collective's timeout (default 60)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S",
                        help="stop a test after this many seconds (default 600)")


def _sizes(args) -> tuple[int, Optional[int]]:
    from clusterctl.nccltest.plan import parse_size

    try:
        low = parse_size(args.min_size)
        high = parse_size(args.max_size) if args.max_size is not None else None
    except ValueError as exc:
        raise UsageError(str(exc), where="--min-size/--max-size", fix="write sizes like 8, 64K, 1M, 1G") from None
    if high is not None and high < low:
        raise UsageError(f"--max-size {args.max_size} is below --min-size {args.min_size}", where="--max-size",
                         fix="give a --max-size at least as large as --min-size")
    if args.iters < 1 or args.warmup < 0:
        raise UsageError("--iters must be >= 1 and --warmup >= 0", where="--iters", fix="e.g. --iters 20 --warmup 5")
    return low, high


def execute(args, app) -> Outcome:
    from clusterctl.backends.launching import not_ready as _not_ready
    from clusterctl.preflight.node_facts import gather_node_facts
    from clusterctl.job.runner import ensure_no_run_in_progress

    sizes = _sizes(args)
    inventory = app.inventory()
    if args.pairs and len(inventory.hosts) < 2:
        raise UsageError("--pairs needs two hosts at least", where="--pairs", fix="drop --pairs, or widen --limit")
    with app.state.lock(f"run-{inventory.name}", "a `clusterctl run`"):
        facts, problems = gather_node_facts(inventory, app.connections)
        if problems:
            return _not_ready(app, problems)
        busy = ensure_no_run_in_progress(inventory, app.connections)
        if busy:
            raise StateError(f"a run is already in progress: {busy}", where=inventory.name,
                             fix="wait for it to end, or stop it with `clusterctl down`")
        if args.pairs:
            return _pairs(app, args, inventory, facts, sizes)
        test = _one_test(app, args, inventory, facts, sizes)
    _show_test(app, test)
    return Outcome(test["document"], interrupted=test["interrupted"])


# --------------------------------------------------------------------------- one test


def bench_inventory(inventory, args, sizes: tuple[int, Optional[int]], run_id: str):
    """The inventory copy whose job is the benchmark (same hosts, container, env, outputs)."""
    from clusterctl.job.torchrun import log_dir
    from clusterctl.job.runner import files_dir
    from clusterctl.nccltest import ALLREDUCE_BENCH

    outputs = inventory.job.outputs
    result_file = f"{log_dir(outputs, run_id, inventory.master.name)}/{RESULT_FILE}"
    bench_args = ["--stage", args.stage, "--min-size", str(sizes[0]), "--iters", str(args.iters),
                  "--warmup", str(args.warmup), "--connect-timeout", f"{args.connect_timeout:g}",
                  "--result-file", result_file]
    if sizes[1] is not None:
        bench_args += ["--max-size", str(sizes[1])]
    # Placeholders are expanded in job.command and job.args: keep literal braces literal.
    job = replace(inventory.job, command=(f"{files_dir(outputs, run_id)}/{ALLREDUCE_BENCH}",),
                  args=tuple(bench_args), world_size_divides=None)
    return replace(inventory, job=job), result_file


def _one_test(app, args, inventory, facts, sizes, label: str = "") -> dict:
    from clusterctl.backends.launching import node_states as _node_states, summary_of as _summary
    from clusterctl.nccltest.plan import report_ok, summarize
    from clusterctl.job.runner import JobRunner
    from clusterctl.job.topology import plan
    from clusterctl.nccltest import ALLREDUCE_BENCH, source

    run_id = app.state.new_run_id()
    bench, result_file = bench_inventory(inventory, args, sizes, run_id)
    topology = plan(bench, {h.name: facts[h.name] for h in bench.hosts})
    live = _LiveView(app, topology, facts, label)
    runner = JobRunner(bench, topology, run_id, "", app.connections, live.on_event, timeout_s=args.timeout,
                       files={ALLREDUCE_BENCH: source(ALLREDUCE_BENCH)})
    for note in topology.notes:
        app.renderer.message(f"plan: {note}", "yellow")
    started = time.time()
    outcome = runner.run()
    records = _read_results(app, bench, topology, result_file) or live.records
    link = live.link_for(records)
    report = summarize(records, link, args.stage)
    _explain_with_diagnosis(report, outcome.first_failure)
    summary = _summary(bench, topology, run_id)
    record = {**summary, "kind": "nccl-test", "commands": runner.commands(), "started": started,
              "ended": time.time(), "duration_s": round(outcome.duration, 3), "exit_code": outcome.exit_code,
              "nodes": _node_states(runner), "first_failure": outcome.first_failure,
              "interrupted": outcome.interrupted, "inventory": str(app.inventory_path()), "nccl_test": report}
    app.state.write_json(app.state.run_dir(run_id) / "run.json", record)
    document = {"ok": report_ok(report, outcome.exit_code), **{k: summary[k] for k in (
        "run_id", "world_size", "nproc_per_node", "nnodes", "master")},
        "exit_code": outcome.exit_code, "duration_s": record["duration_s"], "mode": "single", **report,
        "pairs": [], "slowest_node": None}
    if outcome.first_failure:
        document["first_failure"] = outcome.first_failure
    return {"document": document, "record": record, "interrupted": outcome.interrupted}


def _explain_with_diagnosis(report: dict, first_failure: Optional[dict]) -> None:
    """A stage that failed without a record of its own (the rank died before rank 0 could
    write one) takes the runner's diagnosis as its detail."""
    findings = (first_failure or {}).get("diagnosis") or []
    connect = report["stages"]["connect"]
    if connect["status"] == "failed" and not report["errors"] and findings:
        top = findings[0]
        where = f" on {top['host']}" + (f" rank {top['rank']}" if top.get("rank") is not None else "") if top.get("host") else ""
        connect["detail"] = f"{top['cause']}{where}: {top['evidence']}"


def _read_results(app, inventory, topology, path: str) -> Optional[list[dict]]:
    """Rank 0's records from its result file on the master node; None when unreadable."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.models import Command
    from clusterctl.nccltest.plan import parse_records
    from clusterctl.job.container import on_host_or_in_container

    command = Command(on_host_or_in_container(inventory, path, lambda p: ("cat", p)), timeout=30)
    master = topology.master.host
    result = for_each_host([master], lambda t, h: run_commands(t, h, [command]), app.connections)[master.name]
    if not result.succeeded:
        return None
    return parse_records(result.stdout.splitlines()) or None


class _LiveView:
    """Turns streamed NCCLTEST records into readable lines; keeps them as a fallback."""

    def __init__(self, app, topology, facts, label: str):
        self.app, self.topology, self.facts, self.label = app, topology, facts, label
        self.records: list[dict] = []
        self._link = None

    def link_for(self, records: list[dict]):
        from clusterctl.nccltest.plan import link_class

        connect = next((r for r in records if r.get("stage") == "connect"), {})
        plan = next((r for r in records if r.get("stage") == "plan"), {})
        backend = connect.get("backend") or plan.get("backend") or ("nccl" if self.topology.uses_gpus else "gloo")
        machines = len({"local" if n.host.is_local else n.host.address for n in self.topology.nodes})
        nics = min(len(self.facts[n.host.name].ib_hcas) for n in self.topology.nodes)
        return link_class(backend, self.topology.world_size, machines, self.topology.nproc_per_node,
                          gpu_name=connect.get("gpu"), nvlink=connect.get("nvlink"), ib_nics=nics)

    def on_event(self, event) -> None:
        from clusterctl.executor import Event
        from clusterctl.nccltest.plan import parse_record

        if event.kind == "line":
            record = parse_record(event.text)
            if record is not None:
                self.records.append(record)
                text = self._text(record)
                if text is None:
                    return
                event = Event("line", event.host, text, event.data)
        self.app.renderer.on_event(event)

    def _text(self, record: dict) -> Optional[str]:
        from clusterctl.nccltest.plan import TABLE_HEADER, human_size, size_line, size_row

        stage = record.get("stage")
        label = f"{self.label}: " if self.label else ""
        if stage == "plan":
            sizes = record.get("sizes") or []
            span = f"{human_size(sizes[0])}..{human_size(sizes[-1])}, {len(sizes)} sizes" if sizes else "no sizes"
            return f"{label}plan: {record.get('world_size')} ranks, {record.get('backend')}, {span}"
        if stage == "connect":
            self._link = self.link_for(self.records)
            gpu = f", {record['gpu']}" if record.get("gpu") else ""
            nccl = f", NCCL {record['nccl']}" if record.get("nccl") else ""
            return (f"{label}connectivity ok: {record.get('world_size')} ranks{gpu}{nccl}; init {record.get('init_s')}s, "
                    f"first all_reduce {record.get('first_allreduce_s')}s, start skew {record.get('start_skew_s')}s\n"
                    f"{TABLE_HEADER}")
        if stage in ("small", "full") and "size" in record:
            link = self._link or self.link_for(self.records)  # one rank or not is known before connect
            return size_line(size_row(record, link))
        if stage == "done":
            return f"{label}sweep done in {record.get('elapsed_s')}s"
        if stage == "error":
            return f"{label}error on rank {record.get('rank')}: {record.get('error')}"
        return None


def _show_test(app, test: dict) -> None:
    from clusterctl.nccltest.plan import stop_note, table_lines

    document = test["document"]
    if document["exit_code"] != 0:
        app.renderer.run_summary(test["record"])
    if document["sizes"]:
        for line in table_lines(document):
            app.renderer.message(line)
    note = stop_note(document)
    if note:
        app.renderer.message(note, "bold red")
    stages = ", ".join(f"{name} {entry['status']}" for name, entry in document["stages"].items())
    style = "green" if document["ok"] else "bold red"
    verdict = f"; bandwidth verdict {document['verdict']}" if document["verdict"] != "-" else ""
    correct = {True: "all sums exact", False: "WRONG SUMS", None: "no sums checked"}[document["correct"]]
    app.renderer.message(f"nccl-test {document['run_id']}: {'ok' if document['ok'] else 'FAILED'} ({stages}; "
                         f"{correct}{verdict})", style)


# --------------------------------------------------------------------------- pairs


def _pair_rendezvous(inventory, facts, master: str):
    """The pair's master is `master`. A `rendezvous.address` is the inventory master's address on
    the job's network: another master is reached at its own address on that network (the source
    of its route to that address), not at the inventory master's."""
    address = inventory.rendezvous.address
    if address is not None and master != inventory.master.name:
        address = facts[master].address or None if master in facts else None
    return replace(inventory.rendezvous, master=master, address=address)


def _pairs(app, args, inventory, facts, sizes) -> Outcome:
    from clusterctl.nccltest.plan import pair_rounds, pairs_table_lines, rank_pairs, slowest_node

    results, interrupted = [], False
    rounds = pair_rounds([h.name for h in inventory.hosts])
    for number, pairs in enumerate(rounds, 1):
        for a, b in pairs:
            pair_inventory = replace(inventory, hosts=(inventory.host(a), inventory.host(b)),
                                     rendezvous=_pair_rendezvous(inventory, facts, a))
            label = f"pair {a} + {b} (round {number}/{len(rounds)})"
            app.renderer.message(label, "bold")
            test = _one_test(app, args, pair_inventory, facts, sizes, label=label)
            _show_test(app, test)
            results.append(_pair_entry(test, number))
            if test["interrupted"]:
                interrupted = True
                break
        if interrupted:
            break
    ranked = rank_pairs(results)
    slow = slowest_node(results)
    for line in pairs_table_lines(ranked):
        app.renderer.message(line)
    if slow["host"]:
        stands = "an outlier" if slow["outlier"] else "not an outlier"
        app.renderer.message(f"slowest node: {slow['host']} (median pair busbw {slow['score_gbps']:.2f} GB/s, "
                             f"others {slow['others_median_gbps']:.2f}): {stands}", "bold red" if slow["outlier"] else "")
    else:
        app.renderer.message(f"slowest node: none named ({slow['reason']})")
    ok = bool(results) and all(p["ok"] for p in results) and not slow["outlier"] and not interrupted
    document = {"ok": ok, "mode": "pairs", "stages": {}, "sizes": [], "pairs": ranked,
                "slowest_node": slow["host"], "slowest": slow, "rounds": len(rounds)}
    return Outcome(document, interrupted=interrupted)


def _pair_entry(test: dict, round_number: int) -> dict:
    document = test["document"]
    planned_top = max(document["missing_sizes"] + [row["size"] for row in document["sizes"]], default=None)
    top = next((row for row in document["sizes"] if row["size"] == planned_top), None)
    entry = {"hosts": [node["host"] for node in test["record"]["topology"]],
             "round": round_number, "ok": document["ok"], "run_id": document["run_id"], "size": planned_top,
             "busbw_gbps": top["busbw_gbps"] if top else None, "correct": document["correct"],
             "verdict": document["verdict"], "stages": {k: v["status"] for k, v in document["stages"].items()}}
    if document.get("first_failure"):
        entry["first_failure"] = document["first_failure"]
    return entry
