"""Reliability of `up` (and `check`) on the rehearsal cluster: real faults (sshd stopped, a link
cut mid-pull, dockerd stopped, the registry down, a rebooted node), SIGINT/SIGTERM during pull,
container start and checks, and two `up`s at once. Each case asserts a clear error, a bounded
time, nothing left behind (no half-created container, no orphan listener) and that the next
`up` works without --force; each records its row of docs/reliability.md."""
from __future__ import annotations

import os
import signal
import time

import pytest

from clusterctl_helpers import REPO, Cli, container_of, docker_client, processes_with, variant, wait_until
from reliability import Watched, slow_link

DROP_FROM_NODE3 = ["INPUT", "-p", "tcp", "--dport", "29500", "-s", "198.19.0.13", "-j", "DROP"]  # the fabric

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

NODES = ("node1", "node2", "node3")
CONNECT_TIMEOUT = 3
BIG_TAG = "rel-big"  # the base image plus 32 MiB of random bytes: a pull that takes a while on a slow link
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


@pytest.fixture(scope="module")
def cli(sandbox, tmp_path_factory):
    cli = Cli(tmp_path_factory.mktemp("rel-up-state"))
    yield cli
    cli.json("down", "-i", str(sandbox.inventory_path))  # the next module starts from no container


@pytest.fixture(scope="module")
def base(sandbox, cli, tmp_path_factory):
    """The sandbox inventory with a short connect timeout, its containers up."""
    path = variant(sandbox, tmp_path_factory.mktemp("rel-up") / "base.yaml",
                   lambda d: d["ssh"].update(connect_timeout=CONNECT_TIMEOUT))
    code, doc = cli.json("up", str(path))
    assert code == 0, doc
    return path


@pytest.fixture(scope="module")
def big(sandbox, tmp_path_factory):
    """(inventory, image) of a container `cc-rel-big` running the big image."""
    repository = sandbox.image.rsplit(":", 1)[0]
    image = f"{repository}:{BIG_TAG}"
    sandbox.push_image(image, {"/opt/blob.bin": os.urandom(32 << 20)})

    def change(doc):
        doc["ssh"]["connect_timeout"] = CONNECT_TIMEOUT
        doc["container"].update(image=image, name="cc-rel-big")

    return variant(sandbox, tmp_path_factory.mktemp("rel-big") / "big.yaml", change), image


def _forget(sb, image: str, container: str) -> None:
    """Neither `image` nor `container` on any node: the next `up` pulls and creates."""
    import docker

    for node in NODES:
        client = docker_client(sb, node)
        try:
            try:
                client.containers.get(container).remove(force=True)
            except docker.errors.NotFound:
                pass
            try:
                client.images.remove(image, force=True)
            except docker.errors.ImageNotFound:
                pass
        finally:
            client.close()


def _has_image(sb, node: str, image: str) -> bool:
    import docker

    client = docker_client(sb, node)
    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False
    finally:
        client.close()


def _statuses(doc: dict) -> dict:
    return {name: entry["status"] for name, entry in doc["hosts"].items()}


def _only_complete_containers(sb, name: str, shared_outputs) -> dict:
    """{node: state} of container `name`: each absent, or created with clusterctl's full configuration."""
    states = {}
    for node in NODES:
        container = container_of(sb, node, name)
        if container is None:
            states[node] = "absent"
            continue
        labels, host_config = container.labels, container.attrs["HostConfig"]
        assert labels.get("clusterctl.managed") == "true" and len(labels.get("clusterctl.config-hash", "")) == 16, labels
        assert host_config["NetworkMode"] == "host" and f"{shared_outputs}:/workspace/output" in host_config["Binds"]
        states[node] = container.status
    return states


def _listener_on(sb, node: str, port: int = 29500) -> str:
    return sb.ns_exec(node, ["ss", "-Hltn", f"sport = :{port}"]).stdout.strip()


# --------------------------------------------------------------------------- faults


