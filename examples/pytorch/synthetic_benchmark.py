#!/usr/bin/env python3
"""Synthetic data-parallel training benchmark for gangway (PyTorch DDP).

Every rank trains a small CNN on one fixed random batch, so the numbers
measure compute and gradient all-reduce, not data loading. The output uses
Horovod's synthetic-benchmark lines, which gangway's bench package reads:

    Iter #k: X img/sec per CPU|GPU            every rank, every iteration
    Img/sec per CPU|GPU: m +-c                rank 0: its own mean, c = 1.96 std
    Total img/sec on N CPU(s)|GPU(s): t +-c   rank 0: the SUM of every rank's
                                              mean (all-reduced), not N x m

Unlike Horovod's script, every rank prints its Iter lines, so the launcher
measures all ranks, and the total is measured rather than extrapolated.

Rendezvous uses torch.distributed's env:// method: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT and LOCAL_RANK must be set (gangway's launcher sets
them). The backend is NCCL on CUDA and Gloo on CPU.

Standalone:
    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 LOCAL_RANK=0 \\
        python3 synthetic_benchmark.py --num-iters 2
"""

import argparse
import math
import os
import statistics
import sys
import timeit

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=32, help="images per batch on each rank")
    p.add_argument("--num-warmup-batches", type=int, default=5, help="untimed batches before the benchmark")
    p.add_argument("--num-batches-per-iter", type=int, default=5, help="batches timed together as one iteration")
    p.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    p.add_argument("--image-size", type=int, default=32, help="square input images of this size")
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--num-threads", type=int, default=1, help="intra-op threads per rank on CPU")
    p.add_argument("--no-cuda", action="store_true", help="run on CPU even when CUDA is available")
    args = p.parse_args(argv)
    for name in ("batch_size", "num_batches_per_iter", "num_iters", "image_size", "num_classes", "num_threads"):
        if getattr(args, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if args.num_warmup_batches < 0:
        p.error("--num-warmup-batches must be at least 0")
    return args


class SmallNet(nn.Module):
    """Two conv layers and two linear layers: cheap on CPU, real gradients."""

    def __init__(self, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.fc1 = nn.Linear(32 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = self.pool(F.relu(self.conv2(x)))
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def env_int(name, default=None):
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise SystemExit("synthetic_benchmark: %s is not set (env:// rendezvous needs RANK, WORLD_SIZE, "
                             "MASTER_ADDR, MASTER_PORT)" % name)
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit("synthetic_benchmark: %s=%r is not an integer" % (name, value))


def main(argv=None):
    args = parse_args(argv)
    rank, world, local_rank = env_int("RANK"), env_int("WORLD_SIZE"), env_int("LOCAL_RANK", 0)
    cuda = torch.cuda.is_available() and not args.no_cuda
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        torch.set_num_threads(args.num_threads)
        device = torch.device("cpu")
    dist.init_process_group(backend="nccl" if cuda else "gloo", init_method="env://",
                            rank=rank, world_size=world)
    try:
        run(args, rank, world, local_rank, cuda, device)
    finally:
        dist.destroy_process_group()


def run(args, rank, world, local_rank, cuda, device):
    kind = "GPU" if cuda else "CPU"
    torch.manual_seed(1234)  # the same initial weights on every rank
    model = DistributedDataParallel(SmallNet(args.num_classes).to(device),
                                    device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, args.num_classes, (args.batch_size,), device=device)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    def batches(n):
        for _ in range(n):
            step()
        if cuda:
            torch.cuda.synchronize()

    def log0(msg):
        if rank == 0:
            print(msg, flush=True)

    log0("Model: SmallNet (2 conv + 2 linear), %dx%d images, %d classes" %
         (args.image_size, args.image_size, args.num_classes))
    log0("Batch size: %d per rank" % args.batch_size)
    log0("Number of %ss: %d" % (kind, world))
    log0("Running warmup...")
    batches(args.num_warmup_batches)
    dist.barrier()
    log0("Running benchmark...")
    img_secs = []
    for x in range(args.num_iters):
        t = timeit.timeit(lambda: batches(args.num_batches_per_iter), number=1)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        print("Iter #%d: %.1f img/sec per %s" % (x, img_sec, kind), flush=True)
        img_secs.append(img_sec)

    mean = statistics.fmean(img_secs)
    conf = 1.96 * statistics.pstdev(img_secs)
    # Sum every rank's mean; confidences add in quadrature (independent ranks).
    sums = torch.tensor([mean, conf * conf], dtype=torch.float64, device=device)
    dist.all_reduce(sums, op=dist.ReduceOp.SUM)
    total, total_conf = sums[0].item(), math.sqrt(sums[1].item())
    log0("Img/sec per %s: %.1f +-%.1f" % (kind, mean, conf))
    log0("Total img/sec on %d %s(s): %.1f +-%.1f" % (world, kind, total, total_conf))


if __name__ == "__main__":
    sys.exit(main())
