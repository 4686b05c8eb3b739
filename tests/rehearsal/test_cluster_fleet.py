"""Two operators share the rehearsal cluster (issue 48): alice and bob, each with a state directory of their
own and the same inventory, over real SSH (node2 as the sudo user) and the nodes' containers. The job is a
`sleep` per node (`job.launcher: none`).

alice's detached run survives bob's `up` and `down` (its container too), each naming it; bob's `run` is
refused naming alice's run; bob's `status` shows it; bob's `run --wait` starts once alice's run ends. A
controller killed -9 (an attached run's): its leases lapse within the window and a waiting run starts.
A run's leases end with it: the other operator's next run, started the moment a run returns (attached) or
`status` says it ended (detached), is never refused."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from clusterctl_helpers import Cli, processes_with, variant, wait_until

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _operator(where: Path, who: str) -> Cli:
    cli = Cli(where / who / ".clusterctl")
    cli.state_dir.parent.mkdir(parents=True, exist_ok=True)
    # a subprocess of its own: its operator name, and this checkout's clusterctl (not an installed one)
    cli.env.update(CLUSTERCTL_OPERATOR=f"{who}@ctl-{who}",
                   PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    return cli


def _run(cli: Cli, *args: str, timeout: float = 180) -> tuple[int, dict, str]:
    return Cli.finish(cli.popen(*args), timeout=timeout)


def _sleeping(sb, path: Path, seconds: int = 600) -> Path:
    def change(doc):
        doc["hosts"] = [h for h in doc["hosts"] if h["name"] in ("node1", "node2")]
        doc["job"].update(launcher="none", command=["sleep", str(seconds)], args=[], nproc_per_node=1, lost_after=5)
        doc["job"].pop("world_size_divides", None)

    return variant(sb, path, change)


def _sleeps(run_id: str) -> list:
    """The run's `sleep`s on the nodes (their run dir in the command line of the launch wrapper beside)."""
    return [pid for pid, cmd in processes_with(run_id) if "pytest" not in cmd]


@pytest.fixture(scope="module")
def fleet(sandbox, tmp_path_factory):
    where = tmp_path_factory.mktemp("fleet")
    inventory = _sleeping(sandbox, where / "inventory.yaml")
    (where / "prompt.txt").write_text("a cat\n")
    alice, bob = _operator(where, "alice"), _operator(where, "bob")
    code, doc, err = _run(alice, "up", str(inventory))
    assert code == 0, err[-3000:]
    yield alice, bob, str(inventory), str(where / "prompt.txt")
    _run(alice, "down", "-i", str(inventory), "--force")


def test_a_detached_run_survives_the_other_operators_up_and_down_and_wait_starts_after_it(fleet):
    alice, bob, inventory, prompt = fleet
    code, started, err = _run(alice, "run", "-i", inventory, "--detach", prompt)
    assert code == 0, err[-3000:]
    run_a = started["run_id"]
    waiting = None
    try:
        assert _sleeps(run_a)

        code, up, err = _run(bob, "up", inventory)
        assert code == 0, err[-3000:]
        assert {h: [r["run_id"] for r in up["hosts"][h]["left_running"]] for h in ("node1", "node2")} == {
            "node1": [run_a], "node2": [run_a]}
        assert up["hosts"]["node1"]["left_running"][0]["operator"] == "alice@ctl-alice"

        code, refused, err = _run(bob, "run", "-i", inventory, prompt)
        assert code == 2 and f"by run {run_a} (alice@ctl-alice, since " in refused["error"], refused
        assert f"`clusterctl stop {run_a}`" in refused["fix"] and "run --wait" in refused["fix"]

        code, status, err = _run(bob, "status", "-i", inventory)
        assert [(r["run_id"], r["operator"], sorted(r["gpus"])) for r in status["fleet"]["runs"]] == [
            (run_a, "alice@ctl-alice", ["node1", "node2"])]

        code, down, err = _run(bob, "down", "-i", inventory)
        assert code == 0, err[-3000:]
        assert all("kept" in down["hosts"][h]["detail"] for h in ("node1", "node2")), down["hosts"]
        code, status, err = _run(alice, "status", "-i", inventory)
        mine = next(r for r in status["runs"] if r["run_id"] == run_a)
        assert mine["state"] == "running" and _sleeps(run_a), mine

        waiting = bob.popen("run", "-i", inventory, "--wait", "--detach", prompt)
        wait_until(lambda: _run(bob, "status", "-i", inventory)[1]["fleet"]["waiting"], 60, what="bob in the queue")
        code, stopped, err = _run(alice, "stop", run_a)
        assert code == 0, err[-3000:]
        code, doc, err = Cli.finish(waiting, timeout=120)
        assert code == 0 and doc["detached"], err[-3000:]
        run_b = doc["run_id"]
        code, status, err = _run(alice, "status", "-i", inventory)
        assert [(r["run_id"], r["operator"]) for r in status["fleet"]["runs"]] == [(run_b, "bob@ctl-bob")]
        code, stopped, err = _run(bob, "stop", run_b)
        assert code == 0, err[-3000:]
    finally:
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
            waiting.wait()


def test_a_killed_controllers_leases_lapse_and_a_waiting_run_starts(fleet):
    alice, bob, inventory, prompt = fleet
    attached = alice.popen("run", "-i", inventory, prompt, json_output=False)
    waiting = None
    try:
        leases = lambda: _run(bob, "status", "-i", inventory)[1]["fleet"]["runs"]  # noqa: E731
        run_a = wait_until(leases, 120, interval=1, what="alice's leases")[0]["run_id"]
        attached.send_signal(signal.SIGKILL)  # no goodbye: nothing releases its leases
        attached.wait(timeout=30)
        code, refused, err = _run(bob, "run", "-i", inventory, prompt)
        assert code == 2 and f"by run {run_a}" in refused["error"], refused
        waiting = bob.popen("run", "-i", inventory, "--wait", "--detach", prompt, json_output=False)
        _out, err = waiting.communicate(timeout=120)  # the window: max(lost_after, 15 s) after the last beat
        assert waiting.returncode == 0 and "goes on, watched on the cluster" in err, err[-3000:]
        assert f"{run_a} (alice@ctl-alice) expired" in err, err[-3000:]
        run_b = err.split("goes on, watched on the cluster")[0].rsplit("run ", 1)[1].strip()
        code, stopped, err = _run(bob, "stop", run_b)
        assert code == 0, err[-3000:]
    finally:
        for proc in (attached, waiting):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_next_run_right_after_a_run_returns_or_is_said_ended_is_never_refused(fleet, sandbox, tmp_path):
    alice, bob, _inventory, prompt = fleet
    short = str(_sleeping(sandbox, tmp_path / "short.yaml", seconds=1))
    for who in (alice, bob, alice):  # each the moment the last returned: its leases went before it did
        code, doc, err = _run(who, "run", "-i", short, prompt)
        assert code == 0, (doc.get("error"), err[-3000:])
    code, started, err = _run(alice, "run", "-i", short, "--detach", prompt)
    assert code == 0, err[-3000:]
    ended = lambda: [r for r in _run(alice, "status", "-i", short)[1]["runs"]  # noqa: E731
                     if r["run_id"] == started["run_id"] and r["state"] != "running"]
    assert wait_until(ended, 60, interval=0.5, what="alice's detached run said ended")[0]["state"] == "succeeded"
    code, doc, err = _run(bob, "run", "-i", short, prompt)  # at once: its keepers released before its end was final
    assert code == 0, (doc.get("error"), err[-3000:])