def test_a_node_unreachable_at_up_is_named_while_the_others_proceed_and_a_later_up_completes_only_it(
        sandbox, cli, base, reliability):
    row = reliability("a node unreachable at `up` (its sshd stopped)",
                      "the others proceed; that node `unreachable` within ssh.connect_timeout; exit 3; "
                      "a later `up` completes that node only (the others `ok`)", section="Faults")
    client = docker_client(sandbox, "node2")
    try:
        client.containers.get("cc-sandbox").remove(force=True)  # node2 is missing its container, like a new node
    finally:
        client.close()
    sandbox.stop_sshd("node2")
    try:
        started = time.monotonic()
        code, doc = cli.json("up", str(base))
        elapsed = time.monotonic() - started
    finally:
        sandbox.start_sshd("node2")
    node2 = doc["hosts"]["node2"]
    assert code == 3 and doc["ok"] is False, doc
    assert node2["status"] == "unreachable" and "198.18.0.12" in node2["detail"], node2
    assert node2["duration_s"] <= CONNECT_TIMEOUT + 1
    assert {n: s for n, s in _statuses(doc).items() if n != "node2"} == {"node1": "ok", "node3": "ok"}
    assert container_of(sandbox, "node2", "cc-sandbox") is None

    code, again = cli.json("up", str(base))
    assert code == 0, again
    assert _statuses(again) == {"node1": "ok", "node2": "changed", "node3": "ok"}
    assert container_of(sandbox, "node2", "cc-sandbox").status == "running"
    row.observe(f"exit 3 after {elapsed:.1f} s; node2 `unreachable` in {node2['duration_s']:.1f} s "
                f"({node2['detail'].split(' (fix:')[0]}); node1, node3 `ok`. Next `up`: exit 0, node2 `changed` "
                "(container created), node1, node3 `ok`", seconds=node2["duration_s"])


def test_a_link_cut_mid_pull_makes_that_node_unreachable_in_bounded_time_and_leaves_no_container(
        sandbox, cli, base, big, reliability):
    row = reliability("a node's network cut in the middle of the image pull",
                      "that node `unreachable` within ~25 s (dead-peer detection), the others' containers start, "
                      "exit 3, no half-created container on that node", section="Faults")
    inventory, image = big
    _forget(sandbox, image, "cc-rel-big")
    proc = cut = None
    try:
        with slow_link(sandbox, "node3"):
            proc = cli.popen("up", str(inventory))
            wait_until(lambda: _has_image(sandbox, "node1", image) and _has_image(sandbox, "node2", image), 60,
                       what="node1 and node2 to finish their pull")
            assert not _has_image(sandbox, "node3", image), "node3's pull was not slow enough to be cut"
            sandbox.cut_network("node3")
            cut = time.monotonic()
            code, doc, _ = Cli.finish(proc, timeout=90)
            after_cut = time.monotonic() - cut
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        sandbox.restore_network("node3")
    node3 = doc["hosts"]["node3"]
    assert code == 3, doc
    assert node3["status"] == "unreachable" and "198.19.0.13" in node3["detail"], node3
    assert after_cut < 45, f"exited {after_cut:.1f} s after the cut"
    assert {n: s for n, s in _statuses(doc).items() if n != "node3"} == {"node1": "changed", "node2": "changed"}
    assert container_of(sandbox, "node3", "cc-rel-big") is None
    assert {n: container_of(sandbox, n, "cc-rel-big").status for n in ("node1", "node2")} == {
        "node1": "running", "node2": "running"}
    code, _ = cli.json("down", "-i", str(inventory))
    assert code == 0
    row.observe(f"exit 3, {after_cut:.1f} s after the cut (node1, node2 finished meanwhile); node3 `unreachable`: "
                f"{node3['detail'][:110]}; no cc-rel-big container on node3", seconds=after_cut)


