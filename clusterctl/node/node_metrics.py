"""The node's metrics sampler (issue 41): runs on every node beside the ranks, standard library only.

Started by the ranks' wrapper (plan/wrapper.py) as `python node_metrics.py DIR EVERY_S PID [IFACES]
[MAX_BYTES]`, attached or detached alike, and ended by it when torchrun ends; it also ends by itself
once PID (torchrun) is gone or DIR/agent.exit exists, so a killed wrapper leaves no sampler behind.
Every EVERY_S seconds it appends one JSON line to DIR/metrics.jsonl (docs/metrics.md has the fields):
the GPUs from `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`, asked once and then left
running in its loop mode (`-lms`, LoopedQuery: NVML starts once; none installed: `"gpus": []`),
CPU from /proc/stat (busy share since the last sample), memory from /proc/meminfo (total less
available), network bytes from /proc/net/dev (cumulative counters of IFACES, NCCL_SOCKET_IFNAME's
syntax: `eth0,ib` prefixes, `^docker,lo` exclusions, `=eth0` exact; empty: every interface but lo).

Bounded: once the file passes MAX_BYTES (default 8 MiB), every second line is dropped (rewritten
through a rename) and from then on only every second sample is written; it covers the whole run at
a coarser step, never more than MAX_BYTES. The controller summarises it (clusterctl/observe/).
"""
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

RUNS_ON_NODES = True

FILE = "metrics.jsonl"  # layout.METRICS: this program is shipped alone, so it names its file itself
MAX_BYTES = 8 << 20
# the order of the columns asked of nvidia-smi; FALLBACK_FIELDS where a driver refuses a field
FIELDS = ("index", "uuid", "utilization.gpu", "memory.used", "memory.total", "power.draw", "temperature.gpu",
          "clocks.sm", "clocks_throttle_reasons.active", "ecc.errors.uncorrected.volatile.total")
FALLBACK_FIELDS = FIELDS[:8]
KEYS = {"index": "index", "uuid": "uuid", "utilization.gpu": "util_pct", "memory.used": "mem_used_mb",
        "memory.total": "mem_total_mb", "power.draw": "power_w", "temperature.gpu": "temp_c",
        "clocks.sm": "sm_clock_mhz", "clocks_throttle_reasons.active": "throttle",
        "ecc.errors.uncorrected.volatile.total": "ecc_volatile_uncorrected"}
