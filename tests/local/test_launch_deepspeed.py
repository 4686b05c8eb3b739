"""`job.launcher: deepspeed` (plan/launcher_deepspeed.py): DeepSpeed's per-node launcher as clusterctl runs it.

The argv is read back by the real `deepspeed.launcher.launch` parser (deepspeed 0.19.8, installed by the
test extra), and the node command runs for real on this machine: two "nodes" on loopback, gloo ranks
(tests/fixtures/jobs/ds_ranks.py)."""
from __future__ import annotations

import base64
import os
import signal
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from clusterctl.plan import launcher_deepspeed as launch_deepspeed, launcher as launchers
from clusterctl.plan.torchrun import job_argv, placeholder_values, rank_log_files

from unit.test_launch import NASTY, two_node_inventory, two_node_topology
from clusterctl_helpers import free_port

JOB = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "ds_ranks.py"


def _deepspeed(**job):
    return two_node_topology(two_node_inventory(launcher="deepspeed", **job))


def _decoded(world_info: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(world_info))


def _parsed_by_deepspeed(argv: tuple[str, ...]):
    launch = pytest.importorskip("deepspeed.launcher.launch")
    saved = sys.argv
    sys.argv = ["launch.py", *argv]
    try:
        return launch.parse_args()
    finally:
        sys.argv = saved


def test_deepspeeds_own_parser_reads_our_arguments_and_hands_the_rest_to_the_rank_untouched():
    inv, topo = _deepspeed()
    argv = job_argv(inv.job, placeholder_values(topo, "r1", NASTY, inv.job.outputs))
    command = launch_deepspeed.node_command(inv, topo, topo.nodes[1], "r1", argv, inv.job.outputs)
    args = _parsed_by_deepspeed(command[8:])
    assert (args.node_rank, args.master_addr, args.master_port) == (1, "172.31.0.80", 29511)
    assert _decoded(args.world_info) == {"node-080": [0, 1], "node-082": [0, 1]}
    assert (args.no_python, args.no_local_rank, args.module) == (True, True, False)
    assert [args.training_script, *args.training_script_args] == list(command[14:])


# launch.py's part: start the rank script, and on SIGTERM note it and exit 1 (its sigkill_handler)
_LAUNCH = ("import signal, subprocess, sys\n"
           "signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[1], 'w').write('TERM'), sys.exit(1)))\n"
           "sys.exit(subprocess.call(sys.argv[2:]))\n")


def _rank(tmp_path: Path, at: str, *job: str, rank: str = "3", local_rank: str = "1"):
    """The rank script under a stand-in for launch.py that handles SIGTERM (writing `term`)."""
    env = {"PATH": "/usr/bin:/bin", "RANK": rank, "LOCAL_RANK": local_rank}
    return subprocess.run([sys.executable, "-c", _LAUNCH, str(tmp_path / "term"), "sh", "-c", launch_deepspeed._RANK,
                           "x", str(tmp_path / "att"), at, *job], capture_output=True, text=True, env=env)


def test_the_rank_script_puts_local_rank_where_deepspeed_does_and_writes_the_ranks_files(tmp_path):
    done = _rank(tmp_path, "4", "sh", "-c", 'echo "$@"; echo err >&2', "s", "a b", "$x")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert (tmp_path / "att" / "1" / "stdout.log").read_text() == "--local_rank=1 a b $x\n"
    assert (tmp_path / "att" / "1" / "stderr.log").read_text() == "err\n"
    assert not (tmp_path / "att" / "1" / "failed").exists()


def test_a_failed_rank_is_noted_with_its_global_rank_and_launch_is_stopped_at_once_unless_it_stopped_the_rank(
        tmp_path):
    stopped = _rank(tmp_path, "3", "sh", "-c", "kill -TERM $$", rank="2", local_rank="0")
    assert stopped.returncode == 143 and not (tmp_path / "att" / "0" / "failed").exists()
    assert not (tmp_path / "term").exists()
    done = _rank(tmp_path, "3", "sh", "-c", 'echo "Traceback: boom" >&2; exit 3')
    assert (done.returncode, done.stderr) == (1, "")  # launch.py stopped at once (its next poll: a second)
    assert (tmp_path / "att" / "1" / "failed").read_text() == "3 3\n" and (tmp_path / "term").read_text() == "TERM"


