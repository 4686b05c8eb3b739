"""What starts on each node of a run, decided once: the job's argv with the prompt and the run's values
expanded (once, here), each node's command, env and run dir, and the files shipped. Pure. The Plan
(backends/base.py) carries it; the runner (run/runner.py) carries it out as it is. A node that starts itself
takes its start from here too (`node_start`): `launch --from-env`, the pods of `export k8s`, the nodes of
`export sbatch`'s script."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Iterable, Mapping, Optional

from clusterctl.errors import UsageError
from clusterctl.plan import wrapper as agent, launcher_deepspeed as launch_deepspeed, launcher_mpirun as launch_mpirun, launcher as launchers
from clusterctl.node.heal_policy import attempt_env
from clusterctl.plan.shipping import _FILE_NAME_RE
from clusterctl.plan.topology import NodePlan, Topology
from clusterctl.plan.torchrun import MAX_ARG_BYTES, job_argv, placeholder_values, torchrun_env
from clusterctl.models import MASK, Command, Host, Inventory, looks_secret
from clusterctl.plan.marker import marker_env
from clusterctl.node import program
from clusterctl.node.layout import files_dir, node_run_dir
from clusterctl.plan import metrics_sampler as sampling
from clusterctl.transport import remote_argv


@dataclass(frozen=True)
class NodeLaunch:
    """One node's start: its run dir, the command its agent starts (`torchrun`: the launcher's argv,
    whichever launcher), and the env written beside it."""

    host: Host
    run_dir: str
    torchrun: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


def node_launch(inventory: Inventory, topology, node: NodePlan, run_id: str, job_args: tuple,
                attempt: str, checkpoint: str, logs: bool = True) -> NodeLaunch:
    """`node`'s start in `topology` (a plan, or a detached run's tokens: `template`): its launcher's
    argv (plan/launcher.py: torchrun, mpirun or its gate, DeepSpeed's per-node launcher, or the job
    itself) and its environment; `job_args`: the job's argv, its placeholders expanded (once per plan).
    `logs`: torchrun writes each rank's output into the run dir (not in a pod: its platform keeps it).
    The one builder of a node's start."""
    run_dir = node_run_dir(inventory.job.outputs, run_id, node.host.name)
    argv = launchers.node_command(inventory, topology, node, run_id, job_args, inventory.job.outputs if logs else None)
    env = (*marker_env(inventory.name, node.host.name, run_id), *torchrun_env(node, inventory, run_dir),
           *launchers.node_env(inventory, topology, node, run_id), *agent.job_env(inventory, node.host.env),
           *attempt_env(attempt, checkpoint))
    return NodeLaunch(node.host, run_dir, tuple(argv), tuple(env))


def job_args(inventory: Inventory, topology: Topology, run_id: str, prompt: str, attempt: int = 1,
             checkpoint: Optional[str] = None) -> tuple[str, ...]:
    """The job's argv with the prompt and the run's values expanded: once per plan."""
    return job_argv(inventory.job, {**placeholder_values(topology, run_id, prompt, inventory.job.outputs),
                                    "attempt": str(attempt), "checkpoint": checkpoint or ""})


def node_start(inventory: Inventory, topology: Topology, node: NodePlan, run_id: str, prompt: str,
               logs: bool = True) -> NodeLaunch:
    """One node's start, its first attempt, where the node starts itself rather than being started over
    SSH (`launch --from-env`; a pod of `export k8s`, `logs` False): no remote command line to check."""
    return node_launch(inventory, topology, node, run_id, job_args(inventory, topology, run_id, prompt), "1", None,
                       logs=logs)


def node_launches(inventory: Inventory, topology: Topology, run_id: str, prompt: str, attempt: int = 1,
                  checkpoint: Optional[str] = None) -> tuple[NodeLaunch, ...]:
    """Every node's start, the prompt expanded once; refused (UsageError) when a node's command line
    could not reach it. `attempt`, `checkpoint`: a run that heals itself (backends/healing.py)."""
    job_args_ = job_args(inventory, topology, run_id, prompt, attempt, checkpoint)
    launches = tuple(node_launch(inventory, topology, plan, run_id, job_args_, str(attempt), checkpoint)
                     for plan in topology.nodes)
    for launch in launches:
        _check_command_line(launch.host.name, agent.start_command(inventory, launch.run_dir, launch.torchrun),
                            len(prompt.encode()))
    return launches


