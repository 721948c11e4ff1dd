# A gloo all_reduce that hangs: rank 2 sleeps instead of joining it (the
# hang-diagnosis test's workload). Until the process group is up, each
# rank says it is still starting every second: importing torch and the
# rendezvous take more than the test's 10 s --hang-timeout on a busy
# 2-core machine, and a rank that is still starting is not the hang the
# test is about.
import threading
import time

starting = threading.Event()


def still_starting():
    while not starting.wait(1):
        print("starting", flush=True)


threading.Thread(target=still_starting, daemon=True).start()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
starting.set()
rank = dist.get_rank()
print(f"rank {rank} ready", flush=True)
t = torch.ones(1)
if rank == 2:
    time.sleep(600)  # the odd one out
dist.all_reduce(t)
print(f"rank {rank} sum {t.item()}", flush=True)
