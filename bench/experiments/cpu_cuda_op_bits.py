#!/usr/bin/env python3
"""Which elementwise operations give other bits on the CPU backend than in the CUDA kernels:
each op over 4 Mi random float32 inputs on both, the count of differing results and the largest
difference in units in the last place. (A flex16 training run is bit-identical across the two
only if every operation it uses is.) Run on a GPU machine with the package on PYTHONPATH:

    PYTHONPATH=build-gpu/python python3 bench/experiments/cpu_cuda_op_bits.py
"""
import numpy as np, flexkit as fk
rng = np.random.default_rng(0)
n = 1 << 22
x = (rng.standard_normal(n) * 4).astype(np.float32)
p = np.abs(x) + 1e-3
y = (rng.standard_normal(n) * 3).astype(np.float32)
ops = {"x*y": lambda a, b, c: a * b, "x/y": lambda a, b, c: a / b, "sqrt(p)": lambda a, b, c: fk.sqrt(c),
       "exp(x)": lambda a, b, c: fk.exp(a), "log(p)": lambda a, b, c: fk.log(c), "sig(x)": lambda a, b, c: fk.sig(a),
       "tanh(x)": lambda a, b, c: fk.tanh(a), "exp2(x)": lambda a, b, c: fk.exp2(a), "log2(p)": lambda a, b, c: fk.log2(c),
       "pow(p,y)": lambda a, b, c: fk.pow(c, b), "x*y+p": lambda a, b, c: a * b + c}
print("| op | results that differ | max ulps |")
print("|---|---|---|")
for name, f in ops.items():
    r = {}
    for d in ("cpu", "cuda"):
        a, b, c = (fk.array(v, device=d) for v in (x, y, p))
        r[d] = fk.evaluate(f(a, b, c)).numpy()
    diff = np.count_nonzero(r["cpu"].view(np.int32) != r["cuda"].view(np.int32))
    ulps = np.abs(r["cpu"].view(np.int32).astype(np.int64) - r["cuda"].view(np.int32).astype(np.int64)).max()
    print(f"| {name} | {diff} of {n} | {ulps} |")
