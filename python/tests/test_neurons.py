"""flexkit.Neuron against a float64 NumPy reference: every built-in neuron's forward (spikes,
state sequences, final states) and its backward through time (input, initial-state and
learnable-parameter gradients), written here from the neurons' equations (SpikingJelly's) with a
hand-derived reverse-mode step, plus the forward kinds, the time_axis layout, storage options
and the errors a caller meets."""

import math

import numpy as np
import pytest

import flexkit as fk

T = 6
SHAPE = (3, 7)
SPIKE_MARGIN = 1e-3  # reference |h - threshold| kept above this: float32 cannot flip a spike
RTOL, ATOL = 1e-4, 1e-5


# ---------------------------------------------------------------------------------------------
# Surrogate derivatives (SpikingJelly's formulas), float64.

def _sigmoid(u):
    return 1.0 / (1.0 + np.exp(-u))


def _surrogate_grad(name, alpha, z):
    az = np.abs(z)
    if name == "sigmoid":
        s = _sigmoid(alpha * z)
        return alpha * s * (1.0 - s)
    if name == "atan":
        return alpha / 2.0 / (1.0 + (math.pi / 2.0 * alpha * z) ** 2)
    if name == "piecewise_quadratic":
        return np.where(az > 1.0 / alpha, 0.0, alpha - alpha * alpha * az)
    if name == "piecewise_exp":
        return alpha / 2.0 * np.exp(-alpha * az)
    if name == "soft_sign":
        return 1.0 / (2.0 * alpha * (1.0 / alpha + az) ** 2)
    if name == "super_spike":
        return alpha / (az + 1.0) ** 2
    if name == "erf":
        return alpha / math.sqrt(math.pi) * np.exp(-(alpha * z) ** 2)
    raise AssertionError(name)


_DEFAULT_ALPHA = {"sigmoid": 4.0, "atan": 2.0, "piecewise_quadratic": 1.0, "piecewise_exp": 1.0,
                  "soft_sign": 2.0, "super_spike": 1.0, "erf": 2.0}


def _parse_surrogate(text):
    if "(" in text:
        name, alpha = text[:-1].split("(")
        return name, float(alpha)
    return text, _DEFAULT_ALPHA[text]


# ---------------------------------------------------------------------------------------------
# Reference neurons: step() is one forward step, step_back() its vector-Jacobian product.

class _Ref:
    """Settings by SpikingJelly's names into parameter values; the shared reset and spike."""

    DEFAULTS = {}
    STATES = ("v",)
    HAS_DECAY_INPUT = False

    def __init__(self, **settings):
        settings = dict(settings)
        self.surrogate = _parse_surrogate(settings.pop("surrogate", "sigmoid(4)"))
        self.detach = bool(settings.pop("detach_reset", False))
        self.soft = "v_reset" in settings and settings["v_reset"] is None
        if self.soft:
            del settings["v_reset"]
        if self.HAS_DECAY_INPUT:
            self.decay_input = bool(settings.pop("decay_input", True))
        self.p = dict(self.DEFAULTS)
        self._take(settings)
        unknown = set(settings) - set(self.p)
        assert not unknown, unknown
        self.p.update(settings)

    def _take(self, settings):
        pass

    def initial(self, state):
        return 0.0 if self.soft else self.p["v_reset"]

    def params(self):
        """What Neuron.params should report for these settings."""
        values = dict(self.p)
        values["soft_reset"] = float(self.soft)
        values["detach_reset"] = float(self.detach)
        if self.HAS_DECAY_INPUT:
            values["decay_input"] = float(self.decay_input)
        return values

    def learnable(self):
        return {}

    def param_grads(self, partials):
        return {}

    def sg(self, z):
        return _surrogate_grad(*self.surrogate, z)

    def reset(self, h, s, theta):
        if self.soft:
            return h - s * theta
        return s * self.p["v_reset"] + (1.0 - s) * h

    def reset_back(self, gv, h, s, theta):
        """(dh, ds, dtheta) of the reset, given dL/dv_new."""
        if self.soft:
            ds = np.zeros_like(gv) if self.detach else -gv * theta
            return gv, ds, -gv * s
        ds = np.zeros_like(gv) if self.detach else gv * (self.p["v_reset"] - h)
        return gv * (1.0 - s), ds, np.zeros_like(gv)

    # One-state neurons: charge() gives h and its partials; the rest is shared.
    def step(self, x, st):
        v = st["v"]
        h, dh_dv, dh_dx, dh_dk = self.charge(v, x)
        z = h - self.p["v_threshold"]
        s = (z >= 0).astype(np.float64)
        v_new = self.reset(h, s, self.p["v_threshold"])
        return s, {"v": v_new}, dict(h=h, z=z, s=s, dh_dv=dh_dv, dh_dx=dh_dx, dh_dk=dh_dk)

    def step_back(self, c, gs, gnew):
        dh, ds, _ = self.reset_back(gnew["v"], c["h"], c["s"], self.p["v_threshold"])
        ds = ds + gs
        dh = dh + ds * self.sg(c["z"])
        grads = {}
        if c["dh_dk"] is not None:
            grads["k"] = dh * c["dh_dk"]
        return dh * c["dh_dx"], {"v": dh * c["dh_dv"]}, grads


