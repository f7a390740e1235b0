#!/usr/bin/env python3
"""The peer of `flexkit train --model csnn` on the GPU: SpikingJelly's Fashion-MNIST network
written in plain PyTorch (conv3x3(128)-BN-IF-maxpool2 twice, FC 6272-2048-IF, FC 2048-10-IF,
ATan surrogate, T = 4, MSE on the rate, SGD 0.1 momentum 0.9), cuDNN convolutions, in two
forms: f32 with TF32 off, and bf16 autocast with the IF loop compiled by torch.compile. The
stateless layers run on the T·N merged batch, as SpikingJelly's multi-step containers do; the
first convolution and BN run once (the input is the same at every step), as flexkit's do.

Prints the training time of one epoch (469 steps of 128; measured over STEPS steps after a
warm-up) and the peak memory, one table row per form.

--train EPOCHS trains on Fashion-MNIST instead (TF32 off; the preset's cosine schedule over the
epochs, batch 128, inputs normalised as flexkit's loader does) and prints the test accuracy
after each epoch, with the peak memory; --form bf16 trains in the timed bf16 form (autocast,
compiled IF loop). An epoch's time is its training steps' (no host round trip a step: a
non-finite loss is caught at the epoch's end), the test pass apart. --storage f16 stores what
`flexkit train --precision flex16` stores in flex16 as IEEE float16 instead, with no loss
scaling (the Flexpoint paper's comparison): the layers read their weights rounded to f16 (the
optimizer keeps an f32 master copy, as flexkit's default does), every layer output and every
gradient between layers is rounded to f16, and so is SGD's momentum after each step. Spikes
are 0/1, exact either way.

    python3 bench/torch_csnn.py [--steps 100]
    python3 bench/torch_csnn.py --train 64 [--form f32|bf16] [--storage f32|f16] [--seed 0]
                                [--json out.json]
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The float16 rounding and the IDX reader are the MLP peer's (same folder).
from torch_train_mlp import RoundF16, read_idx


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


def keep(x):
    return x


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
    def __init__(self, T, neuron, store=keep):
        super().__init__()
        self.T, self.neuron, self.store = T, neuron, store
        c = 128
        self.conv1, self.bn1 = nn.Conv2d(1, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.fc1 = nn.Linear(c * 7 * 7, c * 4 * 4, bias=False)
        self.fc2 = nn.Linear(c * 4 * 4, 10, bias=False)

    def forward(self, x):  # x (N, 1, 28, 28)
        T, N, st = self.T, x.shape[0], self.store
        if st is keep:
            h = self.bn1(self.conv1(x))
        else:  # every stored tensor rounded: input, weights, layer outputs, their gradients
            h = st(self.bn1(st(F.conv2d(st(x), st(self.conv1.weight), padding=1))))
        s = self.neuron(h.unsqueeze(0).expand(T, -1, -1, -1, -1).contiguous())
        s = F.max_pool2d(s.flatten(0, 1), 2)
        if st is keep:
            h = self.bn2(self.conv2(s))
        else:
            h = st(self.bn2(st(F.conv2d(s, st(self.conv2.weight), padding=1))))
        s = self.neuron(h.view(T, N, 128, 14, 14))
        s = F.max_pool2d(s.flatten(0, 1), 2).flatten(1)
        s = self.neuron(st(F.linear(s, st(self.fc1.weight))).view(T, N, -1))
        s = self.neuron(st(F.linear(s.flatten(0, 1), st(self.fc2.weight))).view(T, N, -1))
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


def train(args, batch=128, T=4):
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True

    def load(prefix):
        x = read_idx(os.path.join(args.data, prefix + "-images-idx3-ubyte.gz"))
        y = read_idx(os.path.join(args.data, prefix + "-labels-idx1-ubyte.gz"))
        x = torch.tensor((x / 255.0 - 0.2860) / 0.3530, dtype=torch.float32).unsqueeze(1)
        return x.cuda(), torch.tensor(y, dtype=torch.long).cuda()

    x_train, y_train = load("train")
    x_test, y_test = load("t10k")
    f16 = args.storage == "f16"
    bf16 = args.form == "bf16"
    if bf16 and f16:
        raise SystemExit("--form bf16 trains with PyTorch's own storage: no --storage f16")
    neuron = torch.compile(if_loop) if bf16 else if_loop
    model = CSNN(T, neuron, RoundF16.apply if f16 else keep).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.train)
    history, n = [], len(x_train)
    for epoch in range(args.train):
        model.train()
        start = time.perf_counter()
        perm = torch.randperm(n, device="cuda")
        correct = torch.zeros((), device="cuda")
        finite = torch.ones((), dtype=torch.bool, device="cuda")
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                rate = model(x_train[idx]).float()
            loss = F.mse_loss(rate, F.one_hot(y_train[idx], 10).float())
            finite &= torch.isfinite(loss)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if f16:
                with torch.no_grad():
                    for p in model.parameters():
                        m = opt.state[p].get("momentum_buffer")
                        if m is not None:
                            m.copy_(m.half().float())
            correct += (rate.argmax(1) == y_train[idx]).sum()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if not finite.item():
            raise SystemExit(f"epoch {epoch + 1}: the loss is not finite")
        sched.step()
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            acc = sum((model(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum().item()
                      for i in range(0, len(x_test), 1000)) / len(x_test)
        history.append({"epoch": epoch + 1, "train_accuracy": correct.item() / n,
                        "test_accuracy": acc, "seconds": seconds})
        print(f"epoch {epoch + 1}/{args.train}: train acc {100 * correct.item() / n:.2f}% "
              f"test acc {100 * acc:.2f}% {seconds:.1f} s", flush=True)
        result = {"peer": f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}",
                  "form": args.form, "storage": args.storage, "seed": args.seed,
                  "best_test_accuracy": max(h["test_accuracy"] for h in history),
                  "test_accuracy": acc, "history": history,
                  "peak_memory_bytes": torch.cuda.max_memory_allocated()}
        if args.json:  # after every epoch, so that a cut-off run keeps its curve
            with open(args.json + ".part", "w") as f:
                json.dump(result, f, indent=2)
            os.replace(args.json + ".part", args.json)
    print(json.dumps({k: v for k, v in result.items() if k != "history"}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--train", type=int, default=0, metavar="EPOCHS")
    ap.add_argument("--form", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--storage", choices=["f32", "f16"], default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=os.environ.get("FLEXKIT_DATA_DIR") or "/usr/share/datasets/fashion-mnist")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.train:
        return train(args)
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| csnn training (T=4, batch 128) | epoch (s) | peak memory (GiB) |")
    print("|---|---|---|")
    for form, name in [("f32", "PyTorch f32, TF32 off, cuDNN"),
                       ("bf16", "PyTorch bf16 autocast, torch.compile'd IF loop")]:
        epoch, peak = run(form, args.steps)
        print(f"| {name} | {epoch:.2f} | {peak / 2**30:.3f} ({peak} bytes) |", flush=True)


if __name__ == "__main__":
    main()
