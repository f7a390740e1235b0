"""flexkit neurons as PyTorch modules.

``fk.torch.Neuron(neuron)`` is a ``torch.nn.Module`` whose forward runs flexkit's fused
multi-step kernel over a [T, *shape] tensor (CPU or CUDA, float32 or bfloat16) without copying
it, on torch's current CUDA stream, and whose backward is flexkit's backward kernel through a
``torch.autograd.Function``. It keeps its states between calls (continuing the sequence, with
gradients flowing into the earlier call) until ``reset()``, as SpikingJelly's multi-step nodes
do, so it drops in where ``LIFNode(step_mode='m')`` or ``FlexSN`` is used:

    import flexkit as fk
    net = torch.nn.Sequential(torch.nn.Linear(784, 100), fk.torch.LIFNode(tau=2.0))
    y = net(x_seq)          # x_seq: [T, N, 784]
    ...
    net[1].reset()          # before the next sample

Learnable neuron parameters (PLIF's ``w``) are ``nn.Parameter``s. Tensors may have any strides
(they are viewed as they are); gradients that arrive non-contiguous are made contiguous first.
"""

from __future__ import annotations

import math

import torch as _torch

from . import _flexkit

__all__ = ["Neuron", "LIFNode", "IFNode", "ParametricLIFNode"]

_DTYPES = {_torch.float32: "f32", _torch.bfloat16: "bf16"}
# SpikingJelly's surrogate classes by flexkit's names for them.
_SURROGATES = {
    "Sigmoid": "sigmoid",
    "ATan": "atan",
    "PiecewiseQuadratic": "piecewise_quadratic",
    "PiecewiseExp": "piecewise_exp",
    "SoftSign": "soft_sign",
    "SuperSpike": "super_spike",
    "Erf": "erf",
}


def _surrogate_text(surrogate) -> str:
    """'atan(2)' as it is; a SpikingJelly surrogate object (e.g. surrogate.ATan(alpha=2.)) by
    its class and alpha."""
    if isinstance(surrogate, str):
        return surrogate
    name = _SURROGATES.get(type(surrogate).__name__)
    alpha = getattr(surrogate, "alpha", None)
    if name is None or alpha is None:
        raise ValueError(f"surrogate: {surrogate!r} is neither a name such as 'atan(2)' nor a "
                         f"SpikingJelly surrogate flexkit knows ({', '.join(_SURROGATES)})")
    return f"{name}({float(alpha)!r})"


# The per-call conversions go through torch's C entry points for DLPack capsules: the public
# torch.from_dlpack / Tensor.__dlpack__ negotiate streams in Python (tens of microseconds a
# tensor), which this module need not do, since it runs flexkit's kernels on torch's current
# stream.
_to_capsule = getattr(_torch._C, "_to_dlpack", None)
_from_capsule = getattr(_torch._C, "_from_dlpack", None)
_raw_stream = getattr(_torch._C, "_cuda_getCurrentRawStream", None)


def _view(t: _torch.Tensor) -> _flexkit.Array:
    t = t.detach()
    return _flexkit._import_dlpack(_to_capsule(t) if _to_capsule else t, True)


def _tensor(a: _flexkit.Array) -> _torch.Tensor:
    if _from_capsule is None:
        return _torch.from_dlpack(a)
    return _from_capsule(a.__dlpack__(stream=-1))  # same stream: no ordering needed


def _current_stream(x: _torch.Tensor):
    if not x.is_cuda:
        return None
    if _raw_stream is not None:
        return _raw_stream(x.get_device())
    return _torch.cuda.current_stream(x.device).cuda_stream


def _capsule(t: _torch.Tensor):
    t = t.detach()
    return _to_capsule(t) if _to_capsule else t


class _MultiStep(_torch.autograd.Function):
    """Inputs, then the carried states, then the learnable parameters; outputs, then the final
    states."""

    @staticmethod
    def forward(ctx, module, state_names, *tensors):
        neuron = module.neuron
        n_in = module._n_inputs
        n_states = len(state_names)
        x = tensors[0]
        stream = _current_stream(x)
        kind = "training_forward" if any(ctx.needs_input_grad) else "inference_final_state"
        capsules = [_capsule(t) for t in tensors]
        outputs, finals, residuals = neuron._forward_lists(
            kind, capsules[:n_in], list(state_names), capsules[n_in:n_in + n_states],
            module._param_names, capsules[n_in + n_states:], module._storage(x.dtype), stream)
        ctx.residuals = residuals
        ctx.module = module
        ctx.stream = stream
        ctx.state_names = state_names
        return (*[_tensor(a) for a in outputs], *[_tensor(a) for a in finals])

    @staticmethod
    def backward(ctx, *grads):
        module = ctx.module
        if ctx.residuals is None:
            raise RuntimeError("flexkit.torch: this call's residuals were already used by a "
                               "backward (a second backward through the same call needs the "
                               "forward again)")
        n_out = module._n_outputs
        grad_outputs = [None if g is None else _capsule(g.contiguous()) for g in grads[:n_out]]
        grad_finals = [None if g is None else _capsule(g.contiguous()) for g in grads[n_out:]]
        inputs, states, params = module.neuron._backward_lists(
            ctx.residuals, grad_outputs, grad_finals, list(ctx.state_names), module._param_names,
            ctx.stream)
        ctx.residuals = None  # a second backward through the same call is an error
        grad_inputs = [_tensor(a) if ctx.needs_input_grad[2 + i] else None
                       for i, a in enumerate(inputs)]
        grad_states = [None if a is None else _tensor(a) for a in states]
        grad_params = [None if a is None else _tensor(a) for a in params]
        return (None, None, *grad_inputs, *grad_states, *grad_params)