class RefIF(_Ref):
    DEFAULTS = {"v_threshold": 1.0, "v_reset": 0.0}

    def charge(self, v, x):
        return v + x, np.ones_like(v), np.ones_like(v), None


class RefLIF(_Ref):
    DEFAULTS = {"tau": 2.0, "v_threshold": 1.0, "v_reset": 0.0}
    HAS_DECAY_INPUT = True

    def _k(self):
        return 1.0 / self.p["tau"]

    def charge(self, v, x):
        k = self._k()
        vr = 0.0 if self.soft else self.p["v_reset"]
        if self.decay_input:
            h = v + (x - (v - vr)) * k
            return h, np.full_like(v, 1.0 - k), np.full_like(v, k), x - (v - vr)
        h = v - (v - vr) * k + x
        return h, np.full_like(v, 1.0 - k), np.ones_like(v), -(v - vr)


class RefPLIF(RefLIF):
    DEFAULTS = {"w": 0.0, "v_threshold": 1.0, "v_reset": 0.0}

    def _take(self, settings):
        if "init_tau" in settings:
            self.p["w"] = -math.log(settings.pop("init_tau") - 1.0)

    def _k(self):
        return _sigmoid(self.p["w"])

    def learnable(self):
        return {"w": self.p["w"]}

    def param_grads(self, grads):
        k = self._k()
        return {"w": np.sum(grads["k"]) * k * (1.0 - k)}


class RefEIF(_Ref):
    DEFAULTS = {"tau": 2.0, "delta_T": 1.0, "theta_rh": 0.8, "v_threshold": 1.0, "v_rest": 0.0,
                "v_reset": -0.1}

    def charge(self, v, x):
        p = self.p
        e = np.exp((v - p["theta_rh"]) / p["delta_T"])
        h = v + (x + p["v_rest"] - v + p["delta_T"] * e) / p["tau"]
        return h, 1.0 + (e - 1.0) / p["tau"], np.full_like(v, 1.0 / p["tau"]), None


class RefQIF(_Ref):
    DEFAULTS = {"tau": 2.0, "v_c": 0.8, "a0": 1.0, "v_threshold": 1.0, "v_rest": 0.0,
                "v_reset": -0.1}

    def charge(self, v, x):
        p = self.p
        h = v + (x + p["a0"] * (v - p["v_rest"]) * (v - p["v_c"])) / p["tau"]
        dh_dv = 1.0 + p["a0"] * ((v - p["v_c"]) + (v - p["v_rest"])) / p["tau"]
        return h, dh_dv, np.full_like(v, 1.0 / p["tau"]), None


class RefALIF(RefLIF):
    """LIF whose threshold is raised by beta * a, a a spike trace decaying with tau_a."""

    DEFAULTS = {"tau": 2.0, "tau_a": 20.0, "beta": 0.5, "v_threshold": 1.0, "v_reset": 0.0}
    STATES = ("v", "a")

    def initial(self, state):
        return 0.0 if state == "a" else super().initial(state)

    def step(self, x, st):
        p = self.p
        v, a = st["v"], st["a"]
        h, dh_dv, dh_dx, _ = self.charge(v, x)
        theta = p["v_threshold"] + p["beta"] * a
        z = h - theta
        s = (z >= 0).astype(np.float64)
        v_new = self.reset(h, s, theta)
        a_new = a + (s - a) / p["tau_a"]
        return s, {"v": v_new, "a": a_new}, dict(h=h, z=z, s=s, theta=theta, dh_dv=dh_dv,
                                                  dh_dx=dh_dx)

    def step_back(self, c, gs, gnew):
        p = self.p
        gv, ga = gnew["v"], gnew["a"]
        dh, ds, dtheta = self.reset_back(gv, c["h"], c["s"], c["theta"])
        ds = ds + gs + ga / p["tau_a"]
        dz = ds * self.sg(c["z"])
        dh = dh + dz
        dtheta = dtheta - dz
        da = ga * (1.0 - 1.0 / p["tau_a"]) + p["beta"] * dtheta
        return dh * c["dh_dx"], {"v": dh * c["dh_dv"], "a": da}, {}


