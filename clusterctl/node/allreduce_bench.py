#!/usr/bin/env python3
"""All-reduce diagnostic, run by torchrun on every node (`clusterctl nccl-test`).

Stages, each only after the one before succeeded (a hang is then placed, not guessed):
  connect  init_process_group with a short timeout, then one tiny all_reduce; every rank
           reports how long it took to get there (a node that starts minutes late shows).
  small    8 B .. 1 MiB, doubling, few iterations: latency and the protocol switches.
  full     2 MiB .. --max-size (1 GiB on GPUs, 64 MiB on CPU), doubling, warm-up, timed.
Per size: time per all_reduce (the slowest rank's), algbw = S/t, busbw = algbw*2(n-1)/n
(NVIDIA nccl-tests' definition), and correctness: every rank fills its buffer with
rank- and position-dependent small integers and the sum is checked exactly.

Rank 0 prints one line per record, `NCCLTEST {json}`, and appends the same JSON to
--result-file when given; the controller reads that file after the run.

`--reference` is the plain torch.distributed timing loop (torch.rand, warm-up, barrier,
perf_counter around N all_reduce calls, synchronize): what a hand-written script
measures, to compare with.

torch and the standard library only: nothing of clusterctl is installed on the nodes.
"""
import time

T_START = time.time()  # before `import torch`, which is most of a rank's start-up time

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
# A program of its own on the nodes (shipped by the runner, started by torchrun): its clocks are the
# ranks' own, not the controller's (tests/unit/test_architecture.py).
RUNS_ON_NODES = True

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SMALL_MAX = MIB
PATTERN = 16  # values 1..PATTERN per rank: sums stay exact in float32 up to 2**20 ranks
_UNITS = {"": 1, "B": 1, "K": KIB, "KB": KIB, "KIB": KIB, "M": MIB, "MB": MIB, "MIB": MIB,
          "G": GIB, "GB": GIB, "GIB": GIB}


def _sig(value):
    """Six significant digits: a CPU's 0.0003 GB/s and a GPU's 345.123 GB/s both stay readable."""
    return float(f"{value:.6g}")


def parse_size(text):
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8, 64K, 1M, 1G)")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def sweep(min_size, max_size):
    """Doubling sizes from min_size to max_size (whole float32 elements); max_size always ends it."""
    size, sizes = max(4, min_size - min_size % 4), []
    top = max_size - max_size % 4
    while size <= top:
        sizes.append(size)
        size *= 2
    if top >= 4 and (not sizes or sizes[-1] != top):
        sizes.append(top)
    return sizes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="all_reduce bandwidth and correctness, staged")
    p.add_argument("--stage", choices=("connect", "small", "full"), default="full", help="the last stage to run")
    p.add_argument("--min-size", type=parse_size, default=8)
    p.add_argument("--max-size", type=parse_size, default=None, help="default 1G on GPUs, 64M on CPU")
    p.add_argument("--iters", type=int, default=20, help="timed all_reduce calls per size (full stage)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--small-iters", type=int, default=5, help="timed calls per size in the small stage")
    p.add_argument("--connect-timeout", type=float, default=60.0,
                   help="seconds for init_process_group; also the timeout of every collective")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--result-file", default=None, help="rank 0 appends its NCCLTEST records here")
    p.add_argument("--reference", action="store_true", help="the plain torch.distributed timing loop instead")
    args = p.parse_args(argv)
    if args.iters < 1 or args.small_iters < 1 or args.warmup < 0:
        p.error("--iters and --small-iters must be >= 1, --warmup >= 0")
    return args


# --------------------------------------------------------------------------- rank context


class Ctx:
    def __init__(self, args):
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        backend = args.backend
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.backend = backend
        self.cuda = backend == "nccl"
        if self.cuda:
            # An ordinal past the visible GPUs raises "invalid device ordinal" here, on purpose:
            # falling back to the CPU would hide the misconfiguration the test exists to find.
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        self.host = os.environ.get("CLUSTERCTL_HOST") or socket.gethostname()
        self.out = None
        if args.result_file and self.rank == 0:
            os.makedirs(os.path.dirname(os.path.abspath(args.result_file)), exist_ok=True)
            self.out = open(args.result_file, "w", encoding="utf-8")

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def emit(self, record, every_rank=False):
        if self.rank != 0 and not every_rank:
            return
        line = json.dumps(record, sort_keys=True)
        print(f"NCCLTEST {line}", flush=True)
        if self.out is not None:
            self.out.write(line + "\n")
            self.out.flush()

    def say(self, text):
        print(f"[nccltest rank {self.rank}] {text}", flush=True)


