"""`job.launcher: mpirun` without the rehearsal cluster: the hostfile, mpirun's argv, each node's command
and env (plan/launcher_mpirun.py), the gate's handshake, the ranks' env and logs (node/node_mpi_gate.py),
and one real mpirun (Open MPI 4.1, openmpi-bin) whose second "node" is 127.0.0.2 behind a real gate."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clusterctl.plan import launcher_mpirun as launch_mpirun
from clusterctl.node import node_mpi_gate as gate

from unit.test_launch_mpirun import GATE, KEY
from clusterctl_helpers import free_port


def gate_accepting(wait_s: float, master: str = "127.0.0.3") -> tuple[int, dict, threading.Thread]:
    """A gate on 127.0.0.2 taking its first proven connection from `master` (gate.accept_one, on a thread):
    its port, where the (connection, command) will be (`taken["result"]`), and the thread."""
    server = socket.create_server(("127.0.0.2", 0))
    taken: dict = {}
    waiter = threading.Thread(target=lambda: taken.update(result=gate.accept_one(server, KEY, wait_s, frozenset({master}))),
                              daemon=True)
    waiter.start()
    return server.getsockname()[1], taken, waiter


def test_the_gate_closes_a_stranger_at_once_and_still_takes_the_masters_command_after_it():
    port, taken, waiter = gate_accepting(20)
    stranger = socket.create_connection(("127.0.0.2", port), timeout=5, source_address=("127.0.0.4", 0))
    stranger.settimeout(5)
    assert stranger.recv(100) == b""  # closed before any hello: it cannot hold the gate for the handshake's wait
    stranger.close()
    with socket.create_connection(("127.0.0.2", port), timeout=5, source_address=("127.0.0.3", 0)) as master:
        gate.send_command(master, KEY, b"orted --hnp-uri x")
        waiter.join(10)
    conn, command = taken["result"]
    conn.close()
    assert command == b"orted --hnp-uri x"
    assert gate.addresses_of("127.0.0.3") == frozenset({"127.0.0.3"}) and gate.addresses_of("") == frozenset()


# --------------------------------------------------------------------------- a real mpirun on loopback


def _run(tmp_path: Path, job: str) -> tuple[subprocess.CompletedProcess, Path]:
    """mpirun on "m" (127.0.0.1, one slot) and "w" (127.0.0.2 behind a gate, two slots)."""
    logs = tmp_path / "logs" / "r1"
    for host in ("m", "w"):
        (logs / host).mkdir(parents=True)
    base = {**os.environ, gate.SECRET_VAR: "abc", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29600"}
    port = _free_port()
    gate_proc = subprocess.Popen([sys.executable, str(GATE), "gate", "127.0.0.2", str(port), "m", "30",
                                  str(logs / "w" / "r1_mpirun" / "attempt_0")],
                                 env={**base, "CLUSTERCTL_HOST": "w", "NODE_RANK": "1"}, stderr=subprocess.PIPE, text=True)
    mpirun = ["mpirun", "--allow-run-as-root", "--hostfile", str(logs / "m" / "hostfile"), "-np", "3",
              "--map-by", "slot", "--bind-to", "none", "--leave-session-attached", "--mca", "plm", "rsh",
              "--mca", "plm_rsh_agent", f"{sys.executable} {GATE} agent", "--mca", "plm_rsh_no_tree_spawn", "1",
              "--mca", "btl", "tcp,self", "--mca", "oob_tcp_if_include", "lo", "-x", "MASTER_ADDR", "-x", "MASTER_PORT",
              sys.executable, str(GATE), "rank", str(logs), "r1", "sh", "-c", job]
    done = subprocess.run([sys.executable, str(GATE), "launch", str(logs / "m"), "127.0.0.1 slots=1\n127.0.0.2 slots=2\n",
                           *mpirun], env={**base, "CLUSTERCTL_HOST": "m", "NODE_RANK": "0",
                                          gate.PORT_VAR: str(port)}, capture_output=True, text=True, timeout=120)
    gate_proc.wait(60)
    done.gate_code, done.gate_err = gate_proc.returncode, gate_proc.stderr.read()
    return done, logs


def _free_port() -> int:
    return free_port("127.0.0.2")  # tests/clusterctl_helpers.py: below the ephemeral range


needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="openmpi-bin is not installed")
SHOW = 'echo "$CLUSTERCTL_HOST R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE N=$NODE_RANK S=${%s:-none}"' % gate.SECRET_VAR


@needs_mpirun
def test_mpirun_starts_the_remote_ranks_through_the_gate_with_torchs_variables_and_torchrun_like_logs(tmp_path):
    done, logs = _run(tmp_path, SHOW)
    assert (done.returncode, done.gate_code) == (0, 0), done.stderr + done.gate_err
    assert (logs / "m" / "agent.log").read_text() == "[m rank0]: m R=0 W=3 L=0 LW=1 N=0 S=none\n"
    assert sorted((logs / "w" / "agent.log").read_text().splitlines()) == [
        "[w rank1]: w R=1 W=3 L=0 LW=2 N=1 S=none", "[w rank2]: w R=2 W=3 L=1 LW=2 N=1 S=none"]
    assert (logs / "w" / "r1_mpirun" / "attempt_0" / "1" / "stdout.log").read_text() == "w R=2 W=3 L=1 LW=2 N=1 S=none\n"
    assert oct((logs / "m" / "mpi.key").stat().st_mode & 0o777) == "0o600"


@needs_mpirun
def test_a_failed_rank_aborts_mpirun_and_leaves_torchruns_failed_line_on_its_own_node(tmp_path):
    from clusterctl.watch.torchrun_report import first_failed_process

    done, logs = _run(tmp_path, 'if [ "$RANK" = 2 ]; then sleep 1; echo boom >&2; exit 3; fi; sleep 60')
    assert done.returncode == 3 and "exited with non-zero status" in done.stderr
    assert done.gate_code == 3  # orted ended well; the node's own rank failed
    failed = first_failed_process((logs / "w" / "agent.log").read_text())
    assert (failed.local_rank, failed.exit_code) == (1, 3)
    assert "[w rank2]: boom" in (logs / "w" / "agent.log").read_text()
    assert first_failed_process((logs / "m" / "agent.log").read_text()).exit_code == -15  # stopped, not failed
    from clusterctl.watch.failures import Ended, first_failure
    from clusterctl.models import Host, Inventory

    inventory = Inventory("t", (Host("m", "127.0.0.1"), Host("w", "127.0.0.2")))
    master = Ended("m", 10.0, False, 3, (logs / "m" / "agent.log").read_text() + done.stderr)  # mpirun's own words too
    worker = Ended("w", 11.0, False, 3, (logs / "w" / "agent.log").read_text())  # noticed later, failed first
    first = first_failure(inventory, [master, worker], 1.0, 7.0, {"m": 3, "w": 3}, {"m": 0, "w": 1})
    assert (first["host"], first["rank"], first["rank_exit_code"]) == ("w", 2, 3)


def test_a_gate_that_nobody_connects_to_names_the_master_and_ends(tmp_path):
    done = subprocess.run([sys.executable, str(GATE), "gate", "127.0.0.2", str(_free_port()), "node1", "0.5", str(tmp_path)],
                          env={**os.environ, gate.SECRET_VAR: "abc", "PATH": os.environ["PATH"]}, capture_output=True,
                          text=True, timeout=60)
    if shutil.which("orted") is None:
        assert done.returncode == 127 and "apt-get install openmpi-bin" in done.stderr
    else:
        assert done.returncode == 1 and "mpirun on node1 did not connect" in done.stderr


def test_a_node_without_open_mpi_says_which_host_lacks_it_and_how_to_install_it(tmp_path):
    env = {gate.SECRET_VAR: "abc", "CLUSTERCTL_HOST": "node7", "PATH": str(tmp_path)}  # no mpirun, no orted
    launch = subprocess.run([sys.executable, str(GATE), "launch", str(tmp_path), "", "mpirun", "-np", "2", "true"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert launch.returncode == 127
    assert launch.stderr == ("clusterctl mpi launch on node7: mpirun is not installed: apt-get install openmpi-bin "
                             "in the image (or on the node)\n")
    node = subprocess.run([sys.executable, str(GATE), "gate", "127.0.0.2", "1", "node1", "1", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert node.returncode == 127 and "on node7: Open MPI's orted is not installed: apt-get install openmpi-bin" in node.stderr
