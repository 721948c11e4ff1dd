#!/usr/bin/env python3
"""Writes the captured benchmark logs in this directory.

Every line is printed with the format string the real tool uses (see
docs/throughput.md), and the values are chosen so that each rank's mean
is exact: step values alternate base+d, base-d over an even number of steps.
bench's golden tests assert the totals stated in each log's header comment
below. Run: python3 bench/testdata/gen.py
"""
import datetime
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def tag(style, rank, line):
    if style == "mpirun":
        return "[1,%d]<stdout>:%s" % (rank, line)
    if style == "horovodrun":
        return "[%d]<stdout>:%s" % (rank, line)
    if style == "gangway":
        return "[%d] %s" % (rank, line)
    return line


def interleave(per_rank):
    """Round-robin merge of per-rank line lists, as a launcher would print."""
    out, i = [], 0
    while any(i < len(lines) for lines in per_rank):
        for lines in per_rank:
            if i < len(lines):
                out.append(lines[i])
        i += 1
    return out


def write(name, lines):
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(lines) + "\n")


def alternate(base, d, n):
    return [base + d if i % 2 == 0 else base - d for i in range(n)]


def tf_cnn(base, d, steps, ewma=False):
    """tf_cnn_benchmarks: benchmark_cnn.py log_fn formats."""
    lines = ["TensorFlow:  1.15", "Model:       resnet50", "Running warm up", "Done warm up",
             "Step\tImg/sec\ttotal_loss"]
    for step, v in zip(steps, alternate(base, d, len(steps))):
        if ewma:
            perf = "images/sec: %.1f" % v
        else:
            perf = "images/sec: %.1f +/- %.1f (jitter = %.1f)" % (v, 3.5, 10.2)
        lines.append("%i\t%s\t%.3f" % (step, perf, 7.457 - step / 1000.0))
    lines += ["-" * 64, "total images/sec: %.2f" % base, "-" * 64]
    return lines


TF_STEPS = [1] + list(range(10, 111, 10))  # 12 printed steps, as with display_every=10

# tfcnn_untagged.log: one rank, total 2840.5.
write("tfcnn_untagged.log", tf_cnn(2840.5, 4.0, TF_STEPS))

# tfcnn_mpirun.log: 4 ranks, mpirun --tag-output; rank 3 is 20% slow.
# Total = 1000 + 1010 + 990 + 800 = 3800.
bases = [1000.0, 1010.0, 990.0, 800.0]
write("tfcnn_mpirun.log", interleave(
    [[tag("mpirun", r, l) for l in tf_cnn(b, 2.5, TF_STEPS)] for r, b in enumerate(bases)]))

# tfcnn_gangway_ewma.log: 2 ranks, gangway tags, --display_perf_ewma. Total 3001.
write("tfcnn_gangway_ewma.log", interleave(
    [[tag("gangway", r, l) for l in tf_cnn(b, 1.5, TF_STEPS, ewma=True)] for r, b in enumerate([1500.0, 1501.0])]))


def horovod(size, device, base, d, iters):
    """Horovod pytorch_synthetic_benchmark.py log() formats (rank 0 only)."""
    lines = ["Model: resnet50", "Batch size: 32", "Number of %ss: %d" % (device, size), "Running warmup...",
             "Running benchmark..."]
    vals = alternate(base, d, iters)
    for x, v in enumerate(vals):
        lines.append("Iter #%d: %.1f img/sec per %s" % (x, v, device))
    mean = sum(vals) / len(vals)
    conf = 1.96 * d
    lines.append("Img/sec per %s: %.1f +-%.1f" % (device, mean, conf))
    lines.append("Total img/sec on %d %s(s): %.1f +-%.1f" % (size, device, size * mean, size * conf))
    return lines


# horovod_hvdrun.log: horovodrun tags, 4 ranks, only rank 0 measures.
# Per-rank total 300.5 measured on 1 of 4 ranks; printed global total 1202.0.
other = [[tag("horovodrun", r, "[W] rank %d ready" % r)] for r in range(1, 4)]
write("horovod_hvdrun.log", interleave(
    [[tag("horovodrun", 0, l) for l in horovod(4, "GPU", 300.5, 2.0, 10)]] + other))


def dll_ts(i):
    t = datetime.datetime(2021, 3, 24, 17, 24, 33) + datetime.timedelta(seconds=i, microseconds=0 if i == 0 else 107961)
    return str(t)  # no .ffffff when microseconds are 0


# dllogger_tf1.log: gangway tags, 2 ranks; rank 0 logs (0, i) total_ips, then
# () train_throughput : 2750.125 images/s. Value 2750.125 (global).
lines0 = ["DLL %s - (0, %d) total_ips : %s" % (dll_ts(i), 10 * (i + 1), v)
          for i, v in enumerate(alternate(2712.5, 2.5, 8))]
lines0.append("DLL %s - () train_throughput : 2750.125 images/s" % dll_ts(8))
write("dllogger_tf1.log", interleave(
    [[tag("gangway", 0, l) for l in lines0], [tag("gangway", 1, "worker 1 up")]]))

# dllogger_pytorch.log: untagged PyTorch ConvNets lines; the Summary line's
# train.total_ips 2901.77 is the value.
lines = []
for i, v in enumerate(alternate(2900.0, 5.0, 6)):
    lines.append("DLL %s - Epoch: 0 Iteration: %d  train.loss : %.5f  train.compute_ips : %.2f img/s "
                 "train.total_ips : %.2f img/s" % (dll_ts(i), 50 * (i + 1), 6.9, v + 48.5, v))
lines.append("DLL %s - Summary: train.loss : 6.90000  train.compute_ips : 2950.30 img/s "
             "train.total_ips : 2901.77 img/s" % dll_ts(7))
write("dllogger_pytorch.log", lines)


def nccl(wrong="0"):
    """nccl-tests util.cu: preamble %12li  %12li  %8s  %6s  %6s, then two
    groups of %7s  %6s  %6s  %6s, then the footer."""
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20",
             "#",
             "#                                                              out-of-place                       in-place          ",
             "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
             "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       "]
    busbws = []
    size = 8
    for i in range(6):
        oop, ip = 10.0 + 8 * i, 10.5 + 8 * i
        busbws += [oop, ip]
        row = "%12li  %12li  %8s  %6s  %6s" % (size, size // 4, "float", "sum", -1)
        for bw in (oop, ip):
            row += "  %7s  %6s  %6s  %6s" % ("%.2f" % (size / bw / 1000 + 5), "%.2f" % (bw / 2), "%.2f" % bw, wrong)
        lines.append(row)
        size *= 32
    lines.append("# Out of bounds values : 0 OK")
    lines.append("# Avg bus bandwidth    : %g " % (sum(busbws) / len(busbws)))
    lines.append("#")
    return lines


# nccl_mpirun.log: only process 0 prints. Avg bus bandwidth 30.25 GB/s (global).
write("nccl_mpirun.log", [tag("mpirun", 0, l) for l in nccl()])
# nccl_nocheck.log: -c 0 (#wrong is N/A), untagged. Same value.
write("nccl_nocheck.log", nccl("N/A"))

# generic_total.log: untagged, noise around "Total images/sec = 1234.56".
write("generic_total.log", ["epoch 1 loss 0.25", "12345", "Total images/sec = 1234.56", "done"])
