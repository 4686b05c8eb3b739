"""Checkpoint replicas between nodes with no shared filesystem (issue 50), on loopback: three "nodes"
(127.0.0.1-3, each its own run dir and its own checkpoint dir), real Replicators (node/checkpoint_replica.py)
over real sockets. A plain job's per-rank shards are copied to the next node, pruned to `keep`, restored
on a spare as the union of every owner's files; the faults (an unsigned request, a peer's full disk, a
copy cut mid-way, a replica that differs in size or content, a link or never-completed step) are each
an event, and nothing half-copied is ever a step."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from clusterctl.node import checkpoint_copies, checkpoint_replica, checkpoint_wire as wire
from clusterctl_helpers import wait_until
from clusterctl_helpers import free_port

HOSTS = {"n1": "127.0.0.1", "n2": "127.0.0.2", "n3": "127.0.0.3"}
SECRET = "s" * 64  # the run's secret: the controller's; each node's config holds its pair keys only


def _free_port() -> int:
    return free_port()  # tests/clusterctl_helpers.py: below the ephemeral range


@pytest.fixture
def nodes(tmp_path):
    port = _free_port()
    made = {}

    def node(host, active=("n1", "n2"), replicas=1, keep=2):
        run_dir = tmp_path / host / "run"
        run_dir.mkdir(parents=True, mode=0o700)
        config = {"replica_keys": wire.pair_keys(SECRET, host, HOSTS), "run_id": "RUN1", "host": host,
                  "port": port - wire.PORT_OFFSET + 1,
                  "heal": {"addresses": HOSTS, "active": list(active),
                           "checkpoint": {"dir": str(tmp_path / host / "ckpt"), "complete": "COMPLETE",
                                          "replicas": replicas, "keep": keep}}}
        made[host] = checkpoint_replica.Replicator(str(run_dir), config, say=lambda line: None).start()
        made[host]._config = config  # an attempt's replica.json is the same shape (test of the wrapper's copier)
        return made[host]

    yield node, tmp_path
    for replicator in made.values():
        replicator.stop()


def _save(root: Path, step: int, ranks: tuple, complete=True):
    """What a plain job's ranks write on their node: their own shard, then (the last) the marker."""
    where = root / f"step-{step}"
    where.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        (where / f"shard-{rank}.pt").write_bytes(os.urandom(1000 + rank) + bytes([step]))
    if complete:
        (where / "COMPLETE").write_text("")


def _held(tmp_path, host, owner):
    where = tmp_path / host / "ckpt" / ".clusterctl-replicas" / "RUN1" / owner
    return sorted(p.name for p in where.iterdir() if not p.name.startswith(".")) if where.is_dir() else []


def test_each_new_complete_step_reaches_the_next_node_and_old_ones_are_pruned(nodes):
    node, tmp = nodes
    n1, n2 = node("n1"), node("n2")
    for step in (1, 2, 3):
        _save(tmp / "n1" / "ckpt", step, (0,))
        _save(tmp / "n2" / "ckpt", step, (1,))
        wait_until(lambda: f"step-{step}" in _held(tmp, "n2", "n1") and f"step-{step}" in _held(tmp, "n1", "n2"),
                   30, what=f"step-{step} replicated")
    assert _held(tmp, "n2", "n1") == ["step-2", "step-3"]  # keep: 2
    copy = tmp / "n2" / "ckpt" / ".clusterctl-replicas" / "RUN1" / "n1" / "step-3"
    assert (copy / "shard-0.pt").read_bytes() == (tmp / "n1" / "ckpt" / "step-3" / "shard-0.pt").read_bytes()
    assert json.loads((copy / wire.MANIFEST).read_text())[0][0] in ("COMPLETE", "shard-0.pt")
    assert n1.summary()["held"] == {"n2": ["step-2", "step-3"]} and n2.summary()["own"][-1] == "step-3"


def test_a_spare_restores_the_union_of_the_newest_step_complete_across_the_survivors(nodes):
    node, tmp = nodes
    n1, n2 = node("n1"), node("n2")
    for step in (1, 2):
        _save(tmp / "n1" / "ckpt", step, (0,))
        _save(tmp / "n2" / "ckpt", step, (1,))
    wait_until(lambda: "step-2" in _held(tmp, "n1", "n2") and "step-2" in _held(tmp, "n2", "n1"), 30)
    _save(tmp / "n1" / "ckpt", 3, (0,))  # n2 is lost before its step-3: step-3 is incomplete across the fleet
    n2.stop()
    holdings = {"n1": n1.summary()}
    step, sources = checkpoint_copies.choose(holdings, ["n1", "n2"], ["n1", "n3"])
    assert step == "step-2" and sources == {"n1": ["n1"], "n2": ["n1"]}
    n3 = node("n3", active=("n1", "n3"))
    result = n3.restore(2, step, sources)
    assert result["ok"], result
    got = sorted(p.name for p in (tmp / "n3" / "ckpt" / "step-2").iterdir())
    assert got == ["COMPLETE", "shard-0.pt", "shard-1.pt"]
    assert ((tmp / "n3" / "ckpt" / "step-2" / "shard-1.pt").read_bytes()
            == (tmp / "n2" / "ckpt" / "step-2" / "shard-1.pt").read_bytes())
    assert n1.restore(2, step, sources)["ok"] and (tmp / "n1" / "ckpt" / "step-2" / "shard-1.pt").exists()