class RefIzhikevich(_Ref):
    """SpikingJelly's IzhikevichNode; the hard reset's v_reset term and w's jump b * s take the
    undetached spike."""

    DEFAULTS = {"tau": 2.0, "v_c": 0.8, "a0": 1.0, "v_threshold": 1.0, "v_reset": 0.0,
                "v_rest": -0.1, "w_rest": 0.0, "tau_w": 2.0, "a": 0.0, "b": 0.0}
    STATES = ("v", "w")

    def initial(self, state):
        return self.p["w_rest"] if state == "w" else super().initial(state)

    def step(self, x, st):
        p = self.p
        v, w = st["v"], st["w"]
        h = v + (x + p["a0"] * (v - p["v_rest"]) * (v - p["v_c"]) - w) / p["tau"]
        wa = w + (p["a"] * (h - p["v_rest"]) - w) / p["tau_w"]
        z = h - p["v_threshold"]
        s = (z >= 0).astype(np.float64)
        if self.soft:
            v_new = h - s * p["v_threshold"]
        else:
            v_new = s * p["v_reset"] + (1.0 - s) * h
        w_new = wa + p["b"] * s
        return s, {"v": v_new, "w": w_new}, dict(v=v, h=h, z=z, s=s)

    def step_back(self, c, gs, gnew):
        p = self.p
        gv, gw = gnew["v"], gnew["w"]
        ds = gs + p["b"] * gw
        if self.soft:
            dh = gv
            if not self.detach:
                ds = ds - gv * p["v_threshold"]
        else:
            dh = gv * (1.0 - c["s"])
            ds = ds + gv * p["v_reset"]
            if not self.detach:
                ds = ds - gv * c["h"]
        dh = dh + gw * p["a"] / p["tau_w"] + ds * self.sg(c["z"])
        v = c["v"]
        dv = dh * (1.0 + p["a0"] * ((v - p["v_c"]) + (v - p["v_rest"])) / p["tau"])
        dw = gw * (1.0 - 1.0 / p["tau_w"]) - dh / p["tau"]
        return dh / p["tau"], {"v": dv, "w": dw}, {}


REFS = {"if": RefIF, "lif": RefLIF, "plif": RefPLIF, "alif": RefALIF,
        "izhikevich": RefIzhikevich, "eif": RefEIF, "qif": RefQIF}

# Input ranges that give a mix of spikes and silence without the quadratic / exponential
# neurons running away.
X_RANGE = {"if": (-0.4, 0.9), "lif": (-0.5, 3.0), "plif": (-0.5, 3.0), "alif": (-0.5, 3.5),
           "izhikevich": (-0.5, 2.0), "eif": (-0.5, 1.6), "qif": (-0.5, 2.0)}
INIT_RANGE = {"v": (-0.3, 0.9), "a": (0.0, 1.0), "w": (-0.3, 0.3)}


def ref_bptt(ref, x, init, grad_s, grad_seq, grad_final):
    """Forward over T steps, then the reverse sweep: dL/dx, dL/d(initial states) and the
    learnable parameters' gradients for L = sum(grad_s * s) + sum(grad_seq * state sequences)
    + sum(grad_final * final states)."""
    st = {k: np.array(init[k], np.float64) for k in ref.STATES}
    spikes, seqs, caches, margin = [], {k: [] for k in ref.STATES}, [], np.inf
    for t in range(x.shape[0]):
        s, st, cache = ref.step(x[t], st)
        spikes.append(s)
        caches.append(cache)
        margin = min(margin, float(np.min(np.abs(cache["z"]))))
        for k in ref.STATES:
            seqs[k].append(st[k])
    g = {k: np.array(grad_final.get(k, 0.0), np.float64) * np.ones(x.shape[1:])
         for k in ref.STATES}
    dx = np.zeros_like(x)
    partials = {}
    for t in reversed(range(x.shape[0])):
        gnew = {k: g[k] + (grad_seq[k][t] if k in grad_seq else 0.0) for k in ref.STATES}
        dx[t], g, gp = ref.step_back(caches[t], grad_s[t], gnew)
        for k, v in gp.items():
            partials[k] = partials.get(k, 0.0) + v
    return dict(s=np.stack(spikes), seqs={k: np.stack(v) for k, v in seqs.items()}, finals=st,
                margin=margin, dx=dx, dinit=g,
                dparams=ref.param_grads(partials) if partials else {})


def sample(rng, name, ref, init_mode, shape=SHAPE, steps=T):
    """Inputs (uniform in X_RANGE[name] or the given (lo, hi)) and initial states whose
    reference run keeps every |h - threshold| above SPIKE_MARGIN (redrawn otherwise), so that
    spikes are decided alike in float32."""
    lo, hi = X_RANGE[name] if isinstance(name, str) else name
    zero = {k: np.zeros(shape) for k in ref.STATES}
    for _ in range(200):
        x = rng.uniform(lo, hi, size=(steps, *shape)).astype(np.float32)
        init = {}
        if init_mode == "explicit":
            init = {k: rng.uniform(*INIT_RANGE[k], size=shape).astype(np.float32)
                    for k in ref.STATES}
        elif init_mode == "partial":
            k = ref.STATES[-1]
            init = {k: rng.uniform(*INIT_RANGE[k], size=shape).astype(np.float32)}
        full = {k: init.get(k, np.full(shape, ref.initial(k))) for k in ref.STATES}
        run = ref_bptt(ref, x.astype(np.float64), full, np.zeros((steps, *shape)), {}, zero)
        if run["margin"] > SPIKE_MARGIN:
            return x, init, full
    raise AssertionError("no input sample away from the threshold")


