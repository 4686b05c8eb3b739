#!/usr/bin/env python3
"""Render docs/reliability.md from the last test session's `.pytest_reliability.json`.

    python -m pytest -q                 # the whole suite, or one tier: a run keeps the rows of the tests it did not run
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
| A pull failure only quoted the daemon | the cause is named: registry unreachable (with `curl .../v2/` and `container.pull: never` as fixes), plain-HTTP registry, credentials, unknown tag (`registry/docker_replies.pull_failure`) |
| An interrupted `check`/`up` left the rendezvous probe listening on the master's port for up to 12 s: an immediate `up` or `run` failed with port_in_use | the probe's stdin is held open by our connection; it exits the moment the connection ends, however clusterctl ended (`preflight._LISTENER`, `Command.stdin_open`) |
| Two controllers (two state dirs) running `up` at once interleaved on the nodes | `up`/`down` hold a `flock` on the master (`/tmp/clusterctl-locks-UID/cluster-NAME.lock`), kept by a tiny process that lives exactly as long as our SSH connection: the second controller is refused with the holder's name; a crashed controller releases it (`modules/lock.py`, `commands/up.cluster_lock`) |
| A prompt that fits the 128 KiB argument limit but not once quoted for the remote shell failed at launch on every node with "Argument list too long" and a 180 KB "evidence" | refused before launching, naming the size and the fix; a prompt over 128 KiB is refused before connecting; failure details shorten huge command lines (`runner._check_command_line`, `commands/run._check_prompt_fits`, `executor._shorten`) |
| `secret: true` values under plain names were printed by `run --plan` and stored in run.json; values the job printed reached the terminal live | masked as `***` in plans, records, the live log and the first-failure tails (`runner`) |
| `.clusterctl/` (the parents `mkdir -p` creates) was 0755 and step logs 0644 | every directory clusterctl creates is 0700, step logs 0600 (`state.private_dir`, `executor.HostLog`) |
| Names were checked with `re.match(...$)`, which accepts a trailing newline (`"node1\\n"`) | `fullmatch` for host, group, container, env and NIC names and run ids (`inventory`, `platform_env`) |
| `collect-logs` on a full disk: a traceback (manifest), "internal error" or "connection lost"; log files rewritten in place could be left truncated | "writing under DEST failed: No space left on device. Files collected earlier are intact. fix: free space there, or collect elsewhere with --dest DIR"; every file is written whole or not at all, partial files removed (`collect.write_file`, `collect.local_write_failure`) |
| Symlinks in the outputs were silently skipped | still never followed, now reported per node ("N symlink(s) not followed: x -> /etc") (`node/node_archive.py`) |
| collect-logs listed the files, then ran `tar` on the list as root: a directory swapped for a symlink in between was followed (a 0600 root file came back), and a file named `x\\n0\\t0\\t..` added `..` to the newline-split listing (the parent of job.outputs archived) while the odd file itself was dropped (issue 34) | one node-side step finds and archives (`node/node_archive.py`): every path component opened with O_NOFOLLOW from its parent's descriptor, each file archived from the descriptor it was checked on; odd names sent under a safe name (%XX) and reported; the job's `env` and the run's `supervision.json` never sent |
| A negative `Content-Length` made a run's supervisor read until the peer hung up, before the signature was checked (1.5 GiB sent: 1.5 GB of memory); idle connections had no timeout (~1000 of them ended the run); each malformed request wrote a traceback to supervisor.log (issue 34) | the length is checked first (digits, at most 256 KiB); 5 s per read; 16 connections per address, 256 in all (full: one of the greediest address is dropped); a refusal is one line of at most 300 characters, at most one a second |
| `export sbatch` wrote `secret: true` values into the 0755 script and onto srun's command line (issue 34) | not written: the script checks that the submitting shell's environment holds them (`--export=ALL` for sbatch and srun) |
| A run directory another local user made first on 1777 outputs was used as found: that user owned the env file with the job's secrets (issue 34) | made with an exclusive `mkdir -m 700` or proven ours (a directory, not a symlink, our owner, mode 0700), else refused with its owner and mode (`node/safe_files.py`, issue 47: through `node/run_files.py write-env`) |
| collect's tar reader held GNU long-name and pax headers whole and inflated gzip nobody asked for: 1 MiB from a node cost 2 GiB; rank logs were read whole and stored twice: 1.4 GiB of logs peaked at 2.8 GiB (issue 34) | headers bounded (64 KiB names, 1 MiB pax), gzip refused without `--compress`; rank logs hard-linked or copied through 1 MiB (`collect/arrange.py`) |
| Secret values escaped inside JSON (a password with `"` or `\\`; Go's `\\u0026`) were not masked in docker-inspect.json and run.json (issue 34) | every secret is also masked in its JSON-escaped forms (`ground/masking.written_forms`) |
| The peer image relay authenticated one direction only (issue 34): its token was on a command line (`ps` showed it to every local user of the sending node, who could connect first and receive a private image: 64 KiB of it read in the test before stopping), the receiver piped whatever came into `docker load` and checked only the expected tag's ID afterwards (other tags in an injected tar stayed: on a Docker 20.10 engine, `ubuntu:22.04` added to the fixture's manifest was loaded beside it), and idle connections each held the sender 30 s in turn | a per-transfer key on each node's SSH session stdin; both ends prove it (HMAC-SHA256 over both sides' nonces) before any image byte; handshakes side by side, 5 s each, 32 at once, 4 per address; the receiver's check passes `docker load` only the seed's image with the tag asked for, else a broken stream (`registry/relay.py`, `registry/loadcheck.py`) |
| 16 connections trickling a byte every 4 s from a keeper's own address held every slot of that address (5 s per read, not per request): the keeper was refused and the detached run failed after 15 s; two idle connections from the master's address made mpirun's agent exit 255 (the gate took one handshake at a time); 4 handshakes per address let a local user make a peer image transfer fall back to the registry (issue 47) | one listener discipline for the supervisor, the gate and the relay (`node/listener.py`): a deadline per request, slots per address over unproven connections, a newcomer dropping the oldest (never refused), handshakes side by side |
| The transport held a command's whole output: 40k symlinks with long targets made a 1 GB collect report and 3.3 GB of controller memory; a sparse 1 GiB metrics.jsonl cost 2 GB per `top` refresh per node (issue 47) | `Command.max_output` per stream (32 MiB by default), the rest dropped and named (host, command, bytes); `top` reads files' last 64 KiB |
| A detached job could forge health samples in the supervisor's file or sign beats with the run's key; the hosts came from that file, so nodes not even in the run were quarantined (issue 47) | per-keeper keys (HMAC(run secret, host)); the run's hosts from the controller's record; job-side evidence (source `job`) alone makes a node suspect, never quarantined |
| Checkpoint replicas signed with one key every node of the run held (HMAC(secret, "checkpoint replicas")): a node's job could put a step as any other node on a third (issue 47) | a key per pair of nodes (`checkpoint_wire.pair_key`), each node's config holding its own pairs' only; a request is checked with the key of the sender it names, and refused from another run host's address |
| collect of a run whose report passed the 64 MiB the controller reads (40k links with long targets) failed every time: the report's end was dropped with the rest (issue 47) | the node bounds its report (`node_archive.Report`): 1000 links, skips, renames of each kind listed, the rest counted; before the files' lines pass 48 MiB the archive stops whole, collect keeps what came and says to collect again for the rest |
| GPU leases ran their node program over stdin, a second runner beside the inline one (issue 47) | one runner for every node program of one command, `node.inline_argv` (`python -I -S -c TEXT`): run_files, leases, collect's archiver, the image relay; a test finds any other |
| Slack-shaped notifications escaped `& < >` before masking (a secret holding one went out unmasked); a detached healing run's failed-attempt evidence reached run.json and the report unmasked; a crafted bundle's host name gave the report a working `javascript:` link (issue 47) | one masking of the final text of everything written out, over every form one or two encodings give a secret (`ground/masking.py`); report links only percent-encoded relative paths to files inside the bundle |
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
- collect-logs reads bind-mounted outputs on the host as root (sudo), not as the files' owner (what
  root wrote in the container is root's there); what keeps it inside the run is the node-side
  walk that follows no symlink, not a dropped privilege. A rank that wrote to both stdout and
  stderr is stored twice (the fetched files and the joined `<host>-r<rank>.log`); agent.log and
  one-stream ranks are hard links (stored once).
- The peer image relay's stream is authenticated at its start (both ends prove the transfer's key),
  not encrypted: whoever can read the job network's traffic sees the image's bytes, and one who can
  also rewrite it mid-stream gets its changes refused (the check's digests, `docker load`'s diff IDs),
  which fails the transfer. Layer contents are checked by `docker load` itself against the config's
  diff IDs, not by the check. An OCI-layout save whose index points at an image index (several
  platforms: the containerd image store) is refused by the check: those nodes pull from the registry.
  The check costs CPU on the receiver: on loopback on the 2-core test machine (load 4), a 268 MB
  save went through send, receive and check at 250-320 MB/s, where the old send and receive alone
  ran at 650-1950 MB/s; the check alone 310-390 MB/s in 24 MB of memory. On a link faster than
  about 2.5 Gbit/s the check, not the link, sets a transfer's speed.
"""


