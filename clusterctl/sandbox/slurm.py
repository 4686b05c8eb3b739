"""A real Slurm in the rehearsal cluster: `clusterctl sandbox up N --slurm`.

What runs, all from Debian's slurm-wlm (22.05) and munge, all of it under the sandbox's
state directory (`<state>/slurm/`: slurm.conf, the munge key and socket, spool and state
directories, pid and log files), so `sandbox down` finds and removes every piece:
- one munged on this machine, with its own key and socket. A unix socket is reached by
  its path, whatever the network namespace, so the node daemons and the commands on the
  nodes all authenticate through it (`AuthInfo=socket=...`): one key, as on a real cluster;
- slurmctld on this machine, reached at the bridge address. It refuses to start unless
  `SlurmctldHost` names this machine's own hostname, hence `SlurmctldHost=<hostname>(<bridge>)`.
  It listens on every address of this machine: `CommunicationParameters=NoCtldInAddrAny` binds
  the address the hostname resolves to, which is 127.0.0.1 here (Debian's /etc/hosts), where
  the nodes cannot reach it;
- one slurmd per node, entered like the node's sshd (its network namespace, its own
  hostname in a UTS namespace, its /etc/hosts) and started as `slurmd -N nodeN`, so the
  Slurm node name is the inventory's host name while `hostname` says the node's FQDN.
  Steps inherit all of that from slurmd: a task sees the node's network and hostname.
`ProctrackType=proctrack/linuxproc` and `TaskPlugin=task/none`: the cgroup plugins would
want a cgroup tree per node, which namespaces on one machine do not have. Two partitions:
`debug` (every node, the default, MaxTime 1 h) and `short` (MaxTime 1 min) for the checks
that refuse a time limit the partition does not allow.

Commands (sinfo, sbatch, srun...) find this Slurm through `SLURM_CONF=<state>/slurm/slurm.conf`
(`SlurmSandbox.env()`), as on a cluster whose configuration lives elsewhere than /etc/slurm.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from clusterctl.errors import SandboxError
from clusterctl.sandbox.layout import BRIDGE_ADDRESS, Layout, Node
from clusterctl.sandbox.nodes import daemon_argv
from clusterctl.sandbox.system import (daemon_env, owned_pid, pid_file_names_dead_process, spawn_detached, tail,
                                       terminate, wait_until, which)

SLURM_TOOLS = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client", "munged": "munge"}
PACKAGES = ("slurm-wlm", "munge")
PARTITION = "debug"
SHORT_PARTITION = "short"
CTLD_PORT = 6817
SLURMD_PORT = 6818
CLUSTER = "ccsandbox"


@dataclass(frozen=True)
class SlurmFiles:
    """Every path of the sandbox's Slurm, under `<state>/slurm`."""

    root: Path

    @classmethod
    def of(cls, layout: Layout) -> "SlurmFiles":
        return cls(layout.state_dir / "slurm")

    conf = property(lambda self: self.root / "slurm.conf")
    plugstack = property(lambda self: self.root / "plugstack.conf")
    task_prolog = property(lambda self: self.root / "task_prolog.sh")
    munge_dir = property(lambda self: self.root / "munge")
    munge_key = property(lambda self: self.munge_dir / "munge.key")
    munge_socket = property(lambda self: self.munge_dir / "munge.socket")
    munge_pid = property(lambda self: self.munge_dir / "munged.pid")
    munge_log = property(lambda self: self.munge_dir / "munged.log")
    munge_seed = property(lambda self: self.munge_dir / "munged.seed")
    ctld_state = property(lambda self: self.root / "ctld")
    ctld_pid = property(lambda self: self.root / "slurmctld.pid")
    ctld_log = property(lambda self: self.root / "slurmctld.log")

    def slurmd_pid(self, node: Node) -> Path:
        return self.root / f"slurmd.{node.name}.pid"

    def slurmd_log(self, node: Node) -> Path:
        return self.root / f"slurmd.{node.name}.log"

    def spool(self, node: Node) -> Path:
        return self.root / "spool" / node.name


def inventory_path(layout: Layout) -> Path:
    return layout.state_dir / "slurm-inventory.yaml"


