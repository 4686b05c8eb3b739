"""The diagnosis rules: one table, one row per failure signature.

Adding a failure is a two-line change: append a `Rule(cause, patterns, fix, priority)`.

- `cause` is a slug from CONTRACT.md.
- `patterns` are regexes searched (case-insensitively) in each log line; named groups
  become values the fix can quote.
- `fix` is a template: `{name}` is replaced by a captured or derived value (`host`, `rank`,
  `nproc`, `gpus`, ... see `template_values`), `{name|fallback}` falls back to the text
  after `|`, a `[...]` holding placeholders is dropped when one of them is unknown (other
  brackets, as in `hosts[].nic`, are text), and `{{`/`}}` are literal braces.
- `priority` (0-100) says how sure the signature is of being the root cause rather than
  a consequence of another failure; the engine adds bonuses for the first failure in
  time, for the rank torchrun names as root cause, and for node diagnostics that agree.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Pattern

CAUSES = (
    "nic_mismatch", "shm_too_small", "shm_permission", "fabricmanager", "docker_no_gpu_runtime",
    "gpu_ordinal", "oom_killed", "duplicate_gpu", "launcher_args", "nccl_timeout_slow_rank",
    "rdzv_unreachable", "config_divisibility", "driver_too_old", "hostname_unresolvable", "ib_config",
    "nccl_too_old", "platform_backend_unsupported", "port_in_use", "sighup_session_closed",
    "version_mismatch", "unknown",
)
UNKNOWN_FIX = ("no known failure signature matched: start from the quoted lines; rerun with NCCL_DEBUG=INFO "
               "and TORCH_DISTRIBUTED_DEBUG=DETAIL in job.env, and `clusterctl collect-logs` to add node "
               "diagnostics")


@dataclass(frozen=True)
class Rule:
    cause: str
    patterns: tuple[str, ...]
    fix: str
    priority: int = 70

    @property
    def compiled(self) -> tuple[Pattern[str], ...]:
        return _compile(self.patterns)

    @property
    def keywords(self) -> tuple[Optional[tuple[str, ...]], ...]:
        """Per pattern, lower-case literals one of which a matching line must contain (None: no filter)."""
        return tuple(required_literals(p) for p in self.patterns)


_CACHE: dict[tuple[str, ...], tuple[Pattern[str], ...]] = {}


def _compile(patterns: tuple[str, ...]) -> tuple[Pattern[str], ...]:
    if patterns not in _CACHE:
        _CACHE[patterns] = tuple(re.compile(p, re.IGNORECASE) for p in patterns)
    return _CACHE[patterns]


SHM_FIX = ("the container's /dev/shm[ ({shm_size})] is too small for NCCL/DataLoader shared memory: "
           "set container.shm_size: 16g (or container.ipc: host) in the inventory, then `clusterctl up`")
SIGKILL_FIX = ("{rank_name|a rank} was killed with SIGKILL, almost always the kernel OOM killer or the container "
               "memory limit[ on {host}]: free host RAM (fewer DataLoader workers, no other jobs), lower the "
               "per-rank memory in job.args (e.g. --frame_num, offload flags) or run fewer ranks per node "
               "(job.nproc_per_node)")
DIVISOR_FIX = ("the world size {size} does not divide num_heads {heads}: use a world size of "
               "{near_divisors|a divisor of num_heads} (set job.world_size_divides: {heads} and let clusterctl pick)")

RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- network interfaces
    Rule("nic_mismatch", (
        r"Bootstrap : no socket interface found",
        r"no NCCL_SOCKET_IFNAME interface found",
        r"ncclSocketInit: connecting to address .*is neither AF_INET",
        r"Unable to find address for: (?P<iface>[^\s.]+)",
        r"Using the loopback\s+address as fallback",
        r"connectFullMesh failed.*remote=\[127\.0\.0\.1\]",
    ), "NCCL/Gloo picked a NIC that does not route between the nodes[ ({iface})]: set hosts[].nic in the "
       "inventory to the interface carrying the node address (clusterctl exports NCCL_SOCKET_IFNAME and "
       "GLOO_SOCKET_IFNAME from it), never lo/docker0, and make each hostname resolve to that address, "
       "not 127.0.1.1", 88),
    Rule("nic_mismatch", (
        r"(?:Bootstrap|NET/Socket) : Using (?:\[\d+\])?(?P<iface>docker\d*|lo|virbr\d*|veth\w*):",
    ), "NCCL bootstraps over {iface}, which other nodes cannot reach: set hosts[].nic in the inventory to "
       "the routable interface (clusterctl exports NCCL_SOCKET_IFNAME from it)", 45),
    # ---------------------------------------------------------------- shared memory
    Rule("shm_permission", (
        r"shm_open failed\s*:\s*Permission denied",
        r"shared memory segment.*Permission denied",
        r"unable to open shared memory object.*Permission denied",
    ), "/dev/shm in the container is not writable by the rank's user: use container.ipc: host or "
       "container.shm_size: 16g in the inventory, and make /dev/shm mode 1777 (don't run ranks as a user "
       "without write access to it)", 92),
    Rule("shm_too_small", (
        r"posix_fallocate failed\s*:\s*No space left on device",
        r"failed to extend /dev/shm/\S+ to (?P<bytes>\d+) bytes",
        r"shared memory segment.*No space left on device",
        r"NCCL error.*No space left on device",
        r"unable to write to file </torch_\w+>.*No space left",
        # share_memory_() when posix_fallocate fails (torch's MapAllocator)
        r"unable to allocate shared memory\(shm\) for file </torch_\w+>: No space left",
        r"DataLoader worker \(pid \d+\) is killed by signal: Bus error",
    ), SHM_FIX, 88),
    # ---------------------------------------------------------------- GPU access
    Rule("fabricmanager", (
        r"system not yet initialized",
        r"cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY",
        r"fabric manager .*version \S+ (?:don'?t|doesn'?t|does not) match.*driver version (?P<driver>\d+(?:\.\d+)+)",
        r"nvidia-fabricmanager\.service: .*fail",
    ), "the NVSwitch fabric is not ready on[ {host|this node}]: install nvidia-fabricmanager matching the "
       "driver version exactly[ ({driver})], `systemctl enable --now nvidia-fabricmanager`, then rerun "
       "`clusterctl up`", 92),
    Rule("docker_no_gpu_runtime", (
        r'could not select device driver "[^"]*" with capabilities: \[\[gpu\]\]',
        r"Unknown runtime specified nvidia",
        r"nvidia-container-cli: initialization error",
    ), "the Docker daemon on[ {host|this host}] has no NVIDIA runtime: install nvidia-container-toolkit, run "
       "`nvidia-ctk runtime configure --runtime=docker` and restart docker, then `clusterctl up` "
       "(or set container.gpus: none for CPU-only jobs)", 95),
    Rule("gpu_ordinal", (
        r"invalid device ordinal",
        r"cudaErrorInvalidDevice\b",
    ), "job.nproc_per_node[ ({nproc})] exceeds the {gpus_phrase|GPUs} this node exposes: set "
       "nproc_per_node: auto[ or {gpus}] (or expose more GPUs with container.gpus / hosts[].gpus)", 86),
    Rule("gpu_ordinal", (
        r"\d+ Insufficient nvidia\.com/gpu",
    ), "the job asks for more GPUs than a node has free: lower job.nproc_per_node (auto uses what "
       "each node exposes) or free GPUs on the nodes", 60),
    Rule("duplicate_gpu", (
        r"Duplicate GPU detected : rank (?P<rank>\d+) and rank (?P<other>\d+) both on CUDA device (?P<bus>\w+)",
        r"Duplicate GPU detected",
    ), "two ranks landed on the same GPU[ (bus {bus})]: stale ranks of an earlier run still hold the GPUs, "
       "or the script ignores LOCAL_RANK: run `clusterctl down` then `clusterctl up` to clear stale "
       "processes, keep nproc_per_node: auto, and don't override CUDA_VISIBLE_DEVICES in job.env", 92),
    # ---------------------------------------------------------------- memory
    Rule("oom_killed", (
        r"Out of memory: Kill(?:ed)? process (?P<pid>\d+)",
        r"\boom-kill:|Memory cgroup out of memory",
        r"\bOOMKilled\b",
    ), "the kernel OOM killer killed {rank_name|a rank}[ on {host}]: free host RAM or lower the per-rank memory use "
       "(job.args such as --frame_num or offload flags), or run fewer ranks per node (job.nproc_per_node)", 86),
    Rule("oom_killed", (
        r"Signal 9 \(SIGKILL\)",
        r"exitcode\s*:\s*-9\b",
        r"failed \(exitcode: -9\)",
        r"DataLoader worker \(pid \d+\) is killed by signal: Killed",
    ), SIGKILL_FIX, 72),
    Rule("oom_killed", (
        r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED",
    ), "{rank_name|a rank} ran out of GPU memory: lower the per-rank load in job.args (batch size, --frame_num, "
       "resolution, offload flags such as --offload_model) or spread the model over more GPUs "
       "(a larger world size)", 82),
    Rule("oom_killed", (
        r"\d+ nodes? (?:are|is) available:.*Insufficient memory",
        r"Insufficient memory",
    ), "the scheduler found no node with enough free RAM for the requested memory: lower the memory "
       "request/limit of the job (container memory) or free memory on the nodes", 60),
    # ---------------------------------------------------------------- launcher
    Rule("launcher_args", (
        r"unrecognized arguments: --local[-_]rank",
    ), "the script rejects the --local-rank flag that torch.distributed.launch passes: clusterctl launches "
       "with torchrun (LOCAL_RANK in the environment), so drop --local_rank from job.args and read "
       "os.environ['LOCAL_RANK'] in the script", 90),
    Rule("launcher_args", (
        r"error: unrecognized arguments: (?P<args>.+)",
        r"error: the following arguments are required: (?P<args>.+)",
        r"torchrun: error: (?P<args>.+)",
        r"--master[-_]port[= ]0\b",
        r"environment variable (?P<args>\w+) expected, but not set",
    ), "the launch command is wrong[ ({args})]: fix job.command/job.args in the inventory "
       "(clusterctl runs torchrun itself and sets MASTER_ADDR/MASTER_PORT/RANK; keep rendezvous.port non-zero)", 80),
    Rule("sighup_session_closed", (
        r"SignalException: Process \d+ got signal: 1\b",
        r"Received 1 death signal, shutting down workers",
        r"closing signal SIGHUP",
    ), "torchrun got SIGHUP because the SSH/terminal session that started it closed: launch with "
       "`clusterctl run` (detached inside the container), or by hand under tmux / `setsid nohup ... &`", 88),
    Rule("port_in_use", (
        r"failed to bind to \S*:(?P<port>\d+) \(errno: 98",
        r"port: (?P<port>\d+), useIpv6: \S+ code: -98",
        r"port: (?P<port>\d+),.*EADDRINUSE",
        r"Address already in use|EADDRINUSE",
    ), "port {port|rendezvous.port} is already taken on the master (a stale torchrun of an earlier run or "
       "another job): run `clusterctl down` to clear stale ranks, or set rendezvous.port to a free port", 88),
    # ---------------------------------------------------------------- rendezvous / naming
    Rule("hostname_unresolvable", (
        r"network addresses of \((?P<addr>None), (?P<port>\d+)\) cannot be retrieved",
    ), "MASTER_ADDR is empty (the rendezvous host is None): don't override MASTER_ADDR in job.env; let "
       "clusterctl set it from rendezvous.master (default: the first host's address)", 80),
    Rule("hostname_unresolvable", (
        r"network addresses of \((?P<addr>localhost), (?P<port>\d+)\) cannot be retrieved",
    ), "the IPv6 lookup of localhost failed; harmless on its own, and fatal only if the rendezvous address is "
       "localhost on a multi-node run: let clusterctl set MASTER_ADDR (rendezvous.master) to a routable address", 35),
    Rule("hostname_unresolvable", (
        r"network addresses of \((?P<addr>(?!localhost,)[^,]+), (?P<port>\d+)\) cannot be retrieved",
        r"gaierror: \[Errno -?\d+\] (?:Name or service not known|Temporary failure in name resolution)",
    ), "the name[ {addr}] does not resolve on this node: give hosts[].address as an IP in the inventory "
       "(clusterctl passes it as the rendezvous address) or add the name to /etc/hosts on every host", 62),
    Rule("rdzv_unreachable", (
        r"client socket has timed out after \S+ while trying to connect to \(?(?P<addr>[^,\s)]+)(?:, |:)(?P<port>\d+)",
        r"client socket has failed to connect to \[?(?P<addr>[^\]\s]+)\]?:(?P<port>\d+)"
        r".*(?:refused|timed out|unreachable)",
        r"RendezvousConnectionError",
        r"No route to host",
    ), "the workers cannot reach the rendezvous at[ {addr}:{port}]: open TCP[ {port}] on the master "
       "(firewall/security group), and make rendezvous.master (default: the first host) an address the "
       "other hosts route to", 72),
    Rule("rdzv_unreachable", (
        r"Connection refused",
    ), "a rank's connection to the master was refused: the master process was not listening yet or had "
       "already died; check the master's log first, open rendezvous.port on the master's firewall", 50),
    # ---------------------------------------------------------------- job configuration
    Rule("config_divisibility", (
        r"num_heads=(?P<heads>\d+)\W+cannot be divided evenly by\W+\S*?ulysses_size=(?P<size>\d+)",
        r"num_heads \((?P<heads>\d+)\) must be divisible by \w+ \((?P<size>\d+)\)",
        r"attention heads \((?P<heads>\d+)\) must be divisible by [\w ]+ size \((?P<size>\d+)\)",
    ), DIVISOR_FIX, 95),
    Rule("config_divisibility", (
        r"ulysses_size should be equal to the world size",
        r"(?:ulysses|ring|sequence[ _]parallel)\w* \w* ?(?:should|must) (?:be equal to|equal) the world size",
    ), "--ulysses_size must equal the world size[ (ulysses_size {ulysses}, world size {world})]: pass it as "
       "\"{{world_size}}\" in job.args so it always matches, and set job.world_size_divides to the model's "
       "num_heads", 95),
    Rule("config_divisibility", (
        r"must be divisible by (?:the )?(?:world size|tensor parallel size|ulysses_size)",
        r"(?P<heads>\d+) is not divisible by (?P<size>\d+)",
    ), "a model dimension does not divide the parallel size[ ({heads} by {size})]: choose a world size that "
       "divides it (set job.world_size_divides to the model's num_heads and let clusterctl pick)", 85),
    # ---------------------------------------------------------------- versions
    Rule("driver_too_old", (
        r"NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)",
        r"CUDA driver version is insufficient for CUDA runtime version",
        r"cudaErrorInsufficientDriver|forward compatibility was attempted on non supported HW",
    ), "the NVIDIA driver on[ {host|this host}][ (CUDA {found_cuda})] is older than the CUDA that "
       "container.image was built for: upgrade the host driver, or use an image built for the driver's "
       "CUDA version", 92),
    Rule("nccl_too_old", (
        r"undefined symbol: (?P<symbol>nccl\w+)",
        r"NCCL version (?P<version>[\d.]+) is too old|requires NCCL (?:version )?>?=? ?(?P<need>[\d.]+)",
    ), "an older libnccl[ (missing {symbol})] shadows the NCCL that torch was built with: remove the system "
       "libnccl from LD_LIBRARY_PATH (job.env/container.env) or install the nvidia-nccl wheel torch expects "
       "in container.image", 88),
    Rule("version_mismatch", (
        r"NCCL WARN Message truncated : received (?P<got>\d+) bytes instead of (?P<want>\d+)",
        r"NCCL error: version mismatch",
        r"NCCL versions? differ across (?:nodes|hosts)",
    ), "ranks disagree on the NCCL bootstrap protocol, typically different NCCL/torch builds on different "
       "nodes[ ({versions})]: run the same container.image (same digest) on every host and `clusterctl up` "
       "to re-pull; if the versions already match, pin another NCCL release", 84),
    Rule("platform_backend_unsupported", (
        r"Distributed package doesn't have NCCL built in",
        r"use_libuv was requested but PyTorch was build without libuv support",
        r"ProcessGroupNCCL is only supported with GPUs, no GPUs found",
        r"Backend nccl is not available",
    ), "this torch build or OS has no NCCL/libuv (Windows, macOS or a CPU-only wheel): run the ranks on "
       "Linux GPU hosts with a CUDA build of torch in container.image (or use the gloo backend with "
       "USE_LIBUV=0 in job.env)", 92),
    # ---------------------------------------------------------------- fabric / timeouts
    Rule("ib_config", (
        r"NET/IB ?: Got completion (?:from peer \S+ )?with (?:error |status=)(?P<status>\d+)",
        r"transport retry counter exceeded",
        r"NET/IB : Got async event : (?P<event>[^\n]+)",
        r"ibv_\w+ failed",
    ), "InfiniBand/RoCE between the nodes is down or misconfigured[ (completion status {status})]: check that "
       "`ibstat` shows the ports Active/LinkUp on both nodes, set NCCL_IB_HCA and (RoCE) NCCL_IB_GID_INDEX=3 "
       "in job.env, or NCCL_IB_DISABLE=1 to fall back to TCP", 86),
    Rule("nccl_timeout_slow_rank", (
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
        r".*?Timeout\(ms\)=(?P<timeout_ms>\d+)\) ran for (?P<ran_ms>\d+) milliseconds",
        r"Watchdog caught collective operation timeout",
        r"NCCL communicator was aborted on rank \d+.*Timeout",
    ), "a collective[ ({op})] waited[ {timeout_ms} ms] for a rank that was busy (long load/save/eval on one "
       "rank) or had died: look for the first rank that failed; otherwise raise the timeout "
       "(init_process_group(timeout=...)) or take the long work off the collective path", 30),
)

# Lines that are consequences of another rank's failure: never the root cause.
CASCADE_PATTERNS: tuple[Pattern[str], ...] = _compile((
    r"ChildFailedError", r"Connection reset by peer", r"Broken pipe", r"RendezvousClosedError",
    r"closing signal SIGTERM", r"Watchdog caught collective", r"exception raised from",
    r"Connection closed by peer", r"caused by a remote worker crashing", r"no word from the controller",
    r"DistBackendError: NCCL error.*(?:remote process exited|unhandled system error)",
))

# The narrower subset saying that this rank's peer went away (it did not fail by itself).
PEER_LOST_PATTERNS: tuple[Pattern[str], ...] = _compile((
    r"Connection (?:closed|reset) by peer", r"caused by a remote worker crashing", r"Broken pipe",
    r"DistBackendError: NCCL error.*remote process exited",
))

# Lines worth quoting when no rule matched.
SUSPICIOUS = re.compile(
    r"\b(?:\w+Error|\w+Exception|Traceback|FAILED|failed|fatal|Killed|Aborted|Segmentation fault)\b")

# Values read anywhere in the logs, for the fix templates (first match wins).
CONTEXT_PATTERNS: dict[str, tuple[Pattern[str], ...]] = {
    "nproc": _compile((r"--nproc[-_]per[-_]node[= ](\d+)", r"nproc_per_node\s*[:=]\s*(\d+)")),
    "gpus": _compile((r"Attached GPUs\s*:\s*(\d+)", r"nvidia\.com/gpu\W+(\d+)")),
    "ulysses": _compile((r"args\.ulysses_size\W+(\d+)", r"--ulysses_size[= ](\d+)")),
    "world": _compile((r"===world_size===\W+(\d+)", r"\bworld[_ ]size\W{1,4}(\d+)")),
    "driver": _compile((r"Driver Version\s*:\s*([\d.]+)",)),
    "nccl_version": _compile((r"NCCL version (\d+\.\d+\.\d+)",)),
}


# --------------------------------------------------------------------------- fix templates


def template_values(values: dict) -> dict:
    """Known values plus the ones fixes derive from them (divisors, CUDA version, ...)."""
    values = {k: v for k, v in values.items() if v not in (None, "")}
    if "heads" in values and "size" in values:
        values["near_divisors"] = _near_divisors(int(values["heads"]), int(values["size"]))
    if "rank" in values:
        values["rank_name"] = f"rank {values['rank']}"
    if "gpus" in values:
        values["gpus_phrase"] = f"{values['gpus']} GPU" + ("" if str(values["gpus"]) == "1" else "s")
    if "found" in values and len(values["found"]) >= 4:
        found = int(values["found"])
        values["found_cuda"] = f"{found // 1000}.{found % 1000 // 10}"
    return values


def _near_divisors(heads: int, size: int) -> str:
    below = [d for d in range(1, size + 1) if heads % d == 0][-2:]
    above = [d for d in range(size + 1, heads + 1) if heads % d == 0][:1]
    picks = [str(d) for d in below if d > 1] or [str(d) for d in above]
    return " or ".join(picks) if picks else str(heads)


_PLACEHOLDER = re.compile(r"\{(\w+)(?:\|([^{}]*))?\}")
_OPTIONAL = re.compile(r"\[([^\[\]]*\{[^\[\]]*)\]")  # only brackets holding a placeholder


def render_fix(template: str, values: dict) -> str:
    """`{name}` -> value, `{name|fallback}`, `[...]` dropped when a value inside is unknown."""
    template = template.replace("{{", "\0").replace("}}", "\1")

    def optional(match: re.Match) -> str:
        names = [m.group(1) for m in _PLACEHOLDER.finditer(match.group(1)) if m.group(2) is None]
        return match.group(1) if all(n in values for n in names) else ""

    def placeholder(match: re.Match) -> str:
        value = values.get(match.group(1))
        return str(value) if value is not None else (match.group(2) or match.group(1))

    text = _PLACEHOLDER.sub(placeholder, _OPTIONAL.sub(optional, template))
    return re.sub(r"  +", " ", text).replace("\0", "{").replace("\1", "}").strip()


# --------------------------------------------------------------------------- pre-filter


@lru_cache(maxsize=None)
def required_literals(pattern: str) -> Optional[tuple[str, ...]]:
    """The longest plain-text run of each top-level alternative of `pattern`, a cheap pre-filter."""
    literals = []
    for alternative in _top_level(pattern, "|"):
        runs = _literal_runs(alternative)
        best = max(runs, key=len, default="")
        if len(best) < 3:
            return None
        literals.append(best.lower())
    return tuple(literals)


def _tokens(pattern: str):
    """(token, depth) pairs: escapes and character classes are single tokens."""
    depth, index = 0, 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            token = pattern[index:index + 2]
        elif char == "[":
            close = pattern.find("]", index + 2 if pattern[index + 1:index + 2] in ("]", "^") else index + 1)
            close = close if close > 0 else len(pattern) - 1
            while pattern[close - 1] == "\\":
                close = pattern.find("]", close + 1)
            token = pattern[index:close + 1]
        else:
            token = char
        depth -= token == ")"
        yield token, depth
        depth += token == "("
        index += len(token)


def _top_level(pattern: str, separator: str) -> list[str]:
    parts, current = [], ""
    for token, depth in _tokens(pattern):
        if token == separator and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += token
    return parts + [current]


def _literal_runs(alternative: str) -> list[str]:
    tokens = list(_tokens(alternative))
    runs, current = [], ""
    for index, (token, depth) in enumerate(tokens):
        following = tokens[index + 1][0] if index + 1 < len(tokens) else ""
        literal = token[1] if token.startswith("\\") and not token[1:].isalnum() else token
        plain = len(literal) == 1 and (literal.isalnum() or literal in " _-:/,'\"=<>`!@%&~;.()[]")
        if depth == 0 and plain and (token == literal or token.startswith("\\")) and token not in "()[]." \
                and following not in ("?", "*") and not following.startswith("{"):
            current += literal
        else:
            runs.append(current)
            current = ""
    return runs + [current]
