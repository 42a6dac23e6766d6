#!/usr/bin/env python3
"""PyTorch DistributedDataParallel: a small MLP fitted to a known function, on CPU (Gloo) or
GPU (NCCL).

Runs unchanged on Corral and on Kubeflow's PyTorchJob, under `torchrun train.py` (torchrun
reads the PET_* variables both set: static, or elastic with c10d rendezvous) or as
`python train.py` (init_process_group reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK).
Rank 0 checks the fit on held-out points and prints `RESULT ok ...` (exit 0) or
`RESULT FAILED ...` (exit 1).

CRASH_ONCE_FILE (for failure tests): the rank named by CRASH_RANK (default 1) exits with
status 3 halfway through training if that file does not exist yet, creating it first, so the
next attempt trains through.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

SAMPLES = 4096
STEPS = int(os.environ.get("TRAIN_STEPS", "400"))
MAX_MSE = 0.01


def target(x):
    return torch.sin(3 * x[:, :1]) + x[:, 1:2] ** 2


def crash_once(rank):
    marker = os.environ.get("CRASH_ONCE_FILE")
    if marker and rank == int(os.environ.get("CRASH_RANK", "1")) and not os.path.exists(marker):
        open(marker, "w").close()
        print(f"[rank {rank}] crashing mid-training (CRASH_ONCE_FILE)", flush=True)
        os._exit(3)


def main():
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if use_cuda else "cpu")
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    # One thread per process: the example asks one CPU per replica, and a model this small
    # only loses time to more threads.
    torch.set_num_threads(1)

    gen = torch.Generator().manual_seed(1234)
    x = torch.rand(SAMPLES, 2, generator=gen) * 2 - 1
    y = target(x)
    test_x = torch.rand(512, 2, generator=gen) * 2 - 1
    x, y = x[rank::world].to(device), y[rank::world].to(device)  # this rank's shard

    net = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    model = DDP(net.to(device))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    print(f"[rank {rank}] world size {world}, {len(x)} samples on {device}", flush=True)
    for step in range(1, STEPS + 1):
        if step == STEPS // 2:
            crash_once(rank)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # the allreduce: every rank gets the mean gradient
        opt.step()
        if rank == 0 and (step == 1 or step % 100 == 0):
            print(f"[rank 0] step {step}/{STEPS} loss {loss.item():.5f}", flush=True)

    with torch.no_grad():
        mse = torch.nn.functional.mse_loss(net(test_x.to(device)).cpu(), target(test_x)).item()
    ok = mse <= MAX_MSE
    if rank == 0:
        verdict = "ok" if ok else "FAILED"
        print(f"RESULT {verdict} test_mse={mse:.5f} max_mse={MAX_MSE} world_size={world} "
              f"steps={STEPS}", flush=True)
    # Every rank reaches the end before any tears the group down: a rank that destroys it
    # while another still talks over gloo can abort that one at exit ("terminate called
    # without an active exception", seen under torchrun's elastic agent, which then restarts
    # a gang that had already trained).
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
