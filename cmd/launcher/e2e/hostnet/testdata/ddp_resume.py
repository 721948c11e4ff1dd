# A tiny PyTorch DDP job (gloo, CPU) that checkpoints and resumes: the
# whole-gang restart test's workload.
#
# Model: one weight w (start 1.0), loss w^2 on every rank, SGD lr 0.1, so
# w after n steps is exactly 0.8**n whatever the gang size and however
# often it restarts, as long as it resumes from its checkpoint. Rank 0
# writes CKPT (atomically) every CKPT_EVERY steps. In attempt 0
# (TORCHELASTIC_RESTART_COUNT) rank KILL_RANK kills itself with SIGKILL at
# step KILL_STEP. STEP_SLEEP (seconds, default 0) slows every step, for
# tests that act on the job from outside while it runs.
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 20
CKPT_EVERY = 5
KILL_STEP = 8

rank = int(os.environ["RANK"])
ckpt = os.environ["CKPT"]
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
kill_rank = int(os.environ.get("KILL_RANK", "-1"))
step_sleep = float(os.environ.get("STEP_SLEEP", "0"))

dist.init_process_group("gloo")
model = torch.nn.Linear(1, 1, bias=False)
with torch.no_grad():
    model.weight.fill_(1.0)
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
    print(f"rank {rank} attempt {attempt} resumed from step {start}", flush=True)
x = torch.ones(1, 1)
for step in range(start, STEPS):
    if attempt == 0 and rank == kill_rank and step == KILL_STEP:
        print(f"rank {rank} dies at step {step}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    loss = ddp(x).pow(2).sum()
    loss.backward()
    opt.step()
    done = step + 1
    if rank == 0 and done % CKPT_EVERY == 0:
        tmp = ckpt + ".tmp"
        torch.save({"step": done, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
        os.replace(tmp, ckpt)
    dist.barrier()
    if step_sleep:
        time.sleep(step_sleep)
print(f"rank {rank} attempt {attempt} world {dist.get_world_size()} final w {model.weight.item():.6f}", flush=True)
dist.destroy_process_group()
