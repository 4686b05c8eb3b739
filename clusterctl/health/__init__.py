"""The fleet's health record (issue #36): what clusterctl saw go wrong on each node and GPU,
kept across commands in `.clusterctl/health.db`, and the state each node is in because of it.
A library every stage may write to (it imports the ground only): `clusterctl health check`, the
flow that runs preflight and nccl-test on one node, is backends/health_check.py.

- events.py: what is recorded (an `Event`, a GPU's identity)
- store.py: the SQLite file (versioned, WAL, one transaction per write, refused and kept when
  newer, damaged or locked; never recreated)
- rules.py: the one table that moves a node healthy -> suspect -> quarantined (overridden by the
  inventory's `health:`, read by inventory/health_section.py)
- record.py: `HealthRecord`, the API the commands use (record, states, quarantined, release)
- fleet.py, seen.py: where the other flows meet it (the events they saw, the preflight's verdicts)
- watch.py: pure parsers of what the passive watch reads on a node (nvidia-smi CSV, Xid lines,
  dcgmi health) -> events
- export.py: node and GPU states as Prometheus metrics"""
