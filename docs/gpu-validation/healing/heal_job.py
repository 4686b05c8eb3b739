"""Issue 35 on a GPU machine: a small DDP job that saves a checkpoint every SAVE_EVERY steps (a COMPLETE
marker written last) and resumes from CLUSTERCTL_CHECKPOINT, the latest complete one clusterctl found.
NCCL on GPUs, gloo on a CPU machine (the same script rehearses here)."""
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

STEPS, SAVE_EVERY = int(os.environ.get("HEAL_STEPS", "60")), int(os.environ.get("HEAL_SAVE_EVERY", "10"))
CKPT = Path(os.environ["HEAL_CKPT_DIR"])


def main() -> None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    model = torch.nn.Linear(1024, 1024).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    start, resumed = 0, os.environ.get("CLUSTERCTL_CHECKPOINT", "")
    if resumed:
        state = torch.load(Path(resumed) / "model.pt", map_location=device)
        model.load_state_dict(state["model"])
        start = state["step"]
    attempt = os.environ.get("CLUSTERCTL_ATTEMPT", "?")
    print(f"rank {rank} attempt {attempt} host {os.environ.get('CLUSTERCTL_HOST')} "
          f"gpu {torch.cuda.get_device_name(device) if cuda else 'cpu'} resuming from step {start} ({resumed or 'none'})",
          flush=True)
    for step in range(start + 1, STEPS + 1):
        x = torch.randn(64, 1024, device=device)
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.2)
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            (CKPT / "progress").write_text(str(step))
        if step % SAVE_EVERY == 0 and rank == 0:
            where = CKPT / f"step-{step}"
            where.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "step": step}, where / "model.pt")
            (where / "COMPLETE").write_text("ok")
        dist.barrier()
    if rank == 0:
        print(f"done at step {STEPS}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
