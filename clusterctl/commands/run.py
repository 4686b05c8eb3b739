"""`clusterctl run PROMPT_FILE`: plan, launch torchrun on every node, stream, fail fast, record."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from clusterctl.app import add_cluster_options
from clusterctl.cli import Outcome
from clusterctl.errors import StateError, UsageError

MAX_PROMPT_BYTES = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, limit=False)
    parser.add_argument("prompt_file", type=Path, help="its text becomes {prompt} in job.args, byte for byte")
    parser.add_argument("--plan", action="store_true", help="print the topology and per-node commands; launch nothing")
    parser.add_argument("--dry-run", dest="plan", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--strict", action="store_true",
                        help="fail instead of shrinking nproc_per_node to fit world_size_divides")
    parser.add_argument("--timeout", type=float, default=None, help="stop the job after this many seconds")
    parser.add_argument("--stall-timeout", type=_seconds, default=None, metavar="S",
                        help="seconds without output before every rank's stack is taken; stacks that do not move "
                             "stop the run and name the rank elsewhere (default: job.stall_timeout, 900; 0: off)")
    parser.add_argument("-d", "--detach", action="store_true",
                        help="return once every rank has started, printing the run id; the run goes on, watched "
                             "on the cluster (`clusterctl attach`, `logs -f`, `stop`, `status`)")
    parser.add_argument("--ranks", type=_ranks, default=(), metavar="LIST",
                        help="show only these global ranks' lines in the live log, e.g. 0,8 or 0-3,8 (the files on "
                             "the nodes, the run record and the diagnosis keep every rank)")
    parser.add_argument("--local-ranks", "--local-ranks-filter", dest="local_ranks", type=_ranks, default=(),
                        metavar="LIST", help="show only these local ranks of every node in the live log, like "
                                             "torchrun's --local-ranks-filter (with --ranks: a rank either selects shows)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds (0 or more): {text!r}")
    return value


def _ranks(text: str):
    from clusterctl.job.livelog import parse_ranks

    try:
        return parse_ranks(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def read_prompt(path: Path) -> str:
    from clusterctl.job.torchrun import prompt_text

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the prompt file: {exc.strerror}", where=str(path),
                         fix="give the path of a text file holding the prompt") from None
    if len(data) > MAX_PROMPT_BYTES:
        raise UsageError(f"the prompt file is {len(data)} bytes; the limit is {MAX_PROMPT_BYTES}", where=str(path),
                         fix="shorten the prompt, or have the job read a file from a volume")
    if b"\0" in data:
        line = data[: data.index(b"\0")].count(b"\n") + 1
        raise UsageError("the prompt file contains a NUL byte, which no command line can carry",
                         where=f"{path}:{line}", fix="remove the NUL byte (is it a binary file?)")
    try:
        return prompt_text(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"the prompt file is not UTF-8 (byte {exc.start})", where=str(path),
                         fix="save it as UTF-8") from None


def execute(args, app) -> Outcome:
    from clusterctl.preflight.node_facts import gather_node_facts
    from clusterctl.job.livelog import LiveLog, LiveLogEvents
    from clusterctl.job.records import run_lock
    from clusterctl.job.runner import JobRunner, RunnerCrashed, ensure_no_run_in_progress
    from clusterctl.job.topology import plan

    prompt = read_prompt(args.prompt_file)
    inventory = app.inventory()
    _check_prompt_fits(prompt, inventory, args.prompt_file)
    if args.plan and inventory.scheduler is not None:
        return _slurm_plan(app, inventory, prompt, args.strict)
    if args.detach and inventory.scheduler is not None:
        raise UsageError("--detach hands the run over to the cluster, but a run on a Slurm allocation is watched "
                         "through the allocation this clusterctl holds (and gives back when it ends)",
                         where="--detach", fix="leave --detach out (run it under nohup or tmux to outlive the "
                         "terminal), or submit with `clusterctl export sbatch` and sbatch")
    run_id = app.state.new_run_id()
    # one run of a cluster at a time: a second is refused naming the first (`clusterctl stop RUN`)
    with app.state.lock(run_lock(inventory.name), "a `clusterctl run`", run_id=run_id), \
            _nodes(inventory, app, run_id) as (inventory, connections, scheduled):
        if scheduled is None:
            facts, problems, busy, facts_from = _facts_and_busy(app, inventory, connections)
        else:  # on Slurm each is an srun step of the allocation: one after the other
            (facts, problems), busy = gather_node_facts(inventory, connections), None
            facts_from = {name: "probed" for name in facts}
        if problems:
            return _not_ready(app, problems)
        topology = plan(inventory, facts, strict=args.strict)
        ranks = _rank_filter(args, topology)
        live = LiveLogEvents(LiveLog(ranks), app.renderer.on_event, time.monotonic)
        runner = JobRunner(inventory, topology, run_id, prompt, connections, live.on_event,
                           timeout_s=args.timeout, stall_timeout_s=args.stall_timeout,
                           stacks_dir=app.state.root / "runs" / run_id / "stacks")
        summary = {**_summary(inventory, topology, run_id), "facts_from": facts_from}
        reused = sum(1 for where in facts_from.values() if where == "up")
        if reused:
            app.renderer.message(f"facts of {reused} node(s) as `clusterctl up` learned them (same boot, same "
                                 f"container); {len(facts_from) - reused} probed", "dim")
        if scheduled is not None:
            summary["slurm"] = scheduled  # the same dict: its `cancelled` is filled in as the allocation ends
        if args.plan:
            app.renderer.plan(topology, runner.commands())
            return Outcome({"ok": True, **summary, "plan": runner.commands(), "exit_code": None})
        if scheduled is not None:
            busy = ensure_no_run_in_progress(inventory, connections)
        if busy:
            raise StateError(f"a run is already in progress: {busy}", where=inventory.name,
                             fix=busy_fix(busy))
        for note in topology.notes:
            app.renderer.message(f"plan: {note}", "yellow")
        if ranks.ranks or ranks.local_ranks:
            app.renderer.message(f"live log: {ranks} only (every rank's output stays in the files on the nodes)", "dim")
        started = time.time()
        # recorded at the start too: `clusterctl stacks` (and collect-logs) find a run that goes on
        app.state.write_json(app.state.run_dir(run_id) / "run.json", {
            **summary, "commands": runner.commands(), "started": started, "state": "running", "exit_code": None,
            "inventory": str(app.inventory_path())})
        try:
            # on Slurm a hang-up hands nothing over (see --detach): the run goes on watched by this process
            with (hang_up_detaches() if scheduled is None else _not_hung_up()) as hung_up:
                outcome, crash = runner.run(detach=args.detach, hung_up=hung_up), None
        except RunnerCrashed as crashed:
            outcome, crash = crashed.outcome, crashed.cause
        finally:
            live.close()  # the last progress states and counts of repeats, before the summary
        if outcome.detached:
            return _detached(app, runner, summary, started, prompt)
        record = {**summary, "prompt_sha256": _sha256(prompt), "commands": runner.commands(),
                  "started": started, "ended": time.time(), "duration_s": round(outcome.duration, 3),
                  "exit_code": outcome.exit_code, "nodes": _node_states(runner),
                  "first_failure": outcome.first_failure, "interrupted": outcome.interrupted,
                  "inventory": str(app.inventory_path()), "state": "stopped" if outcome.stopped else "ended"}
        if outcome.stopped:
            record["stopped"] = True
        if crash is not None:
            record["internal_error"] = f"{type(crash).__name__}: {crash}"
        app.state.write_json(app.state.run_dir(run_id) / "run.json", record)
        if crash is not None:
            raise crash
    if scheduled is not None:  # whether scancel emptied the queue is known only once the allocation ended
        app.state.write_json(app.state.run_dir(run_id) / "run.json", record)
    app.renderer.run_summary(record)
    document = {"ok": outcome.exit_code == 0, **summary, "exit_code": outcome.exit_code,
                "duration_s": record["duration_s"], "nodes": record["nodes"]}
    if outcome.first_failure:
        document["first_failure"] = outcome.first_failure
    if outcome.stopped:
        document["stopped"] = True
    return Outcome(document, interrupted=outcome.interrupted)


def _facts_and_busy(app, inventory, connections):
    """(the planner's facts, the nodes not ready, a run in progress or None, where each node's facts
    came from: "up" or "probed"), in one round trip per node: the look for a run in progress
    batched with either the full probe or, where `up` remembered the facts, the light read of the
    node's boot and container (node_facts.recall). Only nodes whose facts no longer hold are
    probed again, in a second round trip."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.job.runner import run_in_progress, run_scan_command
    from clusterctl.preflight import node_facts
    from clusterctl.transport import batch_command, split_batch

    remembered = node_facts.recall(app.state, inventory)
    look = node_facts.instance_command(inventory) if remembered else node_facts.probe_command(inventory)

    def action(transport, host):
        batch = batch_command([("scan", run_scan_command(inventory, host)), ("look", look)],
                              timeout=(look.timeout or 60) + 60)
        return run_commands(transport, host, [batch])

    results = for_each_host(list(inventory.hosts), action, connections)
    busy = run_in_progress({name: split_batch(r.stdout).get("scan", "") for name, r in results.items() if r.succeeded})
    if not remembered:
        facts, problems = node_facts.facts_of(inventory, results)
        return facts, problems, busy, {name: "probed" for name in facts}
    instances = {name: node_facts.parse_instance(r.stdout, inventory) if r.succeeded else None
                 for name, r in results.items()}
    facts = node_facts.still_valid(remembered, instances)
    sources = {name: "up" for name in facts}
    stale = [h for h in inventory.hosts if h.name not in facts]
    problems = {}
    if stale:
        probed, problems = node_facts.gather_node_facts(inventory, connections, stale)
        facts.update(probed)
        sources.update({name: "probed" for name in probed})
    return facts, problems, busy, sources


