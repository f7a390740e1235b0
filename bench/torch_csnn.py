#!/usr/bin/env python3
"""The peer of `flexkit train --model csnn` on the GPU: SpikingJelly's Fashion-MNIST network
written in plain PyTorch (conv3x3(128)-BN-IF-maxpool2 twice, FC 6272-2048-IF, FC 2048-10-IF,
ATan surrogate, T = 4, MSE on the rate, SGD 0.1 momentum 0.9), cuDNN convolutions, in two
forms: f32 with TF32 off, and bf16 autocast with the IF loop compiled by torch.compile. The
stateless layers run on the T·N merged batch, as SpikingJelly's multi-step containers do; the
first convolution and BN run once (the input is the same at every step), as flexkit's do.

Prints the training time of one epoch (469 steps of 128; measured over STEPS steps after a
warm-up) and the peak memory, one table row per form.

    python3 bench/torch_csnn.py [--steps 100]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class ATanSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return (z >= 0).to(z.dtype)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        alpha = 2.0
        return grad * (alpha / 2) / (1 + (math.pi / 2 * alpha * z) ** 2)


def if_loop(x):  # x (T, ...) -> spikes (T, ...), IF with hard reset to 0, v_th 1
    v = torch.zeros_like(x[0])
    out = []
    for t in range(x.shape[0]):
        h = v + x[t]
        s = ATanSpike.apply(h - 1.0)
        v = h * (1 - s)
        out.append(s)
    return torch.stack(out)


class CSNN(nn.Module):
    def __init__(self, T, neuron):
        super().__init__()
        self.T, self.neuron = T, neuron
        c = 128
        self.conv1, self.bn1 = nn.Conv2d(1, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.fc1 = nn.Linear(c * 7 * 7, c * 4 * 4, bias=False)
        self.fc2 = nn.Linear(c * 4 * 4, 10, bias=False)

    def forward(self, x):  # x (N, 1, 28, 28)
        T, N = self.T, x.shape[0]
        h = self.bn1(self.conv1(x)).unsqueeze(0).expand(T, -1, -1, -1, -1)
        s = self.neuron(h.contiguous())
        s = F.max_pool2d(s.flatten(0, 1), 2)
        s = self.neuron(self.bn2(self.conv2(s)).view(T, N, 128, 14, 14))
        s = F.max_pool2d(s.flatten(0, 1), 2).flatten(1)
        s = self.neuron(self.fc1(s).view(T, N, -1))
        s = self.neuron(self.fc2(s.flatten(0, 1)).view(T, N, -1))
        return s.mean(0)


def run(form, steps, batch=128, T=4):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    neuron = torch.compile(if_loop) if form == "bf16" else if_loop
    model = CSNN(T, neuron).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 1, 28, 28, device="cuda")
    y = F.one_hot(torch.randint(0, 10, (batch,), device="cuda"), 10).float()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=form == "bf16"):
            loss = F.mse_loss(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    per_step = (time.perf_counter() - start) / steps
    return per_step * math.ceil(60000 / batch), torch.cuda.max_memory_allocated()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| csnn training (T=4, batch 128) | epoch (s) | peak memory (GiB) |")
    print("|---|---|---|")
    for form, name in [("f32", "PyTorch f32, TF32 off, cuDNN"),
                       ("bf16", "PyTorch bf16 autocast, torch.compile'd IF loop")]:
        epoch, peak = run(form, args.steps)
        print(f"| {name} | {epoch:.2f} | {peak / 2**30:.2f} |", flush=True)


if __name__ == "__main__":
    main()
