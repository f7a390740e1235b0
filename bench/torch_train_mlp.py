#!/usr/bin/env python3
"""The peer of `flexkit train` (the mlp preset) in PyTorch on the CPU: the same spiking MLP,
initialisation, data order rule, hyper-parameters and loss, so that samples/s and accuracy
compare. 784-512 LIF-10 LIF, T = 4, direct input (the first linear layer runs once per sample,
as flexkit's does), LIF tau 2 with decay_input, hard reset to 0, v_th 1, sigmoid(4) surrogate,
MSE of the rate against one-hot, Adam lr 1e-3 with cosine annealing over the epochs, batch 128.

--storage f16 stores what `flexkit train --precision flex16` stores in flex16 as IEEE float16
instead, with no loss scaling (the Flexpoint paper's comparison): the layers read the weights
rounded to f16 (the optimizer keeps an f32 master copy, as flexkit's default does), the layer
outputs and every gradient are rounded to f16, and so is Adam's first moment after each step
(its second moment stays f32, as in flexkit). Spikes are 0/1, exact either way.

    python3 bench/torch_train_mlp.py --epochs 10 [--threads 2] [--limit N] [--storage f32|f16]
                                     [--json out.json]
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch


def read_idx(path):
    with gzip.open(path) as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


class Spike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return (z >= 0).to(z.dtype)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        s = torch.sigmoid(4.0 * z)
        return grad * 4.0 * s * (1.0 - s)


class RoundF16(torch.autograd.Function):
    """The value and its gradient as IEEE float16 would store them (overflow to inf, underflow
    to subnormals and zero), computed on in f32."""

    @staticmethod
    def forward(ctx, x):
        return x.half().float()

    @staticmethod
    def backward(ctx, grad):
        return grad.half().float()


def lif(current):  # (T, N, F) -> spikes (T, N, F)
    v = torch.zeros_like(current[0])
    out = []
    for t in range(current.shape[0]):
        h = v + (current[t] - v) / 2.0
        s = Spike.apply(h - 1.0)
        v = h * (1.0 - s)
        out.append(s)
    return torch.stack(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--T", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=os.environ.get("FLEXKIT_DATA_DIR") or "/usr/share/datasets/fashion-mnist")
    ap.add_argument("--json", default="")
    ap.add_argument("--storage", choices=["f32", "f16"], default="f32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    def load(prefix):
        x = read_idx(os.path.join(args.data, prefix + "-images-idx3-ubyte.gz"))
        y = read_idx(os.path.join(args.data, prefix + "-labels-idx1-ubyte.gz"))
        if args.limit:
            x, y = x[: args.limit], y[: args.limit]
        x = torch.tensor((x.reshape(len(x), -1) / 255.0 - 0.2860) / 0.3530, dtype=torch.float32)
        return x, torch.tensor(y, dtype=torch.long)

    x_train, y_train = load("train")
    x_test, y_test = load("t10k")
    fc1, fc2 = torch.nn.Linear(784, args.hidden), torch.nn.Linear(args.hidden, 10)

    f16 = args.storage == "f16"
    store = RoundF16.apply if f16 else (lambda t: t)

    def linear(layer, x):
        return store(torch.nn.functional.linear(x, store(layer.weight), store(layer.bias)))

    def forward(x):
        c1 = linear(fc1, store(x)).unsqueeze(0).expand(args.T, -1, -1)
        return lif(linear(fc2, lif(c1))).mean(0)

    params = list(fc1.parameters()) + list(fc2.parameters())
    opt = torch.optim.Adam(params, lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.epochs)
    history, train_seconds, trained = [], 0.0, 0
    n = len(x_train)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        perm = torch.randperm(n)
        correct = 0
        for i in range(0, n, args.batch):
            idx = perm[i:i + args.batch]
            rate = forward(x_train[idx])
            loss = torch.nn.functional.mse_loss(rate, torch.nn.functional.one_hot(y_train[idx], 10).float())
            opt.zero_grad()
            loss.backward()
            opt.step()
            if f16:
                with torch.no_grad():
                    for p in params:
                        m = opt.state[p]["exp_avg"]
                        m.copy_(m.half().float())
            correct += (rate.argmax(1) == y_train[idx]).sum().item()
        seconds = time.perf_counter() - start
        train_seconds += seconds
        trained += n
        sched.step()
        with torch.no_grad():
            acc = sum((forward(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum().item()
                      for i in range(0, len(x_test), 1000)) / len(x_test)
        history.append({"epoch": epoch + 1, "train_accuracy": correct / n, "test_accuracy": acc,
                        "seconds": seconds})
        print(f"epoch {epoch + 1}/{args.epochs}: train acc {100 * correct / n:.2f}% "
              f"test acc {100 * acc:.2f}% {seconds:.1f} s, {n / seconds:.0f} samples/s", flush=True)
    result = {"peer": f"PyTorch {torch.__version__} CPU, {args.threads} threads",
              "storage": args.storage,
              "test_accuracy": history[-1]["test_accuracy"],
              "samples_per_second": trained / train_seconds, "history": history}
    print(json.dumps({k: v for k, v in result.items() if k != "history"}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