def _np(d):
    return {k: v.numpy() for k, v in d.items()}


def _close(actual, expected, what):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=RTOL, atol=ATOL,
                               err_msg=what)


COMMON_VARIANTS = [
    {},
    {"v_reset": None},
    {"detach_reset": True},
    {"v_reset": None, "detach_reset": True},
    {"surrogate": "atan(2)"},
    {"v_reset": -0.2, "v_threshold": 0.8},
]
EXTRA_VARIANTS = {
    "if": [],
    "lif": [{"decay_input": False}, {"decay_input": False, "v_reset": None, "tau": 3.5}],
    "plif": [{"decay_input": False}, {"init_tau": 3.0, "v_reset": None}],
    "alif": [{"decay_input": False}, {"tau_a": 3.0, "beta": 0.8, "v_reset": None}],
    "izhikevich": [{"a": 0.3, "b": 0.2}, {"a": 0.3, "b": 0.2, "v_reset": None},
                   {"a": 0.3, "b": 0.2, "v_reset": -0.2, "detach_reset": True}],
    "eif": [{"delta_T": 0.5, "theta_rh": 0.6, "tau": 3.0}],
    "qif": [{"a0": 0.7, "v_c": 0.5, "v_rest": -0.1}],
}


def _case_id(name, settings):
    return "-".join([name] + [f"{k}={v}" for k, v in settings.items()] or ["default"])


# Initial states: none given, all given (and plif's w as a params array, inputs as a dict),
# or only the last state of a two-state neuron.
INIT_CASES = [pytest.param(name, settings, mode, id=f"{_case_id(name, settings)}-{mode}")
              for name in REFS for settings in COMMON_VARIANTS + EXTRA_VARIANTS[name]
              for mode in ("default", "explicit", "partial")
              if mode != "partial" or len(REFS[name].STATES) > 1]


def _run_case(name, settings, init_mode, device, rng, all_grads=True):
    ref = REFS[name](**settings)
    neuron = fk.Neuron.builtin(name, **settings)
    x, init, full = sample(rng, name, ref, init_mode)
    params = {}
    if init_mode == "explicit" and ref.learnable():
        ref.p["w"] = float(np.float32(rng.uniform(-1.0, 1.0)))
        params = {"w": fk.array(np.array([ref.p["w"]], np.float32), device=device)}
    grad_s = rng.standard_normal(x.shape).astype(np.float32)
    grad_seq = {k: rng.standard_normal(x.shape).astype(np.float32) for k in ref.STATES}
    grad_final = {k: rng.standard_normal(SHAPE).astype(np.float32) for k in ref.STATES}
    if not all_grads:
        grad_seq, grad_final = {}, {}
    expected = ref_bptt(ref, x.astype(np.float64), full, grad_s.astype(np.float64),
                        {k: v.astype(np.float64) for k, v in grad_seq.items()},
                        {k: v.astype(np.float64) for k, v in grad_final.items()})
    assert expected["margin"] > SPIKE_MARGIN

    on = lambda a: fk.array(a, device=device)  # noqa: E731
    inputs = on(x) if init_mode != "explicit" else {"x": on(x)}
    f = neuron.forward("training_forward", inputs, {k: on(v) for k, v in init.items()} or None,
                       params or None, {"keep_state_sequences": True})
    g = neuron.backward(f.residuals, on(grad_s) if all_grads else {"s": on(grad_s)},
                        {k: on(v) for k, v in grad_seq.items()} or None,
                        {k: on(v) for k, v in grad_final.items()} or None)
    return ref, neuron, x, expected, f, g


@pytest.mark.parametrize("name, settings, init_mode", INIT_CASES)
def test_builtin_matches_reference(name, settings, init_mode, device, rng):
    """Spikes (exactly), state sequences, final states and the gradients of x, the initial
    states and learnable parameters agree with the float64 reference BPTT."""
    ref, neuron, x, expected, f, g = _run_case(name, settings, init_mode, device, rng)

    spikes = f.outputs["s"].numpy()
    assert spikes.shape == x.shape and spikes.dtype == np.float32
    np.testing.assert_array_equal(spikes, expected["s"])
    rate = expected["s"].mean()
    assert 0.05 < rate < 0.95, f"the sample should both fire and stay silent (rate {rate})"
    assert set(f.state_sequences) == set(ref.STATES) == set(f.final_states)
    for k in ref.STATES:
        _close(f.state_sequences[k].numpy(), expected["seqs"][k], f"state sequence {k}")
        _close(f.final_states[k].numpy(), expected["finals"][k], f"final state {k}")

    assert set(g.inputs) == {"x"}
    _close(g.inputs["x"].numpy(), expected["dx"], "dL/dx")
    for k in ref.STATES:
        _close(g.initial_states[k].numpy(), expected["dinit"][k], f"dL/d{k}0")
    assert set(g.params) == set(ref.learnable())
    for k, value in expected["dparams"].items():
        np.testing.assert_allclose(float(g.params[k].numpy()), value, rtol=RTOL,
                                   atol=ATOL * x.size, err_msg=f"dL/d{k}")


