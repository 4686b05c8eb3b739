"""Issue 36 on the rehearsal cluster: the fleet remembers its sick nodes. A node cut off mid-run stops the run
(its own ranks stop by lease) and ends quarantined with the run's evidence, the next plan leaves it out, and a passing `health check`
lets `health release` bring it back; a node whose kernel log shows an Xid 79 while a run goes on
(tests/fixtures/hardware/xid79_dmesg: its dmesg serves the captured line) is quarantined by the
passive watch during that run, attached or detached (the keeper's watch, node/node_health.py);
--include-quarantined plans it anyway. A node quarantined in the record is left out by `up` and
`run --plan` (with job.nodes, the spare takes its place), said in one line; a suspect one is chosen last
where a spare exists (the master stays)."""
from __future__ import annotations

import json
import sys
import time

import pytest

from clusterctl_helpers import Cli, processes_with, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def cli(hardware_sandbox, tmp_path_factory):
    cli = Cli(tmp_path_factory.mktemp("health-state"))
    code, doc = cli.json("up", str(hardware_sandbox.inventory_path))
    assert code == 0, doc
    yield cli
    cli.json("down", "-i", str(hardware_sandbox.inventory_path))


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompt") / "prompt.txt"
    path.write_text("a cat on the grass\n")
    return path


def _inventory(sb, path, *args: str, **job):
    """The sandbox inventory, a node lost once enough to quarantine it, the job given `args` (and `job` keys)."""
    def change(doc):
        doc["job"]["args"] = doc["job"]["args"] + list(args)
        doc["job"].update(job)
        doc["health"] = {"rules": {"node_lost": {"quarantine_after": 1}}}

    return variant(sb, path, change)


def _node(cli, inventory, host: str) -> dict:
    code, doc = cli.json("health", "-i", str(inventory))
    assert code == 0, doc
    return next(n for n in doc["nodes"] if n["host"] == host)


def _planned(cli, inventory, *flags: str) -> list:
    code, doc = cli.json("run", "-i", str(inventory), "--plan", *flags, str(inventory))
    assert code == 0, doc
    return [n["host"] for n in doc["topology"]]


def _stalling(sb, before: set, host: str):
    logs = sb.shared_outputs / "logs"

    def found():
        for run_id in (set(p.name for p in logs.iterdir()) if logs.is_dir() else set()) - before:
            log = logs / run_id / host / "agent.log"
            if log.exists() and "stalling" in log.read_text(errors="replace"):
                return run_id
        return None

    return wait_until(found, 90, interval=0.5, what=f"a stalling rank on {host}")


def test_a_node_cut_off_mid_run_stops_the_run_and_its_own_ranks_by_lease_is_quarantined_left_out_of_the_next_plan_and_back_after_a_passing_check(
        hardware_sandbox, cli, prompt_file, tmp_path):
    """(Also what test_cluster_run.py's own cut-off test asserted, merged here: one run, one lapse of a lease.)"""
    sb = hardware_sandbox
    # job.lost_after 6: node3 is lost 6 s after its last answer (15 by default, attached as detached)
    inventory = _inventory(sb, tmp_path / "lost.yaml", "--stall_rank", "4", "--stall_s", "300", lost_after=6)
    logs = sb.shared_outputs / "logs"
    before = set(p.name for p in logs.iterdir()) if logs.is_dir() else set()
    proc = cli.popen("run", "-i", str(inventory), str(prompt_file))
    cut = None
    try:
        run_id = _stalling(sb, before, "node3")
        sb.cut_network("node3")
        cut = time.monotonic()
        code, doc, _ = Cli.finish(proc, timeout=90)
        stopped_after = time.monotonic() - cut
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sb.restore_network("node3")
    assert code == 1 and doc["run_id"] == run_id and doc["exit_code"] != 0, doc.get("first_failure")
    assert doc["first_failure"]["host"] == "node3", doc.get("first_failure")
    # within seconds of the lost-node window, not after the stalled rank's 300 s; how soon is measured by
    # `make bench` (a bound here only says "not hung": a loaded 2-core machine took 18 s where 9 s is usual)
    assert stopped_after < 30, f"stopped {stopped_after:.1f}s after the cut"
    assert doc["nodes"]["node3"]["lost"] is True

    node3 = _node(cli, inventory, "node3")
    assert node3["state"] == "quarantined" and node3["reason"].startswith("node_lost"), node3
    lost = [e for e in node3["events"] if e["kind"] == "node_lost"]
    assert lost and lost[-1]["run_id"] == run_id and "stopped answering" in lost[-1]["evidence"]

    assert _planned(cli, inventory) == ["node1", "node2"]
    code, refused = cli.json("health", "-i", str(inventory), "release", "node3")
    assert code == 2 and "no check has passed since" in refused["error"], refused

    # node3 stops its own ranks once its lease (15 s) runs out, the others were stopped by the run; then node3
    # is checked like any node
    remaining = max(1.0, cut + 15 + 5 + 5 - time.monotonic())
    assert wait_until(lambda: not [p for p in processes_with(run_id) if "pytest" not in p[1]], remaining,
                      interval=0.5, what="no process of the lost run") is True
    code, judged = cli.json("check", "-i", str(inventory))  # the state beside the verdicts
    assert {n["host"]: n["state"] for n in judged["health"]} == {"node1": "healthy", "node2": "healthy",
                                                                   "node3": "quarantined"}, judged["health"]
    # the lost run still holds node3's lease (nobody could release it), but this controller's record says it
    # ended and node3 shows its ranks gone: the check's NCCL pair takes it back at once (issue 48), no lapse
    code, checked = cli.json("health", "-i", str(inventory), "check", "node3")
    steps = {s["step"]: s for s in checked["steps"]}
    assert code == 0 and checked["ok"] is True, checked
    assert steps["preflight"]["status"] == "pass"
    assert steps["gpu_burn"]["status"] == "skip" and "no CUDA GPU" in steps["gpu_burn"]["detail"]
    assert steps["nccl_pair"]["status"] == "pass" and "with node1" in steps["nccl_pair"]["detail"]

    code, released = cli.json("health", "-i", str(inventory), "release", "node3")
    assert code == 0 and released["nodes"][0]["state"] == "healthy", released
    assert _planned(cli, inventory) == ["node1", "node2", "node3"]


