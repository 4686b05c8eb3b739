"""Seeing a run without reading logs (issue 41): metrics, top, Prometheus, notifications, the run report.

Metrics: node/node_metrics.py is the node-side sampler, shipped with the run's files
(plan/metrics_sampler.py says what the controller hands it) and started and ended with the ranks by
their wrapper; `summary.py` a node's metrics.jsonl -> run.json's per-node mean/max (at collect-logs),
`top.py` the one-round-trip look at a node and the table's rows, `prometheus.py` the text exposition.
backends/observing.py reads every node (`top`, `metrics`), its refresh loop on the executor's Ticker.

Notifications: `messages.py` what a message says (JSON and Slack shapes; pure), `notify.py` delivery
beside the run (executor/beside.py's threads and growing pause, a line of the run's notify.log per
message), `notify_hooks.py` where the run flows call it (around a run that heals itself, at a
relaunch, a straggler named, a detached run's end). The run report: `report_data.py` reads the record
and the collected bundle, `metrics_file.py` the nodes' metrics.jsonl, `svg.py` draws, `report_html.py`
the self-contained page. See docs/observe.md."""
