"""One Docker Engine per node, in the node's namespaces, with its own root and socket.

With `--net=host` a container shares its engine's network namespace (the node's), and
gets the engine's hostname and a copy of its /etc/hosts: exactly `docker run --net=host`
on a real node. The engine is spoken to over its unix socket with plain HTTP, so the
sandbox needs no Docker client library to build or tear down.
"""
from __future__ import annotations

import http.client
import json
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from clusterctl.errors import SandboxError
from clusterctl.sandbox.layout import DOCKER0_ADDRESS, PREFIX_LEN, REGISTRY, Node
from clusterctl.sandbox.nodes import DOCKER_CERTS_D, daemon_argv
from clusterctl.sandbox.system import owned_pid, pid_file_names_dead_process, spawn_detached, tail, terminate, wait_until

DOCKERD = "/usr/sbin/dockerd"


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def api(node: Node, method: str, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """One request to the node's engine; (status, body). Raises OSError when it does not answer."""
    conn = _UnixHTTPConnection(node.docker_sock, timeout)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    except http.client.HTTPException as exc:
        raise OSError(str(exc)) from exc
    finally:
        conn.close()


def answers(node: Node) -> bool:
    try:
        return api(node, "GET", "/_ping", timeout=1.0) == (200, b"OK")
    except OSError:
        return False


def argv(node: Node) -> list[str]:
    return [
        DOCKERD,
        "--data-root", str(node.docker_data),
        "--exec-root", str(node.docker_exec),
        "-H", node.docker_host,
        "--pidfile", str(node.docker_pid),
        # docker0 as on a real node (its own address on every node, nothing routed to it);
        # no iptables or forwarding changes in the node
        f"--bip={DOCKER0_ADDRESS}/{PREFIX_LEN}", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
        "--insecure-registry", REGISTRY,
    ]


def pid(node: Node) -> Optional[int]:
    return owned_pid(node.docker_pid, str(node.docker_sock))


def start(node: Node, timeout: float = 30.0) -> None:
    if pid(node) is not None and answers(node):
        return
    if pid(node) is None:
        node.docker_sock.unlink(missing_ok=True)
        # each node's own /etc/docker/certs.d (the mount point must exist on this machine; left empty)
        node.certs_dir.mkdir(parents=True, exist_ok=True)
        DOCKER_CERTS_D.mkdir(parents=True, exist_ok=True)
        spawn_detached(daemon_argv(node, argv(node)), node.docker_log, node.docker_launch_pid)
    wait_until(lambda: answers(node), timeout, f"the Docker Engine of {node.name}",
               lambda: f"{node.docker_log}\n{tail(node.docker_log)}",
               failed=lambda: pid_file_names_dead_process(node.docker_launch_pid))


def container_ids(node: Node, running_only: bool = False) -> list[str]:
    status, body = api(node, "GET", "/containers/json" + ("" if running_only else "?all=1"))
    if status != 200:
        raise SandboxError(f"engine of {node.name} answered {status} listing containers")
    return [c["Id"] for c in json.loads(body)]


def _each(ids: list[str], action) -> None:
    if ids:
        with ThreadPoolExecutor(max_workers=min(8, len(ids))) as pool:
            list(pool.map(action, ids))


def remove_containers(node: Node) -> None:
    """Force-remove every container: killing an engine with live containers makes it hang."""
    try:
        ids = container_ids(node)
        _each(ids, lambda cid: api(node, "DELETE", f"/containers/{cid}?force=1&v=1", timeout=30))
    except OSError:
        return  # engine not answering: its processes are swept with the namespace


def stop(node: Node, remove: bool = False, timeout: float = 30.0) -> None:
    """Stop the engine like `systemctl stop docker`: containers are stopped, not removed
    (unless `remove`), then the daemon exits."""
    daemon = pid(node)
    if daemon is None:
        return
    if remove:
        remove_containers(node)
    else:
        try:
            _each(container_ids(node, running_only=True),
                  lambda cid: api(node, "POST", f"/containers/{cid}/stop?t=2", timeout=15))
        except OSError:
            pass
    terminate([daemon], timeout=timeout)
    node.docker_pid.unlink(missing_ok=True)