def test_a_replica_that_differs_in_size_or_content_is_refused_and_said(nodes):
    node, tmp = nodes
    n1, n2 = node("n1"), node("n2")
    _save(tmp / "n1" / "ckpt", 1, (0,))
    wait_until(lambda: "step-1" in _held(tmp, "n2", "n1"), 30)
    n1.stop()
    shard = tmp / "n2" / "ckpt" / ".clusterctl-replicas" / "RUN1" / "n1" / "step-1" / "shard-0.pt"
    shard.write_bytes(shard.read_bytes() + b"x")
    n3 = node("n3", active=("n2", "n3"))
    result = n3.restore(2, "step-1", {"n1": ["n2"]})
    assert not result["ok"] and "size_mismatch" in {e["kind"] for e in n3.summary()["events"]}
    shard.write_bytes(b"y" * (len(shard.read_bytes()) - 1))
    result = n3.restore(2, "step-1", {"n1": ["n2"]})
    assert not result["ok"] and "checksum_mismatch" in {e["kind"] for e in n3.summary()["events"]}
    assert not (tmp / "n3" / "ckpt" / "step-1" / "COMPLETE").exists()  # never a step
    assert not [p for p in (tmp / "n3" / "ckpt" / "step-1").iterdir() if p.name.endswith(".part")]


def test_a_peer_with_a_full_disk_keeps_its_older_replica_and_says_so(nodes, monkeypatch):
    node, tmp = nodes
    n1, n2 = node("n1"), node("n2")
    _save(tmp / "n1" / "ckpt", 1, (0,))
    wait_until(lambda: "step-1" in _held(tmp, "n2", "n1"), 30)
    monkeypatch.setattr(wire, "RESERVE", 1 << 62)  # no disk has that much free
    _save(tmp / "n1" / "ckpt", 2, (0,))
    wait_until(lambda: any(e["kind"] == "disk_full" for e in n2.summary()["events"]), 30)
    assert _held(tmp, "n2", "n1") == ["step-1"]
    # n1 hears it in n2's answer, after n2 has recorded it: on a loaded machine a moment later
    wait_until(lambda: any(e["kind"] == "disk_full" and e["peer"] == "n2" for e in n1.summary()["events"]), 30,
               what="n1's disk_full event naming n2")


def test_an_unsigned_request_and_a_copy_cut_midway_write_nothing(nodes):
    node, tmp = nodes
    n2 = node("n2")
    with socket.create_connection((HOSTS["n2"], n2.port)) as conn:
        conn.sendall(b"00" * 32 + b' {"op":"put"}\n')
        conn.recv(100)
    files = [["shard-0.pt", 10_000, "0" * 64]]
    ask = {"op": "put", "run": "RUN1", "from": "n1", "owner": "n1", "step": "step-5", "files": files,
           "at": __import__("time").time(), "nonce": "ab" * 12}
    key = wire.pair_key(SECRET, "n1", "n2")
    with socket.create_connection((HOSTS["n2"], n2.port), source_address=(HOSTS["n1"], 0)) as conn:
        conn.sendall(wire.frame(key, ask))
        first = wire.unframe(key, conn.recv(4096))
        assert first["send"] is True
        conn.sendall(b"z" * 100)  # then the sender's node is cut
    with socket.create_connection((HOSTS["n2"], n2.port), source_address=(HOSTS["n1"], 0)) as conn:  # sent again
        conn.sendall(wire.frame(key, ask))
        again = wire.unframe(key, conn.recv(4096))
        assert again["ok"] is False and "replayed" in again["says"]
    wait_until(lambda: "lost_mid_copy" in {e["kind"] for e in n2.summary()["events"]}, 30)
    assert "refused" in {e["kind"] for e in n2.summary()["events"]}
    assert _held(tmp, "n2", "n1") == [] and not list((tmp / "n2" / "ckpt" / ".clusterctl-replicas" / "RUN1" / "n1").iterdir())


