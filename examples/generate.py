#!/usr/bin/env python3
"""A tiny distributed text-to-video job shaped like Wan2.2's generate.py.

It is what `clusterctl run` launches when rehearsing: the same command line
(--task --size W*H --frame_num --ulysses_size --prompt --save_file --ckpt_dir
--sample_guide_scale --seed ...), the same configuration checks with the same messages,
and real communication: Ulysses sequence parallelism, where each rank holds a slice of
the token sequence and two all_to_all exchanges per attention layer trade it for a
slice of the heads. The "model" is a random transformer block seeded by a hash of the
prompt, so every rank builds the same weights without loading a checkpoint; the result
is written by rank 0 as an animated GIF (a small GIF89a encoder is included: no PIL).

Each rank writes `<dirname(save_file)>/ranks/<run id>/rank<R>.json`: its rank, world
size, local rank, hostname, the prompt exactly as received with its sha256, and
timestamps (start, after init_process_group, after the first collective, end).

Only torch and the standard library are used; clusterctl need not be installed.
Run it with torchrun (ranks from the environment) or alone (world size 1).
"""
import time

T_START = time.time()  # before `import torch`, which is most of a rank's start-up time

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402

TASKS = ("t2v-A14B", "i2v-A14B", "ti2v-5B", "s2v-14B", "animate-14B", "t2v-tiny")
MAX_TOKENS = 4096  # keep attention affordable whatever --size and --frame_num say
MAX_GIF_SIDE = 256


def log(rank, text):
    print(f"[generate rank {rank}] {text}", flush=True)


# --------------------------------------------------------------------------- arguments


def _str2bool(text):
    return str(text).lower() in ("1", "true", "yes", "y", "on")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Tiny Wan2.2-shaped distributed generation (rehearsal workload)")
    p.add_argument("--task", default="t2v-A14B", choices=TASKS)
    p.add_argument("--size", default="64*48", help="W*H in pixels, e.g. 832*480")
    p.add_argument("--frame_num", type=int, default=8)
    p.add_argument("--ulysses_size", type=int, default=1, help="sequence-parallel size; must equal the world size")
    p.add_argument("--prompt", default="A cat walks on the grass, realistic style.")
    p.add_argument("--save_file", default=None)
    p.add_argument("--ckpt_dir", default=None, help="accepted for compatibility; no checkpoint is read")
    p.add_argument("--sample_guide_scale", type=float, default=5.0)
    p.add_argument("--seed", "--base_seed", dest="seed", type=int, default=0)
    p.add_argument("--sample_steps", type=int, default=4)
    p.add_argument("--num_heads", type=int, default=int(os.environ.get("EXAMPLE_NUM_HEADS", "8")))
    p.add_argument("--head_dim", type=int, default=8)
    # Wan2.2 flags that change nothing here but must be accepted.
    p.add_argument("--dit_fsdp", action="store_true")
    p.add_argument("--t5_fsdp", action="store_true")
    p.add_argument("--t5_cpu", action="store_true")
    p.add_argument("--convert_model_dtype", action="store_true")
    p.add_argument("--offload_model", type=_str2bool, default=None)
    p.add_argument("--sample_shift", type=float, default=None)
    p.add_argument("--sample_solver", default="unipc")
    # Fault injection for rehearsing failures.
    p.add_argument("--fail_rank", type=int, default=None, help="this rank raises RuntimeError before generating")
    p.add_argument("--stall_rank", type=int, default=None, help="this rank sleeps --stall_s before the first collective")
    p.add_argument("--stall_s", type=float, default=0.0)
    args = p.parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.lower().replace("x", "*").split("*"))
    except ValueError:
        p.error(f"--size {args.size!r} is not W*H")
    if width < 8 or height < 8 or args.frame_num < 1 or args.sample_steps < 1:
        p.error("--size must be at least 8*8, --frame_num and --sample_steps at least 1")
    args.width, args.height = width, height
    return args


class Config:
    """Stand-in for Wan's model config (cfg.num_heads is what Ulysses must divide)."""

    def __init__(self, num_heads, head_dim):
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dim = num_heads * head_dim


def check_config(cfg, args, world_size):
    """Wan2.2's checks, with its messages (the seeds' AssertionErrors)."""
    assert args.ulysses_size == world_size, "The number of ulysses_size should be equal to the world size."
    assert cfg.num_heads % args.ulysses_size == 0, f"`{cfg.num_heads=}` cannot be divided evenly by `{args.ulysses_size=}`."


# --------------------------------------------------------------------------- GIF89a