def test_the_registry_down_at_pull_time_fails_the_pull_naming_the_registry(sandbox, cli, base, tmp_path, reliability):
    from clusterctl.sandbox import registry

    row = reliability("the image registry down when `up` pulls",
                      "the pull fails on every node with an error naming the registry and the fix; no container", section="Faults")
    repository = sandbox.image.rsplit(":", 1)[0]
    image = f"{repository}:rel-regdown"
    sandbox.push_image(image, {"/etc/rel-regdown": b"x\n"})
    inventory = variant(sandbox, tmp_path / "regdown.yaml",
                        lambda d: d["container"].update(image=image, name="cc-rel-regdown"))
    registry.stop(sandbox.layout)
    try:
        started = time.monotonic()
        code, doc = cli.json("up", str(inventory))
        elapsed = time.monotonic() - started
    finally:
        registry.start(sandbox.layout)
    assert code == 1 and _statuses(doc) == {n: "failed" for n in NODES}, doc
    for name, entry in doc["hosts"].items():  # the pull check, before anything is stopped, names the node
        assert f"registry {sandbox.registry} is not reachable from {name}" in entry["detail"], entry
        assert "container.pull: never" in entry["detail"]
    assert all(container_of(sandbox, n, "cc-rel-regdown") is None for n in NODES)
    row.observe(f"exit 1 in {elapsed:.1f} s; every node `failed`: {doc['hosts']['node1']['detail'][:150]}...",
                seconds=max(e["duration_s"] for e in doc["hosts"].values()))


def test_dockerd_stopped_is_named_by_up_and_check_and_after_the_reboot_run_says_to_run_up(
        sandbox, cli, base, tmp_path, reliability):
    docker_row = reliability("dockerd stopped on one node",
                             "`up` and `check` name the node and the cause (Docker engine not reachable) with the "
                             "fix; the other nodes are fine", section="Faults")
    reboot_row = reliability("a node rebooted between `up` and `run` (dockerd restarted, so its container stopped; "
                             "sshd restarted)", "`run` notices the stopped container, names the node, says to run "
                             "`up`; exit non-zero; nothing launched; the next `up` restarts the container", section="Faults")
    sandbox.stop_dockerd("node3")
    try:
        started = time.monotonic()
        code, doc = cli.json("up", str(base))
        up_s = time.monotonic() - started
        check_code, checks = cli.json("check", "-i", str(base))
    finally:
        sandbox.start_dockerd("node3")  # its container stays stopped: a rebooted node
        sandbox.stop_sshd("node3")
        sandbox.start_sshd("node3")
    node3 = doc["hosts"]["node3"]
    assert code == 1 and node3["status"] == "failed", doc
    assert node3["detail"].startswith("docker engine not reachable on node3:"), node3
    assert "Cannot connect to the Docker daemon" in node3["detail"] and "systemctl enable --now docker" in node3["detail"]
    assert {n: s for n, s in _statuses(doc).items() if n != "node3"} == {"node1": "ok", "node2": "ok"}
    docker_check = next(c for c in checks["checks"] if c["host"] == "node3" and c["check"] == "docker")
    assert check_code == 1 and docker_check["status"] == "fail"
    assert "Docker engine not usable" in docker_check["detail"] and "systemctl enable --now docker" in docker_check["fix"]
    container_check = next(c for c in checks["checks"] if c["host"] == "node3" and c["check"] == "container")
    assert "engine on node3 is not reachable" in container_check["detail"], container_check
    docker_row.observe(f"`up`: exit 1 in {up_s:.1f} s, node3 `failed`: {node3['detail'][:100]}...; `check`: exit 1, "
                       f"docker fail '{docker_check['detail'][:60]}...', fix '{docker_check['fix']}'",
                       seconds=node3["duration_s"])

    prompt = tmp_path / "prompt.txt"
    prompt.write_text("a cat\n")
    logs = sandbox.shared_outputs / "logs"
    before = set(os.listdir(logs)) if logs.is_dir() else set()
    started = time.monotonic()
    code, doc = cli.json("run", "-i", str(base), str(prompt))
    elapsed = time.monotonic() - started
    assert code == 1 and doc["ok"] is False and doc["exit_code"] is None, doc
    assert list(doc["hosts"]) == ["node3"]
    node3 = doc["hosts"]["node3"]
    assert node3["status"] == "failed" and "container cc-sandbox is exited on node3" in node3["detail"]
    assert "run `clusterctl up`" in node3["detail"]
    assert (set(os.listdir(logs)) if logs.is_dir() else set()) == before  # no run directory: nothing launched
    assert not [p for p in processes_with("CLUSTERCTL_CLUSTER=sandbox") if "pytest" not in p[1]]

    code, again = cli.json("up", str(base))
    assert code == 0 and _statuses(again) == {"node1": "ok", "node2": "ok", "node3": "changed"}, again
    assert "started the stopped container" in again["hosts"]["node3"]["detail"]
    reboot_row.observe(f"exit 1 in {elapsed:.1f} s: {node3['detail']}; no run directory, no rank; next `up`: exit 0, "
                       "node3 `changed` (started the stopped container)", seconds=elapsed)


