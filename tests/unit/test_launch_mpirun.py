"""`job.launcher: mpirun` without the rehearsal cluster: the hostfile, mpirun's argv, each node's command
and env (plan/launcher_mpirun.py), the gate's handshake, the ranks' env and logs (node/node_mpi_gate.py),
and one real mpirun (Open MPI 4.1, openmpi-bin) whose second "node" is 127.0.0.2 behind a real gate."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from clusterctl_helpers import examples

from clusterctl.plan import launcher_mpirun as launch_mpirun, launcher as launchers
from clusterctl.node import node_mpi_gate as gate
from clusterctl.plan.torchrun import job_argv, placeholder_values

from unit.test_launch import NASTY, two_node_inventory, two_node_topology

GATE = Path(gate.__file__)
KEY = b"k" * 64


def _mpirun():
    inv, topo = two_node_topology(two_node_inventory(launcher="mpirun"))
    return inv, launchers.shaped(inv, topo)


def test_the_hostfile_lists_each_nodes_plan_address_with_its_planned_ranks_in_plan_order():
    _, topo = _mpirun()
    assert launch_mpirun.hostfile(topo) == "172.31.0.80 slots=2\n172.31.0.82 slots=2\n"
    assert (topo.world_size, [n.first_rank for n in topo.nodes]) == (4, [0, 2])  # torchrun's layout
    assert "gate on port 29514 (rendezvous port + 3)" in topo.notes[-1]


def test_the_master_runs_mpirun_over_the_hostfile_through_the_gates_agent_with_the_jobs_env():
    inv, topo = _mpirun()
    argv = job_argv(inv.job, placeholder_values(topo, "r1", NASTY, inv.job.outputs))
    command = launchers.node_command(inv, topo, topo.nodes[0], "r1", argv, inv.job.outputs)
    program = "/workspace/output/logs/r1/.files/node_mpi_gate.py"
    run_dir = "/workspace/output/logs/r1/node-080"
    assert command[:5] == ("python3", program, "launch", run_dir, launch_mpirun.hostfile(topo))
    mpirun = command[5:]
    pairs = {mpirun[i]: mpirun[i + 1] for i in range(len(mpirun) - 1)}
    assert mpirun[0] == "mpirun" and "--allow-run-as-root" in mpirun and "--leave-session-attached" in mpirun
    assert (pairs["--hostfile"], pairs["-np"], pairs["--map-by"]) == (f"{run_dir}/hostfile", "4", "slot")
    mca = {mpirun[i + 1]: mpirun[i + 2] for i in range(len(mpirun) - 2) if mpirun[i] == "--mca"}
    assert mca == {"plm": "rsh", "plm_rsh_agent": f"python3 {program} agent", "plm_rsh_no_tree_spawn": "1",
                   "btl": "tcp,self", "btl_tcp_if_include": "eth0", "oob_tcp_if_include": "eth0"}
    assert [mpirun[i + 1] for i in range(len(mpirun) - 1) if mpirun[i] == "-x"] == ["MASTER_ADDR", "MASTER_PORT"]
    rank = mpirun.index("rank")
    assert mpirun[rank - 2:rank + 3] == ("python3", program, "rank", "/workspace/output/logs/r1", "r1")
    assert mpirun[rank + 3:] == ("python3",) + argv  # the script under job.python, its argv byte for byte


def test_every_other_node_runs_the_gate_on_its_plan_address_and_every_node_gets_the_runs_secret():
    inv, topo = _mpirun()
    command = launchers.node_command(inv, topo, topo.nodes[1], "r1", ("x",), inv.job.outputs)
    assert command[2:] == ("gate", "172.31.0.82", "29514", "node-080", "90",
                           "/workspace/output/logs/r1/node-082/r1_mpirun/attempt_0")
    env = dict(launchers.node_env(inv, topo, topo.nodes[1], "r1"))
    assert {k: env[k] for k in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CLUSTERCTL_MPI_GATE_PORT")} == {
        "NODE_RANK": "1", "MASTER_ADDR": "172.31.0.80", "MASTER_PORT": "29511", "CLUSTERCTL_MPI_GATE_PORT": "29514"}
    assert env["CLUSTERCTL_MPI_SECRET"] == dict(launchers.node_env(inv, topo, topo.nodes[0], "r1"))["CLUSTERCTL_MPI_SECRET"]
    assert env["CLUSTERCTL_MPI_SECRET"] != dict(launchers.node_env(inv, topo, topo.nodes[1], "r2"))["CLUSTERCTL_MPI_SECRET"]
    assert not any(env["CLUSTERCTL_MPI_SECRET"] in part for part in command)
    assert launchers.shipped(inv) == {"node_mpi_gate.py": GATE.read_bytes(),  # and the paths it imports beside it
                                      "layout.py": GATE.with_name("layout.py").read_bytes(),
                                      "listener.py": GATE.with_name("listener.py").read_bytes()}
    assert launchers.shipped(two_node_inventory()) == {}


def test_an_outputs_path_that_open_mpi_would_split_is_refused_with_one_clear_error():
    from dataclasses import replace

    from clusterctl.errors import UsageError

    inv, topo = _mpirun()
    for outputs in ("/work space/out", "/a:b"):
        spaced = replace(inv, job=replace(inv.job, outputs=outputs))
        with pytest.raises(UsageError, match="splits on"):
            launchers.node_command(spaced, topo, topo.nodes[0], "r1", ("x.py",), outputs)


def test_a_ranks_env_maps_open_mpis_variables_to_torchs_and_drops_the_secret():
    env = gate.rank_env({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                         "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "NODE_RANK": "1", gate.SECRET_VAR: "s", gate.KEYFILE_VAR: "f"})
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")} == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1"}
    assert gate.SECRET_VAR not in env and gate.KEYFILE_VAR not in env


# --------------------------------------------------------------------------- the gate's handshake


def _handshake(agent_side, timeout=5.0):
    """receive_command on one end of a socket pair while `agent_side(sock)` plays the agent."""
    ours, theirs = socket.socketpair()
    player = threading.Thread(target=agent_side, args=(theirs,), daemon=True)
    player.start()
    try:
        return gate.receive_command(ours, KEY, timeout=timeout)
    finally:
        ours.close()
        player.join(5)
        theirs.close()


def _quietly(action):
    def play(sock):
        try:
            action(sock)
        except OSError:
            pass
    return play


def test_the_gate_takes_the_command_of_a_peer_that_holds_the_secret():
    assert _handshake(_quietly(lambda s: gate.send_command(s, KEY, b"orted -mca ess env"))) == b"orted -mca ess env"


def test_the_gate_refuses_a_peer_with_another_secret():
    with pytest.raises(PermissionError):
        _handshake(_quietly(lambda s: gate.send_command(s, b"not the key", b"orted")))


def test_the_gate_refuses_an_oversized_command_before_reading_it():
    def oversized(sock):
        gate.read_line(sock, time.monotonic() + 5)
        sock.sendall(b"00 %d\n" % (gate.MAX_COMMAND + 1))
    with pytest.raises(ValueError, match="at most"):
        _handshake(_quietly(oversized))


def test_the_gate_drops_a_peer_that_says_nothing():
    with pytest.raises(TimeoutError):
        _handshake(_quietly(lambda s: s.recv(100) and s.recv(100)), timeout=0.3)


@settings(max_examples=examples(60), deadline=None)
@given(st.binary(max_size=400))
def test_no_request_without_the_secrets_proof_gets_a_command_run(request):
    def send(sock):
        gate.read_line(sock, time.monotonic() + 5)
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
    with pytest.raises((PermissionError, ValueError, TimeoutError, ConnectionError)):
        _handshake(_quietly(send), timeout=2.0)