def write_inventory(layout: Layout, nodes: list[Node]) -> Path:
    """The sandbox's inventory with `scheduler:` instead of hosts: the same job, on an allocation of
    the `debug` partition. No container: slurmd's tasks run on the nodes themselves."""
    import yaml

    from clusterctl.sandbox import inventory_file

    doc = inventory_file.inventory(layout, nodes, None)
    del doc["hosts"]
    doc["rendezvous"] = {"port": doc["rendezvous"]["port"]}  # the first allocated node, at its Slurm address
    doc = {"name": "sandbox-slurm", "scheduler": {"type": "slurm", "partition": PARTITION, "nodes": len(nodes),
                                                  "time": "00:10:00"}, **{k: v for k, v in doc.items() if k != "name"}}
    path = inventory_path(layout)
    path.write_text("# Written by `clusterctl sandbox up --slurm`; needs SLURM_CONF (see `sandbox up`'s output).\n"
                    + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    return path


def missing_packages() -> list[str]:
    """The Debian packages to install when a Slurm binary is missing (the whole set: they go together)."""
    return list(PACKAGES) if any(which(binary) is None for binary in SLURM_TOOLS) else []


def env(layout: Layout) -> dict[str, str]:
    """What a Slurm command needs to talk to the sandbox's Slurm."""
    return {"SLURM_CONF": str(SlurmFiles.of(layout).conf)}


# Slurm runs it before each task and sets the task's environment from its `export NAME=value` lines:
# a task's docker CLI then talks to its own node's engine, as an SSH session's does (sshd's SetEnv).
# {state} is the sandbox's state dir; SLURMD_NODENAME is set by slurmstepd.
TASK_PROLOG = '#!/bin/sh\necho "export DOCKER_HOST=unix://{state}/$SLURMD_NODENAME/docker.sock"\n'


def conf_text(files: SlurmFiles, nodes: list[Node], controller_hostname: str, docker: bool = False) -> str:
    """slurm.conf for `nodes`: the settings SANDBOX.md's rehearsal verified, every path under `files.root`."""
    names = ",".join(n.name for n in nodes)
    lines = [
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={controller_hostname}({BRIDGE_ADDRESS})",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={files.munge_socket}",
        f"StateSaveLocation={files.ctld_state}",
        f"SlurmdSpoolDir={files.root}/spool/%n",
        f"SlurmctldPidFile={files.ctld_pid}",
        f"SlurmdPidFile={files.root}/slurmd.%n.pid.own",
        f"SlurmctldLogFile={files.ctld_log}",
        f"SlurmdLogFile={files.root}/slurmd.%n.log",
        f"PlugStackConfig={files.plugstack}",  # not /etc/slurm's, which may load pyxis
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        *([f"TaskProlog={files.task_prolog}"] if docker else []),
        "MinJobAge=2",  # ended jobs leave squeue within seconds: "the queue is empty after" is checkable
        "SchedulerParameters=sched_interval=2",
        *(f"NodeName={n.name} NodeHostname={n.hostname.split('.')[0]} NodeAddr={n.address} CPUs=2 "
          "RealMemory=1000 State=UNKNOWN" for n in nodes),
        f"PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=01:00:00 State=UP",
        f"PartitionName={SHORT_PARTITION} Nodes={names} Default=NO MaxTime=00:01:00 State=UP",
        "",
    ]
    return "\n".join(lines)


def controller_hostname() -> str:
    """slurmctld compares SlurmctldHost with `gethostname()` (short form)."""
    return socket.gethostname().split(".")[0]


# --------------------------------------------------------------------------- start


def start(layout: Layout, nodes: list[Node], docker: bool = False) -> None:
    """Start (or reconcile) munged, slurmctld and one slurmd per node, then wait until every
    node is idle. A changed node list restarts the daemons: Slurm reads its nodes at start.
    With `docker`, each task's DOCKER_HOST is its node's engine (TASK_PROLOG)."""
    files = SlurmFiles.of(layout)
    for directory in (files.root, files.munge_dir, files.ctld_state, *(files.spool(n) for n in nodes)):
        directory.mkdir(parents=True, exist_ok=True)
    files.munge_dir.chmod(0o711)  # munged: the socket's directory must be searchable by every client
    files.task_prolog.write_text(TASK_PROLOG.format(state=layout.state_dir))
    files.task_prolog.chmod(0o755)
    text = conf_text(files, nodes, controller_hostname(), docker)
    changed = not files.conf.exists() or files.conf.read_text() != text
    if changed:
        stop(layout)
        for directory in (files.root, files.munge_dir, files.ctld_state, *(files.spool(n) for n in nodes)):
            directory.mkdir(parents=True, exist_ok=True)
        files.conf.write_text(text)
        files.plugstack.write_text("")
    _start_munge(files)
    _start_ctld(files)
    for node in nodes:
        _start_slurmd(files, node)
    wait_until(lambda: _all_idle(layout, nodes), 60, "the sandbox's Slurm nodes to be idle",
               lambda: f"{files.ctld_log}\n{tail(files.ctld_log)}")


def _start_munge(files: SlurmFiles) -> None:
    if owned_pid(files.munge_pid, str(files.munge_socket)) is not None:
        return
    if not files.munge_key.exists():
        files.munge_key.write_bytes(os.urandom(1024))
    files.munge_key.chmod(0o400)
    # --force: munged as root, and a socket under /var/tmp (a sticky, world-writable parent)
    argv = ["munged", "--foreground", "--force", f"--socket={files.munge_socket}", f"--key-file={files.munge_key}",
            f"--pid-file={files.munge_pid}.own", f"--log-file={files.munge_log}", f"--seed-file={files.munge_seed}",
            "--num-threads=4"]
    spawn_detached(argv, files.munge_log, files.munge_pid)
    wait_until(lambda: files.munge_socket.exists(), 15, "munged", lambda: f"{files.munge_log}\n{tail(files.munge_log)}",
               failed=lambda: pid_file_names_dead_process(files.munge_pid))


def _start_ctld(files: SlurmFiles) -> None:
    if owned_pid(files.ctld_pid.with_suffix(".launch"), str(files.conf)) is not None:
        return
    # -c: no jobs or nodes from an earlier start of this state dir; -D: stay in the foreground
    argv = ["slurmctld", "-D", "-c", "-f", str(files.conf)]
    launch = files.ctld_pid.with_suffix(".launch")
    spawn_detached(argv, files.ctld_log.with_suffix(".out"), launch)
    wait_until(lambda: _ctld_answers(files), 30, "slurmctld", lambda: f"{files.ctld_log}\n{tail(files.ctld_log)}",
               failed=lambda: pid_file_names_dead_process(launch))


def _start_slurmd(files: SlurmFiles, node: Node) -> None:
    launch = files.slurmd_pid(node)
    if owned_pid(launch, str(files.conf)) is not None:
        return
    argv = daemon_argv(node, ["slurmd", "-D", "-N", node.name, "-f", str(files.conf)])
    spawn_detached(argv, files.slurmd_log(node).with_suffix(".out"), launch)


def _slurm_env(files: SlurmFiles) -> dict[str, str]:
    return {**daemon_env(), "SLURM_CONF": str(files.conf)}


def _ctld_answers(files: SlurmFiles) -> bool:
    done = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10, env=_slurm_env(files))
    return done.returncode == 0 and "UP" in done.stdout