def template(inventory: Inventory, fleet: Topology, node: NodePlan, run_id: str, prompt: str, token: str,
             as_master: bool) -> dict:
    """`node`'s start with TOKENS where a relaunch changes it (`@<nonce>.nnodes@`, `.node_rank@`,
    `.first_rank@`, `.master@`, `.master_host@`, `.world_size@`, `.hostfile@`, `.world_info@`,
    `.attempt@`, `.checkpoint@`), as the master of an attempt (`as_master`) or not (mpirun starts
    differently there); `fleet`: the plan of every host of the run, spares included. A detached run
    that heals itself hands it to each node; the keepers fill the tokens in with
    heal_policy.launch_values and heal_policy.substitute (node/node_healing.py)."""
    def t(name):
        return f"@{token}.{name}@"

    values = {**placeholder_values(fleet, run_id, prompt, inventory.job.outputs), "world_size": t("world_size"),
              "nnodes": t("nnodes"), "attempt": t("attempt"), "checkpoint": t("checkpoint")}
    shape = SimpleNamespace(nodes=fleet.nodes, nnodes=t("nnodes"), master_addr=t("master"), port=fleet.port,
                            join_timeout=fleet.join_timeout, world_size=t("world_size"),
                            nproc_per_node=fleet.nproc_per_node, master=SimpleNamespace(host=SimpleNamespace(
                                name=t("master_host"))))
    tokened = replace(node, node_rank=t("node_rank"), first_rank=t("first_rank"), is_master=as_master)
    launch = node_launch(inventory, shape, tokened, run_id, job_argv(inventory.job, values), t("attempt"),
                         t("checkpoint"))
    # what the launcher writes of every host: the fleet's, a token in its place
    hostfile, world_info = launch_mpirun.hostfile(fleet), launch_deepspeed.world_info(fleet)
    argv = [t("hostfile") if a == hostfile else a.replace(world_info, t("world_info")) for a in launch.torchrun]
    agent.env_file(launch.env)  # a value with a newline is refused here, not on the node
    return {"argv": argv, "env": [list(kv) for kv in launch.env]}


def shipped_files(inventory: Inventory, files: Optional[Mapping[str, bytes]] = None) -> dict[str, bytes]:
    """{name: bytes} written into the run's files dir on every node before the launcher starts: the
    metrics sampler (issue 41), the mpi gate (issue 38), the checkpoint copier (issue 50), and `files` (a rank-side script job.command
    points at)."""
    shipped = {**sampling.shipped(inventory), **launchers.shipped(inventory), **replica_programs(inventory),
               **(files or {})}
    for name in shipped:
        if not _FILE_NAME_RE.fullmatch(name):
            raise ValueError(f"not a plain file name: {name!r}")
    return shipped


# what node/node_replica.py imports beside it: the copier of an attached run's checkpoint replicas (issue 50)
REPLICA_PROGRAMS = ("node_replica.py", "checkpoint_replica.py", "checkpoint_wire.py", "heal_policy.py", "listener.py",
                    "safe_files.py")


def replica_programs(inventory: Inventory) -> dict[str, bytes]:
    """{name: bytes} of the copier where `job.checkpoint.replicas` is set (the wrapper starts it where the
    controller also wrote the host's replica.json: an attached run), else {}."""
    spec = inventory.job.healing.checkpoint
    if spec is None or not spec.replicas or not inventory.job.healing.enabled:
        return {}
    return {name: program(name).read_bytes() for name in REPLICA_PROGRAMS}


def commands_of(inventory: Inventory, run_id: str, launches: Iterable, files: Mapping[str, bytes]) -> dict[str, dict]:
    """Per host what starts there, secrets masked: `run --plan` and the run record's `commands`."""
    secret_names = {e.name for e in (*inventory.job.env, *(inventory.container.env if inventory.container else ()),
                                     *(e for h in inventory.hosts for e in h.env)) if e.is_secret}
    shipped = {"files": [f"{files_dir(inventory.job.outputs, run_id)}/{n}" for n in files]} if files else {}
    return {
        node.host.name: {"argv": list(node.torchrun),
                         "env": {k: (MASK if looks_secret(k) or k in secret_names else v) for k, v in node.env},
                         "run_dir": node.run_dir,
                         "command": shlex.join(node.torchrun),
                         "launched_with": agent.start_command(inventory, node.run_dir, ("torchrun",)).argv[:4],
                         **shipped}
        for node in launches
    }


def _check_command_line(host: str, command: Command, prompt_bytes: int) -> None:
    """ssh hands the remote shell the whole command as one argument, which Linux caps at 128 KiB:
    refuse before launching anything rather than fail on every node with "Argument list too long"."""
    size = len(shlex.join(remote_argv(command)).encode())
    if size > MAX_ARG_BYTES:
        raise UsageError(
            f"the command that starts torchrun on {host} is {size} bytes once quoted for the remote shell "
            f"(the prompt is {prompt_bytes} of them); Linux refuses a command line over 128 KiB "
            f"({MAX_ARG_BYTES} bytes) in one argument, and ssh passes the whole command as one",
            where="PROMPT_FILE", fix="shorten the prompt (quotes and $ take more room once escaped), "
            "or have the job read it from a file on a shared volume")
