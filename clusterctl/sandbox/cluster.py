"""`up`, `down`, `status` and the `Sandbox` handle tests use to plant faults.

`up` reconciles: it creates what is missing, keeps what is already right, and removes
nodes beyond N, so calling it twice is cheap and calling it with another N adds or
removes nodes without rebuilding the others. `down` finds everything by name (`cc-*`
network objects) and by pid files under the state directory, so it also cleans up after
a half-failed `up`, and it is a no-op when nothing is up.
"""
from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

from clusterctl.errors import SandboxError
from clusterctl.sandbox import auth_registry, engine, image, inventory_file, network, registry, slurm, sshd
from clusterctl.sandbox.layout import (BASE_IMAGE, BEHIND_BASTION, DEFAULT_STATE_DIR, MAX_NODES, REGISTRY, Layout, Node,
                                       Record)
from clusterctl.sandbox.nodes import net_argv, write_node_files
from clusterctl.sandbox.system import ensure_packages, require_root_linux, run, unmount_under


def _parallel(tasks: Iterable[Callable[[], None]]) -> None:
    """Run tasks concurrently; re-raise the first failure after all have finished."""
    tasks = list(tasks)
    if not tasks:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(tasks))) as pool:
        futures = [pool.submit(task) for task in tasks]
    for future in futures:
        future.result()


class Sandbox:
    """A handle on a running sandbox: its nodes, files, and the levers to break them."""

    registry = REGISTRY

    def __init__(self, state_dir: Path, nodes: int, docker: bool, image_ref: Optional[str], slurm: bool = False):
        self.layout = Layout(Path(state_dir))
        self.state_dir = Path(state_dir)
        self.docker = docker
        self.slurm = slurm
        self.image = image_ref
        self.nodes: list[Node] = [self.layout.node(i) for i in range(1, nodes + 1)]
        self.bastion: Optional[Node] = self.layout.node(0) if nodes >= BEHIND_BASTION else None

    @classmethod
    def load(cls, state_dir: Path = DEFAULT_STATE_DIR) -> "Sandbox":
        record = Record.load(Layout(Path(state_dir)))
        if record is None:
            raise SandboxError(f"no sandbox under {state_dir}", fix="clusterctl sandbox up N")
        return cls(Path(state_dir), record.nodes, record.docker, record.image, record.slurm)

    def __repr__(self) -> str:
        return f"Sandbox({len(self.nodes)} nodes, docker={self.docker}, state_dir={str(self.state_dir)!r})"

    # files
    @property
    def inventory_path(self) -> Path:
        return self.layout.inventory

    @property
    def slurm_inventory_path(self) -> Path:
        """The inventory with `scheduler: {type: slurm}` and no hosts (`up(..., slurm_cluster=True)`)."""
        return slurm.inventory_path(self.layout)

    @property
    def slurm_env(self) -> dict[str, str]:
        """SLURM_CONF for Slurm commands that talk to this sandbox's Slurm (`up(..., slurm=True)`)."""
        return slurm.env(self.layout)

    @property
    def known_hosts(self) -> Path:
        return self.layout.known_hosts

    @property
    def identity_file(self) -> Path:
        return self.layout.client_key

    @property
    def shared_outputs(self) -> Path:
        return self.layout.shared_outputs

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise SandboxError(f"no node {name!r} in this sandbox", fix=", ".join(n.name for n in self.nodes))

    def docker_host(self, name: str) -> str:
        """`unix://...` socket of the node's engine (what DOCKER_HOST is in its SSH sessions)."""
        return self.node(name).docker_host

    # running things on a node
    def ns_argv(self, name: str, argv: Sequence[str]) -> list[str]:
        """argv prefixed to run in the node's network namespace (for Popen)."""
        return net_argv(self.node(name), argv)

    def ns_exec(self, name: str, argv: Sequence[str], check: bool = True, timeout: float = 60.0,
                input: Optional[str] = None) -> subprocess.CompletedProcess:
        """Run argv in the node's network namespace; text output captured."""
        return run(self.ns_argv(name, argv), check=check, timeout=timeout, input=input)

    # faults
    def cut_network(self, name: str) -> None:
        """Take every link of the node down (management and fabric): the node is cut off, as when
        its switch port or cable goes; the node itself keeps running."""
        node = self.node(name)
        for link in ("eth0", node.fabric_ifname):
            self.ns_exec(name, ["ip", "link", "set", link, "down"])

    def restore_network(self, name: str) -> None:
        node = self.node(name)
        for link in ("eth0", node.fabric_ifname):
            self.ns_exec(name, ["ip", "link", "set", link, "up"])

    def impersonate(self, name: str, variant: Optional[Path]) -> None:
        """Make the node show the hardware of a stand-in variant directory (tests/fixtures/hardware/):
        its bin/ first on every session's PATH, its env lines in every session, its sys/class/ laid
        over /sys/class in the node's mount namespace. None: the node's own again. sshd restarts
        (open sessions end) so that the new namespace and environment apply."""
        node = self.node(name)
        if variant is None:
            node.hardware_file.unlink(missing_ok=True)
        else:
            node.hardware_file.write_text(str(Path(variant).resolve()) + "\n")
        sshd.write_config(self.layout, node, self.docker)
        sshd.stop(node)
        sshd.start(node)

    def stop_sshd(self, name: str, sessions: bool = True) -> None:
        """Stop the node's sshd; with `sessions` (default) open connections drop too."""
        sshd.stop(self.node(name), sessions=sessions)

    def start_sshd(self, name: str) -> None:
        sshd.start(self.node(name))

    def stop_dockerd(self, name: str) -> None:
        """Like `systemctl stop docker`: containers stop (not removed), the engine exits."""
        engine.stop(self.node(name))

    def start_dockerd(self, name: str) -> None:
        if not self.docker:
            raise SandboxError("this sandbox has no Docker Engines", fix="clusterctl sandbox up N --docker")
        engine.start(self.node(name))

    def regenerate_host_key(self, name: str) -> None:
        """Give the node a new host key (restarting its sshd); known_hosts keeps the old one."""
        node = self.node(name)
        sshd.ensure_key(node.host_key, node.name, regenerate=True)
        if sshd.pid(node) is not None:
            sshd.restart(node)

    def write_known_hosts(self) -> None:
        """Record every node's current host key again (undoes `regenerate_host_key`'s mismatch)."""
        sshd.write_known_hosts(self.layout, self.nodes + ([self.bastion] if self.bastion else []))

    def push_image(self, ref: str, files: Mapping[str, bytes]) -> str:
        """Push the base image plus `files` under `ref` (any tag of the sandbox registry).
        Returns the manifest digest."""
        if not self.docker:
            raise SandboxError("this sandbox has no registry", fix="clusterctl sandbox up N --docker")
        return image.push_variant(ref, files)