@pytest.mark.parametrize("name", list(REFS))
def test_builtin_output_gradient_only(name, device, rng):
    """Backward with only the spikes' gradient (no state-sequence or final-state gradients:
    they count as zero) matches the reference."""
    ref, neuron, x, expected, f, g = _run_case(name, {"v_reset": None}, "explicit", device, rng,
                                                all_grads=False)
    _close(g.inputs["x"].numpy(), expected["dx"], "dL/dx")
    for k in ref.STATES:
        _close(g.initial_states[k].numpy(), expected["dinit"][k], f"dL/d{k}0")
    for k, value in expected["dparams"].items():
        np.testing.assert_allclose(float(g.params[k].numpy()), value, rtol=RTOL,
                                   atol=ATOL * x.size)


@pytest.mark.parametrize("surrogate", ["sigmoid", "sigmoid(2.5)", "atan(3)",
                                       "piecewise_quadratic(0.8)", "piecewise_exp(2)", "soft_sign",
                                       "super_spike(1.5)", "erf(1.5)"])
def test_lif_surrogates(surrogate, device, rng):
    """Each surrogate's derivative (with its default or a given alpha) is the one backward uses."""
    ref, neuron, x, expected, f, g = _run_case("lif", {"surrogate": surrogate}, "explicit",
                                                device, rng)
    np.testing.assert_array_equal(f.outputs["s"].numpy(), expected["s"])
    _close(g.inputs["x"].numpy(), expected["dx"], "dL/dx")
    _close(g.initial_states["v"].numpy(), expected["dinit"]["v"], "dL/dv0")


@pytest.mark.parametrize("name", list(REFS))
def test_settings_map_to_parameters(name):
    """SpikingJelly-style settings land on the neuron's parameters as the reference reads them
    (v_reset=None is soft_reset=1, init_tau gives w = -log(init_tau - 1), booleans are 1/0)."""
    for settings in COMMON_VARIANTS + EXTRA_VARIANTS[name]:
        ref = REFS[name](**settings)
        neuron = fk.Neuron.builtin(name, **settings)
        got = {p["name"]: p["value"] for p in neuron.params}
        for key, value in ref.params().items():
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), (settings, key)
        for state in ref.STATES:
            assert neuron.initial_state_value(state) == pytest.approx(ref.initial(state))
    neuron = fk.Neuron.builtin(name)
    assert neuron.name == name
    assert neuron.inputs == ["x"] and neuron.outputs == ["s"]
    assert neuron.states == list(REFS[name].STATES)
    learnable = [p["name"] for p in neuron.params if p["learnable"]]
    assert learnable == list(REFS[name]().learnable())


@pytest.mark.parametrize("name", ["lif", "alif", "izhikevich"])
def test_forward_kinds_agree(name, device, rng):
    """inference, inference_final_state and training_forward compute the same spikes and
    states; only training_forward keeps residuals, only inference (or keep_state_sequences)
    returns state sequences."""
    ref = REFS[name](v_reset=None)
    neuron = fk.Neuron.builtin(name, v_reset=None)
    x, init, _ = sample(rng, name, ref, "explicit")
    xs = fk.array(x, device=device)
    states = {k: fk.array(v, device=device) for k, v in init.items()}
    inf = neuron.forward("inference", xs, states)
    fin = neuron.forward("inference_final_state", xs, states)
    tr = neuron.forward("training_forward", xs, states, storage={"keep_state_sequences": True})
    tr_plain = neuron.forward("training_forward", xs, states)
    assert inf.residuals is None and fin.residuals is None
    assert tr.residuals is not None and tr.residuals.nbytes > 0
    assert fin.state_sequences == {} and tr_plain.state_sequences == {}
    s = inf.outputs["s"].numpy()
    for other in (fin, tr, tr_plain):
        np.testing.assert_array_equal(other.outputs["s"].numpy(), s)
    for k in ref.STATES:
        seq = inf.state_sequences[k].numpy()
        np.testing.assert_allclose(tr.state_sequences[k].numpy(), seq, rtol=1e-6, atol=1e-7)
        for other in (inf, fin, tr, tr_plain):
            np.testing.assert_allclose(other.final_states[k].numpy(), seq[-1], rtol=1e-6,
                                       atol=1e-7)


