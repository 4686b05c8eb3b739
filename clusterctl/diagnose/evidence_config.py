"""Typed evidence about configuration and resources: argparse-style usage errors, version relations
(X too old for Y, X requires >= V, versions differ), the network interface a library chose (or could
not find), and a resource said to be exhausted (shared memory, GPU memory, host memory, disk).

Part of the evidence layer (evidence.py extracts these with the rest; families.py weighs them).
The shapes are framework-independent: any program's `prog: error: unrecognized arguments`, any
`... too old` / `requires ... >=` sentence about a driver, a C library, NCCL or a GPU architecture,
any `Using <iface>` / loopback address that a communication library reports.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from clusterctl.diagnose.logformat import LogLine
from clusterctl.diagnose.reader import MAX_LINE
from clusterctl.diagnose.textmatch import NCCL_CLASS_DESCRIPTION, compile_kinds, first_kind, gated


@dataclass(frozen=True)
class UsageError:
    line: LogLine
    program: str
    kind: str  # unrecognized | required | invalid | env_missing | divisibility (a size that must divide another)


@dataclass(frozen=True)
class VersionRelation:
    line: LogLine
    subject: str  # fabricmanager | driver | system_library | nccl | gpu_arch | ranks
    relation: str  # too_old | requires | mismatch | unsupported


@dataclass(frozen=True)
class NetInterface:
    line: LogLine
    name: str  # the interface or address a library reports using or connecting through
    kind: str  # loopback | virtual | none


@dataclass(frozen=True)
class ServiceFailure:
    line: LogLine
    unit: str  # the systemd unit or component that failed (nvidia-fabricmanager, nvswitch, docker, ...)


@dataclass(frozen=True)
class PlatformHint:
    line: LogLine
    platform: str  # windows | macos


@dataclass(frozen=True)
class ResourceExhausted:
    line: LogLine
    resource: str  # shm | gpu_memory | host_memory | disk


_SERVICE = re.compile(r"Job for (?P<unit>[\w@.-]{1,80}?)(?:\.service)? failed|(?<![\w@.-])(?P<unit2>[\w@.-]{1,80}?)"
                      r"\.service: (?:Failed|Main "
                      r"process exited|Control process exited)|(?P<nvswitch>NVSwitch\b.{0,80}?(?:fail|error|not "
                      r"(?:found|ready)))", re.IGNORECASE)
_PLATFORM = re.compile(r"\bWinError\b|\b[A-Z]:\\(?:Users|Program|ProgramData|Python|ai|AI)|\bon Windows\b|Under Windows"
                       r"|\bwin32\b|\b(?P<mac>macOS|darwin|Apple M\d)\b")
_DISTRIBUTED = re.compile(r"NCCL|libuv|distributed|gloo|c10d|torchrun|init_process_group", re.IGNORECASE)
_DIVISIBLE = re.compile(r"(?:must|should|has to) be (?:evenly )?divisible|not (?:evenly )?divisible|cannot be divided "
                        r"evenly|divisible by|% ?\w+ ?== ?0", re.IGNORECASE)
_USAGE = re.compile(r"(?:^|\s)(?P<prog>[\w.\-/]{1,80}): error: (?P<what>unrecognized arguments|the following arguments "
                    r"are required|argument [-\w]+: (?:invalid|expected)|ambiguous option|unknown option)"
                    r"|environment variable \w+ expected, but not set"
                    # python-fire's and click's words for an argument the program does not take
                    r"|(?P<other>Could not consume arg: -|No such option: -|Got unexpected extra argument)",
                    re.IGNORECASE)

_SUBJECTS = (
    ("fabricmanager", r"fabric ?manager|NVSwitch"),
    ("system_library", r"GLIBC\w*|CXXABI|libstdc\+\+|\blibc\b|glibc"),
    ("gpu_arch", r"compute capability|cuda capability|\bsm_\d+|GPU arch\w*|this GPU|kernel image"),
    ("driver", r"\bdriver\b"),
    ("nccl", r"\bNCCL\b|libnccl"),
)
_RELATIONS = (
    ("mismatch", r"versions? (?:mismatch|differ)|mismatch(?:ed)? versions?|different versions?"
                 r"|version \S+ (?:doesn.?t|don.?t|does not|do not) match"),
    ("too_old", r"too old|is insufficient|older than|no longer supports?|outdated|update your \w+|upgrade your \w+"),
    ("requires", r"requires? (?:version |at least )?(?:>=?\s*)?v?\d|minimum (?:required )?version|newer version"),
    ("unsupported", r"not compatible|incompatible|not supported|unsupported|version `?\S+'? not found"),
)
_SUBJECT_RE = compile_kinds(_SUBJECTS)
_RELATION_RE = compile_kinds(_RELATIONS)

_IFACE = re.compile(r"(?:Bootstrap|NET/Socket|NET|GLOO|gloo|socket)\w*\s*:?\s*Using (?:interface )?(?:\[\d+\])?"
                    r"(?P<name>[\w.-]+)[:\s<]"
                    r"|(?:^|\s)\[\d+\](?P<item>[\w.-]+):[\w.:%]+<\d+>"  # an item of NCCL's interface list
                    r"|IP Interfaces\s*:.*?\b(?P<listed>lo)\(\w+\)"
                    r"|(?:Connect(?:ing)? to|connect \[?|address|remote=\[|local=\[)\s*(?P<addr>127\.0\.[01]\.1)\b",
                    re.IGNORECASE)
_NO_IFACE = re.compile(r"Unable to find address for:? ?\S+|no (?:\w+ )?(?:socket )?interface found"
                       r"|(?:SOCKET_IFNAME|interface) \S+ (?:not found|does not exist|has no address)", re.IGNORECASE)
_VIRTUAL = re.compile(r"^(?:docker\d*|virbr\d*|veth\w*|br-\w+|cni\d*|flannel\S*|cali\w+|tun\d*|tap\d*)$")


_RESOURCES = (
    ("shm", r"shared memory|/dev/shm|\bshm\b|(?<!PCIe )\bbus error\b"),
    ("gpu_memory", r"(?:GPU|CUDA|device|VRAM|HIP)\s+(?:\w+\s)?memory|\bVRAM\b"),
    ("host_memory", r"host memory|system memory|\bRAM\b|memory pressure|\bOOM\b|memory limit|cgroup memory"),
    ("disk", r"\bdisk\b|file ?system|\bvolume\b|\bquota\b|storage"),
)
_RESOURCE_RE = compile_kinds(_RESOURCES)
_EXHAUSTED = re.compile(r"insufficient|out of|not enough|exhausted|no space|too small|is full|\bfull\b|exceed"
                        r"|ran out|running low|\bbus error\b|killed due to|pressure", re.IGNORECASE)


@gated("insufficient", "out of", "not enough", "exhaust", "no space", "too small", "full", "exceed", "ran out",
       "running low", "bus error", "killed due to", "pressure")
def resources_exhausted(line: LogLine, lowered: str) -> list[ResourceExhausted]:
    text = line.text[:MAX_LINE]
    if not _EXHAUSTED.search(text):
        return []
    resource = first_kind(_RESOURCE_RE, text)
    return [ResourceExhausted(line, resource)] if resource else []


@gated("fail", "exited", "nvswitch")
def service_failures(line: LogLine, lowered: str) -> list[ServiceFailure]:
    match = _SERVICE.search(line.text[:MAX_LINE])
    if not match:
        return []
    unit = "nvswitch" if match.group("nvswitch") else (match.group("unit") or match.group("unit2") or "")
    return [ServiceFailure(line, unit.lower())]


@gated("win", ":\\", "macos", "darwin", "apple m")
def platform_hints(line: LogLine, lowered: str) -> list[PlatformHint]:
    text = line.text[:MAX_LINE]
    match = _PLATFORM.search(text)
    if not match or not _DISTRIBUTED.search(text):
        return []
    return [PlatformHint(line, "macos" if match.group("mac") else "windows")]


@gated("divi", "error:", "expected, but not set", "could not consume arg")
def usage_errors(line: LogLine, lowered: str) -> list[UsageError]:
    if "divi" in lowered and _DIVISIBLE.search(line.text[:MAX_LINE]):
        return [UsageError(line, "", "divisibility")]
    if "error:" not in lowered and "expected, but not set" not in lowered and "could not consume arg" not in lowered:
        return []
    match = _USAGE.search(line.text[:MAX_LINE])
    if not match:
        return []
    if match.group("other"):
        return [UsageError(line, "", "unrecognized")]
    if match.group("what") is None:
        return [UsageError(line, "", "env_missing")]
    what = match.group("what").lower()
    kind = ("unrecognized" if what.startswith(("unrecognized", "unknown", "ambiguous"))
            else "required" if what.startswith("the following") else "invalid")
    return [UsageError(line, match.group("prog"), kind)]


@gated("old", "insufficient", "requir", "version", "support", "compatib", "outdated", "update", "upgrade", "differ",
       "mismatch", "minimum", "match")
def version_relations(line: LogLine, lowered: str) -> list[VersionRelation]:
    text = line.text[:MAX_LINE]
    relation = first_kind(_RELATION_RE, text)
    if not relation:
        return []
    if relation == "mismatch":
        subject = "ranks" if re.search(r"rank|node|host", text, re.IGNORECASE) else ""
        subject = first_kind(_SUBJECT_RE, text, subject)
        return [VersionRelation(line, subject or "ranks", relation)]
    subject = first_kind(_SUBJECT_RE, text)
    return [VersionRelation(line, subject, relation)] if subject else []


# the words every alternative of _NO_IFACE/_IFACE needs, but for an item of NCCL's interface list, which needs both
# "<" and "]" (`[0]eth0:10.0.0.1<0>`): "]" alone is on most lines of a log with timestamps or rank prefixes
_IFACE_WORDS = ("using", "127.0.", "interface", "ifname", "find address")


@gated(*_IFACE_WORDS, "<")
def net_interfaces(line: LogLine, lowered: str) -> list[NetInterface]:
    if "]" not in lowered and not any(word in lowered for word in _IFACE_WORDS):  # "<" alone
        return []
    missing = _NO_IFACE.search(line.text[:MAX_LINE])
    if missing:
        return [NetInterface(line, missing.group(0)[:80], "none")]
    out = []
    for match in _IFACE.finditer(line.text[:MAX_LINE]):
        name = match.group("name") or match.group("addr") or match.group("item") or match.group("listed")
        kind = ("loopback" if name == "lo" or name.startswith("127.") else "virtual" if _VIRTUAL.match(name)
                else "")
        if kind:
            out.append(NetInterface(line, name, kind))
    return out[:1]


PARSERS = (usage_errors, version_relations, net_interfaces, resources_exhausted, service_failures, platform_hints)


@dataclass(frozen=True)
class Placement:
    """Where the log says ranks run: host -> {rank: device}, from NCCL's ring/channel lines
    (`host:pid:tid [dev] ... 6[6] -> 10[2] via P2P/IPC`), its `comm ... rank N ... cudaDev D` lines and
    nccl-tests' `Rank N ... on HOST device D` table. `shared` lists (host, device) pairs that two ranks
    claim: one GPU given twice, or two machines that NCCL takes for one host."""

    hosts: dict
    shared: tuple
    clashes: tuple = ()  # (host, interface, addresses, line): one hostname, two addresses on one interface
    lines: tuple = ()  # the log's lines, for `networked`
    # the launch's own roll-call (Lightning's `GLOBAL_RANK: r, MEMBER: m/N`): (world size, ranks seen, a rank
    # seen twice or None, line); None without one
    roll_call: Optional[tuple] = None
    # a rank the job announced at or past the world size its launch command declares: (world size, rank, line)
    past_world: Optional[tuple] = None
    nccl_hosts: tuple = ()  # the hosts NCCL's own line prefixes name
    stalled: Optional[LogLine] = None  # the log's last line, when it is an NCCL INFO line (it stopped in NCCL)

    @property
    def single_host(self) -> bool:
        return len(self.hosts) == 1 and len(next(iter(self.hosts.values()))) >= 2

    @property
    def networked(self) -> bool:
        """The log shows any network at all (addresses, sockets, IB, interfaces). Asked only of a log with an NCCL
        system error: a search of every line of a big log costs ~10 us each."""
        return any(_NETWORK.search(NCCL_CLASS_DESCRIPTION.sub("", line.raw[:MAX_LINE])) for line in self.lines)


_NCCL_PREFIX = re.compile(r"^([\w.-]+):\d+:\d+ \[(\d+)\]")
_EDGE = re.compile(r"\b(\d{1,5})\[(\d{1,3})\] -> (\d{1,5})\[(\d{1,3})\] (?:\[\w+\] )?via (?:P2P|SHM)")
_COMM = re.compile(r"\brank (\d{1,5}) nranks \d+ cudaDev (\d{1,3})")
_OWN_ADDRESS = re.compile(r"Using (?:interface )?(?:\[\d+\])?([\w.-]+):(\d{1,3}(?:\.\d{1,3}){3})<")
_NETWORK = re.compile(r"NET/|socket|connect|\bIB\b|ibv_|\b\d{1,3}(?:\.\d{1,3}){3}\b|\b(?:eth|ens|enp|bond|ib)\d",
                      re.IGNORECASE)
_NCCL_INFO = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL INFO ")
_NCCL_UNWIND = re.compile(r"NCCL INFO [\w/.-]+:\d+ -> [1-9]\d*(?: \[Async thread\])?\s*$")
_MEMBER = re.compile(r"GLOBAL_RANK: (\d{1,5}), MEMBER: \d{1,5}/(\d{1,5})")
# the world a launch command declares (torch.distributed.launch/torchrun's processes per node x nodes, fairseq's own
# flag) and the ranks a job announces by number (fairseq's `distributed init (rank 7)`, torch's `[rank7]:` prefix)
_NPROC = re.compile(r"--nproc[_-]per[_-]node[= ](\d{1,4})\b")
_NNODES = re.compile(r"--nnodes[= ](?:\d{1,5}:)?(\d{1,5})\b")  # an elastic MIN:MAX range declares MAX
_WORLD_FLAG = re.compile(r"--distributed[_-]world[_-]size[= ](\d{1,6})\b")
_RANK_SAYS = re.compile(r"distributed init \(rank (\d{1,6})\)|initialized host \S+ as rank (\d{1,6})|^\[rank(\d{1,6})\]:")
_TESTS_RANK = re.compile(r"Rank\s+(\d{1,5})\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+([\w.-]+)\s+device\s+(\d{1,3})")


def rank_placement(lines: list[LogLine]) -> Placement:
    hosts: dict = {}
    shared: list = []
    seen: set = set()
    addresses: dict = {}

    def place(host: str, rank: int, device: int, line: LogLine) -> None:
        ranks = hosts.setdefault(host, {})
        for other, dev in ranks.items():
            if dev == device and other != rank and (host, device, min(rank, other), max(rank, other)) not in seen:
                seen.add((host, device, min(rank, other), max(rank, other)))
                shared.append((host, device, min(rank, other), max(rank, other), line))
        ranks[rank] = device

    members: dict = {}
    nccl_hosts: set = set()
    twice, world, last = None, 0, None
    said: list = []  # (rank, line) of each rank a line announces
    declared: dict = {}  # the launch command's world size flags: nproc, nnodes, world
    for line in lines:
        raw = line.raw[:MAX_LINE]
        if "rank" in raw or "--n" in raw or "--distributed" in raw:
            _declared_world(raw, declared, said, line)
        member = _MEMBER.search(raw) if "MEMBER" in raw else None
        if member:
            rank, world, last = int(member.group(1)), int(member.group(2)), line
            members[rank] = members.get(rank, 0) + 1
            twice = rank if twice is None and members[rank] > 1 else twice
        if "[" not in raw and "Rank" not in raw:
            continue
        tests = _TESTS_RANK.search(raw)
        if tests:
            place(tests.group(2), int(tests.group(1)), int(tests.group(3)), line)
            continue
        prefix = _NCCL_PREFIX.match(raw.strip())
        if not prefix:
            continue
        host = prefix.group(1)
        nccl_hosts.add(host)
        own = _OWN_ADDRESS.search(raw)
        if own:
            seen = addresses.setdefault((host, own.group(1)), {})
            seen.setdefault(own.group(2), line)
        edge = _EDGE.search(raw)
        if edge:  # P2P/SHM only between ranks NCCL believes share this host
            place(host, int(edge.group(1)), int(edge.group(2)), line)
            place(host, int(edge.group(3)), int(edge.group(4)), line)
        comm = _COMM.search(raw)
        if comm:
            place(host, int(comm.group(1)), int(comm.group(2)), line)
    clashes = tuple((host, iface, tuple(sorted(ips)), list(ips.values())[-1])
                    for (host, iface), ips in sorted(addresses.items()) if len(ips) > 1)
    roll_call = (world, len(members), twice, last) if members else None
    declared_world = declared.get("world") or declared.get("nproc", 0) * declared.get("nnodes", 1)
    past = next(((declared_world, rank, at) for rank, at in said if declared_world and rank >= declared_world), None)
    tail = next((line for line in reversed(lines) if line.raw.strip()), None)
    # (after batch 14) ...but not on NCCL unwinding an error (`init.cc:970 -> 2`): that is a failure, not a stall
    stalled = tail if tail is not None and _NCCL_INFO.search(tail.raw[:MAX_LINE]) \
        and not _NCCL_UNWIND.search(tail.raw[:MAX_LINE]) else None
    return Placement(hosts, tuple(shared), clashes, tuple(lines), roll_call, past, tuple(sorted(nccl_hosts)), stalled)


def _declared_world(raw: str, declared: dict, said: list, line: LogLine) -> None:
    """The launch command's world size flags (the first of each) and the ranks the line announces."""
    if "--n" in raw or "--distributed" in raw:
        for key, pattern in (("nproc", _NPROC), ("nnodes", _NNODES), ("world", _WORLD_FLAG)):
            found = pattern.search(raw) if key not in declared else None
            if found:
                declared[key] = int(found.group(1))
    announced = _RANK_SAYS.search(raw.strip()) if "rank" in raw else None
    if announced:
        said.append((int(next(g for g in announced.groups() if g)), line))
