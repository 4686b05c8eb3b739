"""A host's `become` (Ansible's ansible_become, ansible_become_user) decides how clusterctl's
privileged node commands run: real commands through the local transport, as root here and, where
setpriv exists, as an unprivileged user without sudo."""
from __future__ import annotations

import os
import shutil

import pytest

from clusterctl.models import Command, Host
from clusterctl.transport import connect
from clusterctl.transport.base import batch_command, split_batch

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs commands as root and as another user")

WHO = Command(("id", "-un"), privileged=True)


def _who(host: Host, command: Command = WHO) -> tuple[int, str]:
    transport = connect(host)
    try:
        result = transport.run(command)
    finally:
        transport.close()
    return result.exit_code, (result.stdout + result.stderr).strip()


def test_become_unset_keeps_the_automatic_choice_and_become_user_is_honoured():
    assert _who(Host(name="local", address="127.0.0.1", connection="local")) == (0, "root")
    assert _who(Host(name="local", address="127.0.0.1", connection="local", become=False)) == (0, "root")
    if shutil.which("sudo"):
        host = Host(name="local", address="127.0.0.1", connection="local", become=True, become_user="nobody")
        assert _who(host) == (0, "nobody")
        batch = batch_command([("who", WHO), ("plain", Command(("id", "-un")))])
        code, _ = _who(host, batch)
        transport = connect(host)
        try:
            sections = split_batch(transport.run(batch).stdout)
        finally:
            transport.close()
        assert sections["who"].strip() == "nobody" and sections["plain"].strip() == "root"


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_become_false_runs_as_the_ssh_user_and_become_true_without_sudo_rights_says_so():
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    where = Path(tempfile.mkdtemp(prefix="clusterctl-become-"))  # pytest's tmp_path is 0700: nobody cannot read it
    script = where / "who.py"
    script.write_text(
        "import sys\n"
        "from clusterctl.models import Command, Host\n"
        "from clusterctl.transport import connect\n"
        "become = {'none': None, 'false': False, 'true': True}[sys.argv[1]]\n"
        "t = connect(Host(name='local', address='127.0.0.1', connection='local', become=become))\n"
        "r = t.run(Command(('id', '-un'), privileged=True))\n"
        "print(r.exit_code, (r.stdout + r.stderr).strip().splitlines()[-1])\n")
    where.chmod(0o755)
    script.chmod(0o644)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def as_nobody(choice: str) -> str:
        proc = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable,
                               str(script), choice], capture_output=True, text=True, env=env, timeout=60, cwd="/")
        return proc.stdout.strip() or proc.stderr.strip()

    try:
        first = as_nobody("none")
        if "Permission denied" in first or "No module named" in first:
            pytest.skip(f"python or clusterctl is not readable by another user here: {first[-200:]}")
        assert first == "0 nobody"  # no sudo for nobody: as the user, as before
        assert as_nobody("false") == "0 nobody"
        code, said = as_nobody("true").split(" ", 1)
        assert code != "0" and "sudo" in said.lower(), said  # asked for sudo and cannot: sudo says why
    finally:
        shutil.rmtree(where)
