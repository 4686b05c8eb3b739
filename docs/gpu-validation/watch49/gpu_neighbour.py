"""A noisy neighbour on one GPU (issue 49: a rank slowed by its GPU, not its CPU): another process's bf16 matmuls
on the same device take a share of its SMs, as a second tenant's job would. Runs until killed.
Usage: python gpu_neighbour.py DEVICE_INDEX"""
import sys

import torch

device = torch.device(f"cuda:{sys.argv[1]}")
a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
while True:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize(device)