@pytest.mark.parametrize("name", ["lif", "alif"])
def test_time_axis(name, device, rng):
    """T at axis 1 of a (3, T, 7) sequence gives the transposed results of the (T, 3, 7) call,
    forward and backward, with states and their gradients still (3, 7)."""
    ref = REFS[name]()
    neuron = fk.Neuron.builtin(name)
    x, init, full = sample(rng, name, ref, "explicit")
    grad_s = rng.standard_normal(x.shape).astype(np.float32)
    expected = ref_bptt(ref, x.astype(np.float64), full, grad_s.astype(np.float64), {}, {})
    on = lambda a: fk.array(np.ascontiguousarray(a), device=device)  # noqa: E731
    states = {k: on(v) for k, v in init.items()}
    xt = x.transpose(1, 0, 2)  # (3, T, 7)
    f = neuron.forward("training_forward", on(xt), states,
                       storage={"time_axis": 1, "keep_state_sequences": True})
    spikes = f.outputs["s"].numpy()
    assert spikes.shape == (SHAPE[0], T, SHAPE[1])
    np.testing.assert_array_equal(spikes, expected["s"].transpose(1, 0, 2))
    for k in ref.STATES:
        assert f.final_states[k].numpy().shape == SHAPE
        _close(f.final_states[k].numpy(), expected["finals"][k], f"final {k}")
        _close(f.state_sequences[k].numpy(), expected["seqs"][k].transpose(1, 0, 2), f"seq {k}")
    g = neuron.backward(f.residuals, on(grad_s.transpose(1, 0, 2)))
    assert g.inputs["x"].numpy().shape == xt.shape
    _close(g.inputs["x"].numpy(), expected["dx"].transpose(1, 0, 2), "dL/dx")
    for k in ref.STATES:
        _close(g.initial_states[k].numpy(), expected["dinit"][k], f"dL/d{k}0")
    # And the same as the time-major call on the device.
    f0 = neuron.forward("inference_final_state", on(x), states)
    np.testing.assert_array_equal(f0.outputs["s"].numpy().transpose(1, 0, 2), spikes)


def test_storage_dtypes(device, rng):
    """u8 spikes hold the same 0/1 values; bf16 residuals give gradients close to the f32 ones
    (bf16 keeps 8 significant bits)."""
    ref = RefLIF()
    neuron = fk.Neuron.builtin("lif")
    x, _, full = sample(rng, "lif", ref, "default")
    grad_s = rng.standard_normal(x.shape).astype(np.float32)
    expected = ref_bptt(ref, x.astype(np.float64), full, grad_s.astype(np.float64), {}, {})
    xs = fk.array(x, device=device)
    u8 = neuron.forward("inference", xs, storage={"spike_dtype": "u8"}).outputs["s"].numpy()
    assert u8.dtype == np.uint8
    np.testing.assert_array_equal(u8, expected["s"])
    f = neuron.forward("training_forward", xs, storage={"residual_dtype": "bf16"})
    g = neuron.backward(f.residuals, fk.array(grad_s, device=device))
    dx = g.inputs["x"].numpy()
    scale = np.abs(expected["dx"]).max()
    np.testing.assert_allclose(dx, expected["dx"], rtol=3e-2, atol=3e-2 * scale)
    assert not np.allclose(expected["dx"], 0)


def test_spike_at_threshold(device):
    """h exactly at the threshold fires (spike(z) is 1 for z >= 0), just below does not."""
    below = float(np.nextafter(np.float32(1.0), np.float32(0.0)))
    for name, x in (("if", [1.0, below]), ("lif", [2.0, 2.0 * below])):
        ref = REFS[name]()
        xs = np.array([x], np.float32)  # T = 1, two neurons; h = x (if), x / 2 (lif)
        expected, _, cache = ref.step(xs[0].astype(np.float64), {"v": np.zeros(2)})
        np.testing.assert_array_equal(cache["z"] == 0, [True, False])
        got = fk.Neuron.builtin(name).forward("inference", fk.array(xs, device=device))
        np.testing.assert_array_equal(got.outputs["s"].numpy()[0], expected)


def test_zero_steps(device, rng):
    """T = 0: empty outputs, the final states are the initial ones and their gradients pass
    straight through to the initial states."""
    neuron = fk.Neuron.builtin("alif")
    v0 = rng.uniform(-0.3, 0.9, SHAPE).astype(np.float32)
    gv = rng.standard_normal(SHAPE).astype(np.float32)
    on = lambda a: fk.array(a, device=device)  # noqa: E731
    f = neuron.forward("training_forward", on(np.zeros((0, *SHAPE), np.float32)), {"v": on(v0)})
    assert f.outputs["s"].numpy().shape == (0, *SHAPE)
    np.testing.assert_array_equal(f.final_states["v"].numpy(), v0)
    np.testing.assert_array_equal(f.final_states["a"].numpy(), np.zeros(SHAPE))
    g = neuron.backward(f.residuals, on(np.zeros((0, *SHAPE), np.float32)), None, {"v": on(gv)})
    assert g.inputs["x"].numpy().shape == (0, *SHAPE)
    np.testing.assert_array_equal(g.initial_states["v"].numpy(), gv)
    np.testing.assert_array_equal(g.initial_states["a"].numpy(), np.zeros(SHAPE))