def test_an_xid_79_in_a_nodes_kernel_log_quarantines_it_during_the_run_and_include_quarantined_plans_it(
        hardware_sandbox, cli, prompt_file, tmp_path):
    node = hardware_sandbox.node_of["xid79_dmesg"]
    inventory = _inventory(hardware_sandbox, tmp_path / "xid.yaml")
    started = time.time()
    code, doc = cli.json("run", "-i", str(inventory), str(prompt_file))
    assert code == 0, doc

    state = _node(cli, inventory, node)
    xids = [e for e in state["events"] if e["kind"] == "xid_fatal"]
    assert state["state"] == "quarantined" and state["reason"].startswith("xid_fatal"), state
    assert xids[0]["source"] == "watch" and xids[0]["run_id"] == doc["run_id"] and xids[0]["at"] >= started
    assert "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus" in xids[0]["evidence"]
    assert all(_node(cli, inventory, other)["state"] == "healthy" for other in {"node1", "node2", "node3"} - {node})

    assert node not in _planned(cli, inventory)
    assert node in _planned(cli, inventory, "--include-quarantined")
    code, released = cli.json("health", "-i", str(inventory), "release", node, "--force")
    assert code == 0 and released["nodes"][0]["state"] == "healthy"


def _quarantine(cli, host: str) -> None:
    """`host` quarantined in the record as a watch of another run would have left it."""
    from clusterctl.health.events import Event
    from clusterctl.health.fleet import record_events
    from clusterctl.models import Inventory
    from clusterctl.state import State

    note = record_events(State(cli.state_dir).health_db, Inventory("sandbox", ()),
                         [Event(host, "xid_fatal", "watch", evidence="NVRM: Xid (PCI:0000:44:00): 79", cause="Xid 79")])
    assert note is None, note


def _up(cli, inventory, *flags: str) -> tuple[list, str]:
    """`up`'s hosts (--json), and what a person sees it say (the same `up` again, without --json)."""
    code, doc = cli.json("up", str(inventory), *flags)
    assert code == 0, doc
    proc = cli.popen("up", str(inventory), *flags, json_output=False)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    return sorted(doc["hosts"]), err  # what is said goes to stderr