# --------------------------------------------------------------------------- up


def up(n: int, docker: bool = False, state_dir: Path = DEFAULT_STATE_DIR, slurm_cluster: bool = False) -> Sandbox:
    """Bring up (or reconcile to) N nodes, with a Docker Engine each when `docker`, and a
    Slurm controller with a slurmd per node when `slurm_cluster` (sandbox/slurm.py).

    Idempotent. A different N adds or removes nodes in place; switching `docker` starts
    or stops the engines and restarts sshd with the matching environment. On failure,
    raises SandboxError and leaves what was built for inspection (`down` removes it).
    """
    if not 1 <= n <= MAX_NODES:
        raise SandboxError(f"cannot make {n} nodes", fix=f"choose 1..{MAX_NODES}")
    require_root_linux()
    layout = Layout(Path(state_dir))
    _check_socket_paths(layout)
    _check_not_another_sandbox(layout)
    ensure_packages(docker)
    if slurm_cluster:
        slurm.install_packages()
        slurm.check_installed()
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    layout.state_dir.chmod(0o711)  # a non-root node user reaches its home and engine socket below; lists nothing
    image_ref = BASE_IMAGE if docker else None
    Record(n, docker, image_ref, slurm_cluster).save(layout)  # first, so a failed up can still be found

    network.ensure_bridge(layout.state_dir)
    network.ensure_forward_rule()
    bastion = layout.node(0) if n >= BEHIND_BASTION else None
    _parallel(lambda node=node: _remove_node(node) for node in _known_nodes(layout)
              if node.index > n or (node.is_bastion and bastion is None))

    sshd.ensure_client_key(layout)
    nodes = [layout.node(i) for i in range(1, n + 1)]
    for node in nodes + ([bastion] if bastion else []):
        node.dir.mkdir(exist_ok=True)
        write_node_files(node, layout.authorized_keys.read_text())
        sshd.ensure_key(node.host_key, node.name)
        network.ensure_node(node)

    services = [lambda node=node: _ensure_daemons(layout, node, docker) for node in nodes]
    if bastion:
        services.append(lambda: _ensure_daemons(layout, bastion, False))
    services.append(lambda: _ensure_registry(layout, docker))
    _parallel(services)

    sshd.write_known_hosts(layout, nodes + ([bastion] if bastion else []))
    if slurm_cluster:
        slurm.start(layout, nodes, docker)
        slurm.write_inventory(layout, nodes)
    else:
        slurm.remove(layout)
        slurm.inventory_path(layout).unlink(missing_ok=True)
    inventory_file.write(layout, nodes, image_ref, bastion)
    return Sandbox(layout.state_dir, n, docker, image_ref, slurm_cluster)