FILES = """\
## A run's files on a node: one no-follow layer, one way to own a directory

A run's directories are a bind mount the job writes into as root in its container (or as whichever user
its image says), and on a shared `job.outputs` (mode 1777) every local user of the node may create names
there first. Two classes of attack follow, and each has one implementation (issue 47):

**Links, FIFOs and devices the job puts in its run dir (H1).** Every read, write, rename, listing and
removal a clusterctl process does under a run's directories goes through `node/safe_files.py`: each path
component opened from its parent's descriptor with `O_NOFOLLOW`; an existing file opened first as `O_PATH`
(which opens nothing: no FIFO waits, no device node acts on an open), its kind checked on that descriptor,
and only a regular file reopened through `/proc/self/fd` (the same inode, whatever is renamed meanwhile);
reads bounded (16 MiB unless the caller says less, `tail` reads from the end); a write is a fresh exclusive
temp file renamed over the name (a link there is replaced, never followed); trees deeper than 64 levels are
reported, not walked. The controller reaches it through one entry point, `node/run_files.py OP BASE REL`,
run as `python3 -I -S -c <program>` by `node.inline_argv`, the one way every node program of one command
runs (the GPU leases, collect's archiver and the image relay too; tests/unit/test_node_programs.py fails on a
program sent any other way, on stdin or as ad hoc `-c` text; the program's text is in the command, never a file
the job or another user could change; `-I -S`: no environment variable, user site or working directory of
the node changes what runs). plan/node_files.py builds its commands for the attached run's poll and lease renewal, `stop`'s mark and its wait, `logs`
and the live log (node/follow_files.py: tail's stream, byte for byte, without `tail -F`), the failure log
tail, `top` and `metrics`, the supervisor's state, the flight-recorder dumps, the relaunch's set-aside,
nccl-test's result, the env, the shipped files and the supervisor's key. The node programs (the keeper and
supervisor, the healing keeper, collect's archiver) import the same layer, shipped beside them.
`tests/unit/test_node_file_operations.py` walks the code (AST of clusterctl/node/, every script and argv the
controller sends) and fails on any file operation outside the layer that is not named with its reason.
The poll's cost: 16 ms of CPU per poll on a node against 2.2 ms for the shell it was, one poll every 4 s:
0.4% of a core (docs/benchmarks.md). No shell form is safe: `[ -L ]` then a write races the job, `touch -h`
still follows a linked directory above the lease, and reading agent.exit needs an open that refuses links,
FIFOs and devices at once.

**Directories someone else made first (H2).** Which directories are ours, and how each is proven:

| directory | made | reused only when |
|---|---|---|
| `<outputs>/logs`, `logs/<run id>` (shared by the nodes) | as root (sudo, or in the container), with job.outputs' mode | a real directory (no link), owned by us or root, not writable by group or others unless sticky (1777: only an entry's owner moves it) |
| `logs/<run id>/.files` (programs the nodes run, the prompt) | as root, 0755 (the ranks read it whoever they run as), files 0644 | the same: owned by us or root, nobody else may write it |
| `logs/<run id>/<host>` (the node's run dir: its env, the run's key) | exclusively, 0700 (given to the SSH user without a container: it runs the job) | a real directory of that user, 0700 |
| `<host>.attempt-N` (a relaunch's set-aside) | by `rename(2)`, which never moves a directory into another: a non-empty one, a file or a link there is refused | the keeper's own earlier set-aside of the same attempt, proven 0700 and ours |

Anything else is refused with the path, what is wrong and the fix (`clusterctl: refused PATH: is owned by
uid 1001, neither 0 nor root...; remove it (or have root make it, mode 1777, once) and run again`), before
an env, a key or a program is written: nothing of another user's runs. A job.outputs that nodes reach as
different users (root on one, a sudo user on another) works because the shared directories are made by
root on every node; a node whose user may not sudo makes them as itself, and a node reached as root then
refuses them (the fix says so).

**What the job may still write.** Its run dir is its own: the ranks' logs, checkpoints and outputs under
it, as root in the container or as the image's user (the node's run dir is 0700: an image user other than
root writes under job.outputs, not into the run dir, as before). The job may turn any of its files into a
link, a FIFO or a device node: clusterctl then refuses that file (a poll whose agent.exit is a link says the
node failed; a linked lease is not renewed, and the wrapper stops the ranks when the lease runs out) and
never reads or writes what it points at. Processes that run as the job's peer (the wrapper, the metrics
sampler, the mpirun gate, in the job's container or as its user) touch the run dir with the job's own rights
and are named as such in the test's allow-list.
"""


