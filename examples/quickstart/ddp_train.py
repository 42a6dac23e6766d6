#!/usr/bin/env python3
"""PyTorch DDP: the quickstart's linear regression with torch.distributed.

Runs unchanged on Corral and on Kubeflow's training operator (PyTorchJob):
  - as `torchrun ddp_train.py`: torchrun reads PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR,
    PET_MASTER_PORT and PET_NPROC_PER_NODE, which both set, and starts the processes;
  - as `python ddp_train.py`: init_process_group("env://") reads MASTER_ADDR, MASTER_PORT,
    WORLD_SIZE and RANK, which both set.
Uses NCCL on GPUs and Gloo on CPUs. Rank 0 checks the fit and prints `RESULT ok ...`
(exit 0) or `RESULT FAILED ...` (exit 1).
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

TRUE_WEIGHTS = [2.0, -3.0, 0.5, 1.5]
TRUE_BIAS = 0.7
SAMPLES = 4096
STEPS = int(os.environ.get("QUICKSTART_STEPS", "300"))
TOLERANCE = 0.05


def main():
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    # One data set (fixed seed), sharded by rank.
    gen = torch.Generator().manual_seed(1234)
    x = torch.rand(SAMPLES, len(TRUE_WEIGHTS), generator=gen) * 2 - 1
    y = x @ torch.tensor(TRUE_WEIGHTS) + TRUE_BIAS + 0.01 * torch.randn(SAMPLES, generator=gen)
    x, y = x[rank::world].to(device), y[rank::world].to(device)

    model = DDP(torch.nn.Linear(len(TRUE_WEIGHTS), 1).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    print(f"[rank {rank}] world size {world}, {len(x)} samples on {device}", flush=True)
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        loss.backward()  # DDP averages the gradients of all ranks (allreduce)
        opt.step()
        if rank == 0 and (step == 1 or step % 50 == 0):
            print(f"[rank 0] step {step}/{STEPS} loss {loss.item():.6f}", flush=True)

    w = model.module.weight.detach().cpu().squeeze(0).tolist()
    b = model.module.bias.detach().cpu().item()
    error = max(abs(a - t) for a, t in zip(w + [b], TRUE_WEIGHTS + [TRUE_BIAS]))
    ok = error <= TOLERANCE
    if rank == 0:
        shown = ", ".join(f"{v:.3f}" for v in w)
        verdict = "ok" if ok else "FAILED"
        print(
            f"RESULT {verdict} weights=[{shown}] bias={b:.3f} max_error={error:.4f} "
            f"tolerance={TOLERANCE} world_size={world} steps={STEPS}",
            flush=True,
        )
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
