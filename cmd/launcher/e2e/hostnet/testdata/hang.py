# A gloo all_reduce that hangs: rank 2 sleeps instead of joining it (the
# hang-diagnosis test's workload).
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} ready", flush=True)
t = torch.ones(1)
if rank == 2:
    time.sleep(600)  # the odd one out
dist.all_reduce(t)
print(f"rank {rank} sum {t.item()}", flush=True)