# NVML's nvmlClocksEventReasons bits (nvml.h), as `clocks_throttle_reasons.active` prints them in hex
THROTTLE_BITS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                 (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                 (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"))
# the reasons that mean the hardware slows itself down to protect itself (heat, power brake, its own slowdown), not
# a setting or an idle GPU: the health watch records `thermal` on them, the straggler watch names a rank on them
PROTECTIVE = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
PROTECTIVE_MASK = sum(bit for bit, name in THROTTLE_BITS if name in PROTECTIVE)


def _number(text):
    """A float, or None for nvidia-smi's `[N/A]`, `[Not Supported]`, `N/A` and the like."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def throttle_reasons(text):
    """`0x0000000000000004` -> ["sw_power_cap"]; anything unreadable -> []."""
    try:
        mask = int(text.strip(), 16)
    except ValueError:
        return []
    return [name for bit, name in THROTTLE_BITS if mask & bit]


def _gpu(cells, fields):
    gpu = {KEYS[f]: None for f in FIELDS}
    gpu["throttle"] = []
    for field, cell in zip(fields, cells):
        key = KEYS.get(field)  # a field the contract has no key for (name, pci.bus_id): left out
        if key is None:
            continue
        if key == "uuid":
            gpu[key] = cell if cell.startswith("GPU-") or cell.startswith("MIG-") else None
        elif key == "throttle":
            gpu[key] = throttle_reasons(cell)
        elif key in ("index", "ecc_volatile_uncorrected"):
            number = _number(cell)
            gpu[key] = None if number is None else int(number)
        else:
            gpu[key] = _number(cell)
    return gpu


def parse_gpus(text, fields=FIELDS):
    """nvidia-smi's `--query-gpu=<fields> --format=csv,noheader,nounits` -> one dict per GPU (the
    contract's keys); lines of another width (a warning, a header, a `#` comment) are left out."""
    gpus = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields) or line.startswith("#"):
            continue
        gpu = _gpu(cells, fields)
        if gpu["index"] is not None:
            gpus.append(gpu)
    return gpus


def cpu_times(text):
    """/proc/stat -> (busy, total) jiffies of the `cpu` line (idle and iowait are not busy)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:9] if v.isdigit()]
            idle = sum(values[3:5])
            return sum(values) - idle, sum(values)
    return 0, 0


def memory_mb(text):
    """/proc/meminfo -> (used, total) MiB; used = MemTotal - MemAvailable (MemFree where older)."""
    found = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            found[name] = int(words[0])
    total = found.get("MemTotal", 0)
    available = found.get("MemAvailable", found.get("MemFree", 0))
    return (total - available) // 1024, total // 1024


def _matches(name, spec):
    """NCCL_SOCKET_IFNAME's rules: prefixes, `^` excludes, `=` exact; empty: every interface but lo."""
    spec = spec.strip()
    if not spec:
        return name != "lo"
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    names = [n for n in spec.lstrip("=").split(",") if n]
    hit = any(name == n if exact else name.startswith(n) for n in names)
    return (not hit and name != "lo") if exclude else hit  # lo only where named: it is no job network


def net_bytes(text, interfaces=""):
    """/proc/net/dev -> (rx, tx) bytes summed over the interfaces chosen (cumulative counters)."""
    rx = tx = 0
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        fields = rest.split()
        if not colon or len(fields) < 9 or not fields[0].isdigit() or not _matches(name.strip(), interfaces):
            continue
        rx, tx = rx + int(fields[0]), tx + int(fields[8])
    return rx, tx


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


class Sampler:
    def __init__(self, run_dir, interfaces="", max_bytes=MAX_BYTES):
        self.path = os.path.join(run_dir, FILE)
        self.host = os.path.basename(run_dir.rstrip("/")) or socket.gethostname()
        self.interfaces, self.max_bytes = interfaces, max_bytes
        self.fields = FIELDS  # FALLBACK_FIELDS once a driver refused one; None: no nvidia-smi here
        self.cpu = cpu_times(_read("/proc/stat"))
        self.stride, self.count = 1, 0
        try:
            self.size = os.path.getsize(self.path)
        except OSError:
            self.size = 0

    def gpus(self):
        while self.fields:
            try:
                done = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(self.fields),
                                       "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, timeout=20, universal_newlines=True)
            except (OSError, subprocess.SubprocessError):  # not installed (a CPU node), or hung
                self.fields = None
                return [], None
            if done.returncode == 0:
                return parse_gpus(done.stdout, self.fields), None
            if self.fields == FIELDS and "field" in (done.stdout + done.stderr).lower():  # said on stdout
                self.fields = FALLBACK_FIELDS  # an older driver: ask what it knows
                continue
            return [], (done.stderr or done.stdout).strip()[-300:]  # the driver failing: say it, go on
        return [], None

    def sample(self, gpus, error=None):
        busy, total = cpu_times(_read("/proc/stat"))
        spent = total - self.cpu[1]
        cpu_pct = round(100.0 * (busy - self.cpu[0]) / spent, 1) if spent > 0 else 0.0
        self.cpu = (busy, total)
        used, mem_total = memory_mb(_read("/proc/meminfo"))
        rx, tx = net_bytes(_read("/proc/net/dev"), self.interfaces)
        line = {"t": round(time.time(), 3), "host": self.host, "cpu_pct": cpu_pct, "mem_used_mb": used,
                "mem_total_mb": mem_total, "net_rx_bytes": rx, "net_tx_bytes": tx, "gpus": gpus}
        if error:
            line["gpu_error"] = error
        return line

    def write(self, line):
        self.count += 1
        if (self.count - 1) % self.stride:
            return
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        if self.size + len(data) > self.max_bytes:
            self.thin()
        with open(self.path, "ab") as out:
            out.write(data)
        self.size += len(data)

    def thin(self):
        """Every second line dropped, and every second sample from now on: the file stays under its cap."""
        with open(self.path, "rb") as source:
            kept = source.readlines()[::2]
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as out:
            out.writelines(kept)
        os.replace(tmp, self.path)
        self.size, self.stride = sum(len(line) for line in kept), self.stride * 2


class LoopedQuery:
    """One nvidia-smi left running (`-lms`), its output read a batch of GPU lines a period: NVML starts
    once, not each sample (a 4x H100 node: 73 ms of CPU per one-shot call, 3.7 ms a sample this way)."""

    def __init__(self, fields, every, count):
        self.fields, self.count, self.buffer = fields, count, b""
        self.child = subprocess.Popen(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits",
                                       "-lms", str(max(100, int(every * 1000)))], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL)

    def batches(self, silent_s):
        """(gpus, error) each period; (None, why) once nvidia-smi ended; ([], why) after `silent_s` of silence."""
        fd, batch = self.child.stdout.fileno(), []
        while True:
            if not select.select([fd], [], [], silent_s)[0]:
                yield [], "nvidia-smi printed nothing for %.0fs" % silent_s
                continue
            data = os.read(fd, 65536)
            if not data:
                yield None, "nvidia-smi ended (exit %s)" % self.child.wait()
                return
            *lines, self.buffer = (self.buffer + data).split(b"\n")
            for gpu in parse_gpus(b"\n".join(lines).decode(errors="replace"), self.fields):
                if batch and gpu["index"] <= batch[-1]["index"]:  # the next period began: a GPU went missing
                    yield batch, None
                    batch = []
                batch.append(gpu)
                if len(batch) == self.count:
                    yield batch, None
                    batch = []

    def close(self):
        if self.child.poll() is None:
            self.child.kill()
            self.child.wait()


