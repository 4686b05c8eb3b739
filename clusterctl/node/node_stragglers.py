"""The straggler watch of a detached run, on the node: its keeper samples the node's ranks with py-spy.
Runs on the nodes, so: the standard library only, Python 3.8+; shipped beside node_agent.py into each
node's run dir (run/supervision.py, with the py-spy the attached watch ships, gzipped) and imported by
its keeper.

At the attached watch's pace (straggler_verdict.INTERVAL_S apart, the first FIRST_AFTER_S after the
start; while every rank read is still importing, straggler_verdict.import_pause_s apart), in a thread of its own so that a py-spy that hangs never holds a beat back: the ranks of this
run on this node (the processes that carry the keeper's own marker and a RANK, as watch/sampler.py's
script finds them: a rank's child with the same RANK and a launcher's shell are passed over), each read
at once with `py-spy dump --json --nonblocking` (the ranks are not paused), TIMEOUT_S at most and
MAX_OUTPUT bytes; a rank whose main thread has not run since its last good dump (/proc's schedstat
unchanged: its stack cannot have moved) is judged on that dump with its state read now, and no py-spy
starts for it (issue 52: a dump is ~15 ms of the node's CPU). Each sample is [tick, [[rank, waits],
...]] (tick: the whole second of the node's clock, so the supervisor puts the nodes' samples of one moment side by side; waits: the main thread in
a collective or asleep inside a library, straggler_verdict.frames_wait, its state read from /proc just
before py-spy starts); the latest KEPT go in every beat, the supervisor keeps
each tick once (engine.py, straggler_verdict.Watch). Without a py-spy that runs, the keeper says so
once (its log and its beats) and the run goes on unwatched. The py-spy unpacked into the run dir is
removed when the keeper ends.
"""
import gzip
import hashlib
import json
import os
import platform
import shutil
import subprocess
import threading
import time
from collections import deque

if __package__:  # imported by the controller's tests
    from clusterctl.node import collective_waits, straggler_verdict as verdict, waits_verdict as fr_verdict
    from clusterctl.node.rank_procs import MARKER, MAX_RANKS, find_ranks, stat_fields
    from clusterctl.node.safe_files import Dir
else:  # beside node_agent.py in a node's run dir
    import straggler_verdict as verdict
    import waits_verdict as fr_verdict
    from rank_procs import MARKER, MAX_RANKS, find_ranks, stat_fields
    from safe_files import Dir
    try:
        import collective_waits
    except ImportError:  # shipped by a clusterctl without it: py-spy's samples only
        collective_waits = None

RUNS_ON_NODES = True
TIMEOUT_S = 5.0  # one py-spy dump
MAX_OUTPUT = 1 << 20  # of one dump: more is not a stack we read
KEPT = 10  # samples a beat carries (the supervisor drops the ticks it has)
UNREAD = 5  # samples in a row in which py-spy read none of the ranks found: said once (a ptrace refused)
RESCAN_S = 5.0  # the ranks are looked for again this often
PACKED = "py-spy.gz"  # as run/supervision.py ships it
BINARY = "py-spy"


def unpack(run_dir, shipped):
    """The py-spy to run: the shipped one unpacked (its sha256 checked, where it runs), else one on PATH;
    (path, "") or (None, why there is none)."""
    packed, path = os.path.join(run_dir, PACKED), os.path.join(run_dir, BINARY)
    wanted = shipped or {}
    if os.path.exists(packed):
        try:
            with gzip.open(packed, "rb") as f:
                data = f.read(64 << 20)
            os.remove(packed)
            if hashlib.sha256(data).hexdigest() == wanted.get("sha") and platform.machine() == wanted.get("arch"):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                if _runs(path):
                    return path, ""
        except (OSError, EOFError, ValueError):
            pass
    found = shutil.which("py-spy")
    if found and _runs(found):
        return found, ""
    return None, f"no py-spy: the shipped binary does not run here ({platform.machine()}) and none is on PATH"


