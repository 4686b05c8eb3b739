#!/usr/bin/env python3
"""A small DeepSpeed training job for `job.launcher: deepspeed` on GPUs: a 2-layer MLP under ZeRO stage 1
(bf16, torch's AdamW as the client optimizer: no op of DeepSpeed's to compile), NCCL between the ranks.
DeepSpeed's per-node launcher passes --local_rank. Prints each rank's view and the last loss; with
DS_FAIL_RANK=N, rank N raises at step 10 while the others go on into the next collective."""
import argparse
import os

import deepspeed
import torch

p = argparse.ArgumentParser()
p.add_argument("--local_rank", type=int, required=True)
p.add_argument("--steps", type=int, default=60)
args = p.parse_args()
deepspeed.init_distributed(dist_backend="nccl")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(args.local_rank)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096))
config = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
          "zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": True, "steps_per_print": 1000}
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                                       config=config)
fail = int(os.environ.get("DS_FAIL_RANK", "-1"))
for step in range(args.steps):
    if rank == fail and step == 10:
        raise RuntimeError(f"rank {rank} gives up at step {step} (DS_FAIL_RANK)")
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    loss = engine(x).float().pow(2).mean()
    engine.backward(loss)
    engine.step()
print(f"rank {rank}/{world} local {args.local_rank} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
      f"device {torch.cuda.get_device_name()} loss {loss.item():.5f}", flush=True)
