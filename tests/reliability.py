"""The rows of docs/reliability.md, recorded by the reliability tests while they run.

A reliability test declares its row first (`row = reliability("case", "expected", section=...)`), then says
what it saw (`row.observe("exit 3 in 4.1 s; node3 unreachable: ...", seconds=4.1)`). The
session merges its rows, with the tests' outcomes, into `.pytest_reliability.json` at the root of
the checkout (gitignored; a run of one tier replaces only the rows of the tests it ran);
`bench/reliability_table.py` renders docs/reliability.md from it.
Cases that older integration tests already cover are listed in COVERED: their outcome in the
same session fills their row.

Also here: what several reliability test files share (signals to a subprocess CLI, a slow link).
"""
from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / ".pytest_reliability.json"

SECTIONS = ("Faults", "Interrupts", "Concurrency", "Hostile input", "Secrets", "SSH trust")
DEFAULT_SECTION = {"test_reliability_input.py": "Hostile input", "test_reliability_ssh.py": "SSH trust"}

# Cases covered by the integration tests of Issues 2-6: node id -> (section, case, expected).
COVERED = {
    "tests/rehearsal/test_cluster_exec.py::test_a_node_whose_network_is_cut_is_unreachable_within_the_connect_timeout": (
        "Faults", "a node unreachable at `exec` (network cut)",
        "that node `unreachable` within ssh.connect_timeout (3 s), the others answer, exit 3"),
    "tests/rehearsal/test_cluster_exec.py::test_eight_nodes_answer_and_one_with_sshd_stopped_is_unreachable_while_seven_succeed": (
        "Faults", "one node of 8 with sshd stopped at `exec`", "that node `unreachable` within 3 s, 7 answer, exit 3"),
    "tests/rehearsal/test_cluster_health.py::test_a_node_cut_off_mid_run_stops_the_run_and_its_own_ranks_by_lease_is_quarantined_left_out_of_the_next_plan_and_back_after_a_passing_check": (
        "Faults", "a node's network cut mid-run",
        "run stops within 15 s naming that node (`node_unreachable`); its ranks stop by lease, no process left"),
    "tests/rehearsal/test_cluster_run.py::test_ctrl_c_stops_every_rank_and_a_second_run_meanwhile_is_refused": (
        "Interrupts", "SIGINT to `run` mid-run; a second concurrent `run` (same and another state dir)",
        "exit 130, every rank stopped within 10 s; the second run refused (exit 2, 'already in progress')"),
    "tests/rehearsal/test_cluster_run.py::test_the_example_job_runs_on_3_nodes_x_2_ranks_and_every_rank_gets_the_prompt_byte_for_byte": (
        "Hostile input", "prompt with quotes, $(...), backticks, globs, tabs, newlines, UTF-8",
        "every rank receives it byte for byte; no shell ever interprets it (canary file never created)"),
    "tests/rehearsal/test_cluster_collect.py::test_collect_gets_logs_outputs_and_diagnostics_once_with_a_manifest_and_no_secret": (
        "Secrets", "secret values printed by the job, in collected files",
        "masked (`***`) in every collected file and in the state dir"),
    "tests/rehearsal/test_cluster_exec.py::test_a_changed_host_key_is_refused_under_strict_and_under_accept_new": (
        "SSH trust", "a node's host key changed", "refused under strict and accept-new ('CHANGED'), known_hosts untouched"),
    "tests/rehearsal/test_cluster_exec.py::test_an_unknown_host_key_is_refused_under_strict_and_recorded_under_accept_new": (
        "SSH trust", "an unknown host key", "strict refuses; accept-new records the node's real key once"),
}


class Row(dict):
    """One case: section, case, expected, observed, seconds (time to detect), test, outcome."""

    def observe(self, observed: str, seconds: Optional[float] = None) -> None:
        self["observed"] = observed
        if seconds is not None:
            self["seconds"] = round(seconds, 2 if seconds < 1 else 1)


