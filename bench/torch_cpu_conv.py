"""The PyTorch peer of bench_cpu_conv on the CPU: the layers its CSV names (geometry and batch from
the CSV), fprop (F.conv2d), bprop (aten.convolution_backward, input gradient only) and update
(filter gradient only) in fp32, each the better of NCHW and channels_last, with as many threads
as bench_cpu_conv had (the machine's); wall clock, median of 7 calls after 2 warm-ups. Rates count
2*N*K*C*R*S*P*Q per direction, as bench_cpu_conv does. Each variant's result is checked against
the NCHW fprop / gradient in float64 first.

Usage: CPU_CONV_CSV=cpu_conv.csv bench_cpu_conv; python3 bench/torch_cpu_conv.py cpu_conv.csv
(Debian's python3-torch is enough)."""
import csv
import os
import statistics
import sys
import time

import torch

from torch_conv import conv_call, rel_error  # this script's directory is on sys.path

DIRECTIONS = ("fprop", "bprop", "update")
FORMATS = ("nchw", "channels_last")
REPEATS, WARMUP = 7, 2
TOLERANCE = 1e-4  # relative Frobenius error of fp32 against float64


def median_ms(call):
    for _ in range(WARMUP):
        call()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(row):
    c, k, hw, rs, pad, stride, n = (int(row[f]) for f in
                                    ("c", "k", "hw", "rs", "pad", "stride", "batch"))
    pq = (hw + 2 * pad - rs) // stride + 1
    ops = 2.0 * n * k * c * rs * rs * pq * pq
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(n, c, hw, hw, generator=gen) * 2 - 1
    w = torch.rand(k, c, rs, rs, generator=gen) * 2 - 1
    gy = torch.rand(n, k, pq, pq, generator=gen) * 2 - 1
    direction = row["direction"]
    reference = conv_call(direction, x.double(), w.double(), gy.double(), pad, stride)()
    best = None
    for fmt in FORMATS:
        mf = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
        call = conv_call(direction, x.contiguous(memory_format=mf), w.contiguous(memory_format=mf),
                         gy.contiguous(memory_format=mf), pad, stride)
        error = rel_error(call(), reference)
        if not error <= TOLERANCE:
            raise RuntimeError("%s %s %s: relative error %.3g" % (row["layer"], direction, fmt,
                                                                  error))
        gops = ops / (median_ms(call) * 1e6)
        if best is None or gops > best[0]:
            best = (gops, fmt)
    return best


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    torch.set_num_threads(os.cpu_count() or 1)
    print("PyTorch %s on the CPU, %d threads: fp32 GOP/s counting 2*N*K*C*R*S*P*Q, median of %d "
          "calls, better of NCHW and channels_last; flexkit from bench_cpu_conv's CSV\n"
          % (torch.__version__, torch.get_num_threads(), REPEATS))
    print("| layer | direction | flexkit flex16 | flexkit f32 | PyTorch fp32 | format | "
          "flex16 / PyTorch | f32 / PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        gops, fmt = measure(row)
        flex16, f32 = float(row["flex16_gops"]), float(row["f32_gops"])
        print("| %s | %s | %.1f | %.1f | %.1f | %s | %.2f | %.2f |" % (
            row["layer"], row["direction"], flex16, f32, gops, fmt, flex16 / gops, f32 / gops),
            flush=True)


if __name__ == "__main__":
    main()
