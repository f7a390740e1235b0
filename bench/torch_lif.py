"""The peer of bench_neuron: a plain PyTorch LIF loop (T = 32, batch 64, 224x224 neurons,
hard reset, tau 2, v_th 1, sigmoid(4) surrogate) under torch.compile, inference and
forward+backward, CUDA events, median of repeats after warm-up; same table units as bench_neuron
(GB/s at the minimal traffic, % of the copy rate measured here)."""
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


def spike(z):
    # Heaviside forward, sigmoid(4) surrogate backward: the straight-through form compiles cleanly.
    sg = torch.sigmoid(4.0 * z)
    return (z >= 0).to(z.dtype).detach() + (sg - sg.detach())


def lif(x):
    v = torch.zeros_like(x[0])
    out = []
    for t in range(x.shape[0]):
        h = v + (x[t] - v) / 2.0
        s = spike(h - 1.0)
        v = h * (1.0 - s)
        out.append(s)
    return torch.stack(out)


def main():
    if not torch.cuda.is_available():
        print("torch_lif: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    a = torch.rand(1 << 27, device="cuda")
    b = torch.empty_like(a)
    c_gbs = 2 * a.nbytes / median_ms(lambda: b.copy_(a)) / 1e6
    T, B, S = 32, 64, 224
    x = torch.rand(T, B, S, S, device="cuda") * 1.5
    gs = torch.rand_like(x) * 2 - 1
    ns = x.numel()
    compiled = torch.compile(lif)

    def row(name, ms, nbytes):
        gbs = nbytes / ms / 1e6
        print("| %-52s | %8.3f | %8.1f | %6.1f %% |" % (name, ms, gbs, 100 * gbs / c_gbs))

    print("\ntorch %s, LIF T=%d batch %d %dx%d; C = %.1f GB/s\n" % (torch.__version__, T, B, S, S, c_gbs))
    print("| %-52s | %8s | %8s | %8s |" % ("kernel", "ms", "GB/s", "of C"))
    print("|---|---|---|---|")
    with torch.no_grad():
        row("torch.compile LIF inference", median_ms(lambda: compiled(x)), 8 * ns)
    xg = x.clone().requires_grad_(True)

    def fwd_bwd():
        xg.grad = None
        compiled(xg).backward(gs)

    row("torch.compile LIF forward+backward", median_ms(fwd_bwd, repeats=7), 24 * ns)
    with torch.no_grad():
        row("PyTorch eager LIF inference", median_ms(lambda: lif(x), repeats=5), 8 * ns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
