"""Names, addresses and paths of the rehearsal cluster. No I/O except the state record.

Everything the sandbox creates is named here, so `down` can find it again even after a
half-failed `up`: network objects by their `cc-` names, files and pid files under the
state directory.

The nodes look like real machines, not like their inventory entries (REALITY.md):
- a hostname that is not the inventory name (an FQDN, `gpu-a01.rack1.cluster.internal`);
  odd nodes map it to 127.0.1.1 in /etc/hosts as Debian does, even nodes to their address;
- three networks: `eth0` on the management bridge (SSH, the registry), a fabric network
  on its own bridge whose interface is `eth1` on odd nodes and `ens1f0` on even ones (the
  job's traffic: the inventory's rendezvous.address is the master's fabric address), and
  a `docker0` bridge with the same address on every node that nothing routes to;
- every third node from node2 on (2, 5, 8...) is reached as a non-root user with
  passwordless sudo on port 2222 (root login refused there);
- node3 is reachable only through a bastion (the namespace `cc-bastion`): its sshd
  listens on its fabric address, which this machine has no route to.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

DEFAULT_STATE_DIR = Path("/var/tmp/clusterctl-sandbox")

BRIDGE = "cc-br"
BRIDGE_ADDRESS = "198.18.0.1"  # 198.18.0.0/15: reserved for benchmarking, used by no real network
PREFIX_LEN = 24
BRIDGE_MAC = "02:cc:ff:00:00:01"  # fixed: a bridge otherwise takes its lowest port's MAC, which changes
REGISTRY = f"{BRIDGE_ADDRESS}:5000"
BASE_IMAGE = f"{REGISTRY}/sandbox/base:1"
NETNS_PREFIX = "cc-node"
NETNS_DIR = Path("/run/netns")
FIRST_HOST_OCTET = 10  # node i lives at 198.18.0.(10 + i)
MAX_NODES = 240
CONTAINER_NAME = "cc-sandbox"
FABRIC_BRIDGE = "cc-fab"  # no address on this machine: only the nodes and the bastion are on it
FABRIC_NETWORK = "198.19.0"  # node i at 198.19.0.(10 + i)/24
DOCKER0_ADDRESS = "198.19.255.1"  # the same on every node, as Docker's default bridge is
SUDO_USER = "ccops"
SUDO_UID = 64222
SUDO_PORT = 2222
BASTION_INDEX = 0  # the bastion is node 0: same plumbing (namespace, veths, sshd), no engine
BASTION_ADDRESS = "198.18.0.2"
BEHIND_BASTION = 3  # the node reachable only through the bastion


@dataclass(frozen=True)
class Node:
    """One rehearsal node: a network namespace with its own sshd (and Docker Engine).
    Index 0 is the bastion."""

    index: int
    state_dir: Path

    @property
    def is_bastion(self) -> bool:
        return self.index == BASTION_INDEX

    @property
    def name(self) -> str:
        return "bastion" if self.is_bastion else f"node{self.index}"

    @property
    def address(self) -> str:
        """On the management network (eth0)."""
        return BASTION_ADDRESS if self.is_bastion else f"198.18.0.{FIRST_HOST_OCTET + self.index}"

    @property
    def hostname(self) -> str:
        if self.is_bastion:
            return "bastion.cluster.internal"
        return f"gpu-a{self.index:02d}.rack{(self.index - 1) // 16 + 1}.cluster.internal"

    @property
    def hostname_on_loopback(self) -> bool:
        """Debian's /etc/hosts: `127.0.1.1 <fqdn> <short>`."""
        return self.index % 2 == 1

    @property
    def fabric_ifname(self) -> str:
        return "eth1" if self.index % 2 == 1 or self.is_bastion else "ens1f0"

    @property
    def fabric_address(self) -> str:
        return f"{FABRIC_NETWORK}.{2 if self.is_bastion else FIRST_HOST_OCTET + self.index}"

    @property
    def fabric_host_veth(self) -> str:
        return f"cc-f{self.index}"

    @property
    def fabric_mac(self) -> str:
        return f"02:cc:02:00:{self.index >> 8:02x}:{self.index & 0xff:02x}"

    @property
    def behind_bastion(self) -> bool:
        return self.index == BEHIND_BASTION

    @property
    def listen_address(self) -> str:
        """Where its sshd listens: the fabric address for the node behind the bastion."""
        return self.fabric_address if self.behind_bastion else self.address

    @property
    def sudo_user(self) -> bool:
        """Reached as SUDO_USER on SUDO_PORT, root login refused."""
        return self.index % 3 == 2

    @property
    def ssh_user(self) -> str:
        return SUDO_USER if self.sudo_user else "root"

    @property
    def ssh_port(self) -> int:
        return SUDO_PORT if self.sudo_user else 22

    @property
    def netns(self) -> str:
        return "cc-bastion" if self.is_bastion else f"{NETNS_PREFIX}{self.index}"

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns

    @property
    def mac(self) -> str:
        """Fixed per index: a node rebuilt at the same address keeps its MAC, so neighbour
        caches of the host and of the other nodes stay right (no multi-second re-ARP stall)."""
        return f"02:cc:00:00:{self.index >> 8:02x}:{self.index & 0xff:02x}"

    @property
    def host_veth_mac(self) -> str:
        return f"02:cc:01:00:{self.index >> 8:02x}:{self.index & 0xff:02x}"

    @property
    def host_veth(self) -> str:
        return f"cc-v{self.index}"

    @property
    def dir(self) -> Path:
        return self.state_dir / self.name

    @property
    def hosts_file(self) -> Path:
        return self.dir / "hosts"

    @property
    def hardware_file(self) -> Path:
        """Names the stand-in variant the node impersonates (see Sandbox.impersonate), if any."""
        return self.dir / "hardware"

    @property
    def passwd_file(self) -> Path:
        """/etc/passwd on the node: the machine's, plus SUDO_USER where the node has it."""
        return self.dir / "passwd"

    @property
    def group_file(self) -> Path:
        return self.dir / "group"

    @property
    def shadow_file(self) -> Path:
        return self.dir / "shadow"

    @property
    def sudoers_file(self) -> Path:
        return self.dir / "sudoers"

    @property
    def home(self) -> Path:
        """SUDO_USER's home directory on the node."""
        return self.dir / "home" / SUDO_USER

    @property
    def bashrc(self) -> Path:
        """What root's ~/.bashrc reads as on the node: Debian's stock file (see nodes.py)."""
        return self.dir / "bashrc"

    @property
    def local_bin(self) -> Path:
        """The node's /usr/local/bin: first on its sessions' PATH (a credential helper goes here)."""
        return self.dir / "bin"

    @property
    def docker_config_dir(self) -> Path:
        """The SSH user's Docker config on this node (what `docker login` there writes): the
        non-root user's ~/.docker; for root, a directory of the node's own ($DOCKER_CONFIG in its
        sessions), since root's home on the nodes is this machine's."""
        return self.home / ".docker" if self.sudo_user else self.dir / "root-docker"

    @property
    def certs_dir(self) -> Path:
        """The node's /etc/docker/certs.d (a registry's private CA goes in <registry>/ca.crt)."""
        return self.dir / "certs.d"

    @property
    def sshd_config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def sshd_pid(self) -> Path:
        return self.dir / "sshd.pid"

    @property
    def sshd_log(self) -> Path:
        return self.dir / "sshd.log"

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def docker_sock(self) -> Path:
        return self.dir / "docker.sock"

    @property
    def docker_pid(self) -> Path:
        return self.dir / "docker.pid"

    @property
    def docker_launch_pid(self) -> Path:
        """Written by the launcher before dockerd starts (dockerd writes docker_pid itself)."""
        return self.dir / "dockerd.launch.pid"

    @property
    def docker_log(self) -> Path:
        return self.dir / "dockerd.log"

    @property
    def docker_data(self) -> Path:
        return self.dir / "data"

    @property
    def docker_exec(self) -> Path:
        return self.dir / "exec"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.docker_sock}"


