#!/usr/bin/env python3
"""An NCCL job for the straggler validation on GPUs (issue 37): each step every rank multiplies
--mm 8192x8192 bf16 matrices --per_step times (the slow rank --slow_factor times as many), then
all_reduces a 64 MiB gradient and waits for the GPU (torch.cuda.synchronize), as a training step does.
--slow_cpu_s S: the slow rank sleeps S s in load_batch() first (a slow data loader). Rank 0 prints `step N` every 10 steps; every rank prints its mean step time at the end."""
import argparse
import os
import time

import torch
import torch.distributed as dist


def load_batch(seconds):
    """Where a slow data loader would keep its rank (--slow_cpu_s: a sleep, on the CPU side)."""
    if seconds:
        time.sleep(seconds)


def compute(a, b, times):
    for _ in range(times):
        a = (a @ b).clamp_(-1, 1)
    return a


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--per_step", type=int, default=40)
    parser.add_argument("--slow_rank", type=int, default=-1)
    parser.add_argument("--slow_factor", type=float, default=1.0, help="more GPU work on --slow_rank")
    parser.add_argument("--slow_cpu_s", type=float, default=0.0, help="a sleep before each step on --slow_rank")
    args = parser.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) / 90
    grad = torch.ones(16 * 1024 * 1024, device="cuda")
    times = round(args.per_step * (args.slow_factor if rank == args.slow_rank else 1.0))
    for _ in range(5):  # warm up
        compute(a, b, 2)
        dist.all_reduce(grad)
    torch.cuda.synchronize()
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        load_batch(args.slow_cpu_s if rank == args.slow_rank else 0.0)
        compute(a, b, times)
        dist.all_reduce(grad)
        torch.cuda.synchronize()
        if rank == 0 and step % 10 == 0:
            print(f"step {step}", flush=True)
    took = (time.monotonic() - started) / args.steps
    print(f"rank {rank} mean step {took:.5f}s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