class Recorder:
    def __init__(self):
        self.rows: list[Row] = []
        self.covered: dict[str, dict] = {}
        self.ran: set[str] = set()  # every test with an outcome this session
        self.started = time.time()

    def declare(self, nodeid: str, case: str, expected: str, section: Optional[str] = None) -> Row:
        section = section or DEFAULT_SECTION.get(Path(nodeid.split("::")[0]).name, "Other")
        assert section in SECTIONS, section
        row = Row(section=section, case=case, expected=expected, observed="", seconds=None, test=nodeid,
                  outcome="running")
        self.rows.append(row)
        return row

    def outcome(self, nodeid: str, outcome: str, duration: float, message: str = "") -> None:
        self.ran.add(nodeid)
        for row in self.rows:
            if row["test"] == nodeid and row["outcome"] in ("running", "passed"):
                row["outcome"] = outcome
                if outcome != "passed" and message:
                    row["observed"] = (row["observed"] + " | " if row["observed"] else "") + f"FAILED: {message}"
        if nodeid in COVERED:
            section, case, expected = COVERED[nodeid]
            self.covered[nodeid] = {"section": section, "case": case, "expected": expected, "test": nodeid,
                                    "outcome": outcome, "duration_s": round(duration, 1)}

    def write(self, path: Path = RESULTS) -> None:
        """Merged into the file's earlier rows: a session that ran one tier (or one file) replaces the rows of
        the tests it ran and keeps the others'; rows of test files that no longer exist are dropped."""
        if not self.rows and not self.ran & COVERED.keys():
            return  # a run without the reliability tests keeps the last table's data
        earlier = _read(path)
        mine: dict[str, list[Row]] = {}
        for row in self.rows:
            mine.setdefault(row["test"], []).append(row)
        rows: list[dict] = []
        for row in earlier.get("rows", []):
            test = row.get("test", "")
            if test in mine:
                rows += mine.pop(test)  # where that test's rows were
            elif test not in self.ran and (REPO / test.split("::")[0]).is_file():
                rows.append(row)
        rows += [row for declared in mine.values() for row in declared]
        before = {entry["test"]: entry for entry in earlier.get("covered", []) if isinstance(entry, dict)}
        document = {"generated": time.strftime("%Y-%m-%d %H:%M:%S"), "session_s": round(time.time() - self.started, 1),
                    "rows": rows, "covered": [self.covered.get(n) or before.get(n) or {
                        "section": s, "case": c, "expected": e, "test": n, "outcome": "not run", "duration_s": None}
                        for n, (s, c, e) in COVERED.items()]}
        path.write_text(json.dumps(document, indent=2) + "\n")


def _read(path: Path) -> dict:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


# --------------------------------------------------------------------------- a CLI in a subprocess


class Watched:
    """A `clusterctl` subprocess (Cli.popen, human output) whose stderr is read as it comes, so a
    test can wait for a step to begin and then signal it."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> float:
        """Seconds until `text` appeared on stderr (AssertionError after `timeout`)."""
        started = time.monotonic()
        while text not in self.stderr:
            if self.proc.poll() is not None and text not in self.stderr:
                raise AssertionError(f"clusterctl exited {self.proc.returncode} before {text!r}:\n{self.stderr[-3000:]}")
            if time.monotonic() - started > timeout:
                raise AssertionError(f"no {text!r} after {timeout}s:\n{self.stderr[-3000:]}")
            time.sleep(0.05)
        return time.monotonic() - started

    def wait_until(self, predicate, timeout: float, what: str):
        """Poll `predicate` while clusterctl runs; AssertionError (with its stderr) when it exits or time is up."""
        started = time.monotonic()
        while not predicate():
            if self.proc.poll() is not None:
                raise AssertionError(f"clusterctl exited {self.proc.returncode} before {what}:\n{self.stderr[-3000:]}")
            if time.monotonic() - started > timeout:
                raise AssertionError(f"no {what} after {timeout}s:\n{self.stderr[-3000:]}")
            time.sleep(0.05)

    def signal_and_wait(self, signum: int, timeout: float = 30) -> tuple[int, float]:
        """Send `signum`; (exit code, seconds until exit)."""
        sent = time.monotonic()
        self.proc.send_signal(signum)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"clusterctl still running {timeout}s after signal {signum}:\n{self.stderr[-3000:]}")
        self._reader.join(5)
        return code, time.monotonic() - sent

    def finish(self, timeout: float = 120) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=30)
            raise AssertionError(f"clusterctl did not finish in {timeout}s:\n{self.stderr[-3000:]}")
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


# --------------------------------------------------------------------------- a slow link


@contextlib.contextmanager
def slow_link(sb, node: str, rate: str = "16mbit"):
    """Shape what `node` receives from the bridge (its registry pulls, our commands) to `rate`:
    a token bucket on the host side of its veth. Always removed on exit."""
    veth = sb.node(node).host_veth
    subprocess.run(["tc", "qdisc", "replace", "dev", veth, "root", "tbf", "rate", rate, "burst", "64kb",
                    "latency", "500ms"], check=True, timeout=10)
    try:
        yield
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], timeout=10)


@contextlib.contextmanager
def slow_uplink(sb, node: str, rate: str = "16mbit"):
    """Shape what `node` sends (a collect's tar stream) to `rate`, inside its namespace."""
    sb.ns_exec(node, ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "64kb",
                      "latency", "500ms"])
    try:
        yield
    finally:
        sb.ns_exec(node, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
