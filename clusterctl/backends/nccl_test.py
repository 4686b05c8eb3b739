"""The all-reduce diagnostic as a flow (`clusterctl nccl-test`): connectivity, small sizes, the full
sweep, or every pair of nodes; the run's layout and record as `clusterctl run` makes them."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Optional

from clusterctl.errors import StateError, UsageError
from clusterctl.health.fleet import record_events
from clusterctl.health.seen import pair_events
from clusterctl.ground.records import RunStore
from clusterctl.ground.run_record import RunRecord
from clusterctl.outcome import Outcome

RESULT_FILE = "nccltest.jsonl"


@dataclass(frozen=True)
class NcclTestOptions:
    """The options of `clusterctl nccl-test` (its --help says each)."""

    min_size: str = "8"
    max_size: Optional[str] = None
    iters: int = 20
    warmup: int = 5
    stage: str = "full"
    pairs: bool = False
    connect_timeout: float = 60.0
    timeout: float = 600.0


def run_nccl_test(app, options: NcclTestOptions, sizes: tuple[int, Optional[int]]) -> Outcome:
    """`clusterctl nccl-test`: one all-reduce job on every node, or (`pairs`) one per pair of nodes."""
    from clusterctl.backends.run_flow import not_ready as _not_ready
    from clusterctl.preflight.node_facts import gather_node_facts
    from clusterctl.run.in_progress import ensure_no_run_in_progress

    inventory = app.inventory()
    if options.pairs and len(inventory.hosts) < 2:
        raise UsageError("--pairs needs two hosts at least", where="--pairs", fix="drop --pairs, or widen --limit")
    with app.state.lock(f"run-{inventory.name}", "a `clusterctl run`"):
        facts, problems = gather_node_facts(inventory, app.connections)
        if problems:
            return _not_ready(app, problems)
        busy = ensure_no_run_in_progress(inventory, app.connections)
        if busy:
            raise StateError(f"a run is already in progress: {busy}", where=inventory.name,
                             fix="wait for it to end, or stop it with `clusterctl down`")
        if options.pairs:
            return _pairs(app, options, inventory, facts, sizes)
        test = _one_test(app, options, inventory, facts, sizes)
    _show_test(app, test)
    return Outcome(test["document"], interrupted=test["interrupted"])


# --------------------------------------------------------------------------- one test


def bench_inventory(inventory, options, sizes: tuple[int, Optional[int]], run_id: str):
    """The inventory copy whose job is the benchmark (same hosts, container, env, outputs)."""
    from clusterctl.nccltest import ALLREDUCE_BENCH
    from clusterctl.node.layout import files_dir, node_run_dir

    outputs = inventory.job.outputs
    result_file = f"{node_run_dir(outputs, run_id, inventory.master.name)}/{RESULT_FILE}"
    bench_args = ["--stage", options.stage, "--min-size", str(sizes[0]), "--iters", str(options.iters),
                  "--warmup", str(options.warmup), "--connect-timeout", f"{options.connect_timeout:g}",
                  "--result-file", result_file]
    if sizes[1] is not None:
        bench_args += ["--max-size", str(sizes[1])]
    # Placeholders are expanded in job.command and job.args: keep literal braces literal.
    job = replace(inventory.job, command=(f"{files_dir(outputs, run_id)}/{ALLREDUCE_BENCH}",),
                  args=tuple(bench_args), world_size_divides=None, launcher="torchrun")  # its ranks are torchrun's
    return replace(inventory, job=job), result_file


def _one_test(app, options, inventory, facts, sizes, label: str = "") -> dict:
    from clusterctl.backends import NodesBackend, RunRequest
    from clusterctl.backends.run_flow import node_states as _node_states, summary_of as _summary
    from clusterctl.nccltest.plan import report_ok, summarize
    from clusterctl.run import leases
    from clusterctl.run.runner import JobRunner
    from clusterctl.plan.topology import plan
    from clusterctl.nccltest import ALLREDUCE_BENCH, source

    run_id = app.state.new_run_id()
    bench, result_file = bench_inventory(inventory, options, sizes, run_id)
    topology = plan(bench, {h.name: facts[h.name] for h in bench.hosts})
    live = _LiveView(app, topology, facts, label)
    planned = NodesBackend(app).plan(bench, RunRequest(""), run_id, topology=topology)  # the Plan, carried out as it is
    runner = JobRunner(bench, topology, run_id, "", app.connections, live.on_event, timeout_s=options.timeout,
                       files={ALLREDUCE_BENCH: source(ALLREDUCE_BENCH)}, launches=planned.launches)
    for note in topology.notes:
        app.renderer.message(f"plan: {note}", "yellow")
    started = time.time()
    held = leases.take(bench, app.connections, run_id, leases.wanted(topology),  # its GPUs as a run's (issue 48)
                       say=lambda text: app.renderer.message(text, "yellow"), ended=leases.ended_in(app.state))
    try:
        outcome = runner.run()
    finally:
        held.release()
    records = _read_results(app, bench, topology, result_file) or live.records
    link = live.link_for(records)
    report = summarize(records, link, options.stage)
    _explain_with_diagnosis(report, outcome.first_failure)
    summary = _summary(bench, topology, run_id)
    record = {**summary, "kind": "nccl-test", "commands": runner.commands(), "started": started,
              "ended": time.time(), "duration_s": round(outcome.duration, 3), "exit_code": outcome.exit_code,
              "nodes": _node_states(runner), "first_failure": outcome.first_failure,
              "interrupted": outcome.interrupted, "inventory": str(app.inventory_path()), "nccl_test": report}
    RunStore(app.state).write(RunRecord.from_json(record))
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
    from clusterctl.nccltest.plan import parse_records

    from clusterctl.plan import node_files

    directory, _, name = path.rpartition("/")  # through the no-follow layer (issue 47): at most 64 MiB
    command = node_files.command(inventory, directory, "read", name, str(64 << 20), timeout=30)
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


def _pairs(app, options, inventory, facts, sizes) -> Outcome:
    from clusterctl.nccltest.plan import pair_rounds, pairs_table_lines, rank_pairs, slowest_node

    results, interrupted = [], False
    rounds = pair_rounds([h.name for h in inventory.hosts])
    for number, pairs in enumerate(rounds, 1):
        for a, b in pairs:
            pair_inventory = replace(inventory, hosts=(inventory.host(a), inventory.host(b)),
                                     rendezvous=_pair_rendezvous(inventory, facts, a))
            label = f"pair {a} + {b} (round {number}/{len(rounds)})"
            app.renderer.message(label, "bold")
            test = _one_test(app, options, pair_inventory, facts, sizes, label=label)
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
    note = record_events(app.state.health_db, inventory, pair_events(document))  # issue 36: the outlier
    if note:
        app.renderer.message(note, "yellow")
    return Outcome(document, interrupted=interrupted)


def pair_test(app, options: NcclTestOptions, inventory, a: str, b: str) -> dict:
    """One pair's test (`clusterctl health check`: the checked node against a healthy one): its
    _pair_entry, or {"ok": False, "detail": ...} where the pair's facts could not be learned."""
    from clusterctl.preflight.node_facts import gather_node_facts

    pair_inventory = replace(inventory, hosts=(inventory.host(a), inventory.host(b)))
    facts, problems = gather_node_facts(pair_inventory, app.connections)
    if problems:
        return {"ok": False, "hosts": [a, b], "detail": "; ".join(f"{h}: {r.detail}" for h, r in problems.items())}
    pair_inventory = replace(pair_inventory, rendezvous=_pair_rendezvous(inventory, facts, a))
    test = _one_test(app, options, pair_inventory, facts, (8, None), label=f"pair {a} + {b}")
    _show_test(app, test)
    return _pair_entry(test, 1)


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
