#!/usr/bin/env python3
"""PyTorch as the oracle for flexkit's convolution: fprop, bprop and update.

usage: conv_torch_test.py PATH/TO/conv_npy_tool [--device=cpu|cuda[:N]] [--seed=N]

For 1-, 2- and 3-d geometries (kernels 1/3/5, padding, stride, dilation, upscale) random f32
operands are written in the seed layouts I = (C, [D, [H,]] W, N), F = (C, [T, [R,]] S, K),
E = (K, [M, [P,]] Q, N) and the tool's results are compared with torch in float64:
fprop = conv{1,2,3}d(nearest-upsampled I, F), bprop and update = torch.autograd.grad of
sum(conv(I, F) * E) with respect to I and F. Autograd through repeat_interleave sums the
replicated positions, which is the upscale's adjoint. The f32 tolerance is relative to the
same computation on |I|, |F|, |E| (the magnitude of the terms summed), since flexkit accumulates
in float32. One flex16 case per direction checks exactness: operands exactly representable, so
torch's float64 result is exact, and flexkit's mantissas must equal it rounded half-to-even at
the output's iwl. Exits 1 with a description of the first mismatch.
"""

import concurrent.futures
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

# float32 has a 24-bit significand; the sums here have at most a few hundred terms, so a
# relative error of 2e-5 of the terms' magnitude is generous for rounding and still far below
# what a wrong tap, offset or missing term produces (an error of the order of the terms).
F32_RTOL = 2e-5

CONV = {1: tf.conv1d, 2: tf.conv2d, 3: tf.conv3d}


class Mismatch(Exception):
    pass


def to_seed(t):
    """torch's (N, C, ...) / (K, C, ...) -> the seed's (C, ..., N) / (C, ..., K)."""
    return np.ascontiguousarray(np.moveaxis(t, 0, -1))


def from_seed(a):
    return np.ascontiguousarray(np.moveaxis(a, -1, 0))


class Geometry:
    def __init__(self, spatial, kernel, c, k, n, padding, stride, dilation, upscale):
        self.dims = len(spatial)
        self.spatial, self.kernel = tuple(spatial), tuple(kernel)
        self.c, self.k, self.n = c, k, n
        # Per-dim tuples for torch; the tool gets the same lists, one value per dim.
        self.padding = self.per_dim(padding)
        self.stride = self.per_dim(stride)
        self.dilation = self.per_dim(dilation)
        self.upscale = self.per_dim(upscale)

    def per_dim(self, v):
        return tuple(v) if isinstance(v, (tuple, list)) else (v,) * self.dims

    def tool_args(self):
        def fmt(v):
            return ",".join(map(str, v))
        return ["--padding=" + fmt(self.padding), "--stride=" + fmt(self.stride),
                "--dilation=" + fmt(self.dilation), "--upscale=" + fmt(self.upscale)]

    def output_spatial(self):
        return tuple((d * u + 2 * p - dl * (kk - 1) - 1) // s + 1
                     for d, u, p, dl, kk, s in zip(self.spatial, self.upscale, self.padding,
                                                    self.dilation, self.kernel, self.stride))

    def __str__(self):
        return ("%dd input %s kernel %s C=%d K=%d N=%d padding %s stride %s dilation %s "
                "upscale %s" % (self.dims, self.spatial, self.kernel, self.c, self.k, self.n,
                                self.padding, self.stride, self.dilation, self.upscale))

    def conv(self, i, f):
        """torch's convolution of torch-layout tensors, the input upsampled first."""
        for d, u in enumerate(self.upscale):
            if u > 1:
                i = i.repeat_interleave(u, dim=2 + d)
        return CONV[self.dims](i, f, stride=self.stride, padding=self.padding,
                               dilation=self.dilation)

    def reference(self, direction, i, f, e):
        """The direction's result in the seed layout, float64, from seed-layout operands."""
        ti = torch.tensor(from_seed(i), dtype=torch.float64, requires_grad=True)
        tfl = torch.tensor(from_seed(f), dtype=torch.float64, requires_grad=True)
        out = self.conv(ti, tfl)
        if direction == "fprop":
            return to_seed(out.detach().numpy())
        te = torch.tensor(from_seed(e), dtype=torch.float64)
        wrt = ti if direction == "bprop" else tfl
        (grad,) = torch.autograd.grad((out * te).sum(), wrt)
        return to_seed(grad.numpy())


