"""Gloo all_reduce of a tensor of ones across every rank of the job.

Run by cmd/launcher/e2e/hostnet's TestTorchGloo through the launcher, which
sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME.
Every rank prints "rank R of N sum S" with S == N on success.
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    iface = os.environ.get("GLOO_SOCKET_IFNAME", "")
    print(f"imported torch {torch.__version__}; GLOO_SOCKET_IFNAME={iface} "
          f"MASTER_ADDR={os.environ.get('MASTER_ADDR')}", flush=True)
    dist.init_process_group("gloo", init_method="env://",
                            timeout=timedelta(seconds=60))
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.ones(16)
    dist.all_reduce(t)
    if not bool((t == t[0]).all()):
        print(f"rank {rank}: elements differ: {t.tolist()}", flush=True)
        return 1
    print(f"rank {rank} of {size} sum {int(t[0].item())}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
