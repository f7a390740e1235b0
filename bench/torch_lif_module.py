"""fk.torch.LIFNode inside a PyTorch training step, beside the same work on flexkit's own arrays
and a torch.compile'd PyTorch LIF loop, in one process (T = 32, batch 64, 224x224 neurons, f32,
hard reset, tau 2, sigmoid(4)): forward + backward in ms (CUDA events, median of repeats after
warm-up), and the host time of each module call (the calls timed without waiting for the GPU,
which is still busy with earlier ones, so the figure is what the host spends, not the kernels).
"""
import statistics
import sys
import time

import torch

import flexkit as fk

T, BATCH, SIDE = 32, 64, 224


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
    sg = torch.sigmoid(4.0 * z)
    return (z >= 0).to(z.dtype).detach() + (sg - sg.detach())


def lif_loop(x):
    v = torch.zeros_like(x[0])
    out = []
    for t in range(x.shape[0]):
        h = v + (x[t] - v) / 2.0
        s = spike(h - 1.0)
        v = h * (1.0 - s)
        out.append(s)
    return torch.stack(out)


def main():
    if not torch.cuda.is_available() or fk.cuda.device_count() == 0:
        print("torch_lif_module: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    shape = (T, BATCH, SIDE, SIDE)
    x = (torch.rand(shape, device="cuda") * 1.5).requires_grad_()
    grad = torch.randn(shape, device="cuda")

    # flexkit's kernels on flexkit arrays (the same memory as the torch tensors): the floor.
    lif = fk.Neuron.builtin("lif")
    fx, fg = fk.from_dlpack(x.detach()), fk.from_dlpack(grad)
    stream = torch.cuda.current_stream().cuda_stream

    def flexkit_step():
        f = lif.forward("training_forward", fx, stream=stream)
        lif.backward(f.residuals, fg, stream=stream)

    node = fk.torch.LIFNode(tau=2.0)

    def module_step():
        node.reset()
        x.grad = None
        node(x).backward(grad)

    compiled = torch.compile(lif_loop)

    def compiled_step():
        x.grad = None
        compiled(x).backward(grad)

    floor_ms = median_ms(flexkit_step)
    module_ms = median_ms(module_step)
    compiled_ms = median_ms(compiled_step)

    # Host time per call: many calls queued back to back, timed on the host only.
    torch.cuda.synchronize()
    calls = 20
    forward_s = backward_s = 0.0
    for _ in range(calls):
        node.reset()
        x.grad = None
        t0 = time.perf_counter()
        y = node(x)
        t1 = time.perf_counter()
        y.backward(grad)
        t2 = time.perf_counter()
        forward_s += t1 - t0
        backward_s += t2 - t1
    torch.cuda.synchronize()
    host_forward_us = forward_s / calls * 1e6
    host_backward_us = backward_s / calls * 1e6

    print(f"fk.torch.LIFNode, T = {T}, batch {BATCH}, {SIDE}x{SIDE} neurons, f32, "
          f"{torch.cuda.get_device_name()} (torch {torch.__version__})\n")
    print("| forward + backward | ms | vs flexkit kernels |")
    print("|---|---|---|")
    print(f"| flexkit kernels on flexkit arrays | {floor_ms:.3f} | 1.00 |")
    print(f"| fk.torch.LIFNode in a torch training step | {module_ms:.3f} | {module_ms / floor_ms:.3f} |")
    print(f"| torch.compile'd PyTorch LIF loop | {compiled_ms:.3f} | {compiled_ms / floor_ms:.3f} |")
    print(f"| host time per module call: forward {host_forward_us:.1f} us, "
          f"backward {host_backward_us:.1f} us | | |")
    bound = 1.1 * floor_ms + 2 * 20e-3
    verdict = "met" if module_ms <= bound else "NOT met"
    print(f"\ntarget: module <= 1.1 x kernels + 20 us per call = {bound:.3f} ms: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
