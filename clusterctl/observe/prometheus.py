"""A run's latest numbers in Prometheus' text exposition format (`clusterctl metrics --prometheus`),
written by `prometheus_client` (CollectorRegistry + generate_latest), never by hand.

Labels are the run id, the cluster, the host, the GPU's index and UUID, a state or throttle reason's
name: nothing from the job's command line or environment, so no secret reaches a scrape.

    clusterctl_run_state{run_id,cluster,state}          1 for the run's state, 0 for the others
    clusterctl_run_attempt{run_id,cluster}              the attempt running (a run that heals itself)
    clusterctl_run_stragglers{run_id,cluster}           stragglers named so far (watch/stragglers.py)
    clusterctl_node_up{run_id,host}                     1 while torchrun runs there, 0 once it ended or can't be read
    clusterctl_node_sample_timestamp_seconds{run_id,host}
    clusterctl_node_cpu_percent / _memory_used_megabytes / _memory_total_megabytes{run_id,host}
    clusterctl_node_network_receive_bytes / _transmit_bytes{run_id,host}   the node's counters (cumulative)
    clusterctl_node_health_state{cluster,host,state}    1 for the node's health state (clusterctl/health)
    clusterctl_gpu_utilization_percent / _memory_used_megabytes / _memory_total_megabytes / _power_watts /
      _temperature_celsius / _sm_clock_megahertz / _ecc_volatile_uncorrected{run_id,host,gpu,uuid}
    clusterctl_gpu_throttle{run_id,host,gpu,uuid,reason}  1 for each active throttle reason
"""
from __future__ import annotations

RUN_STATES = ("running", "succeeded", "failed", "stopped", "interrupted", "unknown")
GPU_GAUGES = (("util_pct", "utilization_percent", "GPU utilisation (nvidia-smi utilization.gpu)"),
              ("mem_used_mb", "memory_used_megabytes", "GPU memory used, MiB"),
              ("mem_total_mb", "memory_total_megabytes", "GPU memory, MiB"),
              ("power_w", "power_watts", "GPU power draw"),
              ("temp_c", "temperature_celsius", "GPU temperature"),
              ("sm_clock_mhz", "sm_clock_megahertz", "GPU SM clock"),
              ("ecc_volatile_uncorrected", "ecc_volatile_uncorrected", "Uncorrected ECC errors since the driver loaded"))
NODE_GAUGES = (("cpu_pct", "cpu_percent", "The node's CPU busy share since the previous sample"),
               ("mem_used_mb", "memory_used_megabytes", "The node's memory in use (total less available), MiB"),
               ("mem_total_mb", "memory_total_megabytes", "The node's memory, MiB"),
               ("net_rx_bytes", "network_receive_bytes", "Bytes received on the job network's interfaces (since boot)"),
               ("net_tx_bytes", "network_transmit_bytes", "Bytes sent on the job network's interfaces (since boot)"),
               ("t", "sample_timestamp_seconds", "Unix time of the node's latest sample"))


def _number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def prometheus_text(look, health_states: dict) -> str:
    """`look`: backends/observing.Look; `health_states`: {host: state} from the health record."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest
    from clusterctl.health.rules import STATES

    registry = CollectorRegistry()
    run, cluster = look.run_id, look.cluster
    gauge = lambda name, text, labels: Gauge(f"clusterctl_{name}", text, labels, registry=registry)  # noqa: E731
    state = look.state
    run_state = gauge("run_state", "The run's state (1 for the current one)", ("run_id", "cluster", "state"))
    for name in RUN_STATES:
        run_state.labels(run, cluster, name).set(1 if state == name else 0)
    gauge("run_attempt", "The run's attempt (1, then one more per relaunch)", ("run_id", "cluster")
          ).labels(run, cluster).set(int(look.record.get("attempt") or 1))
    gauge("run_stragglers", "Stragglers named during the run", ("run_id", "cluster")
          ).labels(run, cluster).set(len(look.record.get("stragglers") or ()))
    up = gauge("node_up", "1 while torchrun runs on the node", ("run_id", "host"))
    nodes = {key: gauge(f"node_{name}", text, ("run_id", "host")) for key, name, text in NODE_GAUGES}
    gpus = {key: gauge(f"gpu_{name}", text, ("run_id", "host", "gpu", "uuid")) for key, name, text in GPU_GAUGES}
    throttle = gauge("gpu_throttle", "1 for each clock throttle reason active", ("run_id", "host", "gpu", "uuid", "reason"))
    for view in look.views:
        up.labels(run, view.host).set(0 if view.error or view.exit_code is not None else 1)
        sample = view.sample or {}
        for key, series in nodes.items():
            if (value := _number(sample.get(key))) is not None:
                series.labels(run, view.host).set(value)
        for gpu in (g for g in sample.get("gpus") or [] if isinstance(g, dict)):
            labels = (run, view.host, str(gpu.get("index")), str(gpu.get("uuid") or ""))
            for key, series in gpus.items():
                if (value := _number(gpu.get(key))) is not None:
                    series.labels(*labels).set(value)
            for reason in gpu.get("throttle") or []:
                throttle.labels(*labels, str(reason)).set(1)
    health = gauge("node_health_state", "The node's health state (1 for the current one)", ("cluster", "host", "state"))
    for host, current in health_states.items():
        for name in STATES:
            health.labels(cluster, host, name).set(1 if current == name else 0)
    return generate_latest(registry).decode()