def nvlink_in_topo(text):
    """From `nvidia-smi topo -m`: True when a GPU row shows an NV# link, False when none
    does, None when there is no GPU matrix (one GPU, no driver)."""
    rows = [line for line in text.splitlines()  # a GPU's row has X on the diagonal; the header has none
            if re.match(r"\s*(\x1b\[[0-9;]*m)?GPU\d+\s", line) and re.search(r"\sX(\s|$)", line)]
    if len(rows) < 2:
        return None
    return any(re.search(r"\bNV\d+\b", row) for row in rows)


def _nvlink():
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return nvlink_in_topo(out)


def _versions(ctx):
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    if ctx.cuda:
        nccl = torch.cuda.nccl.version()
        info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        info["gpu"] = torch.cuda.get_device_name(ctx.device)
        info["gpus_visible"] = torch.cuda.device_count()
        info["nvlink"] = _nvlink() if ctx.local_rank == 0 else None
    return info


# --------------------------------------------------------------------------- stages


def connect(ctx, args):
    t0 = time.time()
    kwargs = {"backend": ctx.backend, "timeout": datetime.timedelta(seconds=args.connect_timeout)}
    if ctx.cuda:
        kwargs["device_id"] = ctx.device  # eager NCCL communicator: connection problems surface here
    dist.init_process_group(**kwargs)
    t_init = time.time()
    one = torch.ones(1, device=ctx.device)
    dist.all_reduce(one)
    ctx.sync()
    t_first = time.time()
    if int(one.item()) != ctx.world:
        raise RuntimeError(f"the first all_reduce summed to {one.item()}, expected {ctx.world}")
    mine = {"rank": ctx.rank, "host": ctx.host, "local_rank": ctx.local_rank, "pid": os.getpid(),
            "start_to_connected_s": round(t_first - T_START, 3), "started_at": round(T_START, 3)}
    everyone = gather_json(ctx, mine)
    ctx.say(f"connected: {ctx.world} ranks, backend {ctx.backend}, init {t_init - t0:.2f}s, "
            f"first all_reduce {t_first - t_init:.2f}s")
    latest = max(everyone, key=lambda r: r["started_at"])
    ctx.emit({"stage": "connect", "ok": True, "world_size": ctx.world, "local_world_size": ctx.local_world,
              "backend": ctx.backend, "init_s": round(t_init - t0, 3), "first_allreduce_s": round(t_first - t_init, 3),
              "start_skew_s": round(latest["started_at"] - min(r["started_at"] for r in everyone), 3),
              "last_to_start": {"rank": latest["rank"], "host": latest["host"]},
              "ranks": everyone, **_versions(ctx)})


def gather_json(ctx, obj, width=2048):
    """Every rank's small JSON object, without numpy (which all_gather_object needs and
    minimal images lack): length-prefixed bytes in a uint8 tensor, all_gather'ed."""
    data = json.dumps(obj).encode()[:width]
    buf = torch.zeros(width + 4, dtype=torch.uint8, device=ctx.device)
    buf[:4 + len(data)] = torch.tensor(list(len(data).to_bytes(4, "little") + data), dtype=torch.uint8)
    gathered = [torch.zeros_like(buf) for _ in range(ctx.world)]
    dist.all_gather(gathered, buf)
    objects = []
    for tensor in gathered:
        raw = bytes(tensor.cpu().tolist())
        objects.append(json.loads(raw[4:4 + int.from_bytes(raw[:4], "little")]))
    return objects


def expected_sums(world):
    """The exact sum at each position class j = i % PATTERN of sum_r ((i + r) % PATTERN + 1)."""
    full, rest = divmod(world, PATTERN)
    base = full * PATTERN * (PATTERN + 1) // 2
    return [base + sum((j + r) % PATTERN + 1 for r in range(rest)) for j in range(PATTERN)]


