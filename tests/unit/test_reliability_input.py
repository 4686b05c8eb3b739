"""Hostile input: refused before anything reaches a node, quickly, with what is wrong and the fix.
NUL bytes and oversized prompts, shell metacharacters in names, YAML alias bombs, outputs at /,
and tar streams that try to write outside the collect destination. Each records its row of
docs/reliability.md."""
from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import pytest

import yaml

from clusterctl_helpers import Cli

NUL_PROMPT = b"a cat\x00 on the grass\n"
ONE_MB = b"a cat on the grass. " * 50_000  # 1,000,000 bytes
BOMB = """\
name: bomb
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
hosts: *i
"""
BAD_HOST_NAMES = ("node1;touch /tmp/cc-pwned", "node$(id)", "node`id`", "node1 node2", "node1\n", "-node1",
                  "../node1", "node1|cat")
BAD_CONTAINER_NAMES = ("cc;rm -rf /", "cc$(id)", "cc sandbox", "cc\n", "-cc", "../cc", "c")


@pytest.fixture
def cli(tmp_path):
    return Cli(tmp_path / "state")


@pytest.fixture
def inventory(tmp_path):
    """A minimal valid inventory (nodes that need not exist: nothing here may connect)."""
    path = tmp_path / "inventory.yaml"
    path.write_text("name: hostile\nssh: {connect_timeout: 1}\nhosts:\n  - {name: node1, address: 198.18.0.11}\n"
                    "job: {command: [job.py], args: [--prompt, '{prompt}']}\n")
    return path


def _timed(cli, *args) -> tuple[int, dict, float]:
    started = time.monotonic()
    code, doc = cli.json(*args)
    return code, doc, time.monotonic() - started


def _nothing_connected(cli) -> bool:
    """No step log and no run record: the command stopped before any host was contacted."""
    runs = cli.state_dir / "runs"
    return not runs.exists() or not any(runs.iterdir())


def test_a_prompt_with_a_nul_byte_is_refused_with_exit_2_and_nothing_launched(cli, inventory, tmp_path, reliability):
    row = reliability("a prompt file with a NUL byte", "refused before connecting (exit 2), names the line; nothing launched")
    prompt = tmp_path / "nul.txt"
    prompt.write_bytes(NUL_PROMPT)
    code, doc, seconds = _timed(cli, "run", "-i", str(inventory), str(prompt))
    assert code == 2 and "NUL byte" in doc["error"] and doc["where"] == f"{prompt}:1", doc
    assert _nothing_connected(cli)
    row.observe(f"exit 2 in {seconds:.2f} s: {doc['error']} ({Path(doc['where']).name}); fix: {doc['fix']}",
                seconds=seconds)


def test_a_one_megabyte_prompt_is_refused_before_connecting_naming_the_argument_limit(cli, inventory, tmp_path,
                                                                                     reliability):
    row = reliability("a 1 MB prompt", "refused before connecting (exit 2), naming Linux's 128 KiB per-argument "
                      "limit and the fix (read it from a file); nothing launched")
    prompt = tmp_path / "big.txt"
    prompt.write_bytes(ONE_MB)
    code, doc, seconds = _timed(cli, "run", "-i", str(inventory), str(prompt))
    assert code == 2 and "1000000 bytes" in doc["error"] and "128 KiB" in doc["error"], doc
    assert "file" in doc["fix"]
    assert _nothing_connected(cli)
    row.observe(f"exit 2 in {seconds:.2f} s: {doc['error']}; fix: {doc['fix']}", seconds=seconds)


def test_host_and_container_names_with_shell_metacharacters_are_refused_at_validation(cli, tmp_path, reliability):
    row = reliability("host and container names with shell metacharacters ($(...), backticks, ;, |, spaces, "
                      "newline, leading -, ../)", "every one refused at validation (exit 2) with the rule and a fix; "
                      "nothing connects")
    slowest, refused = 0.0, []
    for kind, names in (("host", BAD_HOST_NAMES), ("container", BAD_CONTAINER_NAMES)):
        for name in names:
            doc = {"name": "hostile", "hosts": [{"name": "node1", "address": "198.18.0.11"}],
                   "container": {"image": "198.18.0.1:5000/sandbox/base:1", "name": "cc-ok"}}
            (doc["hosts"][0] if kind == "host" else doc["container"])["name"] = name
            path = tmp_path / f"{kind}-{len(refused)}.yaml"
            path.write_text(yaml.safe_dump(doc))
            code, result, seconds = _timed(cli, "exec", "-i", str(path), "--", "true")
            assert code == 2, (kind, name, result)
            assert ("not a safe name" if kind == "host" else "is not valid for docker") in result["error"], result
            assert result["fix"]
            slowest = max(slowest, seconds)
            refused.append(name)
    assert _nothing_connected(cli)
    assert not Path("/tmp/cc-pwned").exists()
    row.observe(f"all {len(refused)} refused with exit 2 (slowest {slowest:.2f} s), e.g. host names must match "
                "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$; a trailing newline ('node1\\n') is refused too", seconds=slowest)