def _runs(path):
    try:
        return subprocess.run([path, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=TIMEOUT_S).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def main_state(pid):
    """The main thread's kernel state (a letter of /proc's `State:`), "" where /proc cannot say."""
    fields = stat_fields(pid, thread=pid)
    state = fields[0] if fields else ""
    return state if len(state) == 1 and state.isalpha() else ""


def ran(pid):
    """How long the main thread has run and how often it was scheduled (/proc's schedstat), "" unknown: the
    same text later means it has not run since, so its Python stack cannot have moved."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            return f.read(256).strip()
    except OSError:
        return ""


def main_frames(text):
    """The main thread's [(function, where)] from py-spy's `dump --json`, innermost first; None unreadable."""
    try:
        threads = json.loads(text)
    except (ValueError, RecursionError):
        return None
    threads = [t for t in threads if isinstance(t, dict) and isinstance(t.get("frames"), list)] \
        if isinstance(threads, list) else []
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0] if threads else None)
    frames = [(f.get("name"), f.get("filename") or f.get("short_filename") or "")
              for f in (main or {}).get("frames", ()) if isinstance(f, dict) and isinstance(f.get("name"), str)]
    return frames or None


def waits(text, state=""):
    """From py-spy's `dump --json` and the main thread's state read as it started: None (unreadable), else
    whether the main thread waits for the others (straggler_verdict.frames_wait)."""
    frames = main_frames(text)
    return verdict.frames_wait(frames, state) if frames else None


class Sampler:
    """The keeper's thread of samples; `summary()` goes in each beat, `close()` at the keeper's end."""

    def __init__(self, run_dir, shipped=None, marker=None, now=time.time):
        self.run_dir, self.shipped, self.now = run_dir, shipped, now
        self.marker = marker or [f"{k}={os.environ.get(k, '')}" for k in MARKER]
        self.samples = deque(maxlen=KEPT)
        self.problem, self.spy, self.error = "", None, ""
        self.lock, self.children, self.closed = threading.Lock(), [], threading.Event()
        self.dumped = {}  # pid -> (its schedstat before its last good dump, that dump's main-thread frames)
        self.importing = False  # every rank the latest sample read was inside `import` (straggler_verdict.importing)
        self.waits = None  # the latest flight-recorder round: {"at": unix time, "ranks": [[rank, wait_s, window_s,
        #                    collectives(, cpu_s, at)]]}
        threading.Thread(target=self._loop, daemon=True).start()
        threading.Thread(target=self._waits_loop, daemon=True).start()

    def summary(self):
        with self.lock:
            return {"samples": list(self.samples), **({"problem": self.problem} if self.problem else {}),
                    **({"waits": self.waits} if self.waits else {})}

    def _waits_loop(self):
        """Flight-recorder rounds (collective_waits.py), WAITS_ROUND_S apart, as the attached watch's: each rank's
        collectives' wait on the GPU (NCCL), which py-spy's samples cannot see. While no rank has a FIFO (gloo, an
        older torch, a process group not made yet) the rounds come further apart (fr_verdict.waits_pause_s)."""
        if collective_waits is None or self.closed.wait(fr_verdict.WAITS_FIRST_AFTER_S):
            return
        idle = 0
        while True:
            try:
                with Dir.open(self.run_dir) as d:
                    lines = collective_waits.node_round(d, marker=self.marker)
            except Exception:  # the run dir gone or refused: no round, the keeper goes on
                lines = []
            idle = 0 if lines else idle + 1
            measured = [[line["rank"], *fr_verdict.measured_figures(line)] for line in lines if "wait_s" in line]
            with self.lock:
                self.waits = {"at": round(self.now(), 3), "ranks": measured[:MAX_RANKS]} if measured else self.waits
            if self.closed.wait(fr_verdict.waits_pause_s(idle)):
                return

    def _loop(self):
        self.spy, self.problem = unpack(self.run_dir, self.shipped)
        if self.spy is None:
            print(f"no straggler watch: {self.problem}", flush=True)
            return
        ranks, scanned, unread, looks = {}, None, 0, 0
        if self.closed.wait(verdict.FIRST_AFTER_S):
            return
        while not self.closed.is_set():
            start = self.now()
            if scanned is None or start - scanned >= RESCAN_S:
                ranks, scanned = find_ranks(self.marker), start
            sample = self.sample(ranks) if ranks else []
            unread = 0 if sample or not ranks else unread + 1
            with self.lock:
                if sample:
                    self.samples.append([int(start // verdict.INTERVAL_S), sample])
                elif unread == UNREAD and not self.problem:
                    self.problem = f"py-spy read none of the {len(ranks)} ranks here: {self.error or 'no stack'}"
                    print(f"no straggler watch yet: {self.problem}", flush=True)
            looks = looks + 1 if sample and self.importing else 0  # every rank read still importing: later
            pause = verdict.import_pause_s(looks) if looks else verdict.INTERVAL_S
            left = pause - (self.now() % verdict.INTERVAL_S)  # a whole tick
            if self.closed.wait(left):
                return

    def sample(self, ranks):
        """[[rank, waits], ...] of the ranks py-spy read now, all at once."""
        started = []
        if self.closed.is_set():
            return []
        self.dumped = {pid: seen for pid, seen in self.dumped.items() if pid in ranks}
        runs = {pid: ran(pid) for pid in ranks}  # before the state: unchanged later, not run since
        states = {pid: main_state(pid) for pid in ranks}  # every rank's at about one moment, before py-spy
        out, read = [], []
        for pid, rank in ranks.items():
            before = self.dumped.get(pid)
            if runs[pid] and before and before[0] == runs[pid]:  # not run since its last dump: that stack, no py-spy
                out.append([rank, int(verdict.frames_wait(before[1], states[pid]))])
                read.append(before[1])
                continue
            try:
                child = subprocess.Popen([self.spy, "dump", "--json", "--nonblocking", "--pid", str(pid)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            except OSError:
                continue
            started.append((pid, rank, states[pid], child))
        with self.lock:
            self.children = [c for _p, _r, _s, c in started]
        deadline = time.monotonic() + TIMEOUT_S
        for pid, rank, state, child in started:
            try:
                text, error = child.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.communicate()
                continue
            frames = main_frames(text.decode("utf-8", "replace")) \
                if child.returncode == 0 and len(text) <= MAX_OUTPUT else None
            if frames is not None:
                self.dumped[pid] = (runs[pid], frames)
                out.append([rank, int(verdict.frames_wait(frames, state))])
                read.append(frames)
            elif error.strip():
                self.error = error.decode("utf-8", "replace").strip().splitlines()[-1][:200]
        with self.lock:
            self.children = []
        self.importing = bool(read) and all(verdict.importing(name for name, _where in frames) for frames in read)
        return sorted(out)

    def close(self):
        """The keeper ends: no py-spy of ours runs on, and the unpacked one goes."""
        self.closed.set()
        with self.lock:
            for child in self.children:
                try:
                    child.kill()
                except OSError:
                    pass
        for name in (BINARY, PACKED):
            try:
                os.remove(os.path.join(self.run_dir, name))
            except OSError:
                pass