def test_a_linked_checkpoint_dir_and_a_step_that_never_completes_are_said_and_not_copied(nodes, tmp_path):
    node, tmp = nodes
    elsewhere = tmp_path / "elsewhere"
    _save(elsewhere, 1, (0,))
    (tmp / "n1").mkdir()
    (tmp / "n1" / "ckpt").symlink_to(elsewhere)
    n1 = node("n1")
    wait_until(lambda: any("symbolic link" in e["says"] for e in n1.summary()["events"]), 30)
    assert n1.summary()["own"] == []
    n2 = node("n2", active=("n2", "n1"))
    _save(tmp / "n2" / "ckpt", 1, (1,), complete=False)
    _save(tmp / "n2" / "ckpt", 2, (1,))
    wait_until(lambda: any(e["kind"] == "incomplete" and e["step"] == "step-1" for e in n2.summary()["events"]), 30)
    # a step the job prunes (its marker gone first, as rmtree may take it) is no step that never completed
    _save(tmp / "n2" / "ckpt", 3, (1,))
    (tmp / "n2" / "ckpt" / "step-2" / "COMPLETE").unlink()
    shutil.rmtree(tmp / "n2" / "ckpt" / "step-2")
    # the sender's scans went past it: step-3 was offered to n1 (whose linked dir refuses it)
    wait_until(lambda: any(e["step"] == "step-3" for e in n2.summary()["events"]), 30, what="step-3 offered")
    assert not any(e["kind"] == "incomplete" and e["step"] == "step-2" for e in n2.summary()["events"])


def test_a_crowd_of_idle_connections_from_a_peers_own_address_does_not_keep_its_copy_out(nodes):
    """The replica receiver is a node port like the supervisor's (issue 47, node/listener.py): a crowd from
    n1's own address, holding idle connections and reopening each one dropped, never refuses n1's signed copy."""
    import threading

    node, tmp = nodes
    n2 = node("n2")
    crowd, done = [None] * 8, threading.Event()

    def hold():
        while not done.is_set():
            for i, conn in enumerate(crowd):
                if conn is None:
                    conn = socket.socket()
                    conn.bind((HOSTS["n1"], 0))
                    try:
                        conn.connect((HOSTS["n2"], n2.port))
                    except OSError:
                        conn.close()
                        continue
                    conn.setblocking(False)
                    crowd[i] = conn
                try:
                    if conn.recv(1) == b"":  # dropped by the receiver: come back at once
                        conn.close()
                        crowd[i] = None
                except BlockingIOError:
                    pass
                except OSError:
                    conn.close()
                    crowd[i] = None
            done.wait(0.02)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        wait_until(lambda: len([c for c in crowd if c is not None]) >= 8, 10, what="the crowd connected")
        n1 = node("n1")
        _save(tmp / "n1" / "ckpt", 1, (0,))
        wait_until(lambda: "step-1" in _held(tmp, "n2", "n1"), 30, what="n1's step copied past the crowd")
    finally:
        done.set()
        holder.join(5)
        for conn in crowd:
            if conn is not None:
                conn.close()


def test_a_node_cannot_forge_another_nodes_copy_with_its_own_keys_nor_from_its_own_address(nodes):
    """Issue 47: the replicas' keys are per pair of nodes (checkpoint_wire.pair_key), so n3 (its job reads its
    config: its keys with n1 and n2) cannot put a step as n1 on n2; n1's key with n2, taken to n3, is refused
    from n3's address; the run's secret is in no node's config."""
    node, tmp = nodes
    n2 = node("n2")
    assert "s" * 64 not in json.dumps(n2.keys) and set(n2.keys) == set(HOSTS)
    files = [["shard-0.pt", 4, "0" * 64]]

    def put(key, source, **more):
        ask = {"op": "put", "run": "RUN1", "from": "n1", "owner": "n1", "step": "step-7", "files": files,
               "at": __import__("time").time(), "nonce": os.urandom(12).hex(), **more}
        with socket.create_connection((HOSTS["n2"], n2.port), source_address=(source, 0)) as conn:
            conn.sendall(wire.frame(key, ask))
            conn.settimeout(10)
            return conn.recv(4096)

    n3_keys = wire.pair_keys("s" * 64, "n3", HOSTS)
    assert put(n3_keys["n2"], HOSTS["n3"]) == b""  # signed with n3's key, claiming n1: unproven, no answer at all
    stolen = wire.pair_key("s" * 64, "n1", "n2")
    answered = wire.unframe(stolen, put(stolen, HOSTS["n3"]))
    assert answered["ok"] is False and "the address of n3" in answered["says"], answered
    wait_until(lambda: sum(e["kind"] == "refused" for e in n2.summary()["events"]) >= 2, 30)
    assert _held(tmp, "n2", "n1") == []
    assert wire.unframe(stolen, put(stolen, HOSTS["n1"]))["send"] is True  # the real n1, from its own address
