"""`job.launcher: mpirun` (Open MPI 4.1, Debian's openmpi-bin): the master node runs mpirun over a
hostfile written from the plan; the other nodes run clusterctl's gate (node/node_mpi_gate.py), through
which mpirun's rsh agent starts their orted: nobody needs SSH keys between nodes. Pure.

- The hostfile: one line per node, in plan order, `<plan address> slots=<nproc>`. Addresses, not host
  names: Open MPI tells the local node by its addresses (rehearsal nodes even share one hostname).
  `--map-by slot` fills the nodes in that order, so global ranks are laid out as torchrun's: the
  master holds 0..k-1, the others follow (NodePlan.first_rank).
- The gate listens on the node's plan address at rendezvous port + GATE_PORT_OFFSET (+1 is the
  supervisor's on the master, +2 the registry relay's during `up`).
- The run's secret (HMAC key of the gate's handshake) goes in each node's private env file, never
  in a command line; the node program takes it out of the environment at once.
- Each rank runs under the node program's `rank` role: env:// variables from OMPI_COMM_WORLD_*,
  NODE_RANK and MASTER_ADDR/MASTER_PORT from the node's env, output into the torchrun-like rank dir
  `<run dir>/<run id>_mpirun/attempt_0/<local rank>/` and, prefixed, the node's agent.log.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import replace

from clusterctl.errors import UsageError
from clusterctl.node import heal_policy, program
from clusterctl.plan.topology import NodePlan, Topology
from clusterctl.models import Inventory
from clusterctl.node.layout import HOSTFILE, files_dir, node_run_dir, ranks_dir, run_logs_dir

GATE_PORT_OFFSET = 3
PROGRAM = "node_mpi_gate.py"
_SOURCE = program(PROGRAM)
_BESIDE = (program("layout.py"), program("listener.py"))  # imported by the gate as files beside it
_SALT = secrets.token_bytes(32)  # this controller's: a run's secret is HMAC(salt, run id), never stored
INSTALL_FIX = "apt-get install openmpi-bin in the image (or on the nodes)"


def gate_port(topo: Topology) -> int:
    return topo.port + GATE_PORT_OFFSET


def shaped(topo: Topology) -> Topology:
    """torchrun's layout, said in the plan's notes."""
    note = (f"job.launcher mpirun: mpirun on {topo.master.host.name} over a hostfile of the plan's addresses "
            f"({topo.world_size} ranks); the other nodes' orted start through clusterctl's gate on port "
            f"{gate_port(topo)} (rendezvous port + {GATE_PORT_OFFSET}), no SSH between nodes")
    return replace(topo, notes=topo.notes + (note,))


def hostfile(topo: Topology) -> str:
    """heal_policy.hostfile, which a relaunch on the nodes fills in too."""
    return heal_policy.hostfile([(node.local_addr, node.nproc) for node in topo.nodes])


def secret(run_id: str) -> str:
    return hmac.new(_SALT, run_id.encode(), hashlib.sha256).hexdigest()


def program(inv: Inventory, run_id: str) -> str:
    return f"{files_dir(inv.job.outputs, run_id)}/{PROGRAM}"


def shipped(inv: Inventory) -> dict[str, bytes]:
    """The gate with the run's paths (node/layout.py) and its listener (node/listener.py), which it imports
    as files beside it."""
    if inv.job.launcher != "mpirun":
        return {}
    return {PROGRAM: _SOURCE.read_bytes(), **{path.name: path.read_bytes() for path in _BESIDE}}


def exported_names(inv: Inventory) -> tuple[str, ...]:
    """What mpirun passes to every rank with -x: the master and the job's env (a name that a host
    sets differs by node: each node's own env already carries it to its ranks)."""
    per_host = {e.name for h in inv.hosts for e in h.env}
    return ("MASTER_ADDR", "MASTER_PORT") + tuple(dict.fromkeys(e.name for e in inv.job.env if e.name not in per_host))


def interface(topo: Topology) -> tuple[str, ...]:
    """The socket interface the plan chose, when every node has the same one (Open MPI takes one list)."""
    nics = {node.nic for node in topo.nodes}
    return (nics.pop(),) if len(nics) == 1 and None not in nics else ()


def mpirun_argv(inv: Inventory, topo: Topology, run_id: str, job_argv: tuple[str, ...]) -> tuple[str, ...]:
    run_dir = node_run_dir(inv.job.outputs, run_id, topo.master.host.name)
    agent = f"{inv.job.python} {program(inv, run_id)} agent"
    if any(c.isspace() or c == ":" for c in agent.replace(" ", "", 2)):
        raise UsageError(f"mpirun's agent {agent!r} has a space or a colon, which Open MPI splits on", "job.outputs",
                         "use job.outputs and job.python without spaces or colons for job.launcher mpirun")
    argv = ["mpirun", "--allow-run-as-root", "--hostfile", f"{run_dir}/{HOSTFILE}", "-np", str(topo.world_size),
            "--map-by", "slot", "--rank-by", "slot", "--bind-to", "none",
            "--leave-session-attached",  # orted stays in the gate's session: the connection is its lifeline
            "--mca", "plm", "rsh", "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "btl", "tcp,self"]
    for nic in interface(topo):
        argv += ["--mca", "btl_tcp_if_include", nic, "--mca", "oob_tcp_if_include", nic]
    for name in exported_names(inv):
        argv += ["-x", name]
    return tuple(argv) + (inv.job.python, program(inv, run_id), "rank", run_logs_dir(inv.job.outputs, run_id),
                          run_id) + job_argv


def node_command(inv: Inventory, topo: Topology, node: NodePlan, run_id: str,
                 job_argv: tuple[str, ...]) -> tuple[str, ...]:
    """The master: mpirun (through the program's `launch`); every other node: the gate."""
    run_dir = node_run_dir(inv.job.outputs, run_id, node.host.name)
    start = (inv.job.python, program(inv, run_id))
    if node.is_master:
        return start + ("launch", run_dir, hostfile(topo)) + mpirun_argv(inv, topo, run_id, job_argv)
    return start + ("gate", node.local_addr, str(gate_port(topo)), topo.master.host.name, str(topo.join_timeout),
                    ranks_dir(run_dir, run_id, "mpirun"))


def node_env(topo: Topology, node: NodePlan, run_id: str) -> tuple[tuple[str, str], ...]:
    return (("NODE_RANK", str(node.node_rank)), ("MASTER_ADDR", topo.master_addr), ("MASTER_PORT", str(topo.port)),
            ("CLUSTERCTL_MPI_GATE_PORT", str(gate_port(topo))), ("CLUSTERCTL_MPI_SECRET", secret(run_id)),
            ("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"))
