"""flexkit: fused, generated kernels for training neural networks, spiking ones included, in
float32 and flex16 (16-bit mantissas with one shared exponent per tensor), on CUDA and the CPU.

    import flexkit as fk
    a = fk.array(numpy_array)            # the same memory, no copy
    out = fk.empty(a.shape)
    out[...] = fk.sig(a * 2 + 1)         # one fused kernel
    lif = fk.Neuron.builtin("lif", tau=2.0)
    f = lif.forward("training_forward", x)

Submodules: flexkit.conv (convolutions), flexkit.cuda (the runtime), flexkit.nn (the trainer),
flexkit.torch (neurons as torch.nn.Module, imported on first use).
"""

from __future__ import annotations

import importlib as _importlib

from . import _flexkit
from ._flexkit import (  # noqa: F401  (the public names)
    Array,
    CompileError,
    CudaError,
    DeviceError,
    DTypeError,
    Expr,
    FormatError,
    IoError,
    Neuron,
    NeuronError,
    NeuronForward,
    NeuronGradients,
    NeuronResiduals,
    NeuronStorage,
    OutOfMemoryError,
    ShapeError,
    TrainingDiverged,
    UnsupportedError,
    abs,
    arange,
    argmax,
    argmin,
    assign,
    ceil,
    clip,
    conv,
    cuda,
    dot,
    dot_kernel_name,
    empty,
    equal,
    evaluate,
    exp,
    exp2,
    floor,
    from_dlpack,
    full,
    greater,
    greater_equal,
    less,
    less_equal,
    load_npy,
    log,
    log2,
    max,
    maximum,
    mean,
    min,
    minimum,
    negative,
    not_equal,
    ones,
    pow,
    power,
    reciprocal,
    save_npy,
    sig,
    sig2,
    sign,
    sqrt,
    square,
    sum,
    tanh,
    tanh2,
    where,
    zeros,
)
from ._convert import array  # noqa: F401

__version__ = _flexkit.__version__


def train(config: dict | None = None, **options) -> dict:
    """Trains as `flexkit train` does; see flexkit.nn.train."""
    from . import nn

    return nn.train(config, **options)


def __getattr__(name: str):
    # flexkit.torch and flexkit.nn load on first use, so that importing flexkit needs no torch.
    if name in ("torch", "nn"):
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'flexkit' has no attribute '{name}'")
