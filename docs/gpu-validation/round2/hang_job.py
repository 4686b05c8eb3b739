#!/usr/bin/env python3
"""A planted hang for issue 23 (docs/gpu-validation.md, round 2): 2 ranks, one warm-up all_reduce that both
join (collective #1), then rank 1 sleeps in `rank_hang` while rank 0 enters all_reduce #2.

Environment (set in the inventory's job.env):
  HANG_NCCL_TIMEOUT_S  init_process_group's timeout, which bounds every collective (default 300): short, the
                       watchdog fires and, with clusterctl's TORCH_NCCL_DUMP_ON_TIMEOUT, the flight recorder dumps
  HANG_SLEEP_S         how long rank 1 sleeps (default 600)
  HANG_RANK            the rank that stalls (default 1; round 3 plants it on rank 2 of 4)
  HANG_WAIT            how rank 0 waits for all_reduce #2: `sync` (the usual code: all_reduce, then
                       torch.cuda.synchronize), `item` (all_reduce, then .item()), `blocking` (rank 0's thread waits
                       inside torch.distributed: TORCH_NCCL_BLOCKING_WAIT=1 must be in the env too)
CPU-only machines use gloo, where all_reduce itself blocks.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist


def rank_hang(seconds):
    """Rank 1's planted stall: it never reaches the second all_reduce in time."""
    time.sleep(seconds)


def main():
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    timeout = float(os.environ.get("HANG_NCCL_TIMEOUT_S", "300"))
    sleep_s = float(os.environ.get("HANG_SLEEP_S", "600"))
    wait = os.environ.get("HANG_WAIT", "sync")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=timeout),
                            **({"device_id": device} if cuda else {}))
    x = torch.ones(1 << 20, device=device)
    dist.all_reduce(x)  # collective #1: both ranks
    print(f"rank {rank}: warm-up all_reduce done, sum {x[0].item():g} "
          f"({torch.cuda.get_device_name(device) if cuda else 'cpu'}, pid {os.getpid()}, wait={wait}, "
          f"timeout {timeout:g}s)", flush=True)
    if rank == int(os.environ.get("HANG_RANK", "1")):
        rank_hang(sleep_s)
    print(f"rank {rank}: entering all_reduce #2", flush=True)
    dist.all_reduce(x)  # collective #2: rank 1 is late
    if wait == "item":
        value = x[0].item()
    else:
        if cuda:
            torch.cuda.synchronize()
        value = x[0].item()
    print(f"rank {rank}: all_reduce #2 done, sum {value:g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
