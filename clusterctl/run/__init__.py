"""Carrying out a Plan on the nodes: `runner.py` launches on every node (`launching.py`: what each
node starts, in as few starts of a program there as it can), watches (with watch/'s observers), fails
fast and stops cleanly; `supervision.py` hands a running job over to the cluster
(node/node_agent.py: `run --detach`, a hang-up) and turns the supervisor's state into the local run
record (ground/records.py); `phases.py` when each phase was reached; `in_progress.py` the look for a
run of the cluster already going; `from_env.py` the `launch --from-env` flow, the entrypoint a
platform runs on every node (commands/launch.py parses, this runs).

Lease: the controller renews `lease` every 4 s on a running node (watch/pace.py): through the node's
output stream while it answers (a renewal asked on its stdin, answered on its stderr: no process on
the node), else with a poll (at once when a node's output stream ends, after a failure and after an
unanswered poll; the watch loop itself still turns every second). A node that hears nothing for 15 s stops its own ranks: a dead
controller or a cut-off node never leaves ranks waiting forever. What becomes of the run (a failed
node stops the others, a node silent for `job.lost_after` is lost, `--timeout`, a hang) is decided by
the run's engine (node/engine.py), which `runner.py` hosts in-process and feeds with its polls; the
runner carries out its orders.

To change how a run is launched, watched, stopped: `runner.py` (the node-side wrapper and lease:
plan/wrapper.py; `stop`: backends/stopping.py); how a run goes on without clusterctl (`--detach`, a
hang-up, `attach`): `supervision.py`, node/node_agent.py."""
