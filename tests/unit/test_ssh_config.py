"""Where and how to connect, differentially against OpenSSH: for every ssh_config in the table and
every host asked, what `ssh -G -F file HOST` prints on this machine is the expected answer, and
both of clusterctl's ways of answering (asking `ssh -G` with the inventory's values as ssh's
command-line options, and reading the files itself where no ssh is installed) must give it.
A generated-config property test widens the table."""
from __future__ import annotations

from clusterctl.transport import ssh_g_cache


def test_a_config_with_match_exec_is_never_kept_on_disk(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Match exec true\n  Port 2201\n")
    assert ssh_g_cache.fingerprint("ssh", [(str(config), True)]) is None