def test_the_rank_script_leaves_a_launcher_that_does_not_handle_sigterm_yet_alone(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "RANK": "0", "LOCAL_RANK": "0"}
    plain = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"  # launch.py still starting ranks
    done = subprocess.run([sys.executable, "-c", plain, "sh", "-c", launch_deepspeed._RANK, "x", str(tmp_path), "1",
                           "false"], capture_output=True, text=True, env=env)
    assert done.returncode == 1 and (tmp_path / "0" / "failed").read_text() == "0 1\n"


def _node(tmp_path: Path, ranks_done: str, code: int = 3):
    """_NODE with a stand-in for Python whose `-m deepspeed.launcher.launch` runs `ranks_done` in the
    ranks' directory and exits with `code`."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n[ "$1" = -c ] && exit 0\ncd "$R" && {ranks_done}\nexit {code}\n')
    python.chmod(0o755)
    ranks = tmp_path / "r1_deepspeed" / "attempt_0"
    return subprocess.run(["sh", "-c", launch_deepspeed._NODE, "x", "node2", str(python), str(ranks), "RANK SCRIPT"],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "R": str(ranks)})


def test_a_failed_node_copies_the_stderr_of_its_rank_that_wrote_its_error_first_with_host_and_rank(tmp_path):
    ranks_done = ("mkdir 0 1 && echo 'Connection closed by peer' >0/stderr.log && echo '2 1' >0/failed && "
                  "echo 'RuntimeError: boom' >1/stderr.log && echo '3 3' >1/failed && "
                  "touch -d '2026-01-01 00:00:01' 1/stderr.log && touch -d '2026-01-01 00:00:02' 0/stderr.log")
    done = _node(tmp_path, ranks_done, code=1)  # launch.py stopped by the rank script: 1
    assert done.returncode == 3
    assert done.stderr.splitlines() == [
        "[node2 rank3]: RuntimeError: boom", "[node2 rank3]: clusterctl: the rank exited with code 3",
        f"clusterctl: rank 2 exited with code 1 too (its stderr: {tmp_path}/r1_deepspeed/attempt_0/0/stderr.log)"]
    assert (tmp_path / "r1_deepspeed" / "rank.sh").read_text() == "RANK SCRIPT"
    assert _node(tmp_path, "true", code=0).stderr == ""


def test_a_python_without_deepspeed_fails_the_node_with_one_line_naming_the_host_and_the_fix(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    done = subprocess.run(["sh", "-c", launch_deepspeed._NODE, "x", "node2", str(bare / "bin" / "python"),
                           str(tmp_path / "r1_deepspeed" / "attempt_0"), "RANK SCRIPT", "--x"],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr == (f"clusterctl: job.launcher deepspeed: ModuleNotFoundError: No module named 'deepspeed' for "
                           f"{bare}/bin/python on node2; fix: pip install deepspeed in the image (or point job.python "
                           "at a Python that has it)\n")


def _local_run(tmp_path: Path, *args: str) -> tuple[list, object, str]:
    """Both nodes' commands on this machine (two hosts on loopback, 2 CPU ranks each); returns the
    launchers' ended processes, the topology and the run's outputs folder."""
    pytest.importorskip("deepspeed")
    inv = two_node_inventory(launcher="deepspeed", python=sys.executable)
    job = replace(inv.job, command=(str(JOB),), args=args, outputs=str(tmp_path))
    inv, topo = two_node_topology(replace(inv, job=job))
    topo = replace(topo, master_addr="127.0.0.1", port=_free_port(),
                   nodes=tuple(replace(n, gpu_ids=None) for n in topo.nodes))
    argv = job_argv(inv.job, placeholder_values(topo, "r1", "", str(tmp_path)))
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "DS_ACCELERATOR": "cpu", "PYTHONUNBUFFERED": "1",
           "GLOO_SOCKET_IFNAME": "lo"}
    started = [subprocess.Popen(launchers.node_command(inv, topo, n, "r1", argv, str(tmp_path)), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in topo.nodes]
    ended = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in started]
    return ended, topo, str(tmp_path)


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


@pytest.mark.slow
def test_two_nodes_of_deepspeeds_launcher_run_gloo_ranks_with_their_global_ranks_in_torchruns_layout(tmp_path):
    ended, topo, outputs = _local_run(tmp_path, "--out", f"{tmp_path}/out")
    assert [code for code, _, _ in ended] == [0, 0], ended
    seen = {int(p.stem[4:]): json.loads(p.read_text()) for p in (tmp_path / "out").glob("rank*.json")}
    assert sorted(seen) == [0, 1, 2, 3] and {s["sum"] for s in seen.values()} == {10}
    for rank, s in seen.items():
        assert (s["WORLD_SIZE"], s["RANK"], s["LOCAL_RANK"], s["local_rank_arg"]) == ("4", str(rank), str(rank % 2), rank % 2)
    for log in rank_log_files(topo, "r1", outputs):
        (stdout,) = Path("/").glob(log.stdout_glob.lstrip("/"))
        assert json.loads(stdout.read_text())["RANK"] == str(log.rank)


@pytest.mark.slow
def test_a_failing_rank_ends_its_node_with_its_code_and_its_stderr_named_by_host_and_rank(tmp_path):
    ended, topo, outputs = _local_run(tmp_path, "--out", f"{tmp_path}/out", "--fail-rank", "2")
    (code0, _, _), (code1, _, err1) = ended
    assert code1 == 3 and code0 != 0, ended
    assert "[node-082 rank2]: RuntimeError: rank 2 gives up" in err1.splitlines()
    assert "[node-082 rank2]: clusterctl: the rank exited with code 3" in err1.splitlines()


def test_the_stack_sampler_takes_the_python_rank_under_deepspeeds_rank_script_not_the_shell(tmp_path):
    from clusterctl.watch import sampler
    from clusterctl.models import Host, Inventory

    sampler.pyspy_binary() or pytest.skip("no py-spy installed")
    ready = tmp_path / "ready"
    rank = (f"import os, subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(60)']); open({str(ready)!r}, 'w').write(str(os.getpid())); time.sleep(60)")
    env = {"PATH": "/usr/bin:/bin", "CLUSTERCTL_CLUSTER": "dsc", "CLUSTERCTL_HOST": "n1", "CLUSTERCTL_RUN_ID": "r1",
           "RANK": "2", "LOCAL_RANK": "0"}  # what launch.py gives the rank script, and the rank inherits
    tree = subprocess.Popen(["sh", "-c", launch_deepspeed._RANK, "x", str(tmp_path / "att"), "3", sys.executable, "-c",
                             rank], env=env, start_new_session=True)
    try:
        for _ in range(600):
            if ready.exists() and ready.read_text():
                break
            subprocess.run(["sleep", "0.05"])
        command = sampler.sample_command(Inventory("dsc", (Host("n1", "10.0.0.1"),)), "n1", "r1", 1, 0.0)
        done = subprocess.run(command.argv, input=command.stdin, capture_output=True, timeout=60)
        stacks = sampler.parse_node_output(done.stdout.decode(), "n1")
    finally:
        os.killpg(tree.pid, signal.SIGKILL)
        tree.wait()
    assert stacks.problem == "", stacks
    (only,) = stacks.samples[0]
    assert (only.rank, only.pid) == (2, int(ready.read_text())) and not only.error, only


def test_on_sigterm_the_rank_script_waits_for_its_rank_so_no_rank_is_left_an_orphan(tmp_path):
    ready = tmp_path / "ready"
    env = {"PATH": "/usr/bin:/bin", "RANK": "0", "LOCAL_RANK": "0"}
    tree = subprocess.Popen(["sh", "-c", launch_deepspeed._RANK, "x", str(tmp_path), "3", "sh", "-c",
                             f"touch {ready}; sleep 60"], env=env, start_new_session=True)
    for _ in range(600):
        if ready.exists():
            break
        subprocess.run(["sleep", "0.05"])
    os.killpg(tree.pid, signal.SIGTERM)  # launch.py's terminate_process_tree, clusterctl's stop
    assert tree.wait(timeout=30) == 143  # the script's own exit after its rank's: not killed by the signal (-15)
