"""A launch's writes on a node in one start of its file program (issue 52): the env and every shipped
file (`stage`), a keeper's files (`put-private` with NAME SIZE pairs), run here in-process on real
directories as the node runs them, from the commands the controller builds."""
from __future__ import annotations

import io
import os
import stat
import sys

import pytest

from clusterctl.models import ContainerSpec, Host, Inventory, JobSpec, RendezvousSpec
from clusterctl.node import run_files
from clusterctl.plan.shipping import stage_commands
from clusterctl.run import launching, supervision

ENV = (("A", "1"), ("HF_TOKEN", "x y"))
FILES = {"node_metrics.py": b"print('metrics')\n", "gate.py": b"", "bench.py": b"\x00\x01binary"}


def _inventory(outputs: str, container: bool = False, volumes: tuple = ()) -> Inventory:
    spec = ContainerSpec(image="img", name="ctr", volumes=volumes) if container else None
    return Inventory(name="t", hosts=(Host("n1", "10.0.0.1"),), container=spec, rendezvous=RendezvousSpec(port=29500),
                     job=JobSpec(command=("job.py",), nproc_per_node=2, outputs=outputs, env=()))


def _run_here(monkeypatch, command) -> tuple[int, str]:
    """The node program's operation as `command` carries it (argv after the program, stdin), in-process."""
    at = command.argv.index("-c") + 2
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(command.stdin or b"")))
    monkeypatch.setattr(sys, "stderr", err)
    code = run_files.main(list(command.argv[at:]))
    monkeypatch.undo()
    return code, err.getvalue()


def test_the_env_and_every_shipped_file_are_written_by_one_start(monkeypatch, tmp_path):
    outputs = tmp_path / "outputs"
    run_dir, files_dir = outputs / "logs" / "r1" / "n1", outputs / "logs" / "r1" / ".files"
    (commands,) = stage_commands(_inventory(str(outputs)), str(run_dir), ENV, str(files_dir), FILES)
    assert "stage" in commands.argv and commands.privileged  # as write-env: root on the host
    assert _run_here(monkeypatch, commands) == (0, "")
    assert (run_dir / "env").read_text() == "A=1\nHF_TOKEN=x y\n" and stat.S_IMODE((run_dir / "env").stat().st_mode) == 0o600
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700 and stat.S_IMODE(files_dir.stat().st_mode) == 0o755
    assert {p.name: p.read_bytes() for p in files_dir.iterdir()} == FILES
    (run_dir / "agent.exit").write_text("0\n")  # a retried launch: the old end mark goes, the same files stay
    assert _run_here(monkeypatch, commands) == (0, "") and not (run_dir / "agent.exit").exists()


def test_no_file_shipped_is_the_env_alone(monkeypatch, tmp_path):
    run_dir = tmp_path / "o" / "logs" / "r1" / "n1"
    (command,) = stage_commands(_inventory(str(tmp_path / "o")), str(run_dir), (), str(run_dir.parent / ".files"), {})
    assert _run_here(monkeypatch, command) == (0, "") and (run_dir / "env").read_bytes() == b""


def test_sizes_that_do_not_add_up_write_nothing(monkeypatch, tmp_path):
    run_dir = tmp_path / "o" / "logs" / "r1" / "n1"
    (command,) = stage_commands(_inventory(str(tmp_path / "o")), str(run_dir), ENV, str(run_dir.parent / ".files"), FILES)
    short = type(command)(command.argv, stdin=command.stdin[:-1])
    code, err = _run_here(monkeypatch, short)
    assert code == run_files.REFUSED_EXIT and "the arguments" in err and not (tmp_path / "o").exists()


def test_a_run_dir_and_files_dir_reached_differently_are_written_one_by_one(tmp_path):
    """Only the run dir on a bind mount: its env as root on the host, the files in the container."""
    inventory = _inventory("/out", container=True, volumes=(f"{tmp_path}:/out/logs/r1/n1",))
    commands = stage_commands(inventory, "/out/logs/r1/n1", ENV, "/out/logs/r1/.files", FILES)
    assert [c.argv[c.argv.index("-c") + 2] for c in commands] == ["write-env", "put", "put", "put"]
    both = _inventory("/out", container=True, volumes=(f"{tmp_path}:/out",))
    (staged,) = stage_commands(both, "/out/logs/r1/n1", ENV, "/out/logs/r1/.files", FILES)
    assert staged.argv[0] == "python3" and str(tmp_path) in staged.argv  # on the host, through the mount
    (inside,) = stage_commands(_inventory("/out", container=True), "/out/logs/r1/n1", ENV, "/out/logs/r1/.files", FILES)
    assert inside.argv[:4] == ("docker", "exec", "-i", "ctr")


def test_a_name_that_is_no_plain_file_name_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="not a plain file name"):
        stage_commands(_inventory("/out"), "/out/logs/r1/n1", ENV, "/out/logs/r1/.files", {"../evil": b"x"})
    with pytest.raises(ValueError, match="newline"):
        stage_commands(_inventory("/out"), "/out/logs/r1/n1", (("A", "1\nB=2"),), "/out/logs/r1/.files", {})


def test_a_node_of_an_attached_run_starts_with_two_commands(tmp_path):
    commands = launching.node_commands(_inventory("/out"), "r1", "/out/logs/r1/n1", ENV, ("torchrun", "job.py"),
                                       FILES, None)
    assert len(commands) == 2 and "stage" in commands[0].argv and commands[1].argv[:2] == ("setsid", "-f")
    replica = launching.node_commands(_inventory("/out"), "r1", "/out/logs/r1/n1", ENV, ("torchrun",), {}, b"{}")
    assert "put-private" in replica[1].argv and replica[1].stdin == b"{}" and len(replica) == 3


def test_a_keepers_files_are_put_by_one_start(monkeypatch, tmp_path):
    run_dir = tmp_path / "o" / "logs" / "r1" / "n1"
    run_dir.mkdir(parents=True, mode=0o700)
    files = [("node_agent.py", b"agent"), ("py-spy.gz", b"\x1f\x8b" * 10), ("empty", b""), ("config.json", b"{}")]
    command = supervision.put_privates(_inventory(str(tmp_path / "o")), str(run_dir), files)
    assert _run_here(monkeypatch, command) == (0, "")
    for name, data in files:
        assert (run_dir / name).read_bytes() == data and stat.S_IMODE((run_dir / name).stat().st_mode) == 0o600
    one = supervision.put_private(_inventory(str(tmp_path / "o")), str(run_dir), "replica.json", b"[1]")
    assert _run_here(monkeypatch, one) == (0, "") and (run_dir / "replica.json").read_bytes() == b"[1]"
    odd = type(command)(command.argv[:-1], stdin=command.stdin)
    assert _run_here(monkeypatch, odd)[0] == run_files.REFUSED_EXIT and os.path.exists(run_dir / "node_agent.py")