def _all_idle(layout: Layout, nodes: list[Node]) -> bool:
    files = SlurmFiles.of(layout)
    done = subprocess.run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %t"], capture_output=True, text=True,
                          timeout=10, env=_slurm_env(files))
    states = dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)
    return all(states.get(n.name) == "idle" for n in nodes)


# --------------------------------------------------------------------------- stop


def running(layout: Layout) -> dict[str, Optional[int]]:
    """The sandbox's Slurm daemons that run: name -> pid (None when not running)."""
    files = SlurmFiles.of(layout)
    found = {"munged": owned_pid(files.munge_pid, str(files.munge_socket)),
             "slurmctld": owned_pid(files.ctld_pid.with_suffix(".launch"), str(files.conf))}
    for pid_file in sorted(files.root.glob("slurmd.*.pid")) if files.root.is_dir() else ():
        found[pid_file.stem.replace(".", " ")] = owned_pid(pid_file, str(files.conf))
    return found


def stop(layout: Layout) -> None:
    """Cancel every job, stop the slurmds, slurmctld and munged. A no-op when none runs."""
    files = SlurmFiles.of(layout)
    if not files.root.is_dir():
        return
    if owned_pid(files.ctld_pid.with_suffix(".launch"), str(files.conf)) is not None:
        try:  # the jobs' processes end with their slurmd below anyway: this only makes it orderly
            subprocess.run(["scancel", "--full", "--user", "root"], capture_output=True, timeout=10,
                           env=_slurm_env(files))
        except subprocess.TimeoutExpired:
            pass
    slurmds = [pid for f in files.root.glob("slurmd.*.pid") for pid in [owned_pid(f, str(files.conf))] if pid]
    terminate(slurmds, timeout=10)
    ctld = owned_pid(files.ctld_pid.with_suffix(".launch"), str(files.conf))
    terminate([ctld] if ctld else [], timeout=10)
    munge = owned_pid(files.munge_pid, str(files.munge_socket))
    terminate([munge] if munge else [], timeout=5)
    for stale in (*files.root.glob("slurmd.*.pid"), files.ctld_pid.with_suffix(".launch"), files.munge_pid):
        stale.unlink(missing_ok=True)


def remove(layout: Layout) -> None:
    """Stop everything, then delete `<state>/slurm`."""
    stop(layout)
    shutil.rmtree(SlurmFiles.of(layout).root, ignore_errors=True)


def check_installed() -> None:
    missing = [binary for binary in SLURM_TOOLS if which(binary) is None]
    if missing:
        raise SandboxError(f"Slurm is not installed here (no {', '.join(missing)})",
                           fix="apt-get install -y slurm-wlm munge (as root), or run `make deps`")


def install_packages() -> None:
    """apt-get install slurm-wlm munge when missing, keeping their own services from starting."""
    if not missing_packages():
        return
    from clusterctl.sandbox.system import install_debian_packages

    install_debian_packages(list(PACKAGES))


