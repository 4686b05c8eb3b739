"""How long each rank waits for its peers inside its collectives, from torch's flight recorder (issue 49).

With NCCL a collective returns at once and the CPU waits later, at the next host sync (`.item()`, a
blocking `.to(gpu)`, the next forward), spinning under the job's own frame: the py-spy samples of the
straggler watch read that as work (2 x H200, the public DDP tutorial: a rank held 60% was never named).
The GPU side says it plainly. torch's flight recorder keeps each rank's last collectives, and with
`TORCH_NCCL_ENABLE_TIMING=1` each one's `duration_ms` from CUDA events: the time its kernel ran, which is
the wait for the last peer to arrive plus the transfer. A rank the others wait for arrives last, so its
collectives are the shortest: the share of a rank's own wall time spent in its collectives is how much
it waits (measured: the rank held 60% 10%, its peer 66%). One rank's dump at a time, no clock shared
between nodes.

The dump comes on demand: with `TORCH_NCCL_DEBUG_INFO_PIPE_FILE` (plan/torchrun.py sets it to the node's
run dir) each rank's NCCL watchdog watches the FIFO `<prefix><rank>.pipe`; a byte written there makes it
write its dump to the flight recorder's file (`nccl_trace_rank_<rank>`, where a timeout's dump goes).
A round (`node_round`, run by run_files.py's `collective-waits`): each dump written since the last
round is read, and moved aside (`fr_round_rank_<rank>`) unless it holds a collective pending longer
than its timeout (a hang's evidence, left for `run` and `diagnose`); then each rank's FIFO gets a byte
for the next round. Each dump makes the rank print one error-level line, DUMP_LINE, which clusterctl's
live log does not show and its stall watches do not count as output (run/runner.py attached; detached, the
round marks the logs first: rank_output.py).

Beside each measured rank's CPU time, the round reads who runs on its GPU (`nvidia-smi pmon`, where the node
has it): the rank's own share of its GPU's time and the share of processes outside the job. A saturated job's
shares and CPU cannot single out a rank slowed on its GPU (its host waits spin a core whatever the GPU does);
another tenant's kernels on that GPU can (waits_verdict.judge_gpu).

Dumps are pickles of plain data written by torch's C++ pickler; a node's file is read with PlainData,
which refuses every class and global, at most MAX_DUMP_BYTES. The standard library only, Python 3.8+.
"""
import io
import json
import pickle
import re
import subprocess
import time

if __package__:  # imported by the controller's tests
    from clusterctl.node import node_metrics
    from clusterctl.node.layout import FR_DUMP_PREFIX, FR_PIPE_PREFIX, METRICS
    from clusterctl.node.rank_output import DUMP_LINE, mark
    from clusterctl.node.rank_procs import cpu_seconds, find_ranks
else:  # a file beside run_files.py or node_stragglers.py, as are rank_output.py, rank_procs.py and node_metrics.py
    import node_metrics
    from layout import FR_DUMP_PREFIX, FR_PIPE_PREFIX, METRICS
    from rank_output import DUMP_LINE, mark
    from rank_procs import cpu_seconds, find_ranks

RUNS_ON_NODES = True

MAX_DUMP_BYTES = 64 << 20
ROUND_PREFIX = "fr_round_rank_"  # a round's dump once read: not a timeout's, so not where run and diagnose look
PIPE_RE = re.compile("^" + re.escape(FR_PIPE_PREFIX) + r"(\d{1,7})\.pipe$")
WINDOW_S = 30.0  # of each rank's latest collectives (its own clock)
MIN_WINDOW_S, MIN_COLLECTIVES = 1.0, 10  # less than this says nothing