def _running(pid, run_dir):
    """torchrun (PID) alive, not a zombie, and its end not yet written."""
    if os.path.exists(os.path.join(run_dir, "agent.exit")):
        return False
    stat = _read("/proc/%d/stat" % pid)  # not rank_procs.stat_fields: this file is shipped without it
    return bool(stat) and stat.rpartition(") ")[2][:1] not in ("Z", "X", "")


def _sample_each_period(sampler, every, pid, run_dir):
    """Without a looped nvidia-smi (a CPU node, one that failed): one query (if any) and /proc a period."""
    while _running(pid, run_dir):
        sampler.write(sampler.sample(*sampler.gpus()))
        time.sleep(every)


def main(argv):
    run_dir, every, pid = argv[1], float(argv[2]), int(argv[3])
    interfaces = argv[4] if len(argv) > 4 else ""
    sampler = Sampler(run_dir, interfaces, int(argv[5]) if len(argv) > 5 else MAX_BYTES)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the wrapper's kill: the finally below still runs
    if every <= 0:
        return 0
    time.sleep(min(1.0, every))  # a first sample soon (`top` has something to show), CPU over that second
    gpus, error = sampler.gpus()
    sampler.write(sampler.sample(gpus, error))
    if not gpus:
        _sample_each_period(sampler, every, pid, run_dir)
        return 0
    looped = LoopedQuery(sampler.fields, every, len(gpus))
    try:
        for gpus, error in looped.batches(silent_s=3 * every + 20):
            if not _running(pid, run_dir):
                return 0
            if gpus is None:
                break  # nvidia-smi ended: ask it each period from now on
            sampler.write(sampler.sample(gpus, error))
    finally:
        looped.close()
    _sample_each_period(sampler, every, pid, run_dir)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except KeyboardInterrupt:
        sys.exit(0)
