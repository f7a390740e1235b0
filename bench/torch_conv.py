"""The cuDNN peer of bench_conv, through PyTorch: the same layers (batch 64, stride 1), fprop
(F.conv2d), bprop (aten.convolution_backward, input gradient only) and update (filter gradient
only), in fp32 (TF32 off), TF32 and BF16, each the better of NCHW and channels_last, with
cudnn.benchmark on; CUDA events, median of 20 repeats after warm-up. Rates count
2*N*K*C*R*S*P*Q per direction, as bench_conv does.

Environment: CONV_LAYERS (names as bench_conv prints them, case and spaces ignored, "3x3", "1x1"
or "all"), CONV_TIME_LIMIT_S (default 240: no new layer starts after it), CONV_CSV (bench_conv's
CSV: adds one merged table per direction). `--device cpu --quick` runs a small-batch smoke test
of the same code on the CPU."""
import argparse
import csv
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

BATCH = 64
DIRECTIONS = ("fprop", "bprop", "update")
PRECISIONS = ("fp32", "tf32", "bf16")
FORMATS = ("nchw", "channels_last")
# Relative Frobenius error of each variant's result against fp32 NCHW (TF32 off) on the same
# inputs: a wrong layout or a mixed-up gradient is far beyond these, rounding is well inside.
TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "bf16": 5e-2}


class Layer:
    def __init__(self, c, k, hw, rs, pad):
        self.c, self.k, self.hw, self.rs, self.pad = c, k, hw, rs, pad
        self.pq = hw + 2 * pad - rs + 1
        self.name = "%dx%d C%d K%d %dx%d" % (rs, rs, c, k, hw, hw)

    def flops(self, batch):
        return 2.0 * batch * self.k * self.c * self.rs * self.rs * self.pq * self.pq


def all_layers():
    layers = [Layer(128, 128, 56, 3, 1)]  # the headline
    layers += [Layer(c, c, hw, 3, 1) for c, hw in ((64, 56), (128, 28), (256, 14), (512, 7))]
    layers += [Layer(c, k, hw, 1, 0) for c, k, hw in (
        (64, 256, 56), (256, 64, 56), (128, 512, 28), (512, 128, 28),
        (256, 1024, 14), (1024, 256, 14), (512, 2048, 7), (2048, 512, 7))]
    return layers


def normalized(text):
    return "".join(text.split()).lower()


def parse_layers(spec):
    layers = all_layers()
    chosen = set()
    for token in (spec or "all").split(","):
        tok = normalized(token)
        if not tok:
            continue
        hits = [i for i, layer in enumerate(layers)
                if tok == "all" or (tok == "3x3" and layer.rs == 3)
                or (tok == "1x1" and layer.rs == 1) or tok == normalized(layer.name)]
        if not hits:
            names = "".join("\n  " + layer.name for layer in layers)
            raise SystemExit("CONV_LAYERS: no layer '%s'; want all, 3x3, 1x1 or one of:%s"
                             % (tok, names))
        chosen.update(hits)
    return [layer for i, layer in enumerate(layers) if i in chosen]


def median_ms(fn, device, repeats, warmup):
    """CUDA events around each call on the GPU; the host clock (after the call returns) on the
    CPU, where the work is synchronous."""
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def set_precision(precision):
    tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32


def conv_call(direction, x, w, gy, pad, stride=1):
    """The call one timed repeat makes (2-d, square padding and stride); its result is a tensor
    to check. bench/torch_cpu_conv.py uses it too."""
    if direction == "fprop":
        return lambda: F.conv2d(x, w, stride=stride, padding=pad)
    # The input is only read for its shape by the input gradient, and the filter only for its
    # shape by the filter gradient; the library is called exactly as autograd would call it.
    mask = [True, False, False] if direction == "bprop" else [False, True, False]
    pick = 0 if direction == "bprop" else 1
    return lambda: torch.ops.aten.convolution_backward(
        gy, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1, mask)[pick]


def direction_call(direction, layer, x, w, gy):
    return conv_call(direction, x, w, gy, layer.pad)


def rel_error(got, ref):
    ref64 = ref.double()
    return ((got.double() - ref64).norm() / ref64.norm().clamp_min(1e-300)).item()