class PlainData(pickle.Unpickler):
    """Only the pickle opcodes of plain containers and scalars: any class or global is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError("a flight-recorder dump names %s.%s: refused" % (module, name))


def load(data):
    """A dump's bytes -> its dict, or None (too big, truncated, another format, a refused class)."""
    if len(data) > MAX_DUMP_BYTES:
        return None
    try:
        raw = PlainData(io.BytesIO(data)).load()
    except Exception:  # a node's file: whatever it holds, it is not our failure
        return None
    return raw if isinstance(raw, dict) and isinstance(raw.get("entries"), list) else None


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def waits(raw, window_s=WINDOW_S):
    """(wait_s, window_s, collectives) of a dump: its collectives' GPU time over the latest `window_s` of its
    own enqueue times, or None where it says too little (no timing, too few, too short)."""
    timed = []
    for item in raw.get("entries") or ():
        if not isinstance(item, dict):
            continue
        created, duration = _number(item.get("time_created_ns")), _number(item.get("duration_ms"))
        if created is not None and duration is not None and duration >= 0:
            timed.append((created, duration))
    if not timed:
        return None
    newest = max(created for created, _ in timed)
    recent = [(created, duration) for created, duration in timed if created >= newest - window_s * 1e9]
    span = (newest - min(created for created, _ in recent)) / 1e9
    if span < MIN_WINDOW_S or len(recent) < MIN_COLLECTIVES:
        return None
    return round(sum(duration for _, duration in recent) / 1000.0, 4), round(span, 4), len(recent)


def holds_a_hang(raw, written_s):
    """A collective not completed at `written_s` (the file's mtime) for longer than its own timeout: the
    dump a timeout wrote, evidence of the hang."""
    for item in raw.get("entries") or ():
        if not isinstance(item, dict) or item.get("state") == "completed":
            continue
        created, timeout_ms = _number(item.get("time_created_ns")), _number(item.get("timeout_ms"))
        if created is not None and timeout_ms and written_s - created / 1e9 >= timeout_ms / 1000.0:
            return True
    return False


def node_round(d, read_limit=MAX_DUMP_BYTES, marker=()):
    """One round in the run dir `d` (safe_files.Dir): each rank's dump read and set aside, then its FIFO
    poked. A list of dicts, one per rank with a FIFO: rank, and wait_s, window_s, collectives, or why not.
    With the run's `marker` (rank_procs.find_ranks), each measured rank's CPU time so far (cpu_s) and this
    node's clock (at): two rounds apart, how much of a core it got (waits_verdict.WaitsRounds)."""
    pipes = [(int(found.group(1)), entry.name) for entry in d.entries() for found in [PIPE_RE.match(entry.name)]
             if found]
    if pipes:  # the logs' own last output, before the dumps print their lines (rank_output.py)
        try:
            mark(d)
        except Exception:  # the run dir refuses the file: the pokes go on, the detached stall watch sees their lines
            pass
    said = []
    for rank, pipe in pipes:
        line = {"rank": rank}
        dump = d.entry(FR_DUMP_PREFIX + str(rank))
        if dump is not None and dump.kind == "file":
            line.update(_read_dump(d, FR_DUMP_PREFIX + str(rank), dump.mtime, read_limit))
        else:
            line["problem"] = "no dump yet"
        line["poked"] = d.poke_fifo(pipe)
        said.append(line)
    if marker and any("wait_s" in line for line in said):
        _add_readings(d, said, marker)
    return said


def _add_readings(d, said, marker):
    """Each measured rank's CPU time and this node's clock, then (with them) who runs on its GPU."""
    pids = {rank: pid for pid, rank in find_ranks(marker).items()}
    rows = kept_pmon_rows(d)
    tenants = gpu_tenants(set(pids.values()), rows)  # {} without nvidia-smi
    slowing = gpus_slowing(d) if tenants else {}
    for line in said:
        pid = pids.get(line["rank"]) if "wait_s" in line else None
        cpu = cpu_seconds(pid) if pid is not None else None
        if cpu is None:
            continue
        line["cpu_s"], line["at"] = round(cpu, 2), round(time.time(), 3)
        if pid in tenants:
            line["gpu_own"], line["gpu_foreign"], line["gpu_neighbour"] = tenants[pid]
            bits = slowing.get(rank_gpu(pid, rows))
            if bits:
                line["gpu_slowing"] = bits


