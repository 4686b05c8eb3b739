"""A non-editable install (`pip install .`: the wheel, in a fresh venv) carries every file the package reads,
finds every built-in playbook, and runs `up` and `down` on this machine (`connection: local`)."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
from wheel_install import REPO, install, package_files, wheel_files

BUILTIN = sorted(path.stem for path in (REPO / "playbooks").glob("*.yaml"))

_CHECK_INSTALLED = """
import json, clusterctl
from clusterctl import playbook
from clusterctl.diagnose import corpus
print(json.dumps({"package": clusterctl.__file__,
                  "playbooks": {name: [str(playbook.builtin(name)), len(playbook.load_playbook(playbook.builtin(name)).tasks)]
                                for name in %r},
                  "corpus": sum(1 for _ in corpus.CORPUS_DIR.rglob("*.log"))}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    return install(tmp_path_factory.mktemp("wheel"))


def test_the_top_level_playbooks_are_the_packaged_ones():
    assert (REPO / "playbooks").resolve() == (REPO / "clusterctl" / "playbooks").resolve()
    assert BUILTIN == ["down", "up"]


def test_the_wheel_carries_every_file_of_the_package(installed):
    missing = sorted(package_files() - wheel_files(installed.wheel))
    assert not missing, f"not in the wheel (pyproject.toml's package-data): {missing}"


def test_the_installed_package_finds_every_builtin_playbook_and_the_corpus(installed, tmp_path):
    found = installed.python_json(_CHECK_INSTALLED % (BUILTIN,), cwd=tmp_path)
    site_packages = str(installed.venv)
    assert found["package"].startswith(site_packages), found["package"]
    for name in BUILTIN:
        path, tasks = found["playbooks"][name]
        assert path.startswith(site_packages) and Path(path).read_text() == (REPO / "playbooks" / f"{name}.yaml").read_text()
        assert tasks > 0
    assert found["corpus"] == sum(1 for _ in (REPO / "clusterctl" / "diagnose" / "corpus").rglob("*.log"))


@pytest.mark.parametrize("command", ["up", "down", "play"])
def test_the_installed_commands_answer_help(installed, tmp_path, command):
    proc = installed.run(command, "--help", cwd=tmp_path)
    assert proc.returncode == 0 and f"usage: clusterctl {command}" in proc.stdout, proc.stderr


def test_up_and_down_of_the_installed_package_run_on_this_machine(installed, tmp_path):
    from clusterctl_helpers import free_port  # below the ephemeral range

    port = free_port()
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"name: wheel-{os.getpid()}\nhosts: [{{name: local, connection: local, slots: 2}}]\n"
                         f"rendezvous: {{port: {port}}}\n"
                         f"job: {{command: [job.py], nproc_per_node: 2, outputs: {tmp_path / 'outputs'}}}\n")
    # the node's python3 is this interpreter's (the preflight imports torch there), as in an activated venv
    env = {"CLUSTERCTL_STATE": str(tmp_path / "state"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    up = installed.run("up", "--json", str(inventory), cwd=tmp_path, env=env)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    assert json.loads(up.stdout)["hosts"]["local"]["status"] == "ok"
    down = installed.run("down", "--json", "-i", str(inventory), cwd=tmp_path, env=env)
    assert down.returncode == 0 and json.loads(down.stdout)["hosts"]["local"]["status"] == "ok", down.stderr[-3000:]
