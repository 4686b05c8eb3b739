"""The torchrun command line and environment for one node, and the job's own argv.

Pure: argv tuples and (name, value) pairs; quoting happens at the transport edge.

Rank placement: static rendezvous, not c10d
-------------------------------------------
The contract is that the master node holds global ranks 0..k-1 and the other nodes
follow in inventory order. torchrun (torch 2.13) gives each agent a *group rank* in
the rendezvous and then, in `SimpleElasticAgent._assign_worker_ranks`
(torch/distributed/elastic/agent/server/api.py), lays global ranks out as cumulative
`local_world_size` in group-rank order. So the group rank decides placement.
- c10d (`DynamicRendezvousHandler`) ignores `--node-rank` (run.py warns "node_rank is
  only used for static rdzv_backend. It will be ignored") and, in
  `_RendezvousStateHolder._mark_rendezvous_complete`
  (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py), assigns
  `for rank, node in enumerate(sorted(state.participants))`, where a participant is a
  `_NodeDesc(addr, pid, local_id)` dataclass with `order=True`: ranks follow the
  lexicographic *string* order of `--local-addr` (or the FQDN), then the agent's pid.
  "10.0.0.10" sorts before "10.0.0.9", and two nodes with the same address are ordered
  by pid, i.e. at random. It also carries the two SANDBOX.md traps (is_host detection
  with the hostname on loopback; workers advertised the agent's hostname as
  MASTER_ADDR).
- static (`StaticTCPRendezvous`, static_tcp_rendezvous.py) takes the group rank from
  `--node-rank` verbatim, makes the node with rank 0 host the TCPStore (no is_host
  guess) and hands the workers the endpoint's address as MASTER_ADDR (no hostname
  lookup). The store on the master waits for all `nnodes` agents up to
  `--rdzv-conf timeout=` seconds; agents started before the master retry until then,
  so start order does not matter. What it gives up is elasticity, which
  `--max-restarts=0` and `--nnodes=N:N` give up anyway.
So: `--rdzv-backend=static --rdzv-endpoint=MASTER:PORT --node-rank=R`. `--local-addr`
is still passed: static does not use it, but torchrun logs it in its launch config,
which shows in each node's log which address the node was planned on.

Per-rank logs
-------------
`--log-dir=<outputs>/logs/<run_id>/<host> --redirects=3 --tee=3`: torchrun writes each
local rank's stdout and stderr to
`<outputs>/logs/<run_id>/<host>/<run_id>_<random>/attempt_0/<local_rank>/{stdout,stderr}.log`
(the `_<random>` part is torchrun's mkdtemp) and also copies every line to its own
stdout/stderr, prefixed by `TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`, which
`torchrun_env` sets to `[<host> rank<global rank>]: `. So the streamed output is
rank-prefixed with host and global rank, and the files are found per host and mapped
to global ranks by `rank_log_files` (global rank = node.first_rank + local_rank). A
wrapper process could name files by global rank directly, but nothing of clusterctl is
installed in the container, and a `sh -c` wrapper would sit between torchrun and the
rank for signals and exit codes.

torchrun rewrites worker arguments with `string.Template(arg).safe_substitute(
local_rank=...)` (torch/distributed/elastic/utils/api.py `macros.substitute`), which
turns `$$` into `$` and `$local_rank` into a number. Every `$` in what torchrun
substitutes is therefore doubled, so the job receives its argv byte for byte (a
prompt may contain `$$`). The `${local_rank}` macro is thus unavailable: jobs read
LOCAL_RANK from the environment.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

from clusterctl.errors import UsageError
from clusterctl.plan.topology import NodePlan, Topology
from clusterctl.models import Inventory, JobSpec
from clusterctl.node.layout import FR_DUMP_PREFIX, FR_PIPE_PREFIX, node_run_dir, ranks_glob

PLACEHOLDERS = ("prompt", "world_size", "nnodes", "nproc_per_node", "run_id", "outputs", "attempt", "checkpoint")
_PLACEHOLDER_RE = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
# Linux refuses a single argv element of MAX_ARG_STRLEN (32 pages) or more with E2BIG.
MAX_ARG_BYTES = 131071
# The `[host rankN]: ` prefix of a rank's line. The rank is ASCII digits, at most 9: a rank's line
# is arbitrary text, and a "rank" of 5000 digits made int() raise ValueError in the live log.
RANK_PREFIX_RE = re.compile(r"^\[(?P<host>\S+) rank(?P<rank>[0-9]{1,9})\]: ?")


# --------------------------------------------------------------------------- job argv


def prompt_text(file_text: str) -> str:
    """The prompt file's text without its final newline, otherwise byte for byte."""
    if file_text.endswith("\r\n"):
        return file_text[:-2]
    if file_text.endswith("\n"):
        return file_text[:-1]
    return file_text