def _wrapper(tmp: Path, host: str, config: dict, job: str) -> subprocess.Popen:
    """The ranks' wrapper of an attached attempt on `host` (plan/wrapper.py, run as a node runs it), with the
    copier shipped in the run's files dir and `config` as its replica.json; `job` the ranks' shell command."""
    from clusterctl.plan import wrapper
    from clusterctl.plan.launch_plan import REPLICA_PROGRAMS
    from clusterctl.node import program

    files = tmp / "logs" / ".files"
    files.mkdir(parents=True, exist_ok=True)
    for name in REPLICA_PROGRAMS:
        (files / name).write_bytes(program(name).read_bytes())
    run_dir = tmp / "logs" / host
    run_dir.mkdir(mode=0o700)
    (run_dir / "env").write_text(f"CKPT={config['heal']['checkpoint']['dir']}\n")
    (run_dir / "replica.json").write_text(json.dumps(config))
    os.chmod(run_dir / "replica.json", 0o600)
    return subprocess.Popen(["sh", "-c", wrapper.WRAPPER, "clusterctl-wrapper", str(run_dir), "15", "", sys.executable,
                             "", "", "sh", "-c", job])


def test_an_attached_attempts_wrapper_restores_before_its_ranks_start_and_refuses_to_start_them_without(nodes):
    """The copier an attached run's wrapper hosts (node/node_replica.py): attempt 2 on n1 and the spare n3
    after n2 was lost; each restores the union of step-2 (n2's shard from its replica on n1) before its
    ranks start, and keeps copying while they run. A step no survivor holds: no rank starts, exit 1, said."""
    node, tmp = nodes
    n1, n2 = node("n1"), node("n2")
    for step in (1, 2):
        _save(tmp / "n1" / "ckpt", step, (0,))
        _save(tmp / "n2" / "ckpt", step, (1,))
    wait_until(lambda: "step-2" in _held(tmp, "n1", "n2"), 30, what="n2's step-2 on n1")
    n1.stop(), n2.stop()
    from local.test_healing import _listing  # what the controller reads of each host (the `checkpoints` operation)

    held = {"n1": _listing(tmp / "n1" / "ckpt", run_id="RUN1"), "n3": {"own": [], "held": {}}}
    assert held["n1"]["own"] == ["step-1", "step-2"] and held["n1"]["held"]["n2"][-1] == "step-2"
    step, sources = checkpoint_copies.choose(held, ["n1", "n2"], ["n1", "n3"])
    order = {"step": step, "sources": sources}
    configs, port = {}, _free_port() - wire.PORT_OFFSET + 1  # a port of its own: n1's stopped one may linger
    for host in ("n1", "n3"):
        config = {**json.loads(json.dumps(n1.__dict__["_config"])), "port": port}
        config["heal"]["checkpoint"]["dir"] = str(tmp / host / "ckpt")
        configs[host] = {**config, "host": host, "attempt": 2, "restore": order,
                         "replica_keys": wire.pair_keys(SECRET, host, HOSTS),
                         "heal": {**config["heal"], "active": ["n1", "n3"]}}
    # as ranks do, each waits for its peer (a rendezvous): a survivor's copier serves until the spare restored
    job = f'ls "$CKPT/step-2" > "$CKPT/../seen"; while [ ! -e {tmp}/n1/seen ] || [ ! -e {tmp}/n3/seen ]; do sleep 0.1; done'
    ran = [_wrapper(tmp / "attempt-2", host, configs[host], job) for host in ("n1", "n3")]
    assert [p.wait(60) for p in ran] == [0, 0]
    for host in ("n1", "n3"):
        assert (tmp / host / "seen").read_text().split() == ["COMPLETE", "shard-0.pt", "shard-1.pt"], host
        assert (tmp / "attempt-2" / "logs" / host / "agent.exit").read_text().strip() == "0"
    assert ((tmp / "n3" / "ckpt" / "step-2" / "shard-1.pt").read_bytes()
            == (tmp / "n2" / "ckpt" / "step-2" / "shard-1.pt").read_bytes())
    lost = {**configs["n3"], "restore": {"step": "step-9", "sources": {"n2": ["n3"]}}}  # held nowhere
    failed = _wrapper(tmp / "attempt-3", "n3", lost, 'touch "$CKPT/../ran"')
    assert failed.wait(60) == 1 and not (tmp / "n3" / "ran").exists()
    run_dir = tmp / "attempt-3" / "logs" / "n3"
    assert (run_dir / "agent.exit").read_text().strip() == "1"
    assert "no rank started: the restore of step-9 failed: n3: n3 holds no replica of n2's step-9" in (
        run_dir / "agent.log").read_text()
