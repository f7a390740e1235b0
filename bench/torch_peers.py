"""PyTorch eager and torch.compile on the expressions bench_expr measures, same shapes, CUDA
events, median of repeats after warm-up; prints a table in the same units (GB/s, % of the copy
rate measured here)."""
import statistics
import sys

import torch


def median_ms(fn, repeats=15, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    if not torch.cuda.is_available():
        print("torch_peers: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    dev = "cuda"
    n = 1 << 27
    a, b, c, d, e = (torch.rand(n, device=dev) * 2 - 1 for _ in range(5))
    out = torch.empty_like(a)
    copy = median_ms(lambda: out.copy_(a))
    c_gbs = 2 * a.nbytes / copy / 1e6

    def row(name, ms, nbytes):
        gbs = nbytes / ms / 1e6
        print("| %-44s | %8.3f | %8.1f | %6.1f %% |" % (name, ms, gbs, 100 * gbs / c_gbs))

    def ew(a, b, c, d, e):
        return torch.sigmoid(a * b + c) * d - e

    ew_c = torch.compile(ew)
    hb = (torch.rand(n, device=dev) * 2 - 1).to(torch.bfloat16)
    hf = (torch.rand(n, device=dev) * 2 - 1).to(torch.bfloat16)  # flex16 stand-in: 2 bytes

    def mix(x, y, z):
        return (x * y + z).to(torch.bfloat16)

    mix_c = torch.compile(mix)
    m = torch.rand(8192, 16384, device=dev)
    s = torch.rand(4096, 32768, device=dev) * 8 - 4

    def softmax(x):
        e = torch.exp(x - x.amax(dim=1, keepdim=True))
        return e / e.sum(dim=1, keepdim=True)

    softmax_c = torch.compile(softmax)
    rsum = torch.compile(lambda x: x.sum(dim=1, keepdim=True))
    cmax = torch.compile(lambda x: x.amax(dim=0, keepdim=True))
    sub_cmax = torch.compile(lambda x: x - x.amax(dim=0, keepdim=True))
    print("\n| PyTorch %-36s |    ms    |   GB/s   |  of C   |" % torch.__version__)
    print("|----------------------------------------------|----------|----------|---------|")
    row("tensor.copy_ 512 MiB (= C)", copy, 2 * a.nbytes)
    row("eager sig(a*b+c)*d-e, 2^27 f32", median_ms(lambda: ew(a, b, c, d, e)), 6 * a.nbytes)
    row("compile sig(a*b+c)*d-e, 2^27 f32", median_ms(lambda: ew_c(a, b, c, d, e)), 6 * a.nbytes)
    row("eager bf16 = bf16*bf16 + f32", median_ms(lambda: mix(hb, hf, c)), 10 * n)
    row("compile bf16 = bf16*bf16 + f32", median_ms(lambda: mix_c(hb, hf, c)), 10 * n)
    row("eager sum(A, 1), 8192x16384", median_ms(lambda: m.sum(dim=1, keepdim=True)), m.nbytes)
    row("compile sum(A, 1), 8192x16384", median_ms(lambda: rsum(m)), m.nbytes)
    row("eager max(A, 0), 8192x16384", median_ms(lambda: m.amax(dim=0, keepdim=True)), m.nbytes)
    row("compile max(A, 0), 8192x16384", median_ms(lambda: cmax(m)), m.nbytes)
    row("eager A - max(A, 0), 4096x32768", median_ms(lambda: s - s.amax(dim=0, keepdim=True)),
        2 * s.nbytes)
    row("compile A - max(A, 0), 4096x32768", median_ms(lambda: sub_cmax(s)), 2 * s.nbytes)
    row("eager softmax rows, 4096x32768", median_ms(lambda: softmax(s)), 2 * s.nbytes)
    row("compile softmax rows, 4096x32768", median_ms(lambda: softmax_c(s)), 2 * s.nbytes)
    row("torch.softmax rows, 4096x32768", median_ms(lambda: torch.softmax(s, dim=1)), 2 * s.nbytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
