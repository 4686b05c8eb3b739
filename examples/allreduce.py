#!/usr/bin/env python3
"""The launch benchmark's job (bench/launch_vs_hand.py): import torch, init, one all_reduce, a barrier.

Each rank writes `<OUT_DIR>/rank<R>.json` with wall-clock timestamps: process start (before
`import torch`), past init_process_group, past the all_reduce, end. OUT_DIR is argv[1]. With a
second argument S the ranks sleep S seconds after the barrier (a job that runs a while, to
measure what the node-side machinery costs while it runs) and meet at a second barrier.
Only torch and the standard library: nothing of clusterctl in the container.
"""
import time

T_START = time.time()  # before `import torch`

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main() -> None:
    out_dir, hold_s = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    dist.init_process_group("gloo")
    t_init = time.time()
    value = torch.ones(1)
    dist.all_reduce(value)
    t_collective = time.time()
    dist.barrier()
    if hold_s:
        time.sleep(hold_s)
        dist.barrier()
    rank = dist.get_rank()
    print(f"rank {rank}: all_reduce gave {value.item():g}", flush=True)
    dist.destroy_process_group()
    os.makedirs(out_dir, exist_ok=True)
    record = {"rank": rank, "t_start": T_START, "t_init": t_init, "t_first_collective": t_collective,
              "t_end": time.time()}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
