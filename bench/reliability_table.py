#!/usr/bin/env python3
"""Render docs/reliability.md from the last test session's `.pytest_reliability.json`.

    python -m pytest -q                 # the whole suite (or tests/test_reliability_*.py)
    python bench/reliability_table.py   # -> docs/reliability.md

Every row of the table comes from that file: what the reliability tests declared, saw and timed
(tests/reliability.py), and the outcome of the older integration tests that cover the rest.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("Faults", "Interrupts", "Concurrency", "Hostile input", "Secrets", "SSH trust")

INTRO = """\
# Reliability and security

What clusterctl does when things go wrong on a real cluster: nodes that vanish, networks cut
mid-transfer, daemons stopped, a full disk, Ctrl-C at every step, two controllers at once,
hostile input and secrets. Every row is a test on the rehearsal cluster (`clusterctl sandbox up`: real
sshd, Docker Engines, a registry and torchrun, one network namespace per node) that plants the
fault for real, asserts a clear error, a bounded time, nothing left behind and nothing lost, restores the
fault, and records what it observed.

This file is generated: `python -m pytest -q` writes `.pytest_reliability.json`, then
`python bench/reliability_table.py` renders it. Last run: {generated}, {passed} of {total} cases
passed{failed_note}.

"Time to detect" is how long clusterctl took to notice and report the fault (or to exit after
the signal), measured by the test; "-" where the case is not about time.
"""

NOTES = """\
## What the suite found and what changed

| found | fix |
|---|---|
| Ctrl-C/SIGTERM during `up` waited for every node's running action: an interrupted pull of a large image returned only when the pull ended (20 s and more) | the executor's pool returns at once on an interrupt; closing the connections ends the actions in flight, and dockerd cancels the pull (`executor.for_each_host`) |
| A node cut off the network during a pull hung `up` for more than 6 minutes: a Docker API stream on a dead TCP connection waits for TCP's retransmission limit | every SSH socket gets TCP keepalive probes and `TCP_USER_TIMEOUT` (10 s): the kernel drops a silent peer, and a host whose connection died mid-action is reported `unreachable` ("the connection ... was lost") instead of "internal error" (`transport/paramiko_setup.py`, `executor`) |
| dockerd stopped: `up` said "internal error: ConnectionError: Connection aborted" | "docker engine not reachable on NODE: Cannot connect to the Docker daemon ... fix: systemctl enable --now docker"; `check`'s container row no longer says "run up to create it" when the engine is down (`modules/docker.engine_action`, `verdicts.check_container`) |
| A pull failure only quoted the daemon | the cause is named: registry unreachable (with `curl .../v2/` and `container.pull: never` as fixes), plain-HTTP registry, credentials, unknown tag (`modules/docker_replies.pull_failure`) |
| An interrupted `check`/`up` left the rendezvous probe listening on the master's port for up to 12 s: an immediate `up` or `run` failed with port_in_use | the probe's stdin is held open by our connection; it exits the moment the connection ends, however clusterctl ended (`preflight._LISTENER`, `Command.stdin_open`) |
| Two controllers (two state dirs) running `up` at once interleaved on the nodes | `up`/`down` hold a `flock` on the master (`/tmp/clusterctl-locks-UID/cluster-NAME.lock`), kept by a tiny process that lives exactly as long as our SSH connection: the second controller is refused with the holder's name; a crashed controller releases it (`modules/lock.py`, `commands/up.cluster_lock`) |
| A prompt that fits the 128 KiB argument limit but not once quoted for the remote shell failed at launch on every node with "Argument list too long" and a 180 KB "evidence" | refused before launching, naming the size and the fix; a prompt over 128 KiB is refused before connecting; failure details shorten huge command lines (`runner._check_command_line`, `commands/run._check_prompt_fits`, `executor._shorten`) |
| `secret: true` values under plain names were printed by `run --plan` and stored in run.json; values the job printed reached the terminal live | masked as `***` in plans, records, the live log and the first-failure tails (`runner`) |
| `.clusterctl/` (the parents `mkdir -p` creates) was 0755 and step logs 0644 | every directory clusterctl creates is 0700, step logs 0600 (`state.private_dir`, `executor.HostLog`) |
| Names were checked with `re.match(...$)`, which accepts a trailing newline (`"node1\\n"`) | `fullmatch` for host, group, container, env and NIC names and run ids (`inventory`, `platform_env`) |
| `collect-logs` on a full disk: a traceback (manifest), "internal error" or "connection lost"; log files rewritten in place could be left truncated | "writing under DEST failed: No space left on device. Files collected earlier are intact. fix: free space there, or collect elsewhere with --dest DIR"; every file is written whole or not at all, partial files removed (`collect.write_file`, `collect.local_write_failure`) |
| Symlinks in the outputs were silently skipped | still never followed, now reported per node ("N symlink(s) not followed: x -> /etc") (`collect._LIST`) |
"""

LIMITS = """\
## Known limits