def test_a_quarantined_node_is_left_out_by_up_and_run_plan_a_spare_takes_its_place_and_a_passing_check_brings_it_back(
        hardware_sandbox, cli, tmp_path):
    inventory = variant(hardware_sandbox, tmp_path / "spare.yaml", lambda doc: doc["job"].update(nodes=2))
    assert _planned(cli, inventory) == ["node1", "node2"]  # node3 is the spare
    _quarantine(cli, "node2")

    hosts, said = _up(cli, inventory)
    assert hosts == ["node1", "node3"], hosts
    assert [line for line in said.splitlines() if "leaving out quarantined node2 (xid_fatal" in line], said
    assert _planned(cli, inventory) == ["node1", "node3"]  # the spare takes node2's place

    hosts, said = _up(cli, inventory, "--include-quarantined")  # the operator knows better: said in one line
    assert hosts == ["node1", "node2", "node3"], hosts
    assert [line for line in said.splitlines() if "planning quarantined node2 (xid_fatal" in line], said
    assert _planned(cli, inventory, "--include-quarantined") == ["node1", "node2"]

    code, checked = cli.json("health", "-i", str(inventory), "check", "node2")
    assert code == 0 and checked["ok"] is True, checked
    code, released = cli.json("health", "-i", str(inventory), "release", "node2")
    assert code == 0 and released["nodes"][0]["state"] == "healthy", released
    assert _planned(cli, inventory) == ["node1", "node2"]
    hosts, said = _up(cli, inventory)
    assert hosts == ["node1", "node2", "node3"] and "quarantined" not in said

    # a suspect node (lost once by a run) is chosen last where a spare exists; the master stays node1 (issue 48)
    from clusterctl.health.events import Event
    from clusterctl.health.fleet import record_events
    from clusterctl.models import Inventory
    from clusterctl.state import State

    record_events(State(cli.state_dir).health_db, Inventory("sandbox", ()), [Event("node2", "node_lost", "run",
                                                                                    run_id="r0")])
    assert _node(cli, inventory, "node2")["state"] == "suspect"
    assert _planned(cli, inventory) == ["node1", "node3"]
    code, released = cli.json("health", "-i", str(inventory), "release", "node2", "--force")
    assert code == 0 and _planned(cli, inventory) == ["node1", "node2"], released


def _kept(doc: dict) -> str:
    """What the run's supervisor kept of each node's health, and the keepers' logs (said on a failure)."""
    from pathlib import Path

    dirs = {host: Path(node["run_dir"]) for host, node in (doc.get("nodes") or {}).items() if node.get("run_dir")}
    said = []
    for host, run_dir in dirs.items():
        for name in ("supervisor.json", "keep.log"):
            if (run_dir / name).is_file():
                said.append(f"{host}/{name}: {(run_dir / name).read_text(errors='replace')[-3000:]}")
    return "\n".join(said) or f"no run dir readable: {dirs}"


def test_an_xid_79_in_a_nodes_kernel_log_during_a_detached_run_makes_it_suspect_through_the_keepers_watch(
        hardware_sandbox, cli, prompt_file, tmp_path):
    """The keeper samples its node (node/node_health.py) and the supervisor keeps the sample; `attach`
    reads the state back and records it, as the job's side (issue 47: the job could have forged it), so
    the node is suspect, not quarantined, until a second source sees it. Ranks on the hosts: the
    stand-in dmesg is on the keeper's PATH (a keeper in the container reads the container's kernel log,
    where it may)."""
    from clusterctl.sandbox.inventory_file import REPO

    sb = hardware_sandbox
    node = sb.node_of["xid79_dmesg"]

    def on_the_hosts(doc):  # node1 and node3, reached as root: this interpreter (with torch) runs the ranks
        doc.pop("container", None)
        doc["hosts"] = [h for h in doc["hosts"] if h["name"] in ("node1", node)]
        doc["job"].update(workdir=str(REPO), outputs=str(sb.shared_outputs), python=sys.executable)

    inventory = variant(sb, tmp_path / "detached.yaml", on_the_hosts)
    started = time.time()
    code, doc = cli.json("run", "-i", str(inventory), "--detach", str(prompt_file))
    assert code == 0 and doc.get("run_id"), json.dumps(doc)[-3000:]
    code, ended = cli.json("attach", "-i", str(inventory), doc["run_id"])  # until the run ends: its state read back
    assert code == 0, ended

    state = _node(cli, inventory, node)
    xids = [e for e in state["events"] if e["kind"] == "xid_fatal" and e["run_id"] == doc["run_id"]]
    kept = json.loads((cli.state_dir / "runs" / doc["run_id"] / "run.json").read_text())
    assert state["state"] == "suspect" and state["reason"].startswith("xid_fatal"), (state, _kept(kept))
    assert "reported by the job's side only" in state["reason"], state
    assert len(xids) == 1 and xids[0]["source"] == "job" and xids[0]["at"] >= started - 5, xids
    assert xids[0]["evidence"].startswith("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"), xids
    assert _node(cli, inventory, "node1")["state"] == "healthy"
    code, released = cli.json("health", "-i", str(inventory), "release", node, "--force")
    assert code == 0 and released["nodes"][0]["state"] == "healthy"