def _nodes(inventory, app, run_id: str):
    """Where the run happens: the inventory's hosts over SSH, or a Slurm allocation's nodes (its
    checks, salloc, and scancel when the block ends: slurm/run.py). Yields (inventory, connections,
    the run record's `slurm` entry or None)."""
    from contextlib import nullcontext

    if inventory.scheduler is None:
        return nullcontext((inventory, app.connections, None))
    from clusterctl.slurm.run import on_allocation

    return on_allocation(inventory, app, run_id)


def _slurm_plan(app, inventory, prompt: str, strict: bool) -> Outcome:
    """`run --plan` on Slurm asks for no allocation: the layout on the nodes the allocation would have
    (scheduler.nodes x scheduler.gpus_per_node), as `export sbatch` plans it, and the script it writes."""
    from clusterctl.slurm import sbatch

    script = sbatch.build(inventory, prompt, strict=strict)
    topo = script.topology
    for note in script.notes:
        app.renderer.message(f"plan: {note}", "yellow")
    app.renderer.message(f"plan: {topo.nnodes} node(s) of the allocation x {topo.nproc_per_node} rank(s) = world size "
                         f"{topo.world_size}; the first allocated node is the master (nothing submitted)", "green")
    if not app.renderer.json_mode:
        print(script.text)
    return Outcome({"ok": True, "cluster": inventory.name, "world_size": topo.world_size,
                    "nproc_per_node": topo.nproc_per_node, "nnodes": topo.nnodes, "notes": list(script.notes),
                    "plan": script.text, "exit_code": None})