def test_input_layouts_and_residual_reuse(rng):
    """A float64 or strided NumPy input gives the reference's results as a contiguous float32
    one does, and one set of residuals can be used by two backward calls alike."""
    ref = RefLIF(v_reset=None)
    neuron = fk.Neuron.builtin("lif", v_reset=None)
    x, _, full = sample(rng, "lif", ref, "default")
    grad_s = rng.standard_normal(x.shape).astype(np.float32)
    expected = ref_bptt(ref, x.astype(np.float64), full, grad_s.astype(np.float64), {}, {})
    strided = np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
    assert not strided.flags.c_contiguous
    for given in (x.astype(np.float64), strided):
        f = neuron.forward("training_forward", given)
        np.testing.assert_array_equal(f.outputs["s"].numpy(), expected["s"])
        _close(f.final_states["v"].numpy(), expected["finals"]["v"], "final v")
        first = neuron.backward(f.residuals, grad_s).inputs["x"].numpy()
        again = neuron.backward(f.residuals, grad_s).inputs["x"].numpy()
        _close(first, expected["dx"], "dL/dx")
        np.testing.assert_array_equal(again, first)


@pytest.mark.parametrize("residual_dtype", ["bf16", "flex16"])
def test_sixteen_bit_storage(residual_dtype, device, rng):
    """bf16 sequences hold the spikes exactly and the states to bf16 precision; 16-bit
    residuals give gradients close to the reference."""
    ref = RefALIF(v_reset=None)
    neuron = fk.Neuron.builtin("alif", v_reset=None)
    x, _, full = sample(rng, "alif", ref, "default")
    grad_s = rng.standard_normal(x.shape).astype(np.float32)
    expected = ref_bptt(ref, x.astype(np.float64), full, grad_s.astype(np.float64), {}, {})
    storage = {"sequence_dtype": "bf16", "spike_dtype": "bf16", "residual_dtype": residual_dtype,
               "keep_state_sequences": True}
    f = neuron.forward("training_forward", fk.array(x, device=device), storage=storage)
    assert f.outputs["s"].dtype == "bf16" and f.state_sequences["v"].dtype == "bf16"
    np.testing.assert_array_equal(f.outputs["s"].numpy().astype(np.float64), expected["s"])
    for k in ref.STATES:
        np.testing.assert_allclose(f.state_sequences[k].numpy().astype(np.float64),
                                   expected["seqs"][k], rtol=1e-2, atol=1e-2)
        _close(f.final_states[k].numpy(), expected["finals"][k], f"final {k} (f32)")
    g = neuron.backward(f.residuals, fk.array(grad_s, device=device))
    scale = np.abs(expected["dx"]).max()
    np.testing.assert_allclose(g.inputs["x"].numpy(), expected["dx"], rtol=3e-2,
                               atol=3e-2 * scale)


CUSTOM = """# a leaky neuron with a soft, detached reset
neuron leaky(x; v) -> s {
  param beta = 0.6;
  h = beta * v + x;
  s = spike(h - 1, atan(2));
  v = h - detach(s);
}
"""


class RefLeaky(_Ref):
    DEFAULTS = {"v_threshold": 1.0}

    def __init__(self, beta):
        super().__init__(surrogate="atan(2)", v_reset=None, detach_reset=True)
        self.beta = beta

    def charge(self, v, x):
        return self.beta * v + x, np.full_like(v, self.beta), np.ones_like(v), None


def test_from_file(tmp_path, device, rng):
    """A neuron read from a file (with a setting applied) runs forward and backward as its text
    says."""
    path = tmp_path / "leaky.neuron"
    path.write_text(CUSTOM)
    neuron = fk.Neuron.from_file(str(path)).with_settings(beta=0.8)
    assert neuron.name == "leaky" and neuron.states == ["v"]
    assert fk.Neuron.parse(neuron.source).source == neuron.source
    ref = RefLeaky(0.8)
    x, _, full = sample(rng, (-0.3, 1.0), ref, "default")
    grad_s = rng.standard_normal(x.shape).astype(np.float32)
    expected = ref_bptt(ref, x.astype(np.float64), full, grad_s.astype(np.float64), {}, {})
    f = neuron.forward("training_forward", fk.array(x, device=device))
    np.testing.assert_array_equal(f.outputs["s"].numpy(), expected["s"])
    _close(f.final_states["v"].numpy(), expected["finals"]["v"], "final v")
    g = neuron.backward(f.residuals, fk.array(grad_s, device=device))
    _close(g.inputs["x"].numpy(), expected["dx"], "dL/dx")
    _close(g.initial_states["v"].numpy(), expected["dinit"]["v"], "dL/dv0")


# ---------------------------------------------------------------------------------------------
# Errors.