- The registry going away in the middle of a pull is reported once dockerd gives up its own
  retries (about 80 s observed); the registry down when the pull starts is reported at once.
- A controller that loses its network while holding the cluster lock keeps it until the
  master's sshd notices the dead connection (its TCP keepalive); the refusal names the holder's
  pid on the master so it can be killed.
- The lock is per remote user (`/tmp/clusterctl-locks-UID`): two controllers logging in as
  different users are not kept apart by it.
- What a job writes on the nodes is its own: the `env` file of a run (0600, under the run's
  directory) holds the secret values the ranks need; collect-logs never fetches it and masks
  every secret value in what it does fetch.
- A dead peer is detected in 10-25 s (keepalive probes, then `TCP_USER_TIMEOUT` after the next
  write); `run` has its own 7 s lost-node detection through its polls.
"""


def _cell(value) -> str:
    text = "-" if value in (None, "") else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _seconds(row: dict) -> str:
    seconds = row.get("seconds")
    return "-" if seconds is None else f"{seconds:g} s"


def _test(nodeid: str) -> str:
    path, _, name = nodeid.partition("::")
    return f"`{Path(path).name}::{name}`"


def render(document: dict) -> str:
    rows = document["rows"]
    covered = document.get("covered", [])
    cases = rows + covered
    passed = sum(1 for r in cases if r.get("outcome") == "passed")
    failed = [r for r in cases if r.get("outcome") not in ("passed",)]
    failed_note = f" ({len(failed)} not passing: see the Result column)" if failed else ""
    out = [INTRO.format(generated=document["generated"], passed=passed, total=len(cases), failed_note=failed_note)]
    for section in SECTIONS + tuple(sorted({r["section"] for r in cases} - set(SECTIONS))):
        mine = [r for r in rows if r["section"] == section]
        theirs = [r for r in covered if r["section"] == section]
        if not mine and not theirs:
            continue
        out.append(f"## {section}\n")
        out.append("| case | expected | observed (last run) | time to detect | result | test |")
        out.append("|---|---|---|---|---|---|")
        for row in mine:
            out.append(f"| {_cell(row['case'])} | {_cell(row['expected'])} | {_cell(row['observed'])} | "
                       f"{_seconds(row)} | {row['outcome']} | {_test(row['test'])} |")
        for row in theirs:
            took = f"test took {row['duration_s']:g} s" if row.get("duration_s") is not None else "-"
            out.append(f"| {_cell(row['case'])} | {_cell(row['expected'])} | covered by an earlier integration test; "
                       f"it asserts exactly this | {took} | {row['outcome']} | {_test(row['test'])} |")
        out.append("")
    out.append(NOTES)
    out.append(LIMITS)
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=REPO / ".pytest_reliability.json")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "reliability.md")
    args = parser.parse_args(argv)
    try:
        document = json.loads(args.results.read_text())
    except (OSError, ValueError) as exc:
        print(f"no results at {args.results} ({exc}); run `python -m pytest -q` first", file=sys.stderr)
        return 2
    args.out.write_text(render(document))
    print(f"{args.out}: {len(document['rows'])} cases measured, {len(document.get('covered', []))} covered elsewhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())