def _detached(app, runner, summary: dict, started: float, prompt: str) -> Outcome:
    """The run goes on, watched on the cluster: the record says where its supervisor is."""
    record = {**summary, "prompt_sha256": _sha256(prompt), "commands": runner.commands(), "started": started,
              "state": "running", "detached": True, "supervisor": runner.supervised.to_json(), "exit_code": None,
              "nodes": _node_states(runner), "inventory": str(app.inventory_path())}
    app.state.write_json(app.state.run_dir(summary["run_id"]) / "run.json", record)
    run_id = summary["run_id"]
    app.renderer.message(f"run {run_id} goes on, watched on the cluster (supervisor on {runner.supervised.host}). "
                         f"Follow it: clusterctl attach {run_id} | logs -f {run_id} | status; end it: "
                         f"clusterctl stop {run_id}", "green")
    return Outcome({"ok": True, **summary, "detached": True, "state": "running", "exit_code": None,
                    "supervisor": runner.supervised.to_json()})


class hang_up_detaches:
    """While a run is attached, a hang-up of its terminal (SIGHUP: a closed laptop, a dropped SSH session
    to this machine) hands the run over to the cluster instead of ending it. The handler only sets a
    flag (the runner hands over at its next poll) and sends this process's output to /dev/null: the
    terminal is gone, and writing to it would fail."""

    def __enter__(self):
        import signal
        import threading

        self.flag = threading.Event()
        self.previous = None
        try:
            # started under nohup (SIGHUP ignored): its user wants this process to watch on, writing
            # to nohup.out; a hang-up changes nothing then
            if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
                self.previous = signal.signal(signal.SIGHUP, self._on_hang_up)
        except (ValueError, AttributeError):  # not the main thread, or no SIGHUP here
            pass
        return self.flag.is_set

    def _on_hang_up(self, signum, frame) -> None:
        import os

        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.close(devnull)
        except OSError:
            pass
        self.flag.set()

    def __exit__(self, *exc) -> None:
        import signal

        if self.previous is not None:
            signal.signal(signal.SIGHUP, self.previous)