def _check_not_another_sandbox(layout: Layout) -> None:
    """Names and addresses are machine-wide: one sandbox per machine."""
    owner = network.bridge_owner()
    if owner and owner != str(layout.state_dir) and Layout(Path(owner)).record.exists():
        raise SandboxError(f"another sandbox is up on this machine, with state in {owner}",
                           fix=f"take it down first: clusterctl sandbox down (state dir {owner})")


def _check_socket_paths(layout: Layout) -> None:
    """Unix socket paths are limited to 107 bytes; containerd's is the longest we make."""
    longest = layout.node(MAX_NODES).docker_exec / "containerd" / "containerd.sock.ttrpc"
    if len(str(longest).encode()) > 107:
        raise SandboxError(f"state directory path too long for unix sockets: {layout.state_dir}",
                           fix=f"use a shorter state directory, like {DEFAULT_STATE_DIR}")


def _ensure_daemons(layout: Layout, node: Node, docker: bool) -> None:
    if docker and not node.is_bastion:
        engine.start(node)
    else:
        engine.stop(node, remove=True)
    if sshd.write_config(layout, node, docker) and sshd.pid(node) is not None:
        sshd.restart(node)
    else:
        sshd.start(node)


def _ensure_registry(layout: Layout, docker: bool) -> None:
    if docker:
        registry.start(layout)
        image.push_base(BASE_IMAGE)
    else:
        registry.stop(layout)
        auth_registry.stop(layout)


def _known_nodes(layout: Layout) -> list[Node]:
    """Every node that may exist: from the state dir and from the machine's cc-* objects."""
    indexes = {n.index for n in layout.node_dirs()}
    indexes |= set(network.sandbox_netns_indexes()) | set(network.sandbox_veth_indexes())
    return [layout.node(i) for i in sorted(indexes)]


def _remove_node(node: Node) -> None:
    engine.stop(node, remove=True)
    sshd.stop(node)
    network.kill_node_processes(node)
    unmount_under(node.dir)
    network.remove_node(node)
    shutil.rmtree(node.dir, ignore_errors=True)


# --------------------------------------------------------------------------- down


def down(state_dir: Path = DEFAULT_STATE_DIR) -> dict:
    """Remove everything the sandbox made: containers, engines, sshds, registry, leftover
    processes in node namespaces, mounts, namespaces, bridge, iptables rule, state dir.
    Safe when nothing is up. Returns {"nodes": [names removed]}."""
    require_root_linux()
    layout = Layout(Path(state_dir))
    _check_not_another_sandbox(layout)
    nodes = _known_nodes(layout)
    slurm.remove(layout)  # its jobs first: their ranks run in the node namespaces
    _parallel(lambda node=node: engine.stop(node, remove=True) for node in nodes)
    _parallel(lambda node=node: sshd.stop(node) for node in nodes)
    registry.stop(layout)
    auth_registry.stop(layout)  # started by the registry tests, if they ran
    _parallel(lambda node=node: network.kill_node_processes(node) for node in nodes)
    unmount_under(layout.state_dir)
    for node in nodes:
        network.remove_node(node)
    network.remove_bridge()
    network.remove_forward_rule()
    if layout.state_dir.exists():
        shutil.rmtree(layout.state_dir)
    return {"nodes": [n.name for n in nodes]}


# --------------------------------------------------------------------------- status


def status(state_dir: Path = DEFAULT_STATE_DIR) -> dict:
    """What is up, per node. `healthy` is true when every recorded node answers."""
    layout = Layout(Path(state_dir))
    record = Record.load(layout)
    nodes = _known_nodes(layout)
    hosts = {}
    for node in nodes:
        docker_wanted = bool(record and record.docker)
        hosts[node.name] = {
            "address": node.listen_address,
            "netns": node.netns_path.exists(),
            "sshd": sshd.pid(node) is not None and sshd.answers(node),
            "dockerd": (engine.pid(node) is not None and engine.answers(node)) if docker_wanted and not node.is_bastion
            else None,
        }
    wanted = {layout.node(i).name for i in range(0 if record and record.nodes >= BEHIND_BASTION else 1,
                                                 record.nodes + 1)} if record else set()
    healthy = bool(record) and wanted <= set(hosts) and all(
        h["netns"] and h["sshd"] and h["dockerd"] is not False for name, h in hosts.items() if name in wanted)
    running_registry = registry.pid(layout) is not None
    return {
        "up": bool(record) or bool(nodes),
        "healthy": healthy and (running_registry or not record.docker),
        "state_dir": str(layout.state_dir),
        "nodes": record.nodes if record else len(nodes),
        "docker": bool(record and record.docker),
        "registry": {"address": REGISTRY, "running": running_registry},
        "image": record.image if record else None,
        "inventory": str(layout.inventory) if layout.inventory.exists() else None,
        "slurm": {name: pid is not None for name, pid in slurm.running(layout).items()} if record and record.slurm
        else None,
        "hosts": hosts,
    }
