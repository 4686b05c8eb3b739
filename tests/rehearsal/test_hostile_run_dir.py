"""A hostile job against root on the host (issue 47, H1), on the rehearsal cluster: as root in its container
the job turns the files of its node's run dir into links to a root-only 0600 file outside the run (a host
path: root on the host reads the run dir through the bind mount) and one into a FIFO
(tests/fixtures/jobs/hostile_links.py). During an attached run and a detached one, and through every
follow-up command (status, logs, top, metrics, stacks, stop, collect-logs, a relaunch after a failure),
the victim is left untouched (bytes, mode, mtime) and unread (its secret in no output, no bundle).

And a detached run's job that forges health evidence (issue 47, M3; tests/fixtures/jobs/forge_health.py): Xid 79
samples written into the supervisor's supervisor.json for its own node and for a node outside the run, beats
signed with the run's keys naming that outside node (and, from the master's job, which holds the run's
secret, a host of the run): the outside node's record stays untouched, the run's own hosts are at most
suspect (job-side evidence alone), and the next plan leaves no one out."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path

import pytest

from clusterctl_helpers import CONTAINER_OUTPUTS, Cli, cluster_with_jobs, steady_health, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

JOBS_DIR = "hostile-jobs"


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    yield from cluster_with_jobs(sandbox, tmp_path_factory, JOBS_DIR, "hostile_links.py", "forge_health.py")


@pytest.fixture
def victim():
    """A root-only file outside every run, and its state now."""
    where = Path("/var/tmp") / f"clusterctl-victim-{secrets.token_hex(4)}"
    where.mkdir(mode=0o700)
    path = where / "victim.key"
    secret = f"VICTIM-{secrets.token_hex(8)}"
    path.write_text(secret + "\n")
    path.chmod(0o600)
    st = path.stat()
    yield path, secret, (st.st_mtime_ns, st.st_size, st.st_mode)
    shutil.rmtree(where, ignore_errors=True)


def _untouched(victim) -> None:
    path, secret, before = victim
    st = path.stat()
    assert path.read_text() == secret + "\n" and (st.st_mtime_ns, st.st_size, st.st_mode) == before
    assert os.listdir(path.parent) == ["victim.key"]  # nothing made beside it through a linked directory


def _inventory(sb, path: Path, victim, seconds: float, exit_code: int = 0, **job) -> Path:
    def change(doc):
        doc["hosts"] = [h for h in doc["hosts"] if h["name"] in ("node1", "node2")]
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/hostile_links.py"], nproc_per_node=1,
                          args=["--victim", str(victim[0]), "--outputs", CONTAINER_OUTPUTS, "--seconds", str(seconds),
                                "--exit", str(exit_code)], **job)
        doc["job"].pop("world_size_divides", None)
        doc["health"] = steady_health()

    return variant(sb, path, change)


def _linked(sb, run_id: str) -> bool:
    return all((sb.shared_outputs / "logs" / run_id / node / "lease").is_symlink() for node in ("node1", "node2"))


def _new_run(sb, before: set) -> str:
    def found():
        logs = sb.shared_outputs / "logs"
        fresh = {p.name for p in logs.iterdir()} - before if logs.is_dir() else set()
        return next((rid for rid in fresh if _linked(sb, rid)), None)

    return wait_until(found, 180, interval=0.5, what="the job's links in both nodes' run dirs")


def _runs(sb) -> set:
    logs = sb.shared_outputs / "logs"
    return {p.name for p in logs.iterdir()} if logs.is_dir() else set()


def _no_secret(secret: str, *texts) -> None:
    for text in texts:
        assert secret not in (text if isinstance(text, str) else json.dumps(text)), "the victim was read"


def _bundle_has_no_secret(dest: Path, secret: str) -> None:
    for path in dest.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert secret.encode() not in path.read_bytes(), f"the victim's bytes in the bundle: {path}"


def test_an_attached_run_and_every_follow_up_leave_the_victim_untouched_and_unread(sandbox, cluster, tmp_path, victim):
    cli, where = cluster
    inventory = _inventory(sandbox, tmp_path / "hostile.yaml", victim, seconds=600)
    before = _runs(sandbox)
    run = cli.popen("run", "-i", str(inventory), "--stall-timeout", "0", str(where / "prompt.txt"))
    try:
        run_id = _new_run(sandbox, before)
        time.sleep(10)  # a few of the attached run's polls (every 4 s) meet the linked lease
        outputs = [cli.json("status", "-i", str(inventory))[1], cli.json("logs", run_id)[1],
                   cli.json("logs", run_id, "--rank", "1", "--tail", "5")[1], cli.json("top", run_id, "--once")[1],
                   cli.json("metrics", run_id)[1], cli.json("stacks", "--run", run_id, "-i", str(inventory))[1]]
        code, doc = cli.json("stop", run_id)
        assert code == 0 and doc["state"] == "stopped", doc
        code, document, stderr = Cli.finish(run, timeout=60)
        assert document["run_id"] == run_id and document["stopped"] is True, (document, stderr[-2000:])
        code, collected = cli.json("collect-logs", "--run", run_id, "--dest", str(tmp_path / "bundle"))
        _no_secret(victim[1], *outputs, document, stderr, collected)
        _bundle_has_no_secret(tmp_path / "bundle", victim[1])
        _untouched(victim)
        for node in ("node1", "node2"):  # stop's mark replaced the job's link, never wrote through it
            assert not (sandbox.shared_outputs / "logs" / run_id / node / "stopped").is_symlink()
    finally:
        if run.poll() is None:
            run.kill()
            cli.json("stop")


def test_a_detached_run_its_relaunch_after_a_failure_and_the_follow_ups_leave_the_victim_untouched(
        sandbox, cluster, tmp_path, victim):
    cli, where = cluster
    inventory = _inventory(sandbox, tmp_path / "hostile-detached.yaml", victim, seconds=12, exit_code=1)
    code, doc = cli.json("run", "-i", str(inventory), "--detach", "--stall-timeout", "0", str(where / "prompt.txt"))
    assert code == 0 and doc.get("detached"), doc
    run_id = doc["run_id"]
    try:
        states = wait_until(lambda: (lambda d: d if d["runs"][0]["state"] != "running" else None)(
            cli.json("status", "-i", str(inventory))[1]), 120, interval=2, what="the detached run's end")
    except AssertionError:
        run_dir = sandbox.shared_outputs / "logs" / run_id
        seen = {str(p.relative_to(run_dir)): p.read_text(errors="replace")[-1500:] for p in run_dir.glob("node*/*.log")
                if p.is_file() and not p.is_symlink()}
        import subprocess

        from clusterctl.plan import node_files

        listing = {str(p.relative_to(run_dir)): ("link" if p.is_symlink() else p.stat().st_size)
                   for p in run_dir.glob("node*/*")}
        state = subprocess.run(node_files.argv("python3", "state", str(run_dir / "node1"), "supervisor.json"),
                               capture_output=True, text=True)
        raise AssertionError(f"{cli.json('status', '-i', str(inventory))[1]['runs'][:1]}\n{seen}\n{listing}\n"
                             f"state: {state.returncode} {state.stdout[:1500]} {state.stderr[-1500:]}") from None
    outputs = [states, cli.json("logs", run_id)[1], cli.json("top", run_id, "--once")[1], cli.json("metrics", run_id)[1]]
    code, collected = cli.json("collect-logs", "--run", run_id, "--dest", str(tmp_path / "bundle"))
    _no_secret(victim[1], *outputs, collected)
    _bundle_has_no_secret(tmp_path / "bundle", victim[1])
    _untouched(victim)

    # attached, healing itself: the first attempt fails, its run dirs (links and all) are set aside and relaunched
    healing = _inventory(sandbox, tmp_path / "hostile-heal.yaml", victim, seconds=8, exit_code=1, restarts=1,
                         heal={"unknown": "transient"})
    run = cli.popen("run", "-i", str(healing), "--stall-timeout", "0", str(where / "prompt.txt"))
    code, document, stderr = Cli.finish(run, timeout=300)
    _no_secret(victim[1], document, stderr)
    _untouched(victim)
    relaunched = document["run_id"]
    aside = sandbox.shared_outputs / "logs" / relaunched / "node1.attempt-1"
    assert aside.is_dir() and not aside.is_symlink() and (aside / "lease").is_symlink(), document


def _health(cli, inventory) -> dict:
    code, doc = cli.json("health", "-i", str(inventory))
    assert code == 0, doc
    return {n["host"]: n for n in doc["nodes"]}


def test_a_detached_jobs_forged_health_samples_and_beats_reach_no_host_outside_its_run(sandbox, cluster, tmp_path):
    cli, where = cluster
    jobs = sandbox.shared_outputs / JOBS_DIR

    def change(doc):
        doc["hosts"] = [h for h in doc["hosts"] if h["name"] in ("node1", "node2")]  # node3: not in the run
        doc["job"].update(command=[f"{CONTAINER_OUTPUTS}/{JOBS_DIR}/forge_health.py"], nproc_per_node=1,
                          args=["--outputs", CONTAINER_OUTPUTS, "--report", f"{CONTAINER_OUTPUTS}/{JOBS_DIR}",
                                "--outside", "node3", "--victim", "node2", "--seconds", "120"])
        doc["job"].pop("world_size_divides", None)

    inventory, fleet = variant(sandbox, tmp_path / "forger.yaml", change), variant(sandbox, tmp_path / "fleet.yaml")
    before = _health(cli, fleet)
    code, doc = cli.json("run", "-i", str(inventory), "--detach", "--stall-timeout", "0", str(where / "prompt.txt"))
    assert code == 0 and doc.get("detached"), doc
    run_id = doc["run_id"]
    try:
        planned = json.loads((cli.state_dir / "runs" / run_id / "run.json").read_text())
        assert [n["host"] for n in planned["topology"]] == ["node1", "node2"], planned["topology"]
        said = {host: wait_until(lambda h=host: (lambda p: json.loads(p.read_text()) if p.is_file() else None)(
            jobs / f"forged-{run_id}-{h}.json"), 120, interval=0.5, what=f"the forger on {host}")
            for host in ("node1", "node2")}
        # refused before a byte of the body: node3 is no host of this run, whoever signs; node2's key is node2's
        assert said["node1"] == {"node3 with node1's key": 403, "node3 with the secret": 403,
                                 "node2 with the secret": 200}, said
        assert said["node2"] == {"node3 with node2's key": 403, "node1 with node2's key": 403}, said

        def seen():  # `status` reads the supervisor's document back (the job's rewrite of it, or the real one)
            cli.json("status", "-i", str(inventory))
            nodes = _health(cli, fleet)
            found = {h: " ".join(e["evidence"] for e in nodes[h]["events"] if e.get("run_id") == run_id)
                     for h in ("node1", "node2")}
            return nodes if "PCI:0000:aa" in found["node1"] and "PCI:0000:bb" in found["node2"] else None

        nodes = wait_until(seen, 60, interval=1, what="the forged samples read back by `status`")
    finally:
        code, stopped = cli.json("stop", run_id)
    assert nodes["node3"]["state"] == before["node3"]["state"] == "healthy", nodes["node3"]
    assert nodes["node3"]["events"] == before["node3"]["events"], nodes["node3"]  # untouched: no event at all
    for host in ("node1", "node2"):
        mine = [e for e in nodes[host]["events"] if e.get("run_id") == run_id]
        assert nodes[host]["state"] == "suspect" and {e["source"] for e in mine} == {"job"}, nodes[host]
        assert "reported by the job's side only" in nodes[host]["reason"], nodes[host]
    code, plan = cli.json("run", "-i", str(fleet), "--plan", str(where / "prompt.txt"))  # the next run: no one left out
    assert code == 0 and [n["host"] for n in plan["topology"]] == ["node1", "node2", "node3"], plan
    for host in ("node1", "node2"):
        code, released = cli.json("health", "-i", str(fleet), "release", host, "--force")
        assert code == 0, released
