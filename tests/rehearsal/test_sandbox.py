"""The rehearsal cluster is made of real parts: real sshd with strict host keys, real
Docker Engines, a real registry, a real network that can be cut."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from clusterctl_helpers import node_ssh_client, node_ssh_run
from clusterctl.sandbox import python_volumes

LISTENER = (
    "import socket,sys\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8); s.settimeout(20)\n"
    "for _ in range(int(sys.argv[3])):\n"
    "    c, _ = s.accept(); c.sendall(b'hello from ' + socket.gethostname().encode()); c.close()\n"
)
CONNECT = (
    "import socket,sys\n"
    "c=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))\n"
    "print(c.recv(64).decode())\n"
)


ssh_client, ssh_run = node_ssh_client, node_ssh_run


def listen(sb, name: str, port: int, accepts: int) -> subprocess.Popen:
    node = sb.node(name)
    server = subprocess.Popen(sb.ns_argv(name, ["python3", "-c", LISTENER, node.address, str(port), str(accepts)]))
    deadline = time.monotonic() + 10
    while sb.ns_exec(name, ["ss", "-Hltn", f"sport = :{port}"]).stdout.strip() == "":
        assert time.monotonic() < deadline, "listener did not start"
        time.sleep(0.05)
    return server


def connect(sb, from_name: str, address: str, port: int, timeout: float = 3.0):
    return sb.ns_exec(from_name, ["python3", "-c", CONNECT, address, str(port), str(timeout)], check=False,
                      timeout=timeout + 10)


def engine(sb, name: str):
    import docker

    return docker.DockerClient(base_url=sb.docker_host(name), version="auto", timeout=60)


# --------------------------------------------------------------------------- the cluster


@pytest.mark.sandbox
def test_every_node_accepts_ssh_with_strict_host_keys_and_knows_its_name(sandbox):
    for node in sandbox.nodes:
        code, out = ssh_run(sandbox, node.name, "hostname")
        assert (code, out.strip()) == (0, node.hostname)


@pytest.mark.sandbox
def test_a_node_hostname_resolves_to_loopback_like_debian(sandbox):
    node = sandbox.node("node1")
    code, out = ssh_run(sandbox, "node1", "getent hosts $(hostname)")
    assert code == 0 and out.split() == ["127.0.1.1", node.hostname, node.hostname.split(".")[0]]


@pytest.mark.sandbox
def test_ssh_sessions_use_the_node_engine_and_the_python_with_torch(sandbox):
    code, out = ssh_run(sandbox, "node3", "echo $DOCKER_HOST; docker info --format '{{.Name}}'; "
                                          "python3 -c 'import importlib.util as u; print(bool(u.find_spec(\"torch\")))'")
    assert code == 0
    assert out.split() == [sandbox.docker_host("node3"), sandbox.node("node3").hostname, "True"]


@pytest.mark.sandbox
def test_nodes_reach_each_other_over_tcp(sandbox):
    server = listen(sandbox, "node1", 29501, accepts=2)
    try:
        for client in ("node2", "node3"):
            done = connect(sandbox, client, sandbox.node("node1").address, 29501)
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith("hello from")
    finally:
        server.wait(timeout=10)


@pytest.mark.sandbox
def test_bridged_traffic_passes_even_when_forward_drops_it(sandbox):
    from clusterctl.sandbox import network

    drop = ["FORWARD", "-i", "cc-br", "-o", "cc-br", "-j", "DROP"]  # what a Docker-made DROP policy does
    node1 = sandbox.node("node1").address
    subprocess.run(["iptables", "-A", *drop], check=True)
    server = None
    try:
        server = listen(sandbox, "node1", 29502, accepts=2)
        assert connect(sandbox, "node2", node1, 29502).returncode == 0
        if Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() == "1":
            network.remove_forward_rule()  # the trap is real: without the rule, the SYN is dropped
            try:
                assert connect(sandbox, "node2", node1, 29502, timeout=1.5).returncode != 0
            finally:
                network.ensure_forward_rule()
        assert connect(sandbox, "node3", node1, 29502).returncode == 0
    finally:
        subprocess.run(["iptables", "-D", *drop], check=True)
        network.ensure_forward_rule()
        if server is not None:
            server.kill()
            server.wait(timeout=10)


@pytest.mark.sandbox
def test_taking_a_node_link_down_really_cuts_it(sandbox):
    node1 = sandbox.node("node1").address
    sandbox.ns_exec("node2", ["ip", "link", "set", "eth0", "down"])
    try:
        assert connect(sandbox, "node2", node1, 22, timeout=2).returncode != 0
        with pytest.raises(OSError):
            socket.create_connection((sandbox.node("node2").address, 22), timeout=2).close()
    finally:
        sandbox.ns_exec("node2", ["ip", "link", "set", "eth0", "up"])
    deadline = time.monotonic() + 10
    while connect(sandbox, "node2", node1, 22).returncode != 0:
        assert time.monotonic() < deadline, "node2 did not come back"
        time.sleep(0.2)


@pytest.mark.sandbox
def test_a_container_on_a_node_runs_torch_from_the_pushed_image(sandbox):
    client = engine(sandbox, "node1")
    started = time.monotonic()
    client.images.pull(sandbox.image)
    out = client.containers.run(
        sandbox.image, ["sh", "-c", "hostname; python3 -c 'import torch; print(torch.__version__)'"],
        network_mode="host", volumes=python_volumes(), remove=True)
    elapsed = time.monotonic() - started
    hostname, version = out.decode().split()
    assert hostname == sandbox.node("node1").hostname and version.split("+")[0] == __import__("torch").__version__.split("+")[0]
    assert elapsed < 15, f"container with torch took {elapsed:.1f}s"


@pytest.mark.sandbox
def test_a_variant_image_can_shadow_a_tag_on_one_node(sandbox):
    ref = f"{sandbox.registry}/sandbox/variant:1"
    sandbox.push_image(ref, {})
    engine(sandbox, "node1").images.pull(ref)
    sandbox.push_image(ref, {"/etc/variant": b"changed\n"})
    engine(sandbox, "node2").images.pull(ref)
    ids = {name: engine(sandbox, name).images.get(ref).id for name in ("node1", "node2")}
    assert ids["node1"] != ids["node2"]
    out = engine(sandbox, "node2").containers.run(ref, ["/usr/bin/cat", "/etc/variant"], volumes=python_volumes(),
                                                  network_mode="host", remove=True)
    assert out == b"changed\n"


@pytest.mark.sandbox
def test_a_regenerated_host_key_is_refused_until_known_hosts_is_rewritten(sandbox):
    import paramiko

    sandbox.regenerate_host_key("node3")
    try:
        with pytest.raises(paramiko.BadHostKeyException):
            ssh_client(sandbox, "node3")
    finally:
        sandbox.write_known_hosts()
    assert ssh_run(sandbox, "node3", "true")[0] == 0


@pytest.mark.sandbox
def test_a_stopped_sshd_refuses_connections_until_started(sandbox):
    sandbox.stop_sshd("node2")
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((sandbox.node("node2").address, sandbox.node("node2").ssh_port), timeout=2).close()
    finally:
        sandbox.start_sshd("node2")
    assert ssh_run(sandbox, "node2", "hostname")[1].strip() == sandbox.node("node2").hostname


@pytest.mark.sandbox
def test_a_stopped_engine_stops_answering_until_started(sandbox):
    import docker

    sandbox.stop_dockerd("node3")
    try:
        with pytest.raises((docker.errors.DockerException, OSError)):  # requests errors are OSErrors
            docker.DockerClient(base_url=sandbox.docker_host("node3"), version="1.41", timeout=3).ping()
    finally:
        sandbox.start_dockerd("node3")
    assert engine(sandbox, "node3").ping()


@pytest.mark.sandbox
def test_up_again_is_quick_and_keeps_keys(sandbox):
    from clusterctl.sandbox import up

    before = sandbox.known_hosts.read_text()
    started = time.monotonic()
    again = up(3, docker=True, state_dir=sandbox.state_dir)
    assert time.monotonic() - started < 5
    assert again.known_hosts.read_text() == before
    assert [n.name for n in again.nodes] == ["node1", "node2", "node3"]


@pytest.mark.sandbox
def test_the_inventory_describes_the_nodes_with_strict_host_keys(sandbox):
    doc = yaml.safe_load(sandbox.inventory_path.read_text())
    assert doc["name"] == "sandbox"
    assert doc["ssh"] == {"user": "root", "port": 22, "identity_file": str(sandbox.identity_file),
                          "known_hosts": str(sandbox.known_hosts), "host_key_policy": "strict"}
    assert doc["hosts"] == [{"name": "node1", "address": "198.18.0.11"},
                            {"name": "node2", "address": "198.18.0.12", "user": "ccops", "port": 2222},
                            {"name": "node3", "address": "198.19.0.13", "proxy_jump": "root@198.18.0.2"}]
    container = doc["container"]
    assert container["image"] == sandbox.image and container["gpus"] == "none"
    assert f"{sandbox.shared_outputs}:/workspace/output" in container["volumes"]
    assert set(python_volumes()) <= set(container["volumes"])
    assert doc["rendezvous"] == {"port": 29500, "address": "198.19.0.11"}  # the fabric


# --------------------------------------------------------------------------- resizing and teardown


@pytest.mark.sandbox
@pytest.mark.sandbox_teardown
def test_up_adds_and_removes_nodes_in_place(sandbox):
    from clusterctl.sandbox import up

    bigger = up(4, docker=True, state_dir=sandbox.state_dir)
    assert ssh_run(bigger, "node4", "hostname")[1].strip() == bigger.node("node4").hostname
    assert len(yaml.safe_load(bigger.inventory_path.read_text())["hosts"]) == 4
    smaller = up(3, docker=True, state_dir=sandbox.state_dir)
    assert not Path("/run/netns/cc-node4").exists() and not Path("/sys/class/net/cc-v4").exists()
    assert ssh_run(smaller, "node1", "hostname")[0] == 0


@pytest.mark.sandbox
@pytest.mark.sandbox_teardown
def test_eight_nodes_without_engines_all_answer_ssh(sandbox):
    from clusterctl.sandbox import up

    started = time.monotonic()
    eight = up(8, docker=False, state_dir=sandbox.state_dir)
    assert time.monotonic() - started < 15
    for node in eight.nodes:
        assert ssh_run(eight, node.name, "hostname")[1].strip() == node.hostname
    assert "container" not in yaml.safe_load(eight.inventory_path.read_text())


def _leftovers(state_dir: Path) -> list[str]:
    found = []
    if Path("/run/netns").is_dir():
        found += [f"netns {n}" for n in os.listdir("/run/netns") if n.startswith("cc-node")]
    found += [f"netns {n}" for n in os.listdir("/run/netns") if n == "cc-bastion"] if Path("/run/netns").is_dir() else []
    found += [f"link {n}" for n in os.listdir("/sys/class/net") if n in ("cc-br", "cc-fab") or n.startswith(("cc-v", "cc-f"))]
    rules = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
    found += [f"rule {r}" for r in rules.splitlines() if "cc-br" in r or "cc-fab" in r]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(state_dir) in cmd:
            found.append(f"process {pid}: {cmd}")
    found += [f"mount {line.split()[4]}" for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if str(state_dir) in line or "cc-node" in line]
    if state_dir.exists():
        found.append(f"dir {state_dir}")
    return found


@pytest.mark.sandbox
@pytest.mark.sandbox_teardown
def test_down_leaves_nothing_behind_even_with_sessions_and_containers_running(sandbox):
    from clusterctl.sandbox import down, up

    sb = up(2, docker=True, state_dir=sandbox.state_dir)
    engine(sb, "node1").containers.run(sb.image, ["sleep", "infinity"], name="cc-sandbox", detach=True,
                                       network_mode="host", volumes=python_volumes())
    client = ssh_client(sb, "node2")
    _, stdout, _ = client.exec_command("nohup sleep 600 >/dev/null 2>&1 & echo $!", timeout=10)
    stray = int(stdout.read().decode().split()[0])
    started = time.monotonic()
    try:
        down(sb.state_dir)
    finally:
        client.close()
    assert time.monotonic() - started < 30
    assert _leftovers(sb.state_dir) == []
    assert not Path(f"/proc/{stray}").exists() or "Z" in Path(f"/proc/{stray}/stat").read_text().split(") ")[1][:1]
    assert not sandbox_image_registry_answers()
    down(sb.state_dir)  # a second down is harmless


def sandbox_image_registry_answers() -> bool:
    from clusterctl.sandbox import registry

    return registry.answers()