def measure_layer(layer, device, batch, repeats, warmup, failures):
    """{(direction, precision): (tflops, format)}, a failed or raising variant as (None, text)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    # Uniform in (-1, 1), never all zeros; made on the CPU so every device sees the same data.
    x32 = (torch.rand(batch, layer.c, layer.hw, layer.hw, generator=gen) * 2 - 1).to(device)
    w32 = (torch.rand(layer.k, layer.c, layer.rs, layer.rs, generator=gen) * 2 - 1).to(device)
    gy32 = (torch.rand(batch, layer.k, layer.pq, layer.pq, generator=gen) * 2 - 1).to(device)
    results = {}
    for direction in DIRECTIONS:
        set_precision("fp32")
        reference = direction_call(direction, layer, x32, w32, gy32)().float()
        for precision in PRECISIONS:
            best = (None, "-")
            for fmt in FORMATS:
                what = "%s %s %s %s" % (layer.name, direction, precision, fmt)
                try:
                    set_precision(precision)
                    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
                    memory_format = (torch.channels_last if fmt == "channels_last"
                                     else torch.contiguous_format)
                    x, w, gy = (t.to(dtype=dtype).contiguous(memory_format=memory_format)
                                for t in (x32, w32, gy32))
                    call = direction_call(direction, layer, x, w, gy)
                    err = rel_error(call().float(), reference)
                    if not math.isfinite(err) or err > TOLERANCE[precision]:
                        raise RuntimeError("relative error %.2e against fp32 NCHW (tolerance %.0e)"
                                           % (err, TOLERANCE[precision]))
                    ms = median_ms(call, device, repeats, warmup)
                    tflops = layer.flops(batch) / (ms * 1e9)
                    print("%-48s %9.3f ms %8.1f TFLOP/s  rel err %.1e"
                          % (what, ms, tflops, err), file=sys.stderr)
                    if best[0] is None or tflops > best[0]:
                        best = (tflops, fmt)
                except Exception as e:  # one variant failing must not hide the others
                    failures.append("%s: %s" % (what, e))
                    print("%-48s FAILED: %s" % (what, e), file=sys.stderr)
                    if best[0] is None:
                        best = (None, "err")
            results[(direction, precision)] = best
    return results


def read_flexkit_csv(path):
    """bench_conv's lines by (layer, direction): (tflops text, ratio_name, ratio text)."""
    rows = {}
    with open(path, newline="") as f:
        for line in csv.DictReader(f):
            rows[(line["layer"], line["direction"])] = (
                line["flexkit_tflops"], line["ratio_name"], line["ratio"])
    return rows


def as_float(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def cell(value):
    return "%.1f" % value if value is not None else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true",
                        help="batch 2, 2 repeats: a smoke test of shapes and tables")
    args = parser.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("torch_conv: no CUDA device", file=sys.stderr)
        return 1
    batch, repeats, warmup = (2, 2, 1) if args.quick else (BATCH, 20, 3)
    layers = parse_layers(os.environ.get("CONV_LAYERS"))
    time_limit = float(os.environ.get("CONV_TIME_LIMIT_S", "240"))
    torch.backends.cudnn.benchmark = True
    start = time.monotonic()

    if device == "cuda":
        what = "%s, cuDNN %s" % (torch.cuda.get_device_name(0), torch.backends.cudnn.version())
    else:
        what = "CPU smoke test"
    print("\ncuDNN convolution peers, PyTorch %s, %s, batch %d%s"
          % (torch.__version__, what, batch, " (--quick)" if args.quick else ""))
    sys.stdout.flush()

    failures = []
    results = {}
    for layer in layers:
        if time.monotonic() - start > time_limit:
            print("%-48s skipped: CONV_TIME_LIMIT_S=%.0f" % (layer.name, time_limit),
                  file=sys.stderr)
            continue
        results[layer.name] = measure_layer(layer, device, batch, repeats, warmup, failures)

    def peer(name, direction, precision):
        r = results.get(name, {}).get((direction, precision))
        if r is None:
            return None, "skip"
        return r

    for direction in DIRECTIONS:
        print("\n%s: TFLOP/s counting 2*N*K*C*R*S*P*Q, N = %d (median of %d repeats, %s), "
              "better of NCHW and channels_last\n"
              % (direction, batch, repeats, "CUDA events" if device == "cuda" else "host clock"))
        print("| layer | cuDNN fp32 TFLOP/s | TF32 | BF16 | formats (fp32 / TF32 / BF16) |")
        print("|---|---|---|---|---|")
        for layer in layers:
            cells = [peer(layer.name, direction, p) for p in PRECISIONS]
            print("| %s | %s |" % (layer.name, " | ".join(
                cell(v) if v is not None else text for v, text in cells)
                + " | " + " / ".join(text for _, text in cells)))

    csv_path = os.environ.get("CONV_CSV")
    if csv_path and os.path.exists(csv_path):
        flexkit = read_flexkit_csv(csv_path)
        for direction in DIRECTIONS:
            print("\n%s: flexkit flex16 (bench_conv, same run) beside cuDNN, TFLOP/s\n"
                  % direction)
            print("| layer | flexkit flex16 | cuDNN fp32 | TF32 | BF16 | flex16/TF32 | "
                  "flex16/BF16 | target ratio |")
            print("|---|---|---|---|---|---|---|---|")
            for layer in layers:
                text, ratio_name, ratio = flexkit.get((layer.name, direction), ("-", "", ""))
                flex = as_float(text)
                fp32, tf32, bf16 = (peer(layer.name, direction, p)[0] for p in PRECISIONS)

                def over(peer_value):
                    if flex is None or not peer_value:
                        return "-"
                    return "%.2f" % (flex / peer_value)

                r = as_float(ratio)
                target = "%.3f %s" % (r, ratio_name) if r is not None else "-"
                print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    layer.name, cell(flex) if flex is not None else (text or "-"), cell(fp32),
                    cell(tf32), cell(bf16), over(tf32), over(bf16), target))
    elif csv_path:
        print("\n(no %s: run bench_conv first for the merged tables)" % csv_path)

    if failures:
        print("\ntorch_conv: %d variant(s) failed:" % len(failures))
        for f in failures:
            print("  " + f)
    print("\ntorch_conv: %s (%.0f s)"
          % ("FAILURES above" if failures else "all variants ran", time.monotonic() - start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
