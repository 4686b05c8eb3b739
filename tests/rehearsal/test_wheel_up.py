"""A non-editable install (`pip install .`: the wheel, in a fresh venv) runs `up` and `down` on the rehearsal
cluster, with the built-in playbooks it carries (tests/local/test_wheel.py checks the wheel's contents)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from clusterctl_helpers import container_of
from wheel_install import install

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

NODES = ("node1", "node2", "node3")


def test_a_wheel_install_brings_the_rehearsal_cluster_up_and_down(sandbox, tmp_path):
    installed = install(tmp_path / "wheel")
    env = {"CLUSTERCTL_STATE": str(tmp_path / "state"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    up = installed.run("up", "--json", str(sandbox.inventory_path), cwd=tmp_path, env=env, timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    document = json.loads(up.stdout)
    assert document["logs"].startswith(str(tmp_path / "state"))
    assert {name: host["status"] in ("ok", "changed") for name, host in document["hosts"].items()} == \
        {node: True for node in NODES}, document["hosts"]
    assert all(container_of(sandbox, node, "cc-sandbox").status == "running" for node in NODES)
    down = installed.run("down", "--json", "-i", str(sandbox.inventory_path), cwd=tmp_path, env=env, timeout=300)
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    assert all(container_of(sandbox, node, "cc-sandbox") is None for node in NODES)
