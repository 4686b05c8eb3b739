"""The passive health watch of a detached run, on the node (issue 36). Runs on the nodes, so: the
standard library only, Python 3.8+; shipped beside node_agent.py into each node's run dir
(run/supervision.py) and imported by its keeper.

Every EVERY_S (the first at once), in a thread of its own so that an nvidia-smi that hangs (a GPU
fallen off the bus does that) never holds a beat back, it reads what watch/health_watch.py reads over
SSH for an attached run:
- `nvidia-smi --query-gpu=<QUERY> --format=csv,nounits` (QUERY is the one list of columns: health/watch.py,
  which parses them and builds the attached watch's command, imports it)
- the kernel log's NVRM lines since the run began (`dmesg`, else `journalctl -k`; where neither is
  readable by the keeper's user, nothing), stamped lines compared to the node's boot time
- `dcgmi health -c` where DCGM is installed
The raw texts, each bounded to its last TEXT_BYTES, and the node's first nvidia-smi text (the
baseline a later one is compared with) go in the keeper's next report; the supervisor keeps each
node's latest sample in supervisor.json, and the controller parses it with health/watch.py's
parsers (watch/detached_health.py). Nothing is judged here. A sample lost with a beat loses nothing:
the next one has the same kernel lines and counters.
"""
import os
import re
import shutil
import subprocess
import threading
import time

RUNS_ON_NODES = True
EVERY_S = 30.0
TIMEOUT_S = 5.0
FINAL_WAIT_S = 5.0
TEXT_BYTES = 8000
KERNEL_LINES = 50
QUERY = ("index", "uuid", "serial", "pci.bus_id", "ecc.errors.uncorrected.volatile.total",
         "ecc.errors.uncorrected.aggregate.total", "retired_pages.pending", "remapped_rows.pending",
         "remapped_rows.failure", "remapped_rows.uncorrectable", "clocks_throttle_reasons.active",
         "temperature.gpu")
_STAMP = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")
# The kernel's stamp and the boot time read back from /proc/uptime disagree by up to a tick, and a
# detached run's keeper samples within milliseconds of the run's start: a line that much older counts.
STAMP_SLACK_S = 1.0


def _run(argv):
    """A tool's stdout, or None: not installed, failed, or past TIMEOUT_S."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def _boot_time():
    try:
        with open("/proc/uptime") as f:
            return time.time() - float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def kernel_lines(text, since, boot):
    """The NVRM lines of kernel log text stamped at or after `since` (unix time); an unstamped line
    (the rest of a multi-line notice) goes with the line before it. The last KERNEL_LINES."""
    kept, keep = [], False
    for line in text.splitlines():
        stamp = _STAMP.match(line)
        if stamp:
            keep = boot is not None and boot + float(stamp.group(1)) >= since - STAMP_SLACK_S
        if keep and ("NVRM" in line or "fallen off the bus" in line):
            kept.append(line)
    return "\n".join(kept[-KERNEL_LINES:])


def read_kernel(since):
    text = _run(["dmesg"])
    if text is None:
        text = _run(["journalctl", "-k", "-q", "-o", "short-monotonic", "--no-pager"])
    return "" if text is None else kernel_lines(text, since, _boot_time())


def sample(since):
    """One read of the node: {"at", "smi", "kernel", "dcgm"}, each text its last TEXT_BYTES ("" where
    the tool is not there or failed)."""
    smi = _run(["nvidia-smi", "--query-gpu=" + ",".join(QUERY), "--format=csv,nounits"]) or ""
    dcgm = _run(["dcgmi", "health", "-c"]) or ""
    return {"at": round(time.time(), 3), "smi": smi[-TEXT_BYTES:], "kernel": read_kernel(since)[-TEXT_BYTES:],
            "dcgm": dcgm[-TEXT_BYTES:]}


class Sampler:
    """The keeper's: `take()` on every beat, `delivered()` once the supervisor acknowledged it."""

    def __init__(self, since=None, every_s=EVERY_S, read=sample):
        self.since = float(since) if isinstance(since, (int, float)) else time.time()
        self.every_s, self.read = every_s, read
        self.lock = threading.Lock()
        self.pending, self.first_smi, self.sent = None, None, False
        self.stopped, self.first_done = threading.Event(), threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def stop(self):
        self.stopped.set()

    def _loop(self):
        while not self.stopped.is_set():
            try:
                found = self.read(self.since)
            except Exception as exc:  # a watch that fails must never end the keeper: said in the sample
                found = {"at": round(time.time(), 3), "error": repr(exc)[:300]}
            with self.lock:
                if self.first_smi is None and found.get("smi"):
                    self.first_smi = found["smi"]
                self.pending = dict(found, smi_first=self.first_smi or "")
            self.first_done.set()
            self.stopped.wait(self.every_s)

    def take(self, final=False):
        """{} or {"health": the newest sample not delivered yet}; it is offered again on every beat
        until `delivered` (a keeper's first beats may reach no supervisor yet). `final` (the report
        of its torchrun's end): a run shorter than the first sample waits for it (FINAL_WAIT_S at
        most, once: well inside the supervisor's 15 s before a silent node is lost)."""
        if final and not self.sent:
            self.first_done.wait(FINAL_WAIT_S)
        with self.lock:
            found = self.pending
        return {"health": found} if found else {}

    def delivered(self, sample):
        """The supervisor acknowledged the report that carried `sample` (None: none was carried)."""
        with self.lock:
            if sample is not None and sample is self.pending:
                self.pending, self.sent = None, True