class Neuron(_torch.nn.Module):
    """A flexkit neuron (flexkit.Neuron, or a built-in's name) as a stateful multi-step module.

    forward(x) takes x of [T, *shape] (step_mode='m') or [*shape] (step_mode='s'), float32 or
    bfloat16, on the CPU or a CUDA device, and returns the spikes (the neuron's outputs: a tuple
    when it has several) in x's dtype. Neurons with several inputs take them positionally in
    the neuron's input order. The states (``.states``, e.g. ``.v``) carry over to the next call
    until ``reset()``; ``detach()`` keeps their values but cuts the graph. residual_dtype
    ('f32', 'bf16' or 'flex16') is what the training forward keeps for backward.
    """

    def __init__(self, neuron, step_mode: str = "m", residual_dtype: str = "f32", **settings):
        super().__init__()
        if isinstance(neuron, str):
            neuron = _flexkit.Neuron.builtin(neuron, **settings)
        elif settings:
            neuron = neuron.with_settings(**settings)
        if not isinstance(neuron, _flexkit.Neuron):
            raise TypeError("flexkit.torch.Neuron: a flexkit.Neuron or a built-in neuron's name")
        if step_mode not in ("m", "s"):
            raise ValueError(f"step_mode: 'm' (multi-step) or 's' (single step), not {step_mode!r}")
        self.neuron = neuron
        self.step_mode = step_mode
        self.residual_dtype = residual_dtype
        self._param_names = []
        for info in neuron.params:
            if info["learnable"] and not info["per_neuron"]:
                self._param_names.append(info["name"])
                self.register_parameter(
                    info["name"], _torch.nn.Parameter(_torch.tensor(float(info["value"]))))
        self._n_inputs = len(neuron.inputs)
        self._n_outputs = len(neuron.outputs)
        self._storages = {}
        self._checked = None  # the input signature last checked
        self.states: dict[str, _torch.Tensor] = {}

    def _storage(self, dtype):
        storage = self._storages.get(dtype)
        if storage is None:
            name = _DTYPES[dtype]
            storage = _flexkit.NeuronStorage(sequence_dtype=name, spike_dtype=name,
                                             residual_dtype=self.residual_dtype)
            self._storages[dtype] = storage
        return storage

    def __getstate__(self):
        # The cached storage descriptions are rebuilt on first use (they do not pickle).
        state = dict(self.__dict__)
        state["_storages"] = {}
        state["_checked"] = None
        return state

    def reset(self) -> None:
        """States back to their initial values (the next call starts a new sequence)."""
        self.__dict__["states"] = {}

    def detach(self) -> None:
        """Keeps the states' values but cuts their graph (truncated BPTT)."""
        self.__dict__["states"] = {k: v.detach() for k, v in self.states.items()}

    def __getattr__(self, name):
        # SpikingJelly style: node.v is the state v (its initial value before the first call).
        states = self.__dict__.get("states")
        if states is not None and "neuron" in self.__dict__ and name in self.__dict__["neuron"].states:
            return states.get(name, self.__dict__["neuron"].initial_state_value(name))
        return super().__getattr__(name)

    def extra_repr(self) -> str:
        return f"neuron={self.neuron.name}, step_mode={self.step_mode}"

    def forward(self, *inputs):
        neuron = self.neuron
        if len(inputs) != self._n_inputs:
            raise TypeError(f"neuron {neuron.name} takes {self._n_inputs} input(s) "
                            f"({', '.join(neuron.inputs)}), got {len(inputs)}")
        if self.step_mode == "s":
            inputs = tuple(x.unsqueeze(0) for x in inputs)
        x = inputs[0]
        params = [getattr(self, name) for name in self._param_names]
        states = self.states
        # The checks run once per signature (shapes, dtypes, devices, carried states), not on
        # every call of a training loop.
        signature = (tuple((type(t), getattr(t, "shape", None), getattr(t, "dtype", None),
                            getattr(t, "device", None), getattr(t, "layout", None))
                           for t in inputs),
                     tuple((k, v.shape, v.device) for k, v in states.items()),
                     tuple(p.device for p in params))
        if signature != self._checked:
            self._check(inputs, states, params)
            self._checked = signature
        state_names = tuple(states)
        results = _MultiStep.apply(self, state_names, *inputs, *states.values(), *params)
        n_out = self._n_outputs
        self.__dict__["states"] = dict(zip(neuron.states, results[n_out:]))
        outputs = results[:n_out]
        if self.step_mode == "s":
            outputs = tuple(o.squeeze(0) for o in outputs)
        return outputs[0] if n_out == 1 else outputs

    def _check(self, inputs, states, params):
        neuron = self.neuron
        x = inputs[0]
        for name, t in zip(neuron.inputs, inputs):
            if not isinstance(t, _torch.Tensor):
                raise TypeError(f"input {name}: a torch.Tensor, not {type(t).__name__}")
            if t.dtype not in _DTYPES:
                raise TypeError(f"input {name}: dtype {t.dtype}; flexkit neurons take "
                                "torch.float32 or torch.bfloat16")
            if t.device.type not in ("cpu", "cuda"):
                raise ValueError(f"input {name}: device {t.device}; flexkit runs on the cpu and "
                                 "CUDA devices")
            if t.layout != _torch.strided:
                raise TypeError(f"input {name}: a strided (dense) tensor, not {t.layout}")
            if t.shape != x.shape or t.device != x.device:
                raise ValueError(f"input {name}: {tuple(t.shape)} on {t.device}, but "
                                 f"{neuron.inputs[0]} is {tuple(x.shape)} on {x.device}")
            if t.dim() < 1:
                raise ValueError(f"input {name}: a [T, *shape] sequence, got a 0-d tensor")
        shape = tuple(x.shape[1:])
        for name, v in states.items():
            if tuple(v.shape) != shape or v.device != x.device:
                raise ValueError(
                    f"state {name} is {tuple(v.shape)} on {v.device} from the previous call, but "
                    f"this input is [T, {', '.join(map(str, shape))}] on {x.device}; call reset() "
                    "between sequences of different shapes or devices")
        for name, p in zip(self._param_names, params):
            if p.device != x.device:
                raise ValueError(f"parameter {name} is on {p.device} but the input on {x.device}; "
                                 "move the module with .to(device)")


