#!/usr/bin/env python3
"""Fabric self-test through the job's own stack: torch.distributed with
NCCL on GPUs, Gloo on CPUs.

Run it as a job of one rank per host, before the real job:

    launcher -H a:8,b:8,c:8,d:8 -N 1 python3 examples/pytorch/fabric_selftest.py [--strict]

It measures the pairs the launcher's --selftest measures (host i with
i+1 and the chords i+N/2, i+N/4, ..., at most 4; launcher/selftest
Pairs and Steps, mirrored here), each direction on its own, every host
in one transfer at a time, and judges them the same way: a pair's
figure is its slower direction, a host's figure is the median of its
pairs', a host under a third of the median host's is slow. Rank 0
prints one line per pair, the median and the slow hosts; with --strict
the job exits 3 when a host is slow. --bytes sets the size of each
transfer (default 64 MiB).

Where launcher --selftest measures the agents' TCP path, this measures
what the ranks use: NCCL's transport (InfiniBand, RoCE or sockets) or
Gloo's.
"""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

MAX_CHORDS = 4
FRACTION = 1.0 / 3


def pairs(n):
    """launcher/selftest.Pairs: ring neighbours, then chords by length."""
    dists = [1]
    d = n // 2
    while d > 1 and len(dists) <= MAX_CHORDS:
        dists.append(d)
        d //= 2
    seen, out = set(), []
    for d in dists:
        for i in range(n):
            a, b = sorted((i, (i + d) % n))
            if a != b and (a, b) not in seen:
                seen.add((a, b))
                out.append((a, b))
    return out


def steps(ps):
    """launcher/selftest.Steps: each host in at most one stream a step."""
    left = [s for a, b in ps for s in ((a, b), (b, a))]
    out = []
    while left:
        busy, step, rest = set(), [], []
        for f, t in left:
            if f in busy or t in busy:
                rest.append((f, t))
                continue
            busy.update((f, t))
            step.append((f, t))
        out.append(step)
        left = rest
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=64 << 20)
    ap.add_argument("--strict", action="store_true")
    args = ap.parse_args()

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group(backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    host = os.environ.get("GANGWAY_HOST") or socket.gethostname()
    names = [None] * n
    dist.all_gather_object(names, host)

    buf = torch.empty(args.bytes, dtype=torch.uint8, device=dev)
    small = torch.empty(1, dtype=torch.uint8, device=dev)
    ps = pairs(n)
    measured = {}  # (from, to) -> MB/s, on the receiver
    for step in steps(ps):
        mine = [(f, t) for f, t in step if rank in (f, t)]
        for f, t in mine:  # warm-up: NCCL makes its p2p channels at first use
            if rank == f:
                dist.send(small, t)
            else:
                dist.recv(small, f)
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        for f, t in mine:
            t0 = time.perf_counter()
            if rank == f:
                dist.send(buf, t)
            else:
                dist.recv(buf, f)
            if cuda:
                torch.cuda.synchronize()
            if rank == t:
                measured[(f, t)] = args.bytes / (time.perf_counter() - t0) / 1e6
        dist.barrier()
    every = [None] * n
    dist.all_gather_object(every, measured)
    code = 0
    if rank == 0:
        got = {k: v for m in every for k, v in m.items()}
        per = [[] for _ in range(n)]
        print(f"fabric selftest ({backend}): {len(ps)} pairs of {n} hosts, {args.bytes} bytes each way (MB/s = 10^6 bytes/s)")
        for a, b in ps:
            ab, ba = got.get((a, b), 0.0), got.get((b, a), 0.0)
            print(f"fabric selftest:   {names[a]} -> {names[b]} {ab:9.1f} MB/s   {names[b]} -> {names[a]} {ba:9.1f} MB/s")
            per[a].append(min(ab, ba))
            per[b].append(min(ab, ba))
        figs = [statistics.median(p) if p else 0.0 for p in per]
        med = statistics.median(figs) if figs else 0.0
        print(f"fabric selftest: median host {med:.1f} MB/s")
        slow = sorted((i for i in range(n) if n >= 3 and figs[i] < FRACTION * med), key=lambda i: figs[i])
        if slow:
            print("fabric selftest: slow hosts, under 33% of the median: " + ", ".join(f"{names[i]} ({figs[i]:.1f} MB/s)" for i in slow))
            code = 3 if args.strict else 0
        else:
            print("fabric selftest: no outlier (none under 33% of the median)")
        sys.stdout.flush()
    codes = [code]
    dist.broadcast_object_list(codes, src=0)
    dist.destroy_process_group()
    sys.exit(codes[0])


if __name__ == "__main__":
    main()