def test_mismatched_initial_state_shape(device):
    """An initial state whose shape is not the input's neuron shape is a ShapeError (a
    ValueError), and so is an output gradient of another shape."""
    neuron = fk.Neuron.builtin("lif")
    x = fk.array(np.zeros((T, *SHAPE), np.float32), device=device)
    bad = fk.array(np.zeros((3, 8), np.float32), device=device)
    with pytest.raises(fk.ShapeError, match=r"\(3, 8\)"):
        neuron.forward("inference", x, {"v": bad})
    assert issubclass(fk.ShapeError, ValueError)
    f = neuron.forward("training_forward", x)
    with pytest.raises(ValueError):
        neuron.backward(f.residuals, fk.array(np.zeros((T, 3, 8), np.float32), device=device))
    with pytest.raises(ValueError, match="no state 'q'"):
        neuron.forward("inference", x, {"q": fk.array(np.zeros(SHAPE, np.float32),
                                                       device=device)})


def test_neuron_text_error():
    """A bad neuron text raises NeuronError (a ValueError) carrying the line and column."""
    text = "neuron n(x; v) -> s {\n  s = spike(v + x);\n  v = v + y;\n}\n"
    with pytest.raises(fk.NeuronError) as info:
        fk.Neuron.parse(text)
    assert isinstance(info.value, ValueError)
    assert (info.value.line, info.value.column) == (3, 11)
    assert "line 3:11" in str(info.value) and "'y'" in str(info.value)


def test_unknown_builtin_setting_and_kind():
    """Unknown built-ins, settings and forward kinds are ValueErrors naming what exists."""
    with pytest.raises(ValueError, match="lif"):
        fk.Neuron.builtin("nope")
    with pytest.raises(ValueError, match="bogus"):
        fk.Neuron.builtin("lif", bogus=1.0)
    with pytest.raises(ValueError, match="surrogate"):
        fk.Neuron.builtin("lif", surrogate="nope(2)")
    neuron = fk.Neuron.builtin("lif")
    x = np.zeros((T, *SHAPE), np.float32)
    with pytest.raises(ValueError, match="training_forward"):
        neuron.forward("train", x)
    with pytest.raises(ValueError):
        neuron.forward("backward", x)
    with pytest.raises(ValueError, match="time_axis"):
        neuron.forward("inference", x, storage={"time_axis": 3})


def test_from_file_missing(tmp_path):
    """A file that does not exist is an OSError naming the path."""
    path = tmp_path / "missing.neuron"
    with pytest.raises(OSError, match="missing.neuron"):
        fk.Neuron.from_file(str(path))


def test_residuals_of_another_neuron():
    """Backward with residuals made by a neuron with other settings is refused."""
    x = np.ones((T, *SHAPE), np.float32)
    f = fk.Neuron.builtin("lif", tau=2.0).forward("training_forward", x)
    with pytest.raises(ValueError, match="residuals"):
        fk.Neuron.builtin("lif", tau=3.0).backward(f.residuals, x)


def test_settings_outside_their_domain_are_refused():
    """A time constant of 0 or below would divide by zero in every step: refused at once."""
    for name, setting in [("lif", "tau"), ("alif", "tau_a"), ("eif", "delta_T")]:
        with pytest.raises(ValueError, match=setting):
            fk.Neuron.builtin(name, **{setting: 0.0})
        with pytest.raises(ValueError, match=setting):
            fk.Neuron.builtin(name).with_settings(**{setting: -1.0})


def test_flex16_sequences_under_autoflex(device):
    """iwl_policy 'autoflex': a kept NeuronStorage carries one exponent manager per flex16
    sequence from call to call. IF's v holds 0.5 * t; the first call stores it exactly, a call
    with twice the input saturates at the first one's range, the next one holds it again."""
    storage = fk.NeuronStorage(sequence_dtype="flex16", iwl_policy="autoflex")
    assert storage.iwl_policy == "autoflex"
    neuron = fk.Neuron.builtin("if", v_threshold=1000.0)
    t = np.arange(1, 9, dtype=np.float64)[:, None]
    iwls, saturated = [], []
    for scale in (0.5, 1.0, 1.0):
        x = np.full((8, 2), scale, np.float32)
        f = neuron.forward("inference", fk.array(x, device=device), storage=storage)
        v = f.state_sequences["v"]
        iwls.append(v.iwl)
        expected = scale * t.repeat(2, axis=1)
        top = 32767 * 2.0 ** (v.iwl - 15)
        np.testing.assert_array_equal(v.numpy().astype(np.float64), np.minimum(expected, top))
        saturated.append(int(np.sum(expected > top)))
    assert iwls[0] == 3  # 4 needs |x| < 2^3
    assert iwls[1] == iwls[0] and saturated[1] > 0 and saturated[0] == 0
    assert iwls[2] >= iwls[1] + 2 and saturated[2] == 0
    with pytest.raises(ValueError):
        fk.NeuronStorage(iwl_policy="nearest")
    exact = neuron.forward("inference", fk.array(np.ones((8, 2), np.float32), device=device),
                           storage={"sequence_dtype": "flex16", "iwl_policy": "exact"})
    assert exact.state_sequences["v"].iwl == 4  # 8 < 2^4