class IFNode(Neuron):
    """SpikingJelly's IFNode: v_reset=None is the soft reset."""

    def __init__(self, v_threshold: float = 1.0, v_reset: float | None = 0.0, surrogate="sigmoid(4)",
                 detach_reset: bool = False, step_mode: str = "m", surrogate_function=None,
                 **kwargs):
        super().__init__("if", step_mode=step_mode, v_threshold=v_threshold, v_reset=v_reset,
                         detach_reset=detach_reset,
                         surrogate=_surrogate_text(surrogate_function or surrogate), **kwargs)


class LIFNode(Neuron):
    """SpikingJelly's LIFNode (tau, decay_input, v_threshold, v_reset=None for the soft reset,
    detach_reset, surrogate)."""

    def __init__(self, tau: float = 2.0, decay_input: bool = True, v_threshold: float = 1.0,
                 v_reset: float | None = 0.0, surrogate="sigmoid(4)", detach_reset: bool = False,
                 step_mode: str = "m", surrogate_function=None, **kwargs):
        super().__init__("lif", step_mode=step_mode, tau=tau, decay_input=decay_input,
                         v_threshold=v_threshold, v_reset=v_reset, detach_reset=detach_reset,
                         surrogate=_surrogate_text(surrogate_function or surrogate), **kwargs)


class ParametricLIFNode(Neuron):
    """SpikingJelly's ParametricLIFNode: 1/tau = sigmoid(w) with w learnable, starting at
    -log(init_tau - 1)."""

    def __init__(self, init_tau: float = 2.0, decay_input: bool = True, v_threshold: float = 1.0,
                 v_reset: float | None = 0.0, surrogate="sigmoid(4)", detach_reset: bool = False,
                 step_mode: str = "m", surrogate_function=None, **kwargs):
        if not init_tau > 1.0:
            raise ValueError(f"init_tau must be > 1 (got {init_tau})")
        super().__init__("plif", step_mode=step_mode, decay_input=decay_input,
                         v_threshold=v_threshold, v_reset=v_reset, detach_reset=detach_reset,
                         surrogate=_surrogate_text(surrogate_function or surrogate), **kwargs)
        with _torch.no_grad():
            self.w.fill_(-math.log(init_tau - 1.0))
