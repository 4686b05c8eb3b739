"""A noisy neighbour on one GPU (issue 49: a rank slowed by its GPU, not its CPU): another process's bf16 matmuls
on the same device take a share of its time, as a second tenant's job would. Runs until killed.
DUTY (default 1): the share of each 200 ms the neighbour keeps the GPU busy (0.3: a lighter tenant).
Usage: python gpu_neighbour.py DEVICE_INDEX [DUTY]"""
import sys
import time

import torch

device = torch.device(f"cuda:{sys.argv[1]}")
duty = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
PERIOD_S = 0.2
while True:
    start = time.monotonic()
    while time.monotonic() - start < duty * PERIOD_S:
        for _ in range(4):
            b = a @ a
        torch.cuda.synchronize(device)
    time.sleep(max(0.0, PERIOD_S - (time.monotonic() - start)))