# --------------------------------------------------------------------------- interrupts


def _interrupt_up_when(cli, inventory, ready, signum) -> tuple[int, float, str]:
    """Start `up`, wait for `ready()`, send `signum`: (exit code, seconds to exit, stderr)."""
    watched = Watched(cli.popen("up", str(inventory), json_output=False))
    try:
        wait_until(ready, 60, interval=0.02, what="the moment to interrupt")
        code, took = watched.signal_and_wait(signum)
    finally:
        watched.kill()
    return code, took, watched.stderr


def test_an_interrupted_pull_stops_at_once_leaves_no_container_and_the_next_up_works(sandbox, cli, base, big,
                                                                                   reliability):
    inventory, image = big
    for name, signum in SIGNALS.items():
        row = reliability(f"{name} to `up` during the image pull",
                          "exit 130 within 5 s (not once the pull ends); no container anywhere; the next `up` "
                          "works without --force", section="Interrupts")
        _forget(sandbox, image, "cc-rel-big")
        with slow_link(sandbox, "node2"):
            code, took, stderr = _interrupt_up_when(cli, inventory, lambda: _has_image(sandbox, "node1", image), signum)
            assert not _has_image(sandbox, "node2", image), "node2's pull was not slow enough to interrupt"
        assert code == 130 and "interrupted" in stderr, stderr[-2000:]
        assert took < 5, f"exited {took:.1f} s after {name}"
        assert _only_complete_containers(sandbox, "cc-rel-big", sandbox.shared_outputs) == {n: "absent" for n in NODES}
        row.observe(f"exit 130 {took:.1f} s after {name} (node1 pulled, node2 mid-pull); no container on any node",
                    seconds=took)
    code, doc = cli.json("up", str(inventory))
    assert code == 0 and _statuses(doc) == {n: "changed" for n in NODES}, doc
    row["observed"] += "; next `up`: exit 0, every node `changed`"
    cli.json("down", "-i", str(inventory))


def test_an_interrupted_container_start_leaves_only_complete_containers_and_the_next_up_works(
        sandbox, cli, base, tmp_path, reliability):
    inventory = variant(sandbox, tmp_path / "start.yaml", lambda d: d["container"].update(name="cc-rel-start"))
    for name, signum in SIGNALS.items():
        row = reliability(f"{name} to `up` while it creates and starts the containers",
                          "exit 130 within 5 s; each node has no container or a complete one (clusterctl's labels "
                          "and configuration); the next `up` works without --force", section="Interrupts")
        cli.json("down", "-i", str(inventory))
        code, took, stderr = _interrupt_up_when(
            cli, inventory, lambda: any(container_of(sandbox, n, "cc-rel-start") for n in NODES), signum)
        assert code == 130 and "interrupted" in stderr, stderr[-2000:]
        assert took < 5
        states = _only_complete_containers(sandbox, "cc-rel-start", sandbox.shared_outputs)
        assert set(states.values()) - {"absent"}, states  # interrupted once a container existed
        row.observe(f"exit 130 {took:.1f} s after {name}, sent once the first container existed; then "
                    f"{', '.join(f'{n} {s}' for n, s in states.items())} (all complete)", seconds=took)
    code, doc = cli.json("up", str(inventory))
    assert code == 0, doc
    assert {n: container_of(sandbox, n, "cc-rel-start").status for n in NODES} == {n: "running" for n in NODES}
    row["observed"] += f"; next `up`: exit 0 ({', '.join(f'{n} {s}' for n, s in _statuses(doc).items())})"
    cli.json("down", "-i", str(inventory))


