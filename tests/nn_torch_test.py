#!/usr/bin/env python3
"""PyTorch as the oracle for flexkit::nn: layers forward and backward, losses and optimizers.

usage: nn_torch_test.py PATH/TO/nn_layer_tool [--device=cpu|cuda[:N]] [--seed=N]

Small random cases (a fixed NumPy seed) are written as .npy files, run through the tool, and
its results compared with torch computing in float64: torch.nn.functional.linear, conv2d,
max_pool2d (ties included), avg_pool2d, batch_norm (training step, running statistics,
evaluation forward), flatten, cross_entropy and mse_loss on the rate, and torch.optim.SGD /
Adam / AdamW. Gradients are torch.autograd's of sum(y * grad_y). Spiking neurons are compared
with a step-by-step float64 implementation of SpikingJelly's equations (LIF, IF, PLIF with
decay_input; hard and soft reset, detach_reset; T = 1 inputs repeated over the steps), the
surrogate gradient a custom autograd function; inputs are drawn so that every charge h stays
more than 1e-3 away from the threshold, where float32 and float64 spikes agree. Dropout is
checked for its mask: y is 0 exactly where grad_x is, y = x / (1 - p) and
grad_x = grad_y / (1 - p) elsewhere, one mask for every time step.

Activations are flexkit's (*features, T, N); torch sees them as (T, N, *features), i.e.
x_torch[t, n, c, h, w] = x_flexkit[c, h, w, t, n]. Parameters are in torch's layouts.
Tolerances are float32-level: |flexkit - torch| <= 1e-4 |torch| + 1e-5 max(1, max |torch|),
on either device. --device is passed to every tool run, so that the same cases check the layers
on CUDA (f32 matmuls through cuBLAS with TF32 off, f32 convolutions lowered onto cuBLAS
products: other summation orders, float32 rounding all the same). Exits 1 listing every
mismatch.
"""

import concurrent.futures
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as tf

TOOL = None
DEVICE_ARGS = []
WORK = None
RTOL = 1e-4
ATOL = 1e-5
THRESHOLD_MARGIN = 1e-3


class Mismatch(Exception):
    pass


def fk_to_torch(a):
    """(*features, T, N) -> (T, N, *features)."""
    r = a.ndim
    return np.ascontiguousarray(np.transpose(a, (r - 2, r - 1) + tuple(range(r - 2))))


def torch_to_fk(a):
    """(T, N, *features) -> (*features, T, N)."""
    r = a.ndim
    return np.ascontiguousarray(np.transpose(a, tuple(range(2, r)) + (0, 1)))


def f32(a):
    return np.asarray(a, dtype=np.float32)


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), dtype=torch.float64, requires_grad=grad)


def numpy64(t):
    return t.detach().numpy().astype(np.float64)