# --------------------------------------------------------------------------- who runs on a rank's GPU
PMON = ("nvidia-smi", "pmon", "-c", "1", "-s", "u")  # one sample of each process's share of its GPU's time
PMON_TIMEOUT_S, PMON_MAX_LINES = 15.0, 4096
# A read is ~0.1 s of CPU (NVML starting, 2 x H200): every round (15 s) it would be 0.7% of a core, so the rows are
# kept in the run dir and read again only once they are PMON_KEPT_S old (0.35%). Not longer: a rank is named by two
# rounds in a row, so with readings at most two rounds apart the naming round's reading was taken after the
# slowdown began, and the tenant that caused it is in the line.
PMON_FILE, PMON_KEPT_S, PMON_FILE_MAX = "gpu_tenants.json", 30.0, 256 << 10


def kept_pmon_rows(d, now=None, read=None):
    """pmon_rows of the run dir `d`'s kept reading while under PMON_KEPT_S old, else of a fresh read (kept for
    the next rounds). The file is the job's to write too: what is not rows of three numbers is read afresh."""
    now = time.time() if now is None else now
    try:
        kept = json.loads(d.read(PMON_FILE, PMON_FILE_MAX).decode("utf-8"))
        rows = [tuple(row) for row in kept["rows"] if len(row) == 3 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in row)]
        if 0 <= now - float(kept["at"]) < PMON_KEPT_S and len(rows) == len(kept["rows"]):
            return [(int(gpu), int(pid), min(float(sm), 1.0)) for gpu, pid, sm in rows]
    except Exception:  # none yet, gone, refused, not ours to trust: read afresh
        pass
    rows = pmon_rows((read or _pmon)())
    try:
        d.write(PMON_FILE, json.dumps({"at": round(now, 3), "rows": rows}))
    except Exception:  # the run dir refuses it: the next round reads afresh
        pass
    return rows


def pmon_rows(text):
    """`nvidia-smi pmon -s u` output -> [(gpu, pid, sm)], sm the process's share of the GPU's time (0..1; its
    "-", no kernel in the sample, 0). The columns are found by the header (drivers add some: jpg, ofa, ...);
    a GPU without processes (pid "-") and any row that does not fit are skipped."""
    columns, rows = None, []
    for line in text.splitlines()[:PMON_MAX_LINES]:
        if line.lstrip().startswith("#"):
            names = line.lstrip().lstrip("#").lower().split()
            if columns is None and {"gpu", "pid", "sm"} <= set(names):
                columns = {name: at for at, name in reversed(list(enumerate(names)))}
            continue
        words = line.split()
        if columns is None or len(words) <= max(columns["gpu"], columns["pid"], columns["sm"]):
            continue
        gpu, pid, sm = words[columns["gpu"]], words[columns["pid"]], words[columns["sm"]]
        if not (gpu.isdigit() and pid.isdigit() and (sm.isdigit() or sm == "-")):
            continue
        rows.append((int(gpu), int(pid), min(int(sm), 100) / 100.0 if sm.isdigit() else 0.0))
    return rows


def gpu_tenants(rank_pids, rows):
    """{pid: (own, foreign, neighbour)} for the job's ranks here (`rank_pids`) that pmon's `rows` list: each one's
    share of the GPU it runs most on, the summed share of the processes there that are not the job's ranks, and
    the busiest of those (its pid, 0 where none). {} where nvidia-smi failed, hung or said nothing."""
    by_gpu = {}
    for gpu, pid, sm in rows:
        by_gpu.setdefault(gpu, []).append((pid, sm))
    found = {}
    for pid in rank_pids:
        gpu = rank_gpu(pid, rows)
        if gpu is None:
            continue
        own = max(sm for other, sm in by_gpu[gpu] if other == pid)
        others = [(sm, other) for other, sm in by_gpu[gpu] if other not in rank_pids]
        found[pid] = (own, round(min(1.0, sum(sm for sm, _ in others)), 2), max(others)[1] if others else 0)
    return found