# Each geometry runs in all three directions. Together they cover 1/2/3-d, kernels 1/3/5,
# padding 0/1/2, stride 1/2, dilation 1/2, upscale 1/2, per-dim lists and odd sizes where a
# stride leaves input rows unused (bprop must give them zero gradient).
GEOMETRIES = [
    Geometry((9,), (3,), c=3, k=5, n=2, padding=1, stride=1, dilation=1, upscale=1),
    Geometry((11,), (5,), c=2, k=3, n=2, padding=2, stride=2, dilation=1, upscale=1),
    Geometry((7,), (3,), c=3, k=2, n=3, padding=0, stride=1, dilation=2, upscale=2),
    Geometry((6,), (1,), c=5, k=3, n=2, padding=0, stride=2, dilation=1, upscale=2),
    Geometry((10,), (3,), c=2, k=5, n=1, padding=2, stride=2, dilation=2, upscale=1),
    Geometry((6, 7), (3, 3), c=3, k=5, n=2, padding=1, stride=1, dilation=1, upscale=1),
    Geometry((8, 9), (5, 5), c=2, k=3, n=2, padding=2, stride=2, dilation=1, upscale=1),
    Geometry((5, 6), (3, 3), c=3, k=2, n=2, padding=1, stride=1, dilation=2, upscale=2),
    Geometry((7, 5), (1, 1), c=5, k=3, n=2, padding=0, stride=2, dilation=1, upscale=1),
    Geometry((4, 5), (3, 5), c=2, k=3, n=3, padding=(1, 2), stride=(2, 1), dilation=(1, 2),
             upscale=(2, 1)),
    Geometry((9, 8), (3, 1), c=3, k=2, n=2, padding=(2, 0), stride=(1, 2), dilation=(2, 1),
             upscale=1),
    Geometry((4, 5, 6), (3, 3, 3), c=2, k=3, n=2, padding=1, stride=1, dilation=1, upscale=1),
    Geometry((5, 5, 5), (3, 3, 3), c=3, k=2, n=2, padding=(0, 1, 2), stride=2, dilation=1,
             upscale=1),
    Geometry((3, 4, 4), (1, 3, 5), c=2, k=5, n=2, padding=(0, 1, 2), stride=(1, 2, 1),
             dilation=(1, 2, 1), upscale=(2, 1, 2)),
    Geometry((4, 3, 5), (3, 1, 3), c=3, k=3, n=2, padding=(1, 0, 2), stride=(2, 1, 1),
             dilation=(2, 1, 2), upscale=(1, 2, 1)),
]

# One exactness case per direction: (geometry, iwl of I, F, E). Stride and upscale are in, so
# the flex16 paths see the same index arithmetic as the f32 ones.
FLEX16_CASES = [
    (Geometry((6, 7), (3, 3), c=3, k=5, n=2, padding=1, stride=2, dilation=1, upscale=2),
     (2, 0, 1)),
    (Geometry((9,), (5,), c=3, k=2, n=2, padding=2, stride=2, dilation=2, upscale=1),
     (-3, 4, 0)),
    (Geometry((3, 4, 5), (3, 3, 1), c=2, k=3, n=2, padding=(1, 0, 0), stride=1, dilation=1,
              upscale=(1, 2, 2)), (1, -2, 3)),
]


