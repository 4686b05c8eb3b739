"""The fleet's health record (issue #36): what clusterctl saw go wrong on each node and GPU,
kept across commands in `.clusterctl/health.db`, and the state each node is in because of it.

- events.py: what is recorded (an `Event`, a GPU's identity)
- store.py: the SQLite file (versioned, WAL, one transaction per write, never recreated)
- rules.py: the one table that moves a node healthy -> suspect -> quarantined
- record.py: `HealthRecord`, the API the commands use
- watch.py: pure parsers of what the passive watch reads on a node -> events
- export.py: node and GPU states as Prometheus metrics
"""