def rank_gpu(pid, rows):
    """The GPU the process `pid` ran on most in pmon's `rows` (the lower index of a tie), None where it is on none."""
    on = [(sm, -gpu) for gpu, other, sm in rows if other == pid]
    return -max(on)[1] if on else None


# --------------------------------------------------------------------------- a GPU slowing itself down
# A GPU that slows its own clocks (too hot, a power brake, its hardware slowdown) slows its rank with nothing else
# on it, and its rank's CPU spins as its peers' do, so neither the CPU nor another tenant says why the shares single
# it out. The metrics sampler (node_metrics.py, every job.metrics_every s) already reads each GPU's throttle reasons
# into the run dir's metrics.jsonl: a round reads its latest line rather than asking nvidia-smi again. Fresh: a line
# under METRICS_FRESH_S old (the sampler's step, coarser once its file has been halved). The file is the job's to
# write too: a line it forged can only add a reason to a rank the shares already name.
METRICS_FRESH_S, METRICS_TAIL = 60.0, 64 << 10


def gpus_slowing(d, now=None):
    """{gpu index: its active protective throttle bits (node_metrics.PROTECTIVE)} of the run dir `d`'s latest
    metrics line while fresh; {} where there is none (metrics off, no GPU), it is stale or it does not read."""
    try:
        text = d.read(METRICS, METRICS_TAIL, tail=True).decode("utf-8", "replace")
    except Exception:  # none yet, gone, refused
        return {}
    return slowing_of(text, time.time() if now is None else now)


def slowing_of(text, now):
    """gpus_slowing's reading of metrics.jsonl's tail `text` at `now`: its last line that parses, if fresh."""
    for raw in reversed(text.splitlines()[-8:]):
        try:
            line = json.loads(raw)
        except ValueError:  # the tail's cut first line, a line being written
            continue
        t = line.get("t") if isinstance(line, dict) else None
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 <= now - t < METRICS_FRESH_S:
            return {}
        found = {}
        for gpu in line.get("gpus") if isinstance(line.get("gpus"), list) else ():
            index = gpu.get("index") if isinstance(gpu, dict) else None
            reasons = gpu.get("throttle") if isinstance(gpu, dict) else None
            if isinstance(index, int) and not isinstance(index, bool) and isinstance(reasons, list):
                named = sum(bit for bit, name in node_metrics.THROTTLE_BITS if name in reasons)
                bits = named & node_metrics.PROTECTIVE_MASK
                if bits:
                    found[index] = bits
        return found
    return {}


def _pmon():
    try:
        done = subprocess.run(PMON, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=PMON_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):  # absent, refused, hung: no reading this round
        return ""
    return done.stdout[:1 << 20].decode("utf-8", "replace") if done.returncode == 0 else ""


def _read_dump(d, name, mtime, read_limit):
    try:
        data = d.read(name, read_limit + 1)
    except Exception as error:  # refused (a link, a FIFO), gone meanwhile: said, never raised
        return {"problem": "dump not read: %s" % error}
    raw = load(data)
    if raw is None:
        return {"problem": "dump not readable (%d bytes: truncated, too big or not a dump)" % len(data)}
    if holds_a_hang(raw, mtime):
        return {"problem": "the dump holds a collective past its timeout: left for the hang's diagnosis"}
    try:
        d.rename(name, ROUND_PREFIX + name[len(FR_DUMP_PREFIX):])
    except OSError as error:
        return {"problem": "dump not set aside: %s" % error}
    measured = waits(raw)
    if measured is None:
        return {"problem": "too few timed collectives (TORCH_NCCL_ENABLE_TIMING off, or the job barely started)"}
    wait_s, window_s, count = measured
    return {"wait_s": wait_s, "window_s": window_s, "collectives": count}
