"""Watching a run: observations of its nodes that the run (run/runner.py) turns into decisions. Pure
parts take text and times as arguments; the others make one round trip per node and wait through
the executor's clock.

The live log: `follow.py` reads back what a node's follow command streams (each rank's own
stdout/stderr files and agent.log through one `tail -v -F`) as whole lines per rank, never torchrun's
copy, whose `\\r` became line ends and whose partial lines glue to another rank's; `livelog.py`
decides what a person sees: a `\\r`-redrawn line as its latest state every few seconds and its final
one, a line many ranks print once with `[repeated Nx across K ranks]`, `run --ranks`; `LiveLogEvents`
puts it between the runner's events and the renderer. `logs.py` is what `clusterctl logs` reads.

Hangs: `stacks.py` (py-spy's output -> frames), `sockets.py` (/proc/net/tcp lines and which
connections look wrong), `rollcall.py` (ranks grouped by innermost frame, hang or computing from two
samples, the `rank_hang` finding), `sampler.py` (the node script that ships py-spy and samples every
rank), `pyspy_kept.py` (py-spy shipped once per node and kept there by digest; removed at the run's
end), `stalls.py` (the runner's silence watch, the saved stack documents). Stragglers:
`stragglers.py` (the rank working while every other rank waits in a collective, judged by
node/straggler_verdict.py, which a detached run's supervisor uses too; its lag and ratio, the step time
from progress lines), `straggler_watch.py` (the runner's rounds of non-blocking
samples, the `[straggler]` lines, the record's `stragglers`).

The first failure: `failures.py` names a run's first failure from the nodes' log tails, the same
answer for the attached runner and the detached supervisor's state; `culprit.py`, `dumps.py` and
`kernel_log.py` read what the failed nodes left (flight-recorder dumps, the kernel's word on a
SIGKILL); `torchrun_report.py` what torchrun said of its failed workers. The passive health watch:
`health_watch.py` (attached) and `detached_health.py` (what a detached run's keepers kept).
`pace.py`: which nodes the watch loop asks each turn (every 4 s a running node; at once when its
stream ends, after a failure and after an unanswered poll).

To change what the live log shows: `livelog.py` (how a node's output is streamed and cut into lines:
plan/wrapper.py's follow command, `follow.py`); how a hang is detected, stacks taken and judged:
`stalls.py` (when), `sampler.py` (the node script), `rollcall.py` (the verdict and its words); a
dump's analysis: diagnose/flight_recorder.py."""
