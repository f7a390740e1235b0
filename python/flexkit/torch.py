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


def _view(t: _torch.Tensor) -> _flexkit.Array:
    return _flexkit._import_dlpack(t.detach(), True)


def _tensor(a: _flexkit.Array) -> _torch.Tensor:
    return _torch.from_dlpack(a)


class _MultiStep(_torch.autograd.Function):
    """Inputs, then the carried states, then the learnable parameters; outputs, then the final
    states."""

    @staticmethod
    def forward(ctx, module, state_names, *tensors):
        neuron = module.neuron
        n_in = len(neuron.inputs)
        n_states = len(state_names)
        inputs = {name: _view(t) for name, t in zip(neuron.inputs, tensors[:n_in])}
        states = {name: _view(t) for name, t in zip(state_names, tensors[n_in:n_in + n_states])}
        params = {name: _view(t) for name, t in zip(module._param_names, tensors[n_in + n_states:])}
        x = tensors[0]
        stream = _torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else None
        training = any(ctx.needs_input_grad)
        kind = "training_forward" if training else "inference_final_state"
        dtype = _DTYPES[x.dtype]
        storage = {"sequence_dtype": dtype, "spike_dtype": dtype,
                   "residual_dtype": module.residual_dtype}
        result = neuron.forward(kind, inputs, states, params, storage, stream=stream)
        ctx.residuals = result.residuals
        ctx.neuron = neuron
        ctx.stream = stream
        ctx.state_names = state_names
        ctx.n_in, ctx.n_states = n_in, n_states
        ctx.param_names = module._param_names
        outputs = [_tensor(result.outputs[name]) for name in neuron.outputs]
        finals = [_tensor(result.final_states[name]) for name in neuron.states]
        return (*outputs, *finals)

    @staticmethod
    def backward(ctx, *grads):
        neuron = ctx.neuron
        if ctx.residuals is None:
            raise RuntimeError("flexkit.torch: this call's residuals were already used by a "
                               "backward (a second backward through the same call needs the "
                               "forward again)")
        n_out = len(neuron.outputs)
        grad_outputs = {name: _view(g.contiguous()) for name, g in zip(neuron.outputs, grads[:n_out])
                        if g is not None}
        grad_finals = {name: _view(g.contiguous()) for name, g in zip(neuron.states, grads[n_out:])
                       if g is not None}
        g = neuron.backward(ctx.residuals, grad_outputs, None, grad_finals, stream=ctx.stream)
        ctx.residuals = None  # a second backward through the same call is an error
        grad_inputs = [_tensor(g.inputs[name]) if ctx.needs_input_grad[2 + i] else None
                       for i, name in enumerate(neuron.inputs)]
        grad_states = [_tensor(g.initial_states[name]) if name in g.initial_states else None
                       for name in ctx.state_names]
        grad_params = [_tensor(g.params[name]) if name in g.params else None
                       for name in ctx.param_names]
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
        self.states: dict[str, _torch.Tensor] = {}

    def reset(self) -> None:
        """States back to their initial values (the next call starts a new sequence)."""
        self.states = {}

    def detach(self) -> None:
        """Keeps the states' values but cuts their graph (truncated BPTT)."""
        self.states = {k: v.detach() for k, v in self.states.items()}

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
        if len(inputs) != len(neuron.inputs):
            raise TypeError(f"neuron {neuron.name} takes {len(neuron.inputs)} input(s) "
                            f"({', '.join(neuron.inputs)}), got {len(inputs)}")
        if self.step_mode == "s":
            inputs = tuple(x.unsqueeze(0) for x in inputs)
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
            if t.shape != x.shape or t.device != x.device:
                raise ValueError(f"input {name}: {tuple(t.shape)} on {t.device}, but "
                                 f"{neuron.inputs[0]} is {tuple(x.shape)} on {x.device}")
            if t.dim() < 1:
                raise ValueError(f"input {name}: a [T, *shape] sequence, got a 0-d tensor")
        shape = tuple(x.shape[1:])
        for name, v in self.states.items():
            if tuple(v.shape) != shape or v.device != x.device:
                raise ValueError(
                    f"state {name} is {tuple(v.shape)} on {v.device} from the previous call, but "
                    f"this input is [T, {', '.join(map(str, shape))}] on {x.device}; call reset() "
                    "between sequences of different shapes or devices")
        params = [getattr(self, name) for name in self._param_names]
        for name, p in zip(self._param_names, params):
            if p.device != x.device:
                raise ValueError(f"parameter {name} is on {p.device} but the input on {x.device}; "
                                 "move the module with .to(device)")
        state_names = tuple(self.states)
        carried = [self.states[name] for name in state_names]
        results = _MultiStep.apply(self, state_names, *inputs, *carried, *params)
        n_out = len(neuron.outputs)
        self.states = dict(zip(neuron.states, results[n_out:]))
        outputs = results[:n_out]
        if self.step_mode == "s":
            outputs = tuple(o.squeeze(0) for o in outputs)
        return outputs[0] if n_out == 1 else outputs


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