def placeholder_values(topo: Topology, run_id: str, prompt: str, outputs: str) -> dict[str, str]:
    return {
        "prompt": prompt,
        "world_size": str(topo.world_size),
        "nnodes": str(topo.nnodes),
        "nproc_per_node": str(topo.nproc_per_node),
        "run_id": run_id,
        "outputs": outputs,
        "attempt": "1",  # a run that heals itself: the runner passes its attempt and checkpoint
        "checkpoint": "",
    }


def _expand(element: str, values: Mapping[str, str], where: str) -> str:
    def one(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            raise UsageError(f"no value for placeholder {{{name}}}", where, f"pass a value for {name}")
        return values[name]

    # One pass over the template only: text inserted for {prompt} is never re-scanned,
    # so a prompt containing "{run_id}" or other braces arrives untouched.
    expanded = _PLACEHOLDER_RE.sub(one, element)
    if "\x00" in expanded:
        raise UsageError("an argument contains a NUL byte, which no process argv can carry", where, "remove the NUL byte from the prompt file")
    size = len(expanded.encode("utf-8", "surrogateescape"))
    if size > MAX_ARG_BYTES:
        raise UsageError(f"an argument is {size} bytes; Linux refuses a single argument over 128 KiB ({MAX_ARG_BYTES} bytes)",
                         where, "shorten the prompt, or let the job read it from a file on a shared volume")
    return expanded


def expand_args(job: JobSpec, values: Mapping[str, str]) -> tuple[str, ...]:
    """job.args with placeholders replaced by exact text (no str.format)."""
    return tuple(_expand(a, values, f"job.args[{i}]") for i, a in enumerate(job.args))


def job_argv(job: JobSpec, values: Mapping[str, str]) -> tuple[str, ...]:
    """job.command + job.args, expanded: what torchrun starts on every node."""
    if not job.command:
        raise UsageError("job.command is empty", "job.command", "name the script torchrun starts, e.g. [generate.py]")
    command = tuple(_expand(a, values, f"job.command[{i}]") for i, a in enumerate(job.command))
    return command + expand_args(job, values)


# --------------------------------------------------------------------------- torchrun


def _endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr and not addr.startswith("[") else f"{addr}:{port}"


def _protect(arg: str) -> str:
    """Undo in advance torchrun's Template substitution of worker arguments."""
    return arg.replace("$", "$$")


def _entry(job_argv_: tuple[str, ...]) -> tuple[str, ...]:
    """How torchrun starts the job: a .py script, `-m module`, or any executable."""
    if not job_argv_:
        raise UsageError("the job argv is empty", "job.command", "name the script torchrun starts, e.g. [generate.py]")
    first, rest = job_argv_[0], job_argv_[1:]
    if first in ("-m", "--module"):
        if not rest:
            raise UsageError("job.command is -m without a module", "job.command", "write [-m, package.module]")
        return ("--module", _protect(rest[0])) + tuple(_protect(a) for a in rest[1:])
    if first.endswith(".py"):
        return (_protect(first),) + tuple(_protect(a) for a in rest)
    # torchrun does not substitute the entrypoint of --no-python, only its arguments.
    return ("--no-python", first) + tuple(_protect(a) for a in rest)


# Of a failed rank's stderr, what a launcher other than torchrun copies into its node's log with the
# rank's prefix (torchrun's --tee puts all of it there), where the first failure is named from.
STDERR_TAIL_LINES = 200


def torchrun_argv(topo: Topology, node: NodePlan, run_id: str, job_argv: tuple[str, ...],
                  python: str = "python3", outputs: Optional[str] = None) -> tuple[str, ...]:
    """The torchrun command for one node; with `outputs`, per-rank log files too."""
    argv = [
        python, "-m", "torch.distributed.run",
        f"--nnodes={topo.nnodes}:{topo.nnodes}",
        f"--nproc-per-node={node.nproc}",
        "--rdzv-backend=static",
        f"--rdzv-endpoint={_endpoint(topo.master_addr, topo.port)}",
        f"--rdzv-id={run_id}",
        f"--node-rank={node.node_rank}",
        f"--rdzv-conf=timeout={topo.join_timeout}",
        f"--local-addr={node.local_addr}",
        "--max-restarts=0",
        "--monitor-interval=0.1",  # torch's default since 2.x (it was 5 s): a rank's exit is seen at once
    ]
    if outputs:
        argv += [f"--log-dir={node_run_dir(outputs, run_id, node.host.name)}", "--redirects=3", "--tee=3"]
    return tuple(argv) + _entry(tuple(job_argv))


# The flight recorder (torch.distributed's ring buffer of the last collectives of every rank), on by
# default, dumped on a collective's timeout into the node's run dir, where collect-logs finds it and
# diagnose reads it (diagnose/flight_recorder.py). torch 2.9 renamed two of its settings
# (TORCH_FR_BUFFER_SIZE, TORCH_FR_DUMP_TEMP_FILE) and still reads the old names, with a deprecation
# warning on every rank (getCvarInt({"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}) in
# FlightRecorder.hpp; WARN_ENV_VAR_ONCE in c10d/Utils.hpp). So the name follows the node's torch
# (NodePlan.torch): the new one from 2.9, the old one before or when the version is unknown (every
# torch reads it). A setting the user gives under any of its names (job, host or container env) is
# left alone entirely; the user turns the recorder off with TORCH_FR_BUFFER_SIZE: "0" (or the old name).
FLIGHT_RECORDER_BUFFER = 2000  # entries, torch 2.13's own default (older torch: 0, off)
FLIGHT_RECORDER_RENAMED_IN = (2, 9)
# setting -> (its name before 2.9, its name from 2.9)
_FLIGHT_RECORDER_NAMES = {
    "buffer": ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"),
    "dump_on_timeout": ("TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"),
    "dump_file": ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"),
    # the straggler watch's evidence over NCCL (node/collective_waits.py): a dump on demand through a FIFO in the
    # run dir, and each collective's GPU time (a CUDA event more per collective)
    "pipe": ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"),
    "timing": ("TORCH_NCCL_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING"),
}


def torch_release(version: Optional[str]) -> Optional[tuple[int, int]]:
    """(major, minor) of a torch version string ("2.13.0+cpu", "2.9.0a0+git1234"); None if unreadable."""
    found = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def flight_recorder_env(run_dir: str, user_names: set, torch_version: Optional[str] = None) -> dict[str, str]:
    """The flight-recorder defaults for ranks whose run dir is `run_dir`, under the names the
    ranks' torch reads without a warning, minus what the user sets."""
    release = torch_release(torch_version)
    new = release is not None and release >= FLIGHT_RECORDER_RENAMED_IN
    values = {"buffer": str(FLIGHT_RECORDER_BUFFER), "dump_on_timeout": "1",
              "dump_file": f"{run_dir.rstrip('/')}/{FR_DUMP_PREFIX}",
              "pipe": f"{run_dir.rstrip('/')}/{FR_PIPE_PREFIX}", "timing": "1"}
    return {_FLIGHT_RECORDER_NAMES[setting][new]: value for setting, value in values.items()
            if not user_names & set(_FLIGHT_RECORDER_NAMES[setting])}


def torchrun_env(node: NodePlan, inv: Inventory, run_dir: Optional[str] = None) -> tuple[tuple[str, str], ...]:
    """Environment for the torchrun process on one node.

    Launcher defaults first, then the node's planned env (derived NCCL/Gloo/CUDA
    settings and the inventory's job/host env, which win). A default that the
    container's env already sets is left to the container. With `run_dir` (the node's
    run directory), the flight recorder's settings too.
    """
    defaults = {
        # torchrun sets OMP_NUM_THREADS=1 itself when nproc > 1, with a banner; saying it
        # keeps the log clean. One rank alone keeps all threads.
        **({"OMP_NUM_THREADS": "1"} if node.nproc > 1 else {}),
        "PYTHONUNBUFFERED": "1",
        "CLUSTERCTL_HOST": node.host.name,  # lets a rank say which inventory host it is
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": f"[{node.host.name.replace('$', '$$')} rank${{rank}}]: ",
    }
    if run_dir:
        user = {e.name for e in (*inv.job.env, *node.host.env, *(inv.container.env if inv.uses_container else ()))}
        defaults.update(flight_recorder_env(run_dir, user | {name for name, _ in node.env}, node.torch))
    if inv.uses_container:
        for var in inv.container.env:
            defaults.pop(var.name, None)
    env = dict(defaults)
    env.update(dict(node.env))
    return tuple(env.items())


@dataclass(frozen=True)
class RankLog:
    host: str
    rank: int
    local_rank: int
    stdout_glob: str
    stderr_glob: str


def rank_log_files(topo: Topology, run_id: str, outputs: str) -> tuple[RankLog, ...]:
    """Where torchrun's --log-dir puts each global rank's output (paths on the node)."""
    logs = []
    for node in topo.nodes:
        base = ranks_glob(node_run_dir(outputs, run_id, node.host.name), run_id)
        for local_rank in range(node.nproc):
            logs.append(RankLog(node.host.name, node.first_rank + local_rank, local_rank,
                                f"{base}/{local_rank}/stdout.log", f"{base}/{local_rank}/stderr.log"))
    return tuple(logs)