def filled(ctx, count):
    """(this rank's buffer, the expected all_reduce result), both float32 of `count` elements."""
    position = torch.arange(count, dtype=torch.int32, device=ctx.device).remainder_(PATTERN)
    table = torch.tensor(expected_sums(ctx.world), dtype=torch.float32, device=ctx.device)
    expected = table.index_select(0, position)
    buf = position.add_(ctx.rank).remainder_(PATTERN).add_(1).to(torch.float32)
    del position
    return buf, expected


def slowest(ctx, seconds):
    t = torch.tensor([seconds], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def all_true(ctx, flag):
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def timed(ctx, buf, iters, warmup):
    """Seconds per all_reduce on this rank, after warm-up, ranks lined up first."""
    for _ in range(warmup):
        dist.all_reduce(buf)
    ctx.sync()
    dist.barrier()
    ctx.sync()
    if ctx.cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(buf)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    return (time.perf_counter() - t0) / iters


def measure(ctx, size, stage, iters, warmup):
    buf, expected = filled(ctx, size // 4)
    dist.all_reduce(buf)
    ctx.sync()
    correct = all_true(ctx, torch.equal(buf, expected))
    del expected
    seconds = slowest(ctx, timed(ctx, buf, iters, warmup))
    del buf
    algbw = size / seconds / 1e9
    busbw = algbw * 2 * (ctx.world - 1) / ctx.world
    ctx.emit({"stage": stage, "size": size, "iters": iters, "time_us": _sig(seconds * 1e6),
              "algbw_gbps": _sig(algbw), "busbw_gbps": _sig(busbw), "correct": correct})
    return correct


def bench(ctx, args):
    max_size = args.max_size or (GIB if ctx.cuda else 64 * MIB)
    sizes = [] if args.stage == "connect" else sweep(args.min_size, max_size)
    if args.stage == "small":
        sizes = [s for s in sizes if s <= SMALL_MAX]
    ctx.emit({"stage": "plan", "sizes": sizes, "world_size": ctx.world, "backend": ctx.backend,
              "iters": args.iters, "small_iters": args.small_iters, "warmup": args.warmup})
    connect(ctx, args)
    all_correct = True
    for size in sizes:
        small = size <= SMALL_MAX
        stage = "small" if small else "full"
        iters = args.small_iters if small else args.iters
        all_correct &= measure(ctx, size, stage, iters, min(args.warmup, 2) if small else args.warmup)
    ctx.emit({"stage": "done", "ok": all_correct, "elapsed_s": round(time.time() - T_START, 3)})
    return 0 if all_correct else 3


# --------------------------------------------------------------------------- the plain reference


def reference(args):
    """The minimal hand-written benchmark: what `torch.distributed` users run to compare."""
    cuda = torch.cuda.is_available() and args.backend != "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    for size in sweep(args.min_size, args.max_size or (GIB if cuda else 64 * MIB)):
        t = torch.rand(size // 4, dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(t)
        if cuda:
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - t0) / args.iters
        algbw = size / seconds / 1e9
        if rank == 0:
            record = {"size": size, "time_us": _sig(seconds * 1e6), "algbw_gbps": _sig(algbw),
                      "busbw_gbps": _sig(algbw * 2 * (n - 1) / n), "world_size": n, "iters": args.iters}
            print("REFERENCE " + json.dumps(record, sort_keys=True), flush=True)
        del t
    dist.destroy_process_group()
    return 0


# --------------------------------------------------------------------------- main


def main(argv=None):
    args = parse_args(argv)
    if args.reference:
        return reference(args)
    ctx = Ctx(args)
    stage = "connect"
    try:
        code = bench(ctx, args)
        stage = "done"
    except Exception as exc:
        ctx.emit({"stage": "error", "ok": False, "rank": ctx.rank, "host": ctx.host,
                  "error": f"{type(exc).__name__}: {exc}"[:2000]}, every_rank=True)
        raise
    finally:
        if ctx.out is not None:
            ctx.out.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    return code if stage == "done" else 1


if __name__ == "__main__":
    try:
        from torch.distributed.elastic.multiprocessing.errors import record
    except ImportError:  # very old torch: no error files, the traceback still prints
        def record(fn):
            return fn
    sys.exit(record(main)())
