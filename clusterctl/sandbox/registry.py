"""The private image registry on the bridge address (like a cluster's in-house registry)."""
from __future__ import annotations

import urllib.error
import urllib.request

import yaml

from clusterctl.sandbox.layout import REGISTRY, Layout
from clusterctl.sandbox.system import owned_pid, pid_file_names_dead_process, spawn_detached, tail, terminate, wait_until

# Never through a proxy: the registry is on the bridge, and proxies cannot reach it.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

def config(layout: Layout) -> dict:
    return {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(layout.registry_storage)}, "delete": {"enabled": True}},
        "http": {"addr": REGISTRY},
    }


def answers() -> bool:
    try:
        with OPENER.open(f"http://{REGISTRY}/v2/", timeout=1.0) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def pid(layout: Layout) -> int | None:
    return owned_pid(layout.registry_pid, str(layout.registry_config))


def start(layout: Layout, timeout: float = 15.0) -> None:
    if pid(layout) is not None and answers():
        return
    if pid(layout) is None:
        layout.registry_storage.mkdir(parents=True, exist_ok=True)
        layout.registry_config.write_text(yaml.safe_dump(config(layout), sort_keys=False))
        spawn_detached(["docker-registry", "serve", layout.registry_config], layout.registry_log, layout.registry_pid)
    wait_until(answers, timeout, f"the registry at {REGISTRY}",
               lambda: f"{layout.registry_log}\n{tail(layout.registry_log)}",
               failed=lambda: pid_file_names_dead_process(layout.registry_pid))


def stop(layout: Layout) -> None:
    running = pid(layout)
    if running is not None:
        terminate([running], timeout=10)
    layout.registry_pid.unlink(missing_ok=True)
