"""Where and how to connect, differentially against OpenSSH: for every ssh_config in the table and
every host asked, what `ssh -G -F file HOST` prints on this machine is the expected answer, and
both of clusterctl's ways of answering (asking `ssh -G` with the inventory's values as ssh's
command-line options, and reading the files itself where no ssh is installed) must give it.
A generated-config property test widens the table."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from clusterctl.transport import openssh_config
from clusterctl.transport.openssh_config import parse_ssh_g

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an OpenSSH client (the reference)")


def _unshare_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs root and unshare (a private mount namespace)")
def test_a_relative_include_is_read_from_the_users_ssh_directory(tmp_path):
    """ssh reads `Include cluster.conf` from ~/.ssh; run in a private mount namespace with a
    tmpfs over the home directory, so the real ~/.ssh is neither read nor written."""
    home = openssh_config._home()
    fake = tmp_path / "home"
    (fake / ".ssh" / "config.d").mkdir(parents=True)
    (fake / ".ssh" / "config.d" / "cluster.conf").write_text("Host r3alias\n  HostName 10.9.9.3\n  Port 2203\n")
    config = tmp_path / "ssh_config"
    config.write_text("Include config.d/*.conf\n")
    script = (f"mount -t tmpfs none {home} && cp -a {fake}/.ssh {home}/ && "
              f"ssh -G -F {config} r3alias")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    printed = parse_ssh_g(proc.stdout)
    assert (printed["hostname"], printed["port"]) == (["10.9.9.3"], ["2203"])
    from clusterctl.transport.ssh_config_file import read_ssh_config

    ours = read_ssh_config("r3alias", [(str(config), True)], [], "root", str(fake))
    assert (ours["hostname"], ours["port"]) == (["10.9.9.3"], ["2203"])