LISTENERS = """\
## What listens on the job network, and what an attacker there can do

Three things clusterctl starts accept connections from the network the ranks use, and all three keep
**one listener discipline, one implementation** (`node/listener.py`, standard library: imported beside
the supervisor and the gate, carried as text in front of the relay's own program):

- **a deadline per request, not per read**: a connection that has not proven itself (its signature,
  its handshake) within the listener's deadline of its accept is shut down by a reaper thread, however
  it trickles bytes (before: 5 s per read, so one byte every 4 s held a slot for ever);
- **slots per address and in all, over unproven connections; a newcomer is never refused**: when its
  address is full, the oldest unproven connection of that address is dropped for it; when all are
  full, the oldest of the address holding the most. The key holder (a keeper, mpirun's agent, the
  receiving relay) proves itself within milliseconds of connecting, so a crowd of idle or slow
  connections from its very address (a local user, a container NATed through the node) cannot keep it
  out: the crowd would have to open a whole address's worth of new connections inside those
  milliseconds, every time;
- **handshakes side by side**, each on its own thread: one silent peer never holds up the next;
- **a proven connection leaves the slots**: the key holder's is never dropped for another.

| listener | admits | from whom | deadline | unproven slots (per address / all) |
|---|---|---|---|---|
| supervisor (`node_agent.py supervise`, rendezvous port + 1, a detached run's life) | signed `POST` beats, sequence growing | anyone connects; only a body signed with the keeper key of the host it names (`X-Clusterctl-Host`, a host of the run) acts, for that host only | 5 s per request | 16 / 256 |
| mpirun gate (`node_mpi_gate.py gate`, rendezvous port + 3, until mpirun's agent came) | the first `orted` command proven with the run's MPI secret | the master's address only (others closed before a byte) | 10 s per handshake | 8 / 8 |
| image relay (`registry/relay.py`, rendezvous port + 2, one transfer) | the first receiver proving the transfer's key | anyone connects; only the key holder is sent a byte | 5 s per handshake | 8 / 32 |
| checkpoint replicas (`node/checkpoint_replica.py`, rendezvous port + 4, each keeper of a run with `job.checkpoint.replicas`) | one signed request a connection (`put` of the sender's own step, `get` for a restore), nonce taken once, fresh within 10 min, files checked against the signed manifest | anyone connects; only a request signed with the key of its pair (the run host it names as sender, and this node) acts, never from another run host's address; nothing unproven is answered | 5 s for the signed request line | 4 / 16 |

Who holds which key (a job reads its own node's run dir, so it holds what its node holds):

| key | what it is | held by | lets its holder |
|---|---|---|---|
| the run's secret | 32 random bytes a run | the controller; the master's `supervision.json` (`supervisor_key`) | derive every key below: the master's job can beat as any host of its run (never another: the host list is the controller's) |
| a keeper's key | HMAC(secret, "keeper " + host) | that node's `supervision.json` | beat for that host only |
| a replica pair key | HMAC(secret, "checkpoint replicas", both hosts sorted) | the two nodes' `supervision.json` (`replica_keys`: a node's pairs only) | copy steps between those two nodes only |
| a relay transfer key | 32 random bytes a transfer | the two ends' SSH stdin, for that transfer | send or receive that image once |

On a `job.outputs` shared by the nodes, a job (root in its container) reads every node's run dir, and so
every key of its run: it still speaks for no host outside the run, and its evidence stays job-side.

Tests: tests/local/test_listeners.py (16 connections sending one byte every 4 s from the keeper's own
address against a real supervisor and keeper: the run stays running; the gate past 12 idle and 4
trickling connections from the master's own address; the relay's receiver past 20 trickling
connections from its own address), tests/local/test_security_hardening.py (800 idle connections and a
negative Content-Length flood).

What each one does past its handshake:

- **A detached run's supervisor** (`node/node_agent.py supervise`, on the master at the rendezvous
  port + 1, for the run's life). It accepts `POST` requests whose body is a keeper's report,
  signed with HMAC-SHA256 under the run's key (32 random bytes, in the 0600 `supervision.json` of
  each node's 0700 run directory) and carrying a sequence number that must grow. Anything else is
  answered 403/409/413 and changes nothing. Bounds: `Content-Length` must be digits and at most
  256 KiB, checked before a byte of the body is read; the listener's slots and 5 s per request; a
  refused request is one line of supervisor.log (at most 300 characters, at most one line a second,
  the rest counted).
- **The peer image relay** (`registry/relay.py`, during `up` only: on a sending node's job-network
  address at the rendezvous port + 2, for one transfer, at most 60 s waiting for its receiver, then
  the stream). It sends the image to the first connection that proves the transfer's key and to no
  other. The key is 32 random bytes clusterctl makes for that one transfer and gives only to its two
  ends, on their SSH sessions' stdin (never a command line or the environment, which `ps` and /proc
  show every local user). A client opens with the relay's hello and a 32-byte nonce; the sender
  answers with its own nonce and HMAC-SHA256(key, "sender" + both nonces); the client checks it
  (constant time) and answers HMAC-SHA256(key, "receiver" + both nonces), which the sender checks
  before any image byte flows. Bounds: 51 bytes read from a client before its proof, the listener's
  slots and 5 s for the whole handshake, so neither idle nor trickling connections hold up or keep
  out the receiver's, which tries again until its 60 s are up; a peer silent for 30 s mid-stream
  ends the transfer. The receiving end checks what it gets before
  `docker load` may keep it (`registry/loadcheck.py`): only the seed's image (its config digest,
  the ID the registry's manifest names), with no tag but the one asked for, in `docker save`'s
  layouts; each blob the content its name says; anything else ends the stream broken, so
  `docker load` fails before it tags or loads anything. Refusing was chosen over loading and
  removing what was not asked for: a tag, once on a shared engine, can be used before it is removed.
- **The mpirun gate** (`node/node_mpi_gate.py gate`, `job.launcher: mpirun` only): see its docstring;
  it runs the first command proven with the run's secret and closes its listening socket.

An attacker on the job network **cannot**: end, stop or mark failed a supervised run, nor forge
or replay a keeper's report or the supervisor's answer (no key); exhaust the supervisor's memory
(under 30 MB observed against 800 idle connections and 400 MB behind a negative Content-Length);
fill supervisor.log; keep a keeper out from the keeper's own address. It **can**: connect and be
refused; hold up to 16 unproven connections per address it owns for 5 s each; with hundreds of
addresses, delay keepers' reports by the connections it makes them lose; past `lost_after_s` (15 s) without a report, the run is stopped as a lost node: the
same as cutting the network, which such an attacker can do anyway.

Against the image relay, an attacker on the job network (or a local user of a node, reading `ps`)
**cannot**: receive an image (no key: the sender's relay answers no one who cannot prove it); feed a
receiving node an image, a tag or a layer of its own (the receiver demands the sender's proof first,
then the check refuses any image but the seed's and any tag but the one asked for); replay a
handshake (fresh nonces from both sides, a new key per transfer); hold up a transfer with idle or
trickling connections (they are proved side by side and dropped 5 s after their accept, or for a
newcomer of their address). It **can**: see the image's bytes
as they cross the network (the stream is not encrypted, as with a plain-HTTP registry); make a
transfer fail by flooding the relay's handshake slots from more than 32 addresses, or by cutting the
connection: that node is sent the image from another holder, then pulls from the registry.

From a node (a job, a compromised host), collect-logs accepts a tar stream and a report: members
outside the destination, links and devices are refused; headers are bounded; gzip only with
`--compress`; every file is written in 1 MiB pieces; names with control characters arrive under
a safe name. The job itself cannot make collect-logs read a file outside its run: nothing on the
node is opened through a symlink, and hard links to files of another owner are skipped.

## Issue 47: each class fixed once, at its cause

- **Listeners** (M1, the mpirun gate, the relay): `node/listener.py`, above.
- **Node output held by the controller** (M2): one place holds what a node prints,
  `transport/base._LineSplitter`, under `Command.max_output` bytes per stream (32 MiB unless the caller
  declares its own: collect's report 64 MiB, `top`'s probe 1 MiB); past it the rest is counted and
  dropped, and the stream ends with `clusterctl: the stdout of CMD on HOST passed its cap of N bytes; M
  more bytes were dropped (Command.max_output)`. A line handed on while it streams is at most 1 MiB
  (longer ones in pieces); a UTF-8 character split across reads is decoded whole. Followed commands
  (the live log, `logs --follow`) hand stdout on and keep their stderr's last 1 MiB. Readers of a
  file's end read only its end on the node (`top`, `metrics`: `tail -c 65536`). Tests:
  tests/local/test_output_caps.py (a `connection: local` command printing 2 GiB through `clusterctl exec
  --json`: the controller's peak RSS under 600 MB, the document naming host, command and bytes dropped;
  a sparse 1 GiB metrics.jsonl under `top`'s probe: under 70 KB read). collect's report is bounded where
  it is made (`node/node_archive.Report`, 48 MiB, under the 64 MiB read of it): links, skips and renames
  listed up to 1000 of each kind and 8 MiB, the rest counted (`not_listed` in the host's `--json` entry);
  a target or reason cut at 1 KiB; before the files' lines would pass the bound, no more is archived: the
  stream ends whole, collect keeps and records what came, fails naming the rest, and the next collect
  sends only that. Tests: tests/local/test_collect_report_bound.py (40k links with 4 KB targets: a report
  of under 9 MB, 39000 counted; a bound reached: three collects in a row get every file once).
- **The job is not the fleet's witness** (M3): a detached run's supervisor document and its keepers'
  beats are the job's side (the job can write the run dir, and read its node's key). Each keeper signs
  with its own key, `node_agent.keeper_key` = HMAC(run secret, host): the secret is in the master's
  config only (`supervisor_key`), a beat must name a host of the run (the controller's list) in
  `X-Clusterctl-Host`, be signed by that host's key, and speak for that host only. On the controller,
  `health/fleet.job_side` keeps such evidence (samples, lost, blamed, straggling, left-out nodes) for
  the run's hosts from the controller's own record (`run_hosts`: its topology and kept hosts), never
  from the supervisor's file, with source `job`; `health/rules.judge` lets job-side events alone make a
  node `suspect`, never quarantined: the events counted for a quarantine must include another source
  (a check, the controller's own watch). Tests: tests/unit/test_health_detached.py (forged samples and
  lost nodes naming hosts outside the run: no event for them; the run's own host suspect; quarantined
  once the watch sees it too), tests/local/test_supervision.py (a beat signed with another node's key,
  or naming another host: refused), and on the rehearsal cluster
  tests/rehearsal/test_hostile_run_dir.py::test_a_detached_jobs_forged_health_samples_and_beats_reach_no_host_outside_its_run
  (a real detached job writes Xid 79 samples into supervisor.json for its node and for node3, outside its
  run, and beats with its keys for node3 and, from the master's job, for node2 of its run: the beats for
  node3 are refused before their body, node3's record is untouched, node1 and node2 are suspect only, the
  next plan leaves no one out). Checkpoint replicas sign with a key per pair of nodes
  (`checkpoint_wire.pair_key`), so a node's job cannot put a step as another node on a third; tests:
  tests/local/test_checkpoint_replica.py (a step signed with n3's own keys claiming n1, and n1's key used
  from n3's address: refused, nothing held).
- **Masking after every encoding**: `ground/masking.py`, one `Masker` over every form one or two of
  clusterctl's encodings give a secret (as is, JSON, JSON in ASCII, with `\\/`, Go's JSON, Slack's
  `& < >` escape, HTML, inside shell single quotes), applied to the final text of what leaves the
  process: every state file (run.json; a JSON document's string tokens only, so it stays JSON whatever
  a secret spells), `--json` documents, the screen and printed logs (`render.Masked`), notifications,
  the HTML report. `OUTBOUND` holds every secret of every inventory the process loaded, so no caller
  has to pass it. Tests: tests/unit/test_masking.py (hypothesis: for any secret and any two encodings in
  a row, the masked final text holds no form of it; a Slack message; a healing run's attempt evidence
  in run.json and the report).
- **Report links**: `observe/report_data.bundle_href` is the one way the report links a file: a
  relative path to a regular file inside the bundle (not a symlink), each segment percent-encoded and
  led by `./` or `../`, else plain text. Tests: tests/unit/test_report.py (host names `javascript:...`,
  `data:...`), tests/local/test_report.py (the real headless chromium: every link a file of the bundle).
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
    out.append(LISTENERS)
    out.append(FILES)
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