class _LZW:
    """GIF's variable-width LZW, code for code as giflib's EGifCompressLine."""

    def __init__(self, min_bits):
        self.min_bits = min_bits
        self.clear = 1 << min_bits
        self.eoi = self.clear + 1
        self.out = bytearray()
        self.acc = 0
        self.nacc = 0
        self._reset()

    def _reset(self):
        self.bits = self.min_bits + 1
        self.max_code1 = 1 << self.bits
        self.running = self.eoi + 1
        self.table = {}

    def _output(self, code):
        self.acc |= code << self.nacc
        self.nacc += self.bits
        while self.nacc >= 8:
            self.out.append(self.acc & 0xFF)
            self.acc >>= 8
            self.nacc -= 8
        if self.running >= self.max_code1 and code <= 4095:
            self.bits += 1
            self.max_code1 = 1 << self.bits

    def encode(self, pixels):
        self._output(self.clear)
        current = pixels[0]
        for px in pixels[1:]:
            key = (current, px)
            code = self.table.get(key)
            if code is not None:
                current = code
                continue
            self._output(current)
            current = px
            if self.running >= 4095:
                self._output(self.clear)
                self._reset()
            else:
                self.table[key] = self.running
                self.running += 1
        self._output(current)
        self._output(self.eoi)
        if self.nacc:
            self.out.append(self.acc & 0xFF)
        return bytes(self.out)


def _sub_blocks(data):
    out = bytearray()
    for i in range(0, len(data), 255):
        chunk = data[i:i + 255]
        out.append(len(chunk))
        out += chunk
    out.append(0)
    return bytes(out)


