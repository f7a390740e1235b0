"""fk.torch.LIFNode inside a PyTorch training step, beside the same work on flexkit's own arrays
and a torch.compile'd PyTorch LIF loop, in one process (T = 32, batch 64, 224x224 neurons, f32,
hard reset, tau 2, sigmoid(4)): forward + backward in ms (CUDA events, median of repeats after
warm-up), and the host time of each module call (the calls timed without waiting for the GPU,
which is still busy with earlier ones, so the figure is what the host spends, not the kernels).
"""
import sys
import time

import torch

import flexkit as fk
# The same timing and the same PyTorch LIF loop as the torch_lif benchmark beside this file.
from torch_lif import lif as lif_loop
from torch_lif import median_ms

T, BATCH, SIDE = 32, 64, 224


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

    # Where the host time goes, and the same calls on a small layer (the GPU idle in between).
    import cProfile
    import pstats
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        node.reset()
        x.grad = None
        node(x).backward(grad)
    torch.cuda.synchronize()
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    small = (torch.rand((T, BATCH, 16, 16), device="cuda") * 1.5).requires_grad_()
    small_grad = torch.randn_like(small)
    for _ in range(5):
        node.reset()
        node(small).backward(small_grad)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        node.reset()
        small.grad = None
        node(small).backward(small_grad)
    torch.cuda.synchronize()
    small_us = (time.perf_counter() - t0) / 200 * 1e6
    # The same small calls on flexkit arrays: what flexkit's own calls cost the host.
    fs, fsg = fk.from_dlpack(small.detach()), fk.from_dlpack(small_grad)
    for _ in range(5):
        f = lif.forward("training_forward", fs, stream=stream)
        lif.backward(f.residuals, fsg, stream=stream)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        f = lif.forward("training_forward", fs, stream=stream)
        lif.backward(f.residuals, fsg, stream=stream)
    torch.cuda.synchronize()
    small_flexkit_us = (time.perf_counter() - t0) / 200 * 1e6

    # The floor any Python autograd.Function sits on: an identity Function, forward + backward,
    # on a tiny CUDA tensor (torch's own per-call cost, no flexkit in it).
    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.view_as(a)

        @staticmethod
        def backward(ctx, g):
            return g

    tiny = torch.rand(8, device="cuda", requires_grad=True)
    tiny_grad = torch.ones(8, device="cuda")
    for _ in range(20):
        Identity.apply(tiny).backward(tiny_grad)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(500):
        Identity.apply(tiny).backward(tiny_grad)
    torch.cuda.synchronize()
    identity_us = (time.perf_counter() - t0) / 500 * 1e6

    print(f"fk.torch.LIFNode, T = {T}, batch {BATCH}, {SIDE}x{SIDE} neurons, f32, "
          f"{torch.cuda.get_device_name()} (torch {torch.__version__})\n")
    print("| forward + backward | ms | vs flexkit kernels |")
    print("|---|---|---|")
    print(f"| flexkit kernels on flexkit arrays | {floor_ms:.3f} | 1.00 |")
    print(f"| fk.torch.LIFNode in a torch training step | {module_ms:.3f} | {module_ms / floor_ms:.3f} |")
    print(f"| torch.compile'd PyTorch LIF loop | {compiled_ms:.3f} | {compiled_ms / floor_ms:.3f} |")
    print(f"| host time per module call: forward {host_forward_us:.1f} us, "
          f"backward {host_backward_us:.1f} us | | |")
    print(f"| small layer (T = {T}, batch {BATCH}, 16x16), forward + backward wall: module | "
          f"{small_us / 1e3:.3f} | flexkit calls {small_flexkit_us / 1e3:.3f} ms: the module adds "
          f"{(small_us - small_flexkit_us) / 2:.1f} us per call |")
    print(f"| torch's floor: an identity autograd.Function, forward + backward, wall | "
          f"{identity_us / 1e3:.3f} | |")
    bound = 1.1 * floor_ms + 2 * 20e-3
    verdict = "met" if module_ms <= bound else "NOT met"
    print(f"\ntarget: module <= 1.1 x kernels + 20 us per call = {bound:.3f} ms: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
