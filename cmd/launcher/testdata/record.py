# A torch job whose rank 1 raises under torch's @record: the root-cause
# test's workload. @record writes the exception and its traceback to
# TORCHELASTIC_ERROR_FILE, which the launcher must show.
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


def step(rank):
    raise RuntimeError(f"loss is nan on rank {rank}")


@record
def main():
    rank = int(os.environ["RANK"])
    if rank == 1:
        step(rank)
    time.sleep(60)


main()