def palette_332():
    """256 colours: 3 bits red, 3 bits green, 2 bits blue."""
    pal = bytearray()
    for i in range(256):
        pal += bytes(((i >> 5) * 255 // 7, ((i >> 2) & 7) * 255 // 7, (i & 3) * 255 // 3))
    return bytes(pal)


def encode_gif(frames, width, height, delay_cs=12):
    """frames: iterables of palette indices (bytes of width*height) -> GIF89a bytes."""
    out = bytearray(b"GIF89a")
    out += struct.pack("<HHBBB", width, height, 0xF7, 0, 0)  # global table of 256 colours
    out += palette_332()
    out += b"!\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"  # loop forever
    for pixels in frames:
        out += b"!\xf9\x04\x04" + struct.pack("<H", delay_cs) + b"\x00\x00"  # keep previous frame
        out += b"," + struct.pack("<HHHHB", 0, 0, width, height, 0)
        out += bytes([8]) + _sub_blocks(_LZW(8).encode(bytes(pixels)))
    out += b";"
    return bytes(out)


# --------------------------------------------------------------------------- layout


def latent_grid(args):
    """Token grid (frames, rows, cols) and the pixel stride one token stands for."""
    stride = 8
    while True:
        rows, cols = max(1, args.height // stride), max(1, args.width // stride)
        if args.frame_num * rows * cols <= MAX_TOKENS or (rows == 1 and cols == 1):
            return args.frame_num, rows, cols, stride
        stride *= 2


def _seed_from(prompt_bytes, seed):
    return int.from_bytes(hashlib.sha256(prompt_bytes + b"\x00" + str(seed).encode()).digest()[:8], "little") & (2**63 - 1)


class TinyDiT:
    """One attention + MLP block; weights from a generator seeded by the prompt."""

    def __init__(self, cfg, gen, device):
        d = cfg.dim

        def w(*shape, scale=1.0):
            return (torch.randn(*shape, generator=gen) * scale / shape[0] ** 0.5).to(device)

        self.cfg = cfg
        self.qkv = w(d, 3 * d)
        self.proj = w(d, d)
        self.mlp_in = w(d, 2 * d)
        self.mlp_out = w(2 * d, d)
        self.text = torch.randn(d, generator=gen).to(device)  # the prompt's "embedding"
        self.to_rgb = w(d, 3, scale=2.0)

    def forward(self, x, cond, attn, t):
        """x: [B, Ls, D] local sequence slice; cond: [B, 1, D]; returns velocity."""
        h = F.layer_norm(x, x.shape[-1:]) + cond + t
        h = x + attn(h @ self.qkv) @ self.proj
        return h + F.gelu(F.layer_norm(h, h.shape[-1:]) @ self.mlp_in) @ self.mlp_out - x


class Ulysses:
    """Sequence-parallel attention: all_to_all seq-slices <-> head-slices."""

    def __init__(self, cfg, world, seq_len, local_len, valid_len):
        self.cfg, self.world, self.seq_len, self.local_len = cfg, world, seq_len, local_len
        self.heads_local = cfg.num_heads // world
        self.mask = None
        if valid_len < seq_len:  # padding tokens must not be attended to
            self.mask = (torch.arange(seq_len) < valid_len).view(1, 1, 1, seq_len)

    def _exchange(self, t):
        """[P, ...] chunk j goes to rank j; returns [P, ...] with chunk i from rank i."""
        t = t.contiguous()
        out = torch.empty(t.shape, dtype=t.dtype, device=t.device)  # empty_like would keep t's strides
        if self.world == 1:
            out.copy_(t)
        else:
            dist.all_to_all_single(out, t)
        return out

    def __call__(self, qkv):
        B, Ls, _ = qkv.shape
        P, Hl, hd = self.world, self.heads_local, self.cfg.head_dim
        q, k, v = qkv.view(B, Ls, 3, P, Hl, hd).permute(2, 3, 0, 1, 4, 5).unbind(0)  # each [P, B, Ls, Hl, hd]
        full = []
        for t in (q, k, v):
            got = self._exchange(t)  # [P(source seq slice), B, Ls, Hl, hd]
            full.append(got.permute(1, 3, 0, 2, 4).reshape(B, Hl, P * Ls, hd))
        mask = None if self.mask is None else self.mask.to(qkv.device)
        o = F.scaled_dot_product_attention(full[0], full[1], full[2], attn_mask=mask)  # [B, Hl, L, hd]
        o = o.view(B, Hl, P, Ls, hd).permute(2, 0, 3, 1, 4)  # [P(dest seq slice), B, Ls, Hl, hd]
        back = self._exchange(o)  # [P(source head group), B, Ls, Hl, hd]
        return back.permute(1, 2, 0, 3, 4).reshape(B, Ls, P * Hl * hd)


# --------------------------------------------------------------------------- ranks


def _init_distributed():
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend)
    else:  # run alone: a one-rank group keeps a single code path
        backend, local_rank = "gloo", 0
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    device = torch.device(f"cuda:{local_rank}") if backend == "nccl" else torch.device("cpu")
    return backend, local_rank, device


def _check_same_prompt(prompt_sha, world, rank, device):
    """First collective: every rank must have received the same prompt."""
    mine = torch.tensor(list(prompt_sha), dtype=torch.int32, device=device)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    for other, theirs in enumerate(gathered):
        if not torch.equal(theirs, mine):
            raise RuntimeError(f"the prompt differs between rank {rank} and rank {other}: it was changed on the way to one of them")


def smooth_noise(gen, frames, rows, cols, dim, seq):
    """Noise correlated across neighbouring tokens in space and time, so frames move."""
    base = torch.randn(1, dim, frames, rows, cols, generator=gen)
    for _ in range(2):
        base = F.avg_pool3d(base, kernel_size=3, stride=1, padding=1, count_include_pad=False)
    tokens = base[0].permute(1, 2, 3, 0).reshape(-1, dim)
    tokens = (tokens - tokens.mean(0)) / tokens.std(0).clamp_min(1e-6)
    pad = torch.randn(seq - tokens.shape[0], dim, generator=gen)
    return torch.cat([tokens, pad])


def global_std(x, world):
    """Standard deviation over every rank's tokens: the same scale on all ranks."""
    n = torch.tensor(float(x.numel()), device=x.device, dtype=x.dtype)
    stats = torch.stack([x.sum(), (x * x).sum(), n])
    if world > 1:
        dist.all_reduce(stats)
    mean = stats[0] / stats[2]
    return (stats[1] / stats[2] - mean * mean).clamp_min(1e-12).sqrt()


def generate(args, cfg, rank, world, device, prompt_bytes):
    frames, rows, cols, stride = latent_grid(args)
    valid = frames * rows * cols
    local = -(-valid // world)
    seq = local * world
    gen = torch.Generator().manual_seed(_seed_from(prompt_bytes, args.seed))
    model = TinyDiT(cfg, gen, device)
    noise = smooth_noise(gen, frames, rows, cols, cfg.dim, seq).to(device)
    x = noise[rank * local:(rank + 1) * local].unsqueeze(0).repeat(2, 1, 1)  # [cond, uncond]
    cond = torch.stack([model.text, torch.zeros_like(model.text)]).unsqueeze(1)
    attn = Ulysses(cfg, world, seq, local, valid)
    mine_valid = max(0, min(local, valid - rank * local))  # this rank's tokens that are not padding
    g = args.sample_guide_scale
    for step in range(args.sample_steps):
        t0 = time.time()
        t = torch.full((1, 1, cfg.dim), 1.0 - step / args.sample_steps, device=device)
        v = model.forward(x, cond, attn, t)
        guided = v[1] + g * (v[0] - v[1])
        x = x - guided.unsqueeze(0) / args.sample_steps
        x = x / global_std(x[:, :mine_valid], world)
        if rank == 0:
            log(rank, f"step {step + 1}/{args.sample_steps} ({time.time() - t0:.3f}s)")
    mine = x[0].contiguous()
    pieces = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(pieces, mine)
    if rank != 0:
        return None
    latent = torch.cat(pieces)[:valid].float().cpu()
    colour = latent @ model.to_rgb.float().cpu()
    colour = (colour - colour.mean(0)) / colour.std(0).clamp_min(1e-6)  # contrast per channel over the clip
    rgb = torch.sigmoid(1.5 * colour).view(frames, rows, cols, 3)
    return rgb, stride


def to_gif(rgb, stride):
    frames, rows, cols, _ = rgb.shape
    scale = max(1, min(stride, MAX_GIF_SIDE // max(rows, cols)))
    up = rgb.repeat_interleave(scale, dim=1).repeat_interleave(scale, dim=2)
    q = (up * 255).round().clamp(0, 255).to(torch.int32)
    idx = ((q[..., 0] >> 5) << 5) | ((q[..., 1] >> 5) << 2) | (q[..., 2] >> 6)
    data = [bytes(idx[f].to(torch.uint8).flatten().tolist()) for f in range(frames)]
    return encode_gif(data, cols * scale, rows * scale), frames


def _record_path(save_file, run_id, rank):
    stem = os.path.splitext(os.path.basename(save_file))[0]
    return os.path.join(os.path.dirname(os.path.abspath(save_file)), "ranks", run_id or stem, f"rank{rank}.json")


def _write_record(path, record_):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record_, fh, ensure_ascii=False, indent=1)
    os.replace(tmp, path)


@record
def main(argv=None):
    args = parse_args(argv)
    prompt_bytes = os.fsencode(args.prompt)  # the bytes as received in argv
    if args.save_file is None:
        args.save_file = f"{args.task}_{args.size.replace('*', 'x')}_{args.ulysses_size}_{time.strftime('%Y%m%d_%H%M%S')}.gif"
    backend, local_rank, device = _init_distributed()
    t_init = time.time()
    rank, world = dist.get_rank(), dist.get_world_size()
    run_id = os.environ.get("TORCHELASTIC_RUN_ID") or None
    rec = {
        "rank": rank, "world_size": world, "local_rank": local_rank,
        "group_rank": int(os.environ.get("GROUP_RANK", "0")),
        "node": os.environ.get("CLUSTERCTL_HOST"), "hostname": socket.gethostname(), "pid": os.getpid(),
        "backend": backend, "device": str(device), "run_id": run_id,
        "master": f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}",
        "prompt": args.prompt, "prompt_sha256": hashlib.sha256(prompt_bytes).hexdigest(), "prompt_bytes": len(prompt_bytes),
        "argv": sys.argv[1:], "save_file": args.save_file,
        "t_start": T_START, "t_init": t_init, "t_first_collective": None, "t_end": None, "error": None,
    }
    path = _record_path(args.save_file, run_id, rank)
    log(rank, f"world {world} backend {backend} device {device} on {socket.gethostname()} "
              f"(init_process_group after {t_init - T_START:.2f}s)")
    try:
        cfg = Config(args.num_heads, args.head_dim)
        check_config(cfg, args, world)
        if args.stall_rank == rank and args.stall_s > 0:
            log(rank, f"stalling {args.stall_s}s before the first collective")
            time.sleep(args.stall_s)
        _check_same_prompt(hashlib.sha256(prompt_bytes).digest(), world, rank, device)
        rec["t_first_collective"] = time.time()
        if args.fail_rank == rank:
            raise RuntimeError(f"injected failure on rank {rank} (--fail_rank)")
        out = generate(args, cfg, rank, world, device, prompt_bytes)
        if out is not None:
            data, nframes = to_gif(*out)
            os.makedirs(os.path.dirname(os.path.abspath(args.save_file)), exist_ok=True)
            with open(args.save_file, "wb") as fh:
                fh.write(data)
            rec["gif_frames"], rec["gif_bytes"] = nframes, len(data)
            log(rank, f"saved {nframes} frames ({len(data)} bytes) to {args.save_file}")
        dist.barrier(device_ids=[local_rank] if backend == "nccl" else None)
    except BaseException as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        rec["t_end"] = time.time()
        _write_record(path, rec)
        dist.destroy_process_group()  # without it gloo aborts at exit ("terminate called...")
    log(rank, f"done in {rec['t_end'] - T_START:.2f}s")


if __name__ == "__main__":
    main()
    # Success: skip the interpreter's teardown of torch's modules (0.5-1 s per rank on a
    # busy CPU). Everything is written and closed; failures above exit the normal way.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