def _not_hung_up():
    from contextlib import nullcontext

    return nullcontext(lambda: False)


def busy_fix(busy: str) -> str:
    """The fix of "a run is already in progress" seen on the nodes: stop that run, by its id when
    its torchrun's command line gives it (`--rdzv-id=RUN`)."""
    import re

    match = re.search(r"\brun (\S+) ", busy)
    if match:
        return (f"wait for it to end, or stop it: `clusterctl stop {match.group(1)}` where it was started "
                "(or `clusterctl down`)")
    return "wait for it to end, or stop it with `clusterctl down`"


def _rank_filter(args, topology):
    """The live log's rank filter; one that selects no rank of this job is a mistake said now."""
    from clusterctl.job.livelog import RankFilter

    ranks = RankFilter(getattr(args, "ranks", ()) or (), getattr(args, "local_ranks", ()) or ())
    if (ranks.ranks or ranks.local_ranks) and not ranks.selects_any(n.ranks for n in topology.nodes):
        raise UsageError(f"{ranks} selects no rank of this job, whose ranks are 0-{topology.world_size - 1} "
                         f"({topology.nproc_per_node} per node)", where="--ranks" if ranks.ranks else "--local-ranks",
                         fix="name ranks the job has, or leave the flag out to see every rank")
    return ranks


def _check_prompt_fits(prompt: str, inventory, path: Path) -> None:
    """A prompt over Linux's limit for one argument can never reach the job: say so before connecting."""
    from clusterctl.job.torchrun import MAX_ARG_BYTES

    size = len(prompt.encode())
    if size > MAX_ARG_BYTES and any("{prompt}" in a for a in (*inventory.job.command, *inventory.job.args)):
        raise UsageError(f"the prompt is {size} bytes and becomes one argument of the job; Linux refuses a single "
                         f"argument over 128 KiB ({MAX_ARG_BYTES} bytes)", where=str(path),
                         fix="shorten the prompt, or have the job read it from a file on a shared volume "
                             "(pass the file's path in job.args instead of {prompt})")


def _summary(inventory, topology, run_id: str) -> dict:
    return {
        "run_id": run_id,
        "cluster": inventory.name,
        "world_size": topology.world_size,
        "nproc_per_node": topology.nproc_per_node,
        "nnodes": topology.nnodes,
        "master": {"host": topology.master.host.name, "address": topology.master_addr, "port": topology.port},
        "topology": [{"host": n.host.name, "node_rank": n.node_rank, "ranks": [n.ranks.start, n.ranks.stop - 1],
                      "gpus": list(n.gpu_ids) if n.gpu_ids is not None else None, "nic": n.nic,
                      "local_addr": n.local_addr} for n in topology.nodes],
        "notes": list(topology.notes),
        "outputs": inventory.job.outputs,
    }


def _node_states(runner) -> dict:
    return {name: {"exit_code": n.exit_code, "lost": n.lost, "run_dir": n.run_dir} for name, n in runner.nodes.items()}


def _not_ready(app, problems: dict) -> Outcome:
    from clusterctl.commands import any_unreachable, hosts_document

    app.renderer.hosts_table("run: nodes not ready", problems)
    document = hosts_document(problems)
    document["ok"] = False
    document["exit_code"] = None
    return Outcome(document, unreachable=any_unreachable(problems))


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
