"""Node and GPU health states as Prometheus metrics (text exposition format), for a textfile
collector or a scrape of `clusterctl health export --prometheus` output.

    clusterctl_node_health_state{cluster,host,state}      1 for the node's state, 0 for the others
    clusterctl_node_health_since_seconds{cluster,host}    when it entered that state (unix time)
    clusterctl_gpu_health_state{cluster,host,gpu,index,state}
"""
from __future__ import annotations

from typing import Sequence

from clusterctl.health.record import NodeHealth
from clusterctl.health.rules import STATES


def prometheus_text(cluster: str, nodes: Sequence[NodeHealth]) -> str:
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    node_state = Gauge("clusterctl_node_health_state", "The node's health state (1 for the current one)",
                       ("cluster", "host", "state"), registry=registry)
    since = Gauge("clusterctl_node_health_since_seconds", "Unix time the node entered its current state",
                  ("cluster", "host"), registry=registry)
    gpu_state = Gauge("clusterctl_gpu_health_state", "A GPU's health state (1 for the current one)",
                      ("cluster", "host", "gpu", "index", "state"), registry=registry)
    for node in nodes:
        for state in STATES:
            node_state.labels(cluster, node.host, state).set(1 if node.state == state else 0)
        if node.verdict.since is not None:
            since.labels(cluster, node.host).set(node.verdict.since)
        for gpu in node.gpus:
            index = "" if gpu.index is None else str(gpu.index)
            for state in STATES:
                gpu_state.labels(cluster, node.host, gpu.key, index, state).set(1 if gpu.verdict.state == state else 0)
    return generate_latest(registry).decode()