class Case:
    def __init__(self, index, direction, geometry, flex16_iwls=None, rng=None):
        self.direction = direction
        self.geometry = geometry
        self.flex16 = flex16_iwls is not None
        self.dir = os.path.join(WORK, "case%03d_%s" % (index, direction))
        os.makedirs(self.dir)
        g = geometry
        shapes = {"I": (g.c,) + g.spatial + (g.n,), "F": (g.c,) + g.kernel + (g.k,),
                  "E": (g.k,) + g.output_spatial() + (g.n,)}
        self.values = {}
        self.iwl = {}
        for idx, (name, shape) in enumerate(shapes.items()):
            if self.flex16:
                # Random mantissas over the full range: value = m * 2^(iwl - 15) exactly.
                iwl = flex16_iwls[idx]
                m = rng.integers(-32767, 32768, size=shape, dtype=np.int16)
                np.save(self.path(name), m)
                with open(self.path(name) + ".iwl", "w") as fh:
                    fh.write("%d\n" % iwl)
                self.values[name] = m.astype(np.float64) * 2.0 ** (iwl - 15)
            else:
                x = rng.standard_normal(shape).astype(np.float32)
                np.save(self.path(name), x)
                self.values[name] = x.astype(np.float64)
        v = self.values
        self.expected = g.reference(direction, v["I"], v["F"], v["E"])
        self.args = [TOOL, direction, self.dir] + DEVICE_ARGS + g.tool_args()
        if self.flex16:
            # Every mantissa product is exact in float64 and the sums stay far below 2^53, so
            # torch's result is the exact one in any summation order. One more bit of iwl than
            # the largest value needs keeps the rounded result clear of saturation.
            peak = float(np.max(np.abs(self.expected)))
            self.out_iwl = (int(np.floor(np.log2(peak))) + 2) if peak > 0 else 0
            self.args.append("--out-iwl=%d" % self.out_iwl)
        else:
            a = {name: np.abs(x) for name, x in v.items()}
            self.magnitude = g.reference(direction, a["I"], a["F"], a["E"])
        self.result = None

    def path(self, name):
        return os.path.join(self.dir, name + ".npy")

    def label(self):
        return "%s%s %s" % (self.direction, " flex16" if self.flex16 else "", self.geometry)

    def run(self):
        p = subprocess.run(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.result = (p.returncode, p.stderr.strip())

    def check(self):
        rc, err = self.result
        if rc != 0:
            raise Mismatch("the tool failed (exit %d): %s" % (rc, err))
        out_name = {"fprop": "O", "bprop": "gradI", "update": "gradF"}[self.direction]
        out = np.load(self.path(out_name))
        if out.shape != self.expected.shape:
            raise Mismatch("shape %s, torch gives %s" % (out.shape, self.expected.shape))
        if self.flex16:
            self.check_flex16(out, out_name)
        else:
            self.check_f32(out)

    def check_f32(self, out):
        if out.dtype != np.float32:
            raise Mismatch("dtype %s, expected float32" % out.dtype)
        err = np.abs(out.astype(np.float64) - self.expected)
        tol = F32_RTOL * self.magnitude + 1e-30
        bad = np.argwhere(err > tol)
        if bad.size:
            at = tuple(bad[0])
            raise Mismatch("%d of %d elements off; first at %s: flexkit %r, torch %r, "
                           "tolerance %.3g" % (len(bad), out.size, at, float(out[at]),
                                               float(self.expected[at]), float(tol[at])))

    def check_flex16(self, out, out_name):
        if out.dtype != np.int16:
            raise Mismatch("dtype %s, expected int16 flex16 mantissas" % out.dtype)
        with open(self.path(out_name) + ".iwl") as fh:
            iwl = int(fh.read().strip())
        if iwl != self.out_iwl:
            raise Mismatch("output iwl %d, --out-iwl asked for %d" % (iwl, self.out_iwl))
        # Scaling by a power of two is exact, and np.rint rounds half to even.
        want = np.rint(self.expected * 2.0 ** (15 - iwl))
        if np.max(np.abs(want)) > 32767:
            raise Mismatch("test bug: the chosen iwl %d saturates" % iwl)
        bad = np.argwhere(out.astype(np.float64) != want)
        if bad.size:
            at = tuple(bad[0])
            raise Mismatch("%d of %d mantissas differ; first at %s: flexkit %d, torch %d "
                           "(exact value %r, iwl %d)" % (len(bad), out.size, at, int(out[at]),
                                                         int(want[at]), float(self.expected[at]),
                                                         iwl))


def main():
    global TOOL, DEVICE_ARGS, WORK
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    TOOL = os.path.abspath(sys.argv[1])
    seed = 20240612
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
    WORK = tempfile.mkdtemp(prefix="flexkit_conv_torch_")
    try:
        cases = []
        for g in GEOMETRIES:
            for direction in ("fprop", "bprop", "update"):
                cases.append(Case(len(cases), direction, g, rng=rng))
        for direction, (g, iwls) in zip(("fprop", "bprop", "update"), FLEX16_CASES):
            cases.append(Case(len(cases), direction, g, flex16_iwls=iwls, rng=rng))
        # Each case is a process; run them side by side, check them in order.
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            list(pool.map(Case.run, cases))
        for case in cases:
            try:
                case.check()
            except Mismatch as e:
                print("MISMATCH [%s]\n  command: %s\n  %s" % (
                    case.label(), " ".join(case.args), e), file=sys.stderr)
                return 1
        print("conv_torch: %d cases agree with torch %s (%d geometries x fprop/bprop/update "
              "in f32, 3 flex16 exact)%s" % (len(cases), torch.__version__, len(GEOMETRIES),
                                             " on " + DEVICE_ARGS[0][9:] if DEVICE_ARGS else ""))
        return 0
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