class Case:
    """One tool run: inputs written to its directory, expected outputs compared afterwards."""

    def __init__(self, label, tool_case, options=(), inputs=None, expected=None, check=None):
        self.label = label
        self.dir = os.path.join(WORK, "case%03d_%s" % (len(CASES), tool_case))
        os.makedirs(self.dir)
        for name, value in (inputs or {}).items():
            np.save(os.path.join(self.dir, name + ".npy"), value)
        self.expected = expected or {}
        self.custom_check = check
        self.args = [TOOL, tool_case, self.dir] + list(options) + DEVICE_ARGS
        self.result = None
        CASES.append(self)

    def load(self, name):
        return np.load(os.path.join(self.dir, name + ".npy"))

    def run(self):
        p = subprocess.run(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.result = (p.returncode, p.stderr.strip())

    def check(self):
        rc, err = self.result
        if rc != 0:
            raise Mismatch("the tool failed (exit %d): %s" % (rc, err))
        for name, want in self.expected.items():
            compare(name, self.load(name), want)
        if self.custom_check:
            self.custom_check(self)


def compare(name, got, want, rtol=RTOL, atol=ATOL):
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise Mismatch("%s: shape %s, torch gives %s" % (name, got.shape, want.shape))
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    err = np.abs(got.astype(np.float64) - want)
    tol = rtol * np.abs(want) + atol * scale
    bad = np.argwhere(err > tol)
    if bad.size:
        at = tuple(bad[0])
        raise Mismatch("%s: %d of %d elements off; first at %s: flexkit %r, torch %r, "
                       "tolerance %.3g" % (name, len(bad), got.size, at, float(got[at]),
                                           float(want[at]), float(tol[at])))


CASES = []


# ---- linear and conv ----------------------------------------------------------------------------

def linear_case(rng, inf, outf, steps, n, bias):
    x = f32(rng.standard_normal((inf, steps, n)))
    gy = f32(rng.standard_normal((outf, steps, n)))
    w = f32(rng.standard_normal((outf, inf)) / math.sqrt(inf))
    b = f32(rng.standard_normal(outf))
    xt, wt, bt = t64(fk_to_torch(x), True), t64(w, True), t64(b, True)
    y = tf.linear(xt, wt, bt if bias else None)
    (y * t64(fk_to_torch(gy))).sum().backward()
    inputs = {"x": x, "grad_y": gy, "weight": w}
    expected = {"y": torch_to_fk(numpy64(y)), "grad_x": torch_to_fk(numpy64(xt.grad)),
                "grad_weight": numpy64(wt.grad)}
    if bias:
        inputs["bias"] = b
        expected["grad_bias"] = numpy64(bt.grad)
    Case("linear in=%d out=%d T=%d N=%d bias=%s" % (inf, outf, steps, n, bias), "linear",
         inputs=inputs, expected=expected)


def images(x):
    """(C, H, W, T, N) -> torch's (T·N, C, H, W)."""
    c, h, w, steps, n = x.shape
    return fk_to_torch(x).reshape(steps * n, c, h, w)


def from_images(y, steps, n):
    """(T·N, K, P, Q) -> (K, P, Q, T, N)."""
    return torch_to_fk(y.reshape((steps, n) + y.shape[1:]))


def conv_case(rng, c, k, hw, kernel, stride, padding, steps, n, bias):
    x = f32(rng.standard_normal((c,) + hw + (steps, n)))
    w = f32(rng.standard_normal((k, c, kernel, kernel)) / math.sqrt(c * kernel * kernel))
    b = f32(rng.standard_normal(k))
    xt, wt, bt = t64(images(x), True), t64(w, True), t64(b, True)
    y = tf.conv2d(xt, wt, bt if bias else None, stride=stride, padding=padding)
    gy = f32(rng.standard_normal(from_images(numpy64(y), steps, n).shape))
    (y * t64(images(gy))).sum().backward()
    inputs = {"x": x, "grad_y": gy, "weight": w}
    expected = {"y": from_images(numpy64(y), steps, n),
                "grad_x": from_images(numpy64(xt.grad), steps, n),
                "grad_weight": numpy64(wt.grad)}
    if bias:
        inputs["bias"] = b
        expected["grad_bias"] = numpy64(bt.grad)
    Case("conv C=%d K=%d %s kernel %d stride %d padding %d T=%d N=%d bias=%s"
         % (c, k, hw, kernel, stride, padding, steps, n, bias), "conv",
         ["stride=%d" % stride, "padding=%d" % padding], inputs, expected)


# ---- pooling and flatten ------------------------------------------------------------------------

def pool_case(rng, mode, c, hw, kernel, stride, steps, n, spikes=False):
    if spikes:
        # 0/1 values, as after a spiking layer: windows with ties, all-zero windows included.
        x = f32(rng.random((c,) + hw + (steps, n)) < 0.3)
    else:
        x = f32(rng.standard_normal((c,) + hw + (steps, n)))
    xt = t64(images(x), True)
    if mode == "maxpool":
        y = tf.max_pool2d(xt, kernel, stride)
    else:
        y = tf.avg_pool2d(xt, kernel, stride)
    gy = f32(rng.standard_normal(from_images(numpy64(y), steps, n).shape))
    (y * t64(images(gy))).sum().backward()
    Case("%s C=%d %s kernel %d stride %d T=%d N=%d%s"
         % (mode, c, hw, kernel, stride, steps, n, " spikes (ties)" if spikes else ""),
         mode, ["kernel=%d" % kernel, "stride=%d" % stride], {"x": x, "grad_y": gy},
         {"y": from_images(numpy64(y), steps, n),
          "grad_x": from_images(numpy64(xt.grad), steps, n)})


def flatten_case(rng, features, steps, n):
    x = f32(rng.standard_normal(features + (steps, n)))
    xt = t64(fk_to_torch(x), True)
    y = xt.flatten(2)
    gy = f32(rng.standard_normal((int(np.prod(features)), steps, n)))
    (y * t64(fk_to_torch(gy))).sum().backward()
    Case("flatten %s T=%d N=%d" % (features, steps, n), "flatten", (), {"x": x, "grad_y": gy},
         {"y": torch_to_fk(numpy64(y)), "grad_x": torch_to_fk(numpy64(xt.grad))})


# ---- batch normalisation ------------------------------------------------------------------------

def bn_case(rng, shape, affine, momentum=0.1, eps=1e-5):
    c = shape[0]
    x = f32(rng.standard_normal(shape) * 1.5 + rng.standard_normal((c,) + (1,) * (len(shape) - 1)))
    gy = f32(rng.standard_normal(shape))
    x_eval = f32(rng.standard_normal(shape))
    w = f32(1 + 0.5 * rng.standard_normal(c))
    b = f32(rng.standard_normal(c))
    rm = f32(0.3 * rng.standard_normal(c))
    rv = f32(1 + 0.5 * rng.random(c))

    # Per channel over every other axis: (C, ...) -> (M, C) for torch.
    def rows(a):
        return a.reshape(c, -1).T

    xt = t64(rows(x), True)
    wt, bt = t64(w, True), t64(b, True)
    rmt, rvt = t64(rm), t64(rv)
    y = tf.batch_norm(xt, rmt, rvt, wt if affine else None, bt if affine else None,
                      training=True, momentum=momentum, eps=eps)
    (y * t64(rows(gy))).sum().backward()
    y_eval = tf.batch_norm(t64(rows(x_eval)), rmt, rvt, wt.detach() if affine else None,
                           bt.detach() if affine else None, training=False, eps=eps)
    inputs = {"x": x, "grad_y": gy, "x_eval": x_eval, "running_mean": rm, "running_var": rv}
    expected = {"y": numpy64(y).T.reshape(shape), "grad_x": numpy64(xt.grad).T.reshape(shape),
                "running_mean": numpy64(rmt), "running_var": numpy64(rvt),
                "y_eval": numpy64(y_eval).T.reshape(shape)}
    if affine:
        inputs.update(weight=w, bias=b)
        expected.update(grad_weight=numpy64(wt.grad), grad_bias=numpy64(bt.grad))
    Case("bn %s affine=%s momentum %g eps %g" % (shape, affine, momentum, eps), "bn",
         ["affine=%d" % affine, "momentum=%r" % momentum, "eps=%r" % eps], inputs, expected)


# ---- dropout ------------------------------------------------------------------------------------

def dropout_case(rng, p, features, steps, n, seed):
    # Inputs and gradients away from zero, so that a zero in y or grad_x is a dropped element.
    shape = features + (steps, n)
    x = f32(np.sign(rng.standard_normal(shape)) * (0.5 + rng.random(shape)))
    gy = f32(np.sign(rng.standard_normal(shape)) * (0.5 + rng.random(shape)))

    def check(case):
        y, gx = case.load("y"), case.load("grad_x")
        if y.shape != shape or gx.shape != shape:
            raise Mismatch("shapes %s, %s, expected %s" % (y.shape, gx.shape, shape))
        if p == 0:
            if not (np.array_equal(y, x) and np.array_equal(gx, gy)):
                raise Mismatch("p=0 is not the identity")
            return
        scale = np.float32(1.0 / (1.0 - p))
        kept = y != 0
        if not np.array_equal(kept, gx != 0):
            raise Mismatch("y and grad_x are zero at different elements")
        if not np.array_equal(y[kept], x[kept] * scale):
            raise Mismatch("kept elements of y are not x * %r" % float(scale))
        if not np.array_equal(gx[kept], gy[kept] * scale):
            raise Mismatch("kept elements of grad_x are not grad_y * %r" % float(scale))
        for t in range(1, steps):
            if not np.array_equal(kept[..., t, :], kept[..., 0, :]):
                raise Mismatch("the mask at step %d differs from step 0" % t)
        fraction = 1.0 - kept[..., 0, :].mean()
        count = kept[..., 0, :].size
        # Binomial: p ± 5 standard deviations.
        sd = math.sqrt(p * (1 - p) / count)
        if abs(fraction - p) > 5 * sd:
            raise Mismatch("dropped fraction %.3f of %d, p = %g" % (fraction, count, p))

    Case("dropout p=%g %s T=%d N=%d seed %d" % (p, features, steps, n, seed), "dropout",
         ["p=%r" % p, "seed=%d" % seed], {"x": x, "grad_y": gy}, check=check)


# ---- spiking neurons ----------------------------------------------------------------------------

class Spike(torch.autograd.Function):
    """heaviside(z) forward (spike where z >= 0), a surrogate's derivative backward."""

    @staticmethod
    def forward(ctx, z, surrogate, alpha):
        ctx.save_for_backward(z)
        ctx.surrogate, ctx.alpha = surrogate, alpha
        return (z >= 0).to(z.dtype)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        a = ctx.alpha
        if ctx.surrogate == "sigmoid":
            sg = torch.sigmoid(a * z)
            d = a * sg * (1 - sg)
        elif ctx.surrogate == "atan":
            d = (a / 2) / (1 + (math.pi / 2 * a * z) ** 2)
        else:
            raise ValueError(ctx.surrogate)
        return grad * d, None, None


def neuron_reference(kind, x, steps, tau, w, surrogate, alpha, v_threshold=1.0, soft=False,
                     detach=False):
    """SpikingJelly's multi-step neuron with decay_input: hard reset to v_reset = 0 or, soft,
    subtracting the threshold; detach_reset takes the reset out of the gradient.

    x: flexkit layout (*f, T_in, N) with T_in = steps or 1 (repeated). Returns the spikes
    (flexkit layout), the smallest |h - v_threshold| seen, and the tensors for autograd.
    """
    xt = t64(fk_to_torch(x), True)
    wt = t64(w, True)
    v = torch.zeros(xt.shape[1:], dtype=torch.float64)
    spikes, margin = [], math.inf
    for t in range(steps):
        xs = xt[0] if xt.shape[0] == 1 else xt[t]
        if kind == "lif":
            h = v + (xs - v) / tau
        elif kind == "plif":
            h = v + (xs - v) * torch.sigmoid(wt)
        elif kind == "if":
            h = v + xs
        else:
            raise ValueError(kind)
        margin = min(margin, float(torch.min(torch.abs(h - v_threshold))))
        s = Spike.apply(h - v_threshold, surrogate, alpha)
        sd = s.detach() if detach else s
        v = h - sd * v_threshold if soft else h * (1 - sd)
        spikes.append(s)
    return torch.stack(spikes), margin, xt, wt


def spiking_case(rng, kind, features, steps, n, mean, sd, input_steps=None, tau=2.0, w=None,
                 surrogate="sigmoid", alpha=4.0, soft=False, detach=False, settings=()):
    input_steps = steps if input_steps is None else input_steps
    shape = features + (input_steps, n)
    for _ in range(1000):
        x = f32(mean + sd * rng.standard_normal(shape))
        s, margin, xt, wt = neuron_reference(kind, x, steps, tau, 0.0 if w is None else w,
                                             surrogate, alpha, soft=soft, detach=detach)
        # Some spikes and some silence, or the case tests little.
        rate = float(s.detach().mean())
        if margin > THRESHOLD_MARGIN and 0.1 < rate < 0.9:
            break
    else:
        raise RuntimeError("test bug: no input away from the threshold for %s" % kind)
    gy = f32(rng.standard_normal(features + (steps, n)))
    (s * t64(fk_to_torch(gy))).sum().backward()
    spikes = torch_to_fk(numpy64(s))
    inputs = {"x": x, "grad_y": gy}
    expected = {"y": spikes, "grad_x": torch_to_fk(numpy64(xt.grad))}
    options = ["neuron=" + kind, "T=%d" % steps] + ["set.%s=%s" % kv for kv in settings]
    if kind == "plif":
        if w is not None:
            inputs["w"] = f32(np.array(w))
        expected["grad_w"] = numpy64(wt.grad).reshape(1)
    Case("spiking %s %s T=%d (input T=%d) N=%d%s%s" % (
        kind, features, steps, input_steps, n, " w=%g" % w if w is not None else "",
        "".join(" " + o for o in options[2:])), "spiking", options, inputs, expected)


# ---- losses -------------------------------------------------------------------------------------

def loss_case(rng, kind, classes, steps, n, spikes=False):
    if spikes:
        x = f32(rng.random((classes, steps, n)) < 0.4)
    else:
        x = f32(rng.random((classes, steps, n)))
    labels = rng.integers(0, classes, size=n).astype(np.int32)
    xt = t64(x, True)
    rate = xt.mean(1)  # (classes, N)
    if kind == "ce":
        loss = tf.cross_entropy(rate.T, torch.tensor(labels, dtype=torch.int64))
    else:
        one_hot = tf.one_hot(torch.tensor(labels, dtype=torch.int64), classes).to(torch.float64)
        loss = tf.mse_loss(rate.T, one_hot)
    loss.backward()
    # argmax takes the first (lowest) class on ties, as flexkit does.
    correct = int(np.sum(np.argmax(numpy64(rate), axis=0) == labels))

    def check(case):
        got = int(case.load("correct")[0])
        if got != correct:
            raise Mismatch("correct: flexkit %d, expected %d" % (got, correct))

    Case("loss %s classes=%d T=%d N=%d%s" % (kind, classes, steps, n, " spikes" if spikes else ""),
         "loss", ["kind=" + kind], {"x": x, "labels": labels},
         {"loss": np.array([float(loss)]), "grad_x": numpy64(xt.grad), "rate": numpy64(rate)},
         check)


# ---- optimizers ---------------------------------------------------------------------------------

def optimizer_case(rng, name, lr, steps=5, **options):
    shapes = [(3, 4), (5,)]
    params = [f32(rng.standard_normal(s)) for s in shapes]
    grads = [f32(rng.standard_normal((steps,) + s)) for s in shapes]
    tensors = [t64(p, True) for p in params]
    if name == "sgd":
        opt = torch.optim.SGD(tensors, lr=lr, momentum=options.get("momentum", 0.9),
                              nesterov=bool(options.get("nesterov", 0)),
                              weight_decay=options.get("weight_decay", 0.0))
    elif name == "adam":
        opt = torch.optim.Adam(tensors, lr=lr, weight_decay=options.get("weight_decay", 0.0))
    elif name == "adamw":
        opt = torch.optim.AdamW(tensors, lr=lr, weight_decay=options.get("weight_decay", 0.0))
    else:
        raise ValueError(name)
    history = [[] for _ in tensors]
    for s in range(steps):
        for t, g in zip(tensors, grads):
            t.grad = t64(g[s])
        opt.step()
        for h, t in zip(history, tensors):
            h.append(numpy64(t))
    inputs, expected = {}, {}
    for i, (p, g, h) in enumerate(zip(params, grads, history)):
        inputs["p%d" % i] = p
        inputs["g%d" % i] = g
        expected["out%d" % i] = np.stack(h)
    tool_options = ["name=" + name, "lr=%r" % lr, "steps=%d" % steps]
    tool_options += ["%s=%r" % kv for kv in sorted(options.items())]
    Case("optimizer %s lr %g %s" % (name, lr, " ".join(tool_options[3:])), "optimizer",
         tool_options, inputs, expected)


def build_cases(rng):
    linear_case(rng, 7, 5, 3, 4, bias=True)
    linear_case(rng, 6, 3, 1, 5, bias=False)
    linear_case(rng, 1, 9, 2, 2, bias=True)

    conv_case(rng, 3, 4, (6, 5), 3, 1, 1, 2, 3, bias=True)
    conv_case(rng, 3, 4, (6, 5), 3, 1, 1, 2, 3, bias=False)
    conv_case(rng, 2, 5, (7, 8), 3, 2, 0, 1, 3, bias=True)
    conv_case(rng, 2, 5, (7, 8), 3, 2, 0, 2, 2, bias=False)
    conv_case(rng, 4, 2, (5, 5), 1, 1, 0, 2, 2, bias=True)
    conv_case(rng, 2, 3, (8, 7), 3, 2, 1, 2, 2, bias=True)
    conv_case(rng, 1, 3, (6, 6), 5, 1, 2, 1, 4, bias=True)

    pool_case(rng, "maxpool", 3, (6, 8), 2, 2, 2, 3)
    pool_case(rng, "maxpool", 2, (7, 7), 2, 2, 2, 2)   # the last row and column unused
    pool_case(rng, "maxpool", 2, (7, 9), 3, 2, 2, 2)   # overlapping windows
    pool_case(rng, "maxpool", 2, (6, 6), 3, 1, 1, 3)   # overlapping, stride 1
    # Ties: the gradient goes to the first maximum of the window in row-major order, as torch's.
    pool_case(rng, "maxpool", 2, (6, 8), 2, 2, 2, 3, spikes=True)
    pool_case(rng, "maxpool", 2, (7, 9), 3, 2, 2, 2, spikes=True)
    # Windows that tile the input, 9 taps each (ties in the second).
    pool_case(rng, "maxpool", 2, (6, 9), 3, 3, 2, 2)
    pool_case(rng, "maxpool", 3, (9, 6), 3, 3, 1, 3, spikes=True)
    pool_case(rng, "avgpool", 2, (6, 9), 3, 3, 2, 2)
    pool_case(rng, "avgpool", 3, (6, 8), 2, 2, 2, 3)
    pool_case(rng, "avgpool", 2, (7, 9), 3, 2, 2, 2)

    flatten_case(rng, (3, 4, 5), 2, 3)
    flatten_case(rng, (2, 3), 1, 4)

    bn_case(rng, (3, 4, 5, 2, 3), affine=True)
    bn_case(rng, (5, 3, 4), affine=True, momentum=0.3, eps=1e-3)
    bn_case(rng, (4, 3, 3, 1, 2), affine=False)

    dropout_case(rng, 0.0, (6,), 3, 4, seed=1)
    dropout_case(rng, 0.5, (8, 5), 4, 6, seed=7)
    dropout_case(rng, 0.5, (2, 3, 4), 3, 5, seed=123)
    dropout_case(rng, 0.2, (40,), 2, 8, seed=3)

    spiking_case(rng, "lif", (2, 3, 2), 4, 3, mean=1.5, sd=1.5)
    spiking_case(rng, "lif", (5,), 6, 4, mean=1.0, sd=1.5, tau=3.0, settings=[("tau", "3")])
    spiking_case(rng, "if", (4, 3), 5, 3, mean=0.4, sd=0.6, surrogate="atan", alpha=2.0,
                 settings=[("surrogate", "atan")])
    spiking_case(rng, "if", (6,), 4, 3, mean=0.4, sd=0.6)
    spiking_case(rng, "lif", (4, 3), 5, 3, mean=1.5, sd=1.5, soft=True,
                 settings=[("v_reset", "none")])
    spiking_case(rng, "if", (5,), 5, 3, mean=0.4, sd=0.6, detach=True,
                 settings=[("detach_reset", "1")])
    spiking_case(rng, "plif", (3, 4), 4, 3, mean=1.5, sd=1.5)
    spiking_case(rng, "plif", (2, 2, 3), 5, 2, mean=1.2, sd=1.2, w=0.7)
    spiking_case(rng, "lif", (3, 2, 2), 4, 3, mean=1.5, sd=1.5, input_steps=1)
    spiking_case(rng, "if", (7,), 4, 3, mean=0.4, sd=0.5, input_steps=1, surrogate="atan",
                 alpha=2.0, settings=[("surrogate", "atan")])
    spiking_case(rng, "plif", (5,), 4, 4, mean=1.5, sd=1.5, input_steps=1, w=-0.4)

    loss_case(rng, "ce", 5, 4, 6)
    loss_case(rng, "ce", 10, 3, 7, spikes=True)
    loss_case(rng, "mse", 5, 4, 6)
    loss_case(rng, "mse", 4, 6, 5, spikes=True)

    optimizer_case(rng, "sgd", 0.1, momentum=0.0)
    optimizer_case(rng, "sgd", 0.1, momentum=0.9, weight_decay=1e-2)
    optimizer_case(rng, "sgd", 0.1, momentum=0.9, nesterov=1, weight_decay=1e-2)
    optimizer_case(rng, "sgd", 0.05, momentum=0.9)
    optimizer_case(rng, "adam", 0.01)
    optimizer_case(rng, "adam", 0.01, weight_decay=1e-2)
    optimizer_case(rng, "adamw", 0.01, weight_decay=1e-2)


def main():
    global TOOL, DEVICE_ARGS, WORK
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    TOOL = os.path.abspath(sys.argv[1])
    seed = 20240917
    for arg in sys.argv[2:]:
        if arg.startswith("--device="):
            DEVICE_ARGS = [arg]
        elif arg.startswith("--seed="):
            seed = int(arg[len("--seed="):])
        else:
            print("unknown argument %s" % arg, file=sys.stderr)
            return 2
    if not os.access(TOOL, os.X_OK):
        print("%s is not an executable" % TOOL, file=sys.stderr)
        return 2

    rng = np.random.default_rng(seed)
    WORK = tempfile.mkdtemp(prefix="flexkit_nn_torch_")
    try:
        build_cases(rng)
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            list(pool.map(Case.run, CASES))
        failures = 0
        for case in CASES:
            try:
                case.check()
            except Mismatch as e:
                failures += 1
                print("MISMATCH [%s]\n  command: %s\n  %s" % (case.label, " ".join(case.args), e),
                      file=sys.stderr)
        if failures:
            print("nn_torch: %d of %d cases disagree with torch" % (failures, len(CASES)),
                  file=sys.stderr)
            return 1
        print("nn_torch: %d cases agree with torch %s (layers, losses, optimizers) on %s"
              % (len(CASES), torch.__version__,
                 DEVICE_ARGS[0][len("--device="):] if DEVICE_ARGS else "cpu"))
        return 0
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
