"""The executor with a fake transport: results are values, failures stay on their host."""
from __future__ import annotations

from clusterctl.models import Command, Host
from clusterctl.transport import LocalTransport


def test_local_transport_runs_argv_without_a_shell_and_streams_lines():
    transport = LocalTransport(Host("local", "127.0.0.1", connection="local"))
    lines = []
    result = transport.run(Command(("printf", "%s\\n", "a b", "$(echo no)")), on_line=lambda s, l: lines.append(l))
    assert result.ok and lines == ["a b", "$(echo no)"]


def test_local_transport_times_out_and_reports_it():
    transport = LocalTransport(Host("local", "127.0.0.1", connection="local"))
    result = transport.run(Command(("sleep", "5"), timeout=0.3))
    assert result.timed_out and result.exit_code is None and result.duration < 2


def test_local_transport_passes_stdin_env_and_cwd(tmp_path):
    transport = LocalTransport(Host("local", "127.0.0.1", connection="local"))
    result = transport.run(Command(("sh", "-c", 'cat; echo "$X"; pwd'), stdin=b"in\n", env=(("X", "y z"),), cwd=str(tmp_path)))
    assert result.stdout == f"in\ny z\n{tmp_path}\n"
