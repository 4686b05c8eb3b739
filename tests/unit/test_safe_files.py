"""The no-follow layer (clusterctl/node/safe_files.py): links are never followed, special files never
opened, directories not ours refused, reads bounded; a hypothesis property over arbitrary trees of
files, links and FIFOs whose targets lie outside the run."""
from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given, settings, strategies as st

from clusterctl.node.safe_files import Dir, Refused, read_under, write_under
from clusterctl_helpers import examples


@pytest.fixture
def victim(tmp_path):
    """A root-only file outside the run: what a hostile job points its links at."""
    path = tmp_path / "victim.key"
    path.write_bytes(b"SECRET\n")
    path.chmod(0o600)
    return path


def _run(tmp_path):
    run = tmp_path / "outputs" / "logs" / "run1"
    run.mkdir(parents=True)
    return run


def test_a_link_is_neither_read_nor_written_through(tmp_path, victim):
    run = _run(tmp_path)
    (run / "agent.log").symlink_to(victim)
    with Dir.open(run) as d:
        with pytest.raises(Refused, match="symbolic link"):
            d.read("agent.log")
        with pytest.raises(Refused, match="symbolic link"):
            d.touch("agent.log")
        with pytest.raises(Refused, match="symbolic link"):
            d.append("agent.log", b"x")
        d.write("agent.log", b"note\n")  # replaces the link itself
    assert victim.read_bytes() == b"SECRET\n"
    assert not (run / "agent.log").is_symlink() and (run / "agent.log").read_bytes() == b"note\n"


def test_a_linked_directory_component_is_refused(tmp_path, victim):
    run = _run(tmp_path)
    (run / "node1").symlink_to(victim.parent)
    with pytest.raises(Refused, match="symbolic link or not a directory"):
        read_under(run, "node1/victim.key")
    with pytest.raises(Refused):
        write_under(run, "node1/victim.key", b"overwritten")
    assert victim.read_bytes() == b"SECRET\n"


def test_a_fifo_or_device_is_not_opened(tmp_path):
    run = _run(tmp_path)
    os.mkfifo(run / "metrics.jsonl")
    with Dir.open(run) as d, pytest.raises(Refused, match="not a regular file"):
        d.read("metrics.jsonl")  # O_NONBLOCK: returns at once instead of hanging on the FIFO


def test_reads_are_bounded_head_and_tail(tmp_path):
    run = _run(tmp_path)
    (run / "big.log").write_bytes(b"a" * 1000 + b"END")
    with Dir.open(run) as d:
        assert d.read("big.log", 10) == b"a" * 10
        assert d.read("big.log", 3, tail=True) == b"END"


def test_a_directory_made_by_someone_else_is_refused(tmp_path):
    run = _run(tmp_path)
    (run / ".files").mkdir(mode=0o777)
    os.chmod(run / ".files", 0o777)
    with Dir.open(run) as d, pytest.raises(Refused, match="mode 777"):
        d.sub(".files", private=True)
    with Dir.open(run) as d, pytest.raises(Refused, match="exists already"):
        d.make_private(".files")


def test_created_directories_are_private(tmp_path):
    with Dir.open(tmp_path, "a/b/c", create=True) as d:
        assert stat.S_IMODE(os.fstat(d.fd).st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700


def test_remove_tree_removes_links_not_targets_and_bounds_depth(tmp_path, victim):
    run = _run(tmp_path)
    (run / "x" / "y").mkdir(parents=True)
    (run / "x" / "y" / "link").symlink_to(victim)
    (run / "x" / "dirlink").symlink_to(victim.parent)
    with Dir.open(run) as d:
        d.remove_tree("x")
    assert not (run / "x").exists() and victim.read_bytes() == b"SECRET\n"
    deep = run / "deep"
    path = deep
    for _ in range(70):
        path = path / "d"
    path.mkdir(parents=True)
    with Dir.open(run) as d, pytest.raises(Refused, match="deeper"):
        d.remove_tree("deep")


def test_path_components_must_be_plain_names(tmp_path):
    for bad in ("../victim.key", "a/../../x", "/etc/passwd"):
        with pytest.raises(Refused):
            read_under(tmp_path, bad)


_names = st.sampled_from(["a", "b", "c", "agent.log", "lease"])
_kinds = st.sampled_from(["file", "dir", "link_file", "link_dir", "fifo"])


@settings(max_examples=examples(60), deadline=None)
@given(tree=st.lists(st.tuples(st.lists(_names, min_size=1, max_size=3), _kinds), max_size=12),
       probes=st.lists(st.lists(_names, min_size=1, max_size=3), min_size=1, max_size=6))
def test_no_operation_reaches_outside(tmp_path_factory, tree, probes):
    """Whatever a job makes of its run dir, no read returns the victim's bytes and no write changes it."""
    root = tmp_path_factory.mktemp("prop")
    victim = root / "victim.key"
    victim.write_bytes(b"SECRET\n")
    run = root / "run"
    run.mkdir()
    for parts, kind in tree:
        path = run.joinpath(*parts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "file":
                path.write_bytes(b"ok")
            elif kind == "dir":
                path.mkdir()
            elif kind == "link_file":
                path.symlink_to(victim)
            elif kind == "link_dir":
                path.symlink_to(root)
            else:
                os.mkfifo(path)
        except OSError:
            continue  # a component is a file or a link already: the job could not make this either
    for parts in probes:
        rel = "/".join(parts)
        for action in ("read", "write", "touch", "append"):
            try:
                with Dir.open(run, tuple(parts[:-1])) as d:
                    if action == "read":
                        assert b"SECRET" not in d.read(parts[-1])
                    else:
                        getattr(d, action)(parts[-1], b"x") if action != "touch" else d.touch(parts[-1])
            except (Refused, OSError):
                pass
        assert victim.read_bytes() == b"SECRET\n", rel
