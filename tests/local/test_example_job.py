"""The example workload, launched for real with the torchrun command clusterctl builds.

Two "nodes" on this machine are two torchrun processes on loopback, each with its own
`torchrun_argv`/`torchrun_env` from a real `plan()`: gloo ranks, static rendezvous,
per-rank log files, the prompt passed through argv untouched.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterctl.plan.torchrun import RANK_PREFIX_RE, job_argv, placeholder_values, prompt_text, torchrun_argv, torchrun_env
from clusterctl.models import Host, Inventory, JobSpec, RendezvousSpec
from clusterctl.plan.topology import NodeFacts, plan

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "generate.py"
PROMPT = prompt_text((ROOT / "examples" / "prompt.txt").read_text(encoding="utf-8"))
NASTY = (PROMPT + ' "quoted" \'single\' $(touch /tmp/pwned) `id` $HOME $$ ${local_rank} {run_id} back\\slash\\n'
         "\nnew line\ttab ünïcødé 中文 🚀 -- --prompt")


def free_port() -> int:
    from clusterctl_helpers import free_port as below_ephemeral  # no outgoing connection takes it meanwhile

    return below_ephemeral()


def local_cluster(n_nodes: int, nproc: int, outputs: Path, args: tuple[str, ...], addrs: tuple[str, ...]) -> Inventory:
    hosts = tuple(Host(f"local{i}", addrs[i], connection="local") for i in range(n_nodes))
    return Inventory(name="local", hosts=hosts, rendezvous=RendezvousSpec(port=free_port(), join_timeout=60),
                     job=JobSpec(command=(str(SCRIPT),), args=args, nproc_per_node=nproc, outputs=str(outputs)))


WAN_ARGS = ("--task", "t2v-A14B", "--size", "64*48", "--frame_num", "8", "--ulysses_size", "{ulysses}",
            "--sample_guide_scale", "10", "--seed", "7", "--ckpt_dir", "/nonexistent",
            "--prompt", "{prompt}", "--save_file", "{outputs}/{run_id}.gif")


def launch(tmp_path: Path, n_nodes: int, nproc: int, prompt: str, ulysses: str = "{world_size}",
           addrs: tuple[str, ...] = ("127.0.0.1", "127.0.0.1"), timeout: float = 60):
    """Start one torchrun per node (workers first: start order must not matter)."""
    outputs = tmp_path / "output"
    args = tuple(a.replace("{ulysses}", ulysses) for a in WAN_ARGS)
    inv = local_cluster(n_nodes, nproc, outputs, args, addrs)
    facts = {h.name: NodeFacts(gpu_ids=None, nic="lo", address=h.address) for h in inv.hosts}
    topo = plan(inv, facts)
    run_id = f"run-{n_nodes}x{nproc}-{os.getpid()}"
    argv_job = job_argv(inv.job, placeholder_values(topo, run_id, prompt, str(outputs)))
    procs = {}
    for node in reversed(topo.nodes):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "MASTER_", "RANK", "WORLD_SIZE"))}
        env.update(torchrun_env(node, inv))
        argv = torchrun_argv(topo, node, run_id, argv_job, python=sys.executable, outputs=str(outputs))
        procs[node.host.name] = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True, errors="replace")
    results = {}
    deadline = time.time() + timeout
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=max(1, deadline - time.time()))
        results[name] = (proc.returncode, out)
    return topo, run_id, outputs, results


def read_records(outputs: Path, run_id: str) -> dict[int, dict]:
    recs = {}
    for path in (outputs / "ranks" / run_id).glob("rank*.json"):
        rec = json.loads(path.read_text(encoding="utf-8"))
        recs[rec["rank"]] = rec
    return recs


# --------------------------------------------------------------------------- a GIF reader, to check the writer


def _lzw_decode(data: bytes, min_bits: int) -> bytes:
    clear, eoi = 1 << min_bits, (1 << min_bits) + 1
    bitpos, out, prev = 0, bytearray(), None
    table, bits = [], min_bits + 1

    def reset():
        return [bytes([i]) for i in range(clear)] + [b"", b""], min_bits + 1

    table, bits = reset()
    while bitpos + bits <= len(data) * 8:
        code = (int.from_bytes(data[bitpos // 8:bitpos // 8 + 3], "little") >> (bitpos % 8)) & ((1 << bits) - 1)
        bitpos += bits
        if code == clear:
            table, bits, prev = *reset(), None
            continue
        if code == eoi:
            return bytes(out)
        if prev is None:
            entry = table[code]
        elif code < len(table):
            entry = table[code]
            table.append(prev + entry[:1])
        elif code == len(table):
            entry = prev + prev[:1]
            table.append(entry)
        else:
            raise ValueError(f"bad LZW code {code} (table {len(table)})")
        out += entry
        prev = entry
        if len(table) == (1 << bits) and bits < 12:
            bits += 1
    raise ValueError("LZW data ends without an end code")


def decode_gif(data: bytes):
    """(width, height, [frame pixel indices]) of a GIF89a; raises on anything malformed."""
    assert data[:6] == b"GIF89a", data[:6]
    width, height, packed = struct.unpack("<HHB", data[6:11])
    pos = 13 + (3 * (2 << (packed & 7)) if packed & 0x80 else 0)
    frames = []
    while True:
        kind = data[pos]
        pos += 1
        if kind == 0x3B:
            return width, height, frames
        if kind == 0x21:
            pos += 1
            while data[pos]:
                pos += data[pos] + 1
            pos += 1
            continue
        assert kind == 0x2C, f"unexpected block {kind:#x} at {pos - 1}"
        _, _, fw, fh, fpacked = struct.unpack("<HHHHB", data[pos:pos + 9])
        pos += 9 + (3 * (2 << (fpacked & 7)) if fpacked & 0x80 else 0)
        min_bits = data[pos]
        pos += 1
        chunks = bytearray()
        while data[pos]:
            chunks += data[pos + 1:pos + 1 + data[pos]]
            pos += data[pos] + 1
        pos += 1
        pixels = _lzw_decode(bytes(chunks), min_bits)
        assert len(pixels) == fw * fh, (len(pixels), fw, fh)
        frames.append(pixels)


def load_generate():
    spec = importlib.util.spec_from_file_location("example_generate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gif_encoder_round_trips_through_an_independent_decoder():
    gen = load_generate()
    rnd = random.Random(1)
    noisy = bytes(rnd.randrange(256) for _ in range(120 * 100))  # forces 12-bit codes and table resets
    smooth = bytes((x // 7 + y // 5) % 256 for y in range(100) for x in range(120))
    flat = bytes(120 * 100)
    width, height, frames = decode_gif(gen.encode_gif([noisy, smooth, flat], 120, 100))
    assert (width, height) == (120, 100)
    assert frames == [noisy, smooth, flat]


# --------------------------------------------------------------------------- real runs


@pytest.mark.slow
def test_one_node_two_ranks_makes_a_gif_and_rank_records(tmp_path):
    topo, run_id, outputs, results = launch(tmp_path, 1, 2, PROMPT)
    code, out = results["local0"]
    assert code == 0, out
    width, height, frames = decode_gif((outputs / f"{run_id}.gif").read_bytes())
    assert (width, height) == (64, 48) and len(frames) == 8 and len(set(frames)) > 1
    recs = read_records(outputs, run_id)
    assert sorted(recs) == [0, 1]
    for rank, rec in recs.items():
        assert rec["world_size"] == 2 and rec["local_rank"] == rank and rec["error"] is None
        assert rec["prompt"] == PROMPT and '"tenxcloud"' in rec["prompt"]
        assert rec["t_start"] <= rec["t_init"] <= rec["t_first_collective"] <= rec["t_end"]
    # Ulysses is exact: the same job on one rank, without torchrun, makes the same GIF.
    alone = tmp_path / "alone.gif"
    argv = [a.replace("{world_size}", "1").replace("{prompt}", PROMPT).replace("{outputs}/{run_id}.gif", str(alone))
            for a in WAN_ARGS]
    argv = [a.replace("{ulysses}", "1") for a in argv]
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert alone.read_bytes() == (outputs / f"{run_id}.gif").read_bytes()


@pytest.mark.slow
def test_two_nodes_put_ranks_0_1_on_the_master_and_deliver_the_prompt_byte_for_byte(tmp_path):
    # The master's address sorts after the worker's as a string ("127.0.0.10" < "127.0.0.2"):
    # c10d would give the worker ranks 0..1 (and make it MASTER_ADDR); static must not.
    topo, run_id, outputs, results = launch(tmp_path, 2, 2, NASTY, addrs=("127.0.0.2", "127.0.0.10"))
    assert topo.master_addr == "127.0.0.2"
    for name, (code, out) in results.items():
        assert code == 0, f"{name}:\n{out}"
    assert not Path("/tmp/pwned").exists()
    recs = read_records(outputs, run_id)
    assert sorted(recs) == [0, 1, 2, 3]
    by_node = {name: sorted(r["rank"] for r in recs.values() if r["node"] == name) for name in ("local0", "local1")}
    assert by_node == {"local0": [0, 1], "local1": [2, 3]}  # the master (node_rank 0) holds ranks 0..k-1
    assert all(recs[r]["group_rank"] == (0 if r < 2 else 1) for r in recs)
    assert {r["master"] for r in recs.values()} == {f"127.0.0.2:{topo.port}"}
    sha = hashlib.sha256(NASTY.encode()).hexdigest()
    for rec in recs.values():
        assert rec["prompt"] == NASTY
        assert rec["prompt_sha256"] == sha
    _, _, frames = decode_gif((outputs / f"{run_id}.gif").read_bytes())
    assert len(frames) == 8
    # Streamed lines carry host and global rank; torchrun's per-rank files sit under the run and host.
    master_lines = [RANK_PREFIX_RE.match(l) for l in results["local0"][1].splitlines()]
    assert {(m["host"], m["rank"]) for m in master_lines if m} >= {("local0", "0"), ("local0", "1")}
    worker_stdout = list((outputs / "logs" / run_id / "local1").glob(f"{run_id}_*/attempt_0/1/stdout.log"))
    assert worker_stdout and "[generate rank 3]" in worker_stdout[0].read_text()


@pytest.mark.slow
def test_a_ulysses_size_that_is_not_the_world_size_fails_with_wan_s_message(tmp_path):
    topo, run_id, outputs, results = launch(tmp_path, 1, 2, "a cat", ulysses="3")
    code, out = results["local0"]
    assert code != 0
    assert "AssertionError: The number of ulysses_size should be equal to the world size." in out
    recs = read_records(outputs, run_id)
    assert recs and all("ulysses_size" in r["error"] for r in recs.values())


def test_heads_that_ulysses_cannot_divide_fail_with_wan_s_message():
    gen = load_generate()
    gen.check_config(gen.Config(40, 8), gen.parse_args(["--ulysses_size", "8"]), 8)  # the seeds' final layout
    with pytest.raises(AssertionError) as err:
        gen.check_config(gen.Config(40, 8), gen.parse_args(["--ulysses_size", "14"]), 14)
    assert str(err.value) == "`cfg.num_heads=40` cannot be divided evenly by `args.ulysses_size=14`."
    with pytest.raises(AssertionError) as err:
        gen.check_config(gen.Config(8, 8), gen.parse_args(["--ulysses_size", "10"]), 2)
    assert str(err.value) == "The number of ulysses_size should be equal to the world size."