def test_an_interrupted_preflight_leaves_no_listener_on_the_rendezvous_port(sandbox, cli, base, reliability):
    # node3's connects are dropped on node1, so the probe listens for its whole time (a healthy
    # probe is over in ~0.1 s, too soon to be interrupted on purpose)
    for name, command in (("SIGINT", "check"), ("SIGTERM", "up")):
        row = reliability(f"{name} to `{command}` during the preflight checks (its rendezvous probe listening on "
                          "the master, waiting for a worker whose connects a rule drops)",
                          "exit 130 within 5 s; the probe listener gone at once (port 29500 free); "
                          "the next `up` passes every check", section="Interrupts")
        args = ("check", "-i", str(base)) if command == "check" else ("up", str(base))
        sandbox.ns_exec("node1", ["iptables", "-A", *DROP_FROM_NODE3])
        watched = Watched(cli.popen(*args, json_output=False))
        try:
            wait_until(lambda: _listener_on(sandbox, "node1"), 60, interval=0.05, what="the rendezvous probe on node1")
            code, took = watched.signal_and_wait(SIGNALS[name])
            exited = time.monotonic()
            wait_until(lambda: not _listener_on(sandbox, "node1"), 5, interval=0.05, what="port 29500 free on node1")
            freed = time.monotonic() - exited
        finally:
            watched.kill()
            sandbox.ns_exec("node1", ["iptables", "-D", *DROP_FROM_NODE3])
        assert code == 130, watched.stderr[-2000:]
        assert took < 5
        wait_until(lambda: not processes_with("import os, select, socket"), 5, interval=0.05,
                   what="the probe listener to exit")
        row.observe(f"exit 130 {took:.1f} s after {name}; port 29500 free on node1 {freed:.1f} s later", seconds=took)
    code, doc = cli.json("up", str(base))
    assert code == 0, doc
    rdzv = [c for c in doc["checks"] if c["check"].startswith("rdzv")]
    assert rdzv and {c["status"] for c in rdzv} == {"pass"}
    row["observed"] += "; next `up`: exit 0, rdzv_port_free and rdzv_reachable pass"


# --------------------------------------------------------------------------- concurrency


def test_a_second_up_meanwhile_is_refused_by_the_local_lock_and_from_elsewhere_by_the_lock_on_the_master(
        sandbox, cli, base, tmp_path, reliability):
    same = reliability("two `up`s at once from one state directory",
                       "the second refused at once (exit 2, 'already in progress', the holder's pid) by the local "
                       "lock; the first completes untouched", section="Concurrency")
    elsewhere = reliability("two `up`s at once from two state directories (two controllers)",
                            "the second refused (exit 2) by the lock on the master node, naming the holder, before "
                            "touching any node; once the first ends, `up` from the second works", section="Concurrency")
    other = Cli(tmp_path / "another-controller")
    # the first `up` holds its locks for a while: a leading task sleeps (a warm `up` is over in ~1 s)
    slow = tmp_path / "slow-up.yaml"
    slow.write_text("- name: Take a while\n  shell: sleep 6\n" + (REPO / "playbooks" / "up.yaml").read_text())
    first = Watched(cli.popen("up", "--playbook", str(slow), str(base), json_output=False))
    try:
        first.wait_for("TASK Take a while", 60)
        started = time.monotonic()
        code, doc = cli.json("up", str(base))
        refused_in = time.monotonic() - started
        assert code == 2 and "`clusterctl up` is already in progress on this cluster" in doc["error"], doc
        assert f"pid {first.proc.pid}" in doc["error"]
        same.observe(f"second: exit 2 in {refused_in:.2f} s: {doc['error']}", seconds=refused_in)

        started = time.monotonic()
        code, doc = other.json("up", str(base))
        refused_in = time.monotonic() - started
        assert code == 2 and "already in progress on this cluster from another controller" in doc["error"], doc
        assert f"(pid {first.proc.pid})" in doc["error"] and doc["where"].startswith("node1:")
        assert not list((other.state_dir / "runs").glob("up-*"))  # refused before touching any node
        elsewhere.observe(f"second: exit 2 in {refused_in:.1f} s: {doc['error'][:150]}", seconds=refused_in)
        assert first.finish(120) == 0, first.stderr[-2000:]
    finally:
        first.kill()
    same["observed"] += "; first: exit 0"
    code, again = other.json("up", str(base))
    assert code == 0 and _statuses(again) == {n: "ok" for n in NODES}, again
    elsewhere["observed"] += "; first: exit 0; then `up` from the second state dir: exit 0, all `ok`"