def node_index(name: str) -> int:
    """`node3` -> 3, `bastion` -> 0; anything else is not a sandbox node name."""
    if name == "bastion":
        return BASTION_INDEX
    if not name.startswith("node") or not name[4:].isdigit():
        raise ValueError(f"not a sandbox node name: {name!r}")
    return int(name[4:])


@dataclass(frozen=True)
class Layout:
    """The files of one sandbox, all under its state directory."""

    state_dir: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir).absolute())

    def node(self, index: int) -> Node:
        return Node(index, self.state_dir)

    @property
    def record(self) -> Path:
        return self.state_dir / "sandbox.json"

    @property
    def client_key(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.state_dir / "authorized_keys"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def inventory(self) -> Path:
        return self.state_dir / "inventory.yaml"

    @property
    def shared_outputs(self) -> Path:
        return self.state_dir / "shared-outputs"

    @property
    def registry_dir(self) -> Path:
        return self.state_dir / "registry"

    @property
    def registry_config(self) -> Path:
        return self.registry_dir / "config.yml"

    @property
    def registry_pid(self) -> Path:
        return self.registry_dir / "registry.pid"

    @property
    def registry_log(self) -> Path:
        return self.registry_dir / "registry.log"

    @property
    def registry_storage(self) -> Path:
        return self.registry_dir / "storage"

    @property
    def auth_registry_dir(self) -> Path:
        """The registries that want a login (sandbox/auth_registry.py): CA, htpasswd, configs."""
        return self.state_dir / "auth-registry"

    def node_dirs(self) -> list[Node]:
        """Nodes that have a directory under the state dir (maybe from a half-failed up)."""
        if not self.state_dir.is_dir():
            return []
        found = []
        for entry in self.state_dir.iterdir():
            try:
                found.append(self.node(node_index(entry.name)))
            except ValueError:
                continue
        return sorted(found, key=lambda n: n.index)


@dataclass(frozen=True)
class Record:
    """What `up` last asked for, so `up` can reconcile and `down`/`status` can report."""

    nodes: int
    docker: bool
    image: Optional[str] = None
    slurm: bool = False  # a Slurm controller, munged and one slurmd per node (sandbox/slurm.py)

    def save(self, layout: Layout) -> None:
        layout.record.write_text(json.dumps({"nodes": self.nodes, "docker": self.docker, "image": self.image,
                                             "slurm": self.slurm}) + "\n")

    @classmethod
    def load(cls, layout: Layout) -> Optional["Record"]:
        try:
            data = json.loads(layout.record.read_text())
            return cls(int(data["nodes"]), bool(data["docker"]), data.get("image"), bool(data.get("slurm")))
        except (OSError, ValueError, KeyError, TypeError):
            return None