def test_a_yaml_alias_bomb_is_refused_quickly_with_a_clear_error(cli, tmp_path, reliability):
    row = reliability("a YAML anchors/aliases bomb (9^9 nodes from 600 bytes)",
                      "refused in well under a second (exit 2): 'alias/anchor bomb', the line, the fix")
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    code, doc, seconds = _timed(cli, "exec", "-i", str(path), "--", "true")
    assert code == 2 and "alias/anchor bomb" in doc["error"] and doc["where"].startswith(str(path)), doc
    assert seconds < 2
    row.observe(f"exit 2 in {seconds:.2f} s: {doc['error']} at {Path(doc['where']).name}", seconds=seconds)


def test_outputs_at_the_root_or_a_system_directory_are_refused_at_validation(cli, inventory, tmp_path, reliability):
    row = reliability("job.outputs pointing at / (or /etc, /usr/.., /proc/x)",
                      "refused at validation (exit 2): runs write and clean files there")
    seen = []
    for outputs in ("/", "/etc", "/usr/..", "//", "/proc/self", "/var"):
        path = tmp_path / f"outputs-{len(seen)}.yaml"
        path.write_text(inventory.read_text().replace("job: {", f"job: {{outputs: '{outputs}', "))
        code, doc, seconds = _timed(cli, "exec", "-i", str(path), "--", "true")
        assert code == 2 and "is a system directory" in doc["error"], (outputs, doc)
        seen.append(f"{outputs} ({seconds:.2f} s)")
    assert _nothing_connected(cli)
    row.observe(f"exit 2 for each of {', '.join(seen)}: {doc['error']}", seconds=seconds)


def _tar(members) -> bytes:
    """A tar stream of (name, kind, payload or link target)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE,
                             "device": tarfile.CHRTYPE}[kind]
                info.linkname = data.decode() if data else ""
                tar.addfile(info)
    return raw.getvalue()


def test_a_crafted_tar_stream_cannot_write_outside_the_collect_destination(tmp_path, reliability):
    from clusterctl.collect.fetch import extract

    row = reliability("a tar stream from a node with ../, absolute paths, symlinks, hard links and devices "
                      "(collect.extract, unit level)", "each refused and reported; only the plain files are written, "
                      "all inside dest; nothing outside")
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    archive = tmp_path / "evil.tar"
    archive.write_bytes(_tar([
        ("../outside/escaped", "file", b"x"),
        ("a/../../outside/escaped2", "file", b"x"),
        (str(outside / "absolute"), "file", b"x"),
        ("link-to-outside", "symlink", str(outside).encode()),
        ("link-to-outside/through-the-link", "file", b"x"),
        ("passwd-hardlink", "hardlink", b"/etc/passwd"),
        ("a-fifo", "fifo", b""),
        ("a-device", "device", b""),
        ("run..with..dots.txt", "file", b"fine\n"),
        ("logs/node1/agent.log", "file", b"fine\n"),
    ]))
    started = time.monotonic()
    written, refused = extract(archive, dest, set())
    seconds = time.monotonic() - started
    # the symlink was refused, so "link-to-outside/..." is a plain directory inside dest
    assert sorted(str(p.relative_to(dest)) for p in written) == [
        "link-to-outside/through-the-link", "logs/node1/agent.log", "run..with..dots.txt"]
    assert not (dest / "link-to-outside").is_symlink()
    assert len(refused) == 7, refused
    for name in ("../outside/escaped", "a/../../outside/escaped2", "absolute", "link-to-outside", "passwd-hardlink",
                 "a-fifo", "a-device"):
        assert any(name in r for r in refused), (name, refused)
    assert list(outside.iterdir()) == []
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    shown = "; ".join(r.replace(str(tmp_path), "TMP") for r in refused)
    row.observe(f"{len(refused)} of 10 members refused ({shown}); the 3 plain "
                "files written inside dest (the file 'through' the refused link lands in a real directory); nothing "
                "outside", seconds=seconds)
