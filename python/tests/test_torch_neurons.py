"""flexkit.torch neuron modules against plain PyTorch autograd references in float64: spikes,
input and parameter gradients across calls that carry the state, reset(), detach(), step
modes, bfloat16 and strided inputs, a small model that trains, and the errors a caller meets."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flexkit as fk  # noqa: E402

T = 5
SHAPE = (4, 6)
MARGIN = 1e-3  # the reference keeps every |h - threshold| above this (no float32 spike flips)
RTOL, ATOL = 1e-4, 1e-5


class SpikeFn(torch.autograd.Function):
    """Heaviside (z >= 0) forward; a surrogate's derivative backward."""

    @staticmethod
    def forward(ctx, z, name, alpha):
        ctx.save_for_backward(z)
        ctx.name, ctx.alpha = name, alpha
        return (z >= 0).to(z.dtype)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        a = ctx.alpha
        if ctx.name == "sigmoid":
            s = torch.sigmoid(a * z)
            d = a * s * (1 - s)
        elif ctx.name == "atan":
            d = a / 2 / (1 + (math.pi / 2 * a * z) ** 2)
        else:
            raise AssertionError(ctx.name)
        return grad * d, None, None


class RefNode:
    """A SpikingJelly-style multi-step node in float64 autograd: kind 'if', 'lif' or 'plif'
    (k = 1/tau, sigmoid(w) for plif), carrying v across calls until reset(); min_margin is the
    smallest |h - v_threshold| seen."""

    def __init__(self, kind, tau=2.0, decay_input=True, v_threshold=1.0, v_reset=0.0,
                 detach_reset=False, surrogate=("sigmoid", 4.0), w=None):
        self.kind, self.tau, self.decay_input = kind, tau, decay_input
        self.v_threshold, self.v_reset, self.detach_reset = v_threshold, v_reset, detach_reset
        self.surrogate = surrogate
        self.w = w
        self.reset()

    def reset(self):
        self.v = None
        self.min_margin = math.inf

    def __call__(self, x):
        vr = 0.0 if self.v_reset is None else self.v_reset
        v = self.v if self.v is not None else torch.full(x.shape[1:], vr, dtype=x.dtype)
        spikes = []
        for t in range(x.shape[0]):
            if self.kind == "if":
                h = v + x[t]
            else:
                k = torch.sigmoid(self.w) if self.kind == "plif" else 1.0 / self.tau
                if self.decay_input:
                    h = v + (x[t] - (v - vr)) * k
                else:
                    h = v - (v - vr) * k + x[t]
            z = h - self.v_threshold
            self.min_margin = min(self.min_margin, float(z.detach().abs().min()))
            s = SpikeFn.apply(z, *self.surrogate)
            sd = s.detach() if self.detach_reset else s
            if self.v_reset is None:
                v = h - sd * self.v_threshold
            else:
                v = sd * self.v_reset + (1 - sd) * h
            spikes.append(s)
        self.v = v
        return torch.stack(spikes)


def tdev(device):
    return torch.device(device)


def draw(gen, shape, lo, hi, device, dtype=torch.float32):
    return (lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float64)).to(
        dtype=dtype, device=tdev(device))


def inputs_away_from_threshold(gen, make_ref, n_calls, lo, hi, device, shape=SHAPE, steps=T):
    """n_calls input sequences whose reference run (state carried) keeps every |h - threshold|
    above MARGIN; redrawn until one does."""
    for _ in range(200):
        xs = [draw(gen, (steps, *shape), lo, hi, device) for _ in range(n_calls)]
        ref = make_ref()
        with torch.no_grad():
            for x in xs:
                ref(x.double().cpu())
        if ref.min_margin > MARGIN:
            return xs
    raise AssertionError("no input sample away from the threshold")


def close(actual, expected, what, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(actual.detach().double().cpu().numpy(),
                               expected.detach().double().cpu().numpy(), rtol=rtol, atol=atol,
                               err_msg=what)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(20261201)


NODE_CASES = [
    pytest.param("lif", {}, id="lif"),
    pytest.param("lif", {"v_reset": None}, id="lif-soft"),
    pytest.param("lif", {"detach_reset": True}, id="lif-detach_reset"),
    pytest.param("lif", {"decay_input": False, "tau": 3.0, "v_reset": -0.2}, id="lif-no_decay"),
    pytest.param("lif", {"surrogate": "atan(2)", "v_threshold": 0.8}, id="lif-atan"),
    pytest.param("if", {}, id="if"),
    pytest.param("if", {"v_reset": None, "detach_reset": True}, id="if-soft-detach_reset"),
    pytest.param("plif", {}, id="plif"),
    pytest.param("plif", {"init_tau": 3.0, "v_reset": None}, id="plif-soft"),
    pytest.param("plif", {"decay_input": False, "detach_reset": True}, id="plif-no_decay"),
]
X_RANGE = {"if": (-0.4, 0.9), "lif": (-0.5, 3.0), "plif": (-0.5, 3.0)}


def make_pair(kind, settings, device):
    """The flexkit module and a function giving a fresh matching float64 reference (with its
    own float64 copy of w for plif)."""
    settings = dict(settings)
    surrogate = settings.pop("surrogate", "sigmoid(4)")
    name, alpha = surrogate[:-1].split("(")
    if kind == "if":
        node = fk.torch.IFNode(surrogate=surrogate, **settings)
    elif kind == "lif":
        node = fk.torch.LIFNode(surrogate=surrogate, **settings)
    else:
        node = fk.torch.ParametricLIFNode(surrogate=surrogate, **settings)
    node = node.to(tdev(device))
    ref_settings = dict(settings)
    w = None
    if kind == "plif":
        init_tau = ref_settings.pop("init_tau", 2.0)
        w = torch.tensor(-math.log(init_tau - 1.0), dtype=torch.float64, requires_grad=True)

    def make_ref():
        return RefNode(kind, surrogate=(name, float(alpha)), w=w, **ref_settings)

    return node, make_ref, w


@pytest.mark.parametrize("kind, settings", NODE_CASES)
def test_node_matches_reference_across_calls(kind, settings, device, gen):
    """Two consecutive calls carry v (gradients of the second call's loss flow back into the
    first call's input), then reset() starts afresh: spikes, v, x.grad (and w.grad for plif)
    match a float64 autograd loop that carries v the same way."""
    node, make_ref, w = make_pair(kind, settings, device)
    lo, hi = X_RANGE[kind]
    x1, x2 = inputs_away_from_threshold(gen, make_ref, 2, lo, hi, device)
    (x3,) = inputs_away_from_threshold(gen, make_ref, 1, lo, hi, device)  # runs after reset()
    g1, g2, g3 = (draw(gen, (T, *SHAPE), -1.0, 1.0, device) for _ in range(3))
    for x in (x1, x2, x3):
        x.requires_grad_(True)

    s1, s2 = node(x1), node(x2)
    v_after_two = node.v.detach().clone()
    (s1 * g1).sum().add((s2 * g2).sum()).backward()

    ref = make_ref()
    r = [x.detach().double().cpu().requires_grad_(True) for x in (x1, x2, x3)]
    rs1, rs2 = ref(r[0]), ref(r[1])
    (rs1 * g1.double().cpu()).sum().add((rs2 * g2.double().cpu()).sum()).backward()

    assert s1.dtype == torch.float32 and s1.shape == x1.shape
    np.testing.assert_array_equal(s1.detach().cpu().numpy(), rs1.detach().numpy())
    np.testing.assert_array_equal(s2.detach().cpu().numpy(), rs2.detach().numpy())
    assert 0.05 < float(rs1.mean() + rs2.mean()) / 2 < 0.95
    close(v_after_two, ref.v, "v after two calls")
    close(x1.grad, r[0].grad, "x1.grad (through the carried v)")
    close(x2.grad, r[1].grad, "x2.grad")
    assert float(r[0].grad.abs().max()) > 0
    if kind == "plif":
        close(node.w.grad, w.grad, "w.grad", atol=ATOL * x1.numel())
        node.w.grad = None
        w.grad = None

    node.reset()
    ref.reset()
    assert node.v == node.neuron.initial_state_value("v")
    s3 = node(x3)
    rs3 = ref(r[2])
    (s3 * g3).sum().backward()
    (rs3 * g3.double().cpu()).sum().backward()
    np.testing.assert_array_equal(s3.detach().cpu().numpy(), rs3.detach().numpy())
    close(x3.grad, r[2].grad, "x3.grad after reset()")
    close(node.v, ref.v, "v after reset() and a call")
    if kind == "plif":
        close(node.w.grad, w.grad, "w.grad after reset()", atol=ATOL * x1.numel())


def test_plif_w_value_is_used(device, gen):
    """A changed w (the nn.Parameter) changes the forward as 1/tau = sigmoid(w) says."""
    node, make_ref, w = make_pair("plif", {}, device)
    with torch.no_grad():
        node.w.fill_(0.7)
        w.fill_(0.7)
    (x,) = inputs_away_from_threshold(gen, make_ref, 1, -0.5, 3.0, device)
    x.requires_grad_(True)
    g = draw(gen, x.shape, -1.0, 1.0, device)
    s = node(x)
    (s * g).sum().backward()
    ref = make_ref()
    rx = x.detach().double().cpu().requires_grad_(True)
    rs = ref(rx)
    (rs * g.double().cpu()).sum().backward()
    np.testing.assert_array_equal(s.detach().cpu().numpy(), rs.detach().numpy())
    close(x.grad, rx.grad, "x.grad")
    close(node.w.grad, w.grad, "w.grad", atol=ATOL * x.numel())
    default = fk.torch.ParametricLIFNode().to(tdev(device))
    assert not torch.equal(default(x.detach()), s), "w = 0.7 should fire otherwise than w = 0"


def _ref_spikes(make_ref, x):
    with torch.no_grad():
        return make_ref()(x.detach().double().cpu()).numpy()


def test_state_gradient_and_no_grad_call(device, gen):
    """A call under no_grad still carries v (no residuals kept); a loss that reads the final
    node.v as well as the spikes sends the final-state gradient back through the call."""
    node, make_ref, _ = make_pair("lif", {"v_reset": None}, device)
    x1, x2 = inputs_away_from_threshold(gen, make_ref, 2, -0.5, 3.0, device)
    gs = draw(gen, x2.shape, -1.0, 1.0, device)
    gv = draw(gen, SHAPE, -1.0, 1.0, device)
    with torch.no_grad():
        s1 = node(x1)
    assert not s1.requires_grad and not node.v.requires_grad
    x2.requires_grad_(True)
    s2 = node(x2)
    ((s2 * gs).sum() + (node.v * gv).sum()).backward()
    ref = make_ref()
    with torch.no_grad():
        rs1 = ref(x1.double().cpu())
    r2 = x2.detach().double().cpu().requires_grad_(True)
    rs2 = ref(r2)
    ((rs2 * gs.double().cpu()).sum() + (ref.v * gv.double().cpu()).sum()).backward()
    np.testing.assert_array_equal(s1.cpu().numpy(), rs1.numpy())
    np.testing.assert_array_equal(s2.detach().cpu().numpy(), rs2.detach().numpy())
    close(x2.grad, r2.grad, "x2.grad with a final-state gradient")


def test_detach_cuts_the_graph(device, gen):
    """After detach() the carried v keeps its value but the next call's loss no longer reaches
    the earlier input."""
    node, make_ref, _ = make_pair("lif", {}, device)
    x1, x2 = inputs_away_from_threshold(gen, make_ref, 2, -0.5, 3.0, device)
    x1.requires_grad_(True)
    x2.requires_grad_(True)
    node(x1)
    v = node.v.clone()
    node.detach()
    close(node.v, v, "v after detach()", rtol=0, atol=0)
    assert not node.v.requires_grad
    node(x2).sum().backward()
    assert x1.grad is None
    ref = make_ref()
    with torch.no_grad():
        ref(x1.detach().double().cpu())
    ref.v = ref.v.detach()
    r2 = x2.detach().double().cpu().requires_grad_(True)
    ref(r2).sum().backward()
    close(x2.grad, r2.grad, "x2.grad")


@pytest.mark.parametrize("kind", ["lif", "plif"])
def test_single_step_mode_equals_multi_step(kind, device, gen):
    """T calls with step_mode='s' give the spikes, final v and gradients of one 'm' call (and
    of the reference)."""
    node_m, make_ref, w = make_pair(kind, {"v_reset": None}, device)
    node_s = (fk.torch.LIFNode(v_reset=None, step_mode="s") if kind == "lif"
              else fk.torch.ParametricLIFNode(v_reset=None, step_mode="s")).to(tdev(device))
    (x,) = inputs_away_from_threshold(gen, make_ref, 1, -0.5, 3.0, device)
    g = draw(gen, x.shape, -1.0, 1.0, device)
    xm = x.clone().requires_grad_(True)
    xs = x.clone().requires_grad_(True)
    sm = node_m(xm)
    steps = [node_s(xs[t]) for t in range(T)]
    assert steps[0].shape == SHAPE
    ss = torch.stack(steps)
    (sm * g).sum().backward()
    (ss * g).sum().backward()
    ref = make_ref()
    rx = x.double().cpu().requires_grad_(True)
    rs = ref(rx)
    (rs * g.double().cpu()).sum().backward()
    np.testing.assert_array_equal(ss.detach().cpu().numpy(), rs.detach().numpy())
    np.testing.assert_array_equal(sm.detach().cpu().numpy(), rs.detach().numpy())
    close(node_s.v, ref.v, "v ('s')")
    close(xs.grad, rx.grad, "x.grad ('s')")
    close(xm.grad, rx.grad, "x.grad ('m')")
    if kind == "plif":
        close(node_s.w.grad, w.grad, "w.grad ('s')", atol=ATOL * x.numel())
        close(node_m.w.grad, node_s.w.grad, "w.grad 'm' vs 's'", atol=ATOL * x.numel())


def test_bfloat16_input(device, gen):
    """A bfloat16 input runs and gives bfloat16 spikes and gradients, equal (spikes) and close
    (gradients, to bfloat16's precision) to the float32 call on the same values."""
    node, make_ref, _ = make_pair("lif", {}, device)
    node32, _, _ = make_pair("lif", {}, device)
    for _ in range(50):
        (x,) = inputs_away_from_threshold(gen, make_ref, 1, -0.5, 3.0, device)
        x = x.bfloat16()  # the float32 run sees the same (bf16-representable) values
        ref = make_ref()
        with torch.no_grad():
            ref(x.double().cpu())
        if ref.min_margin > MARGIN:
            break
    else:
        raise AssertionError("no bf16 input sample away from the threshold")
    g = draw(gen, x.shape, -1.0, 1.0, device).bfloat16()
    xb = x.clone().requires_grad_(True)
    x32 = x.float().requires_grad_(True)
    sb = node(xb)
    s32 = node32(x32)
    assert sb.dtype == torch.bfloat16 and sb.shape == x.shape
    (sb * g).sum().backward()
    (s32 * g.float()).sum().backward()
    assert xb.grad.dtype == torch.bfloat16
    np.testing.assert_array_equal(sb.detach().float().cpu().numpy(), s32.detach().cpu().numpy())
    np.testing.assert_array_equal(sb.detach().float().cpu().numpy(), _ref_spikes(make_ref, x))
    scale = float(x32.grad.abs().max())
    assert scale > 0
    close(xb.grad, x32.grad, "bf16 vs f32 x.grad", rtol=2e-2, atol=2e-2 * scale)
    close(node.v, node32.v, "bf16 vs f32 v", rtol=2e-2, atol=2e-2)


def test_non_contiguous_input(device, gen):
    """A transposed (strided) input gives the spikes and gradients of its contiguous copy, and
    the reference's."""
    node_a, make_ref, _ = make_pair("lif", {}, device)
    node_b, _, _ = make_pair("lif", {}, device)
    (base,) = inputs_away_from_threshold(gen, make_ref, 1, -0.5, 3.0, device, shape=(5, 4))
    base.requires_grad_(True)
    x = base.transpose(1, 2)
    assert not x.is_contiguous()
    xc = x.detach().contiguous().requires_grad_(True)
    g = draw(gen, (T, 4, 5), -1.0, 1.0, device).transpose(1, 2).contiguous().transpose(1, 2)
    sa, sb = node_a(x), node_b(xc)
    assert sa.shape == (T, 4, 5)
    (sa * g).sum().backward()
    (sb * g).sum().backward()
    np.testing.assert_array_equal(sa.detach().cpu().numpy(), sb.detach().cpu().numpy())
    ref = make_ref()
    rx = x.detach().double().cpu().requires_grad_(True)
    rs = ref(rx)
    (rs * g.double().cpu()).sum().backward()
    np.testing.assert_array_equal(sa.detach().cpu().numpy(), rs.detach().numpy())
    close(base.grad.transpose(1, 2), xc.grad, "strided vs contiguous x.grad", rtol=0, atol=0)
    close(xc.grad, rx.grad, "x.grad")
    close(node_a.v, ref.v, "v")


class _RefLIFModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ref = RefNode("lif")

    def forward(self, x):
        self.ref.reset()
        return self.ref(x)


def _model(lif):
    return torch.nn.Sequential(torch.nn.Linear(20, 16), lif)


def _loss(net, head, x, y):
    rate = net(x).mean(0)
    return torch.nn.functional.cross_entropy(head(rate), y)


def test_tiny_model_trains(device):
    """Linear -> LIFNode -> rate -> Linear: the first step's weight gradients equal those of the
    same model with the float64 reference LIF, and 30 Adam steps lower the loss clearly."""
    torch.manual_seed(7)
    dev = tdev(device)
    net = _model(fk.torch.LIFNode()).to(dev)
    head = torch.nn.Linear(16, 3).to(dev)
    x = (2.5 * torch.randn(T, 32, 20)).to(dev)
    y = torch.randint(0, 3, (32,)).to(dev)

    ref_net = _model(_RefLIFModule()).double()
    ref_head = torch.nn.Linear(16, 3).double()
    ref_net[0].load_state_dict({k: v.double().cpu() for k, v in net[0].state_dict().items()})
    ref_head.load_state_dict({k: v.double().cpu() for k, v in head.state_dict().items()})
    ref_loss = _loss(ref_net, ref_head, x.double().cpu(), y.cpu())
    assert ref_net[1].ref.min_margin > 1e-4, "pick another seed: a spike sits on the threshold"
    ref_loss.backward()

    params = list(net.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=1e-2)
    losses = []
    for step in range(30):
        net[1].reset()
        opt.zero_grad()
        loss = _loss(net, head, x, y)
        loss.backward()
        if step == 0:
            assert float(loss) == pytest.approx(float(ref_loss), rel=1e-4)
            for mine, theirs in ((net[0].weight, ref_net[0].weight), (net[0].bias, ref_net[0].bias),
                                 (head.weight, ref_head.weight)):
                close(mine.grad, theirs.grad, "first-step gradient", rtol=1e-3, atol=1e-5)
            assert float(net[0].weight.grad.abs().max()) > 0
        opt.step()
        losses.append(float(loss))
    assert all(math.isfinite(v) for v in losses)
    assert np.mean(losses[-3:]) < 0.7 * losses[0], losses


# ---------------------------------------------------------------------------------------------
# Errors.

def test_state_from_another_shape(device):
    """A state carried from a call with another shape is refused with a message pointing to
    reset(); after reset() the new shape runs."""
    node = fk.torch.LIFNode().to(tdev(device))
    node(torch.ones(T, 4, 6, device=tdev(device)))
    with pytest.raises(ValueError, match=r"reset\(\)"):
        node(torch.ones(T, 4, 5, device=tdev(device)))
    node.reset()
    assert node(torch.ones(T, 4, 5, device=tdev(device))).shape == (T, 4, 5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int64, torch.float16])
def test_unsupported_dtype(dtype, device):
    """Only float32 and bfloat16 inputs are taken; others are a TypeError."""
    node = fk.torch.LIFNode().to(tdev(device))
    with pytest.raises(TypeError, match="float32"):
        node(torch.ones(T, 3, dtype=dtype, device=tdev(device)))


def test_parameter_on_another_device():
    """A learnable parameter on another device than the input is a ValueError asking to move
    the module (a 'meta' parameter stands for the other device on a CPU-only machine); an
    input on a device flexkit does not run on is a ValueError too."""
    node = fk.torch.ParametricLIFNode().to("meta")
    with pytest.raises(ValueError, match=r"\.to\(device\)"):
        node(torch.ones(T, 3))
    with pytest.raises(ValueError, match="device"):
        fk.torch.LIFNode()(torch.ones(T, 3, device="meta"))


@pytest.mark.cuda
@pytest.mark.skipif(not fk.cuda.device_count() > 0, reason="no CUDA device")
def test_parameter_on_cpu_input_on_cuda():
    """A PLIF module left on the CPU with a CUDA input is a ValueError asking to move it."""
    node = fk.torch.ParametricLIFNode()
    with pytest.raises(ValueError, match=r"\.to\(device\)"):
        node(torch.ones(T, 3, device="cuda"))


def test_wrong_number_of_inputs(device):
    """A one-input neuron called with two tensors, or with none, is a TypeError."""
    node = fk.torch.LIFNode().to(tdev(device))
    x = torch.ones(T, 3, device=tdev(device))
    with pytest.raises(TypeError, match="1 input"):
        node(x, x)
    with pytest.raises(TypeError):
        node()


def test_not_a_tensor():
    """A NumPy array is not taken as a module input."""
    with pytest.raises(TypeError, match="torch.Tensor"):
        fk.torch.LIFNode()(np.ones((T, 3), np.float32))


def test_modules_copy_and_save_whole(gen):
    """A module holding a neuron deep-copies and round-trips through torch.save with its
    bound settings (the neuron pickles as its source)."""
    import copy
    import io

    node = fk.torch.LIFNode(tau=3.0, v_reset=None, surrogate="atan(2)")
    x = torch.rand((5, 2, 3), generator=gen) * 2
    expected = node(x)
    clone = copy.deepcopy(node)
    clone.reset()
    torch.testing.assert_close(clone(x), expected, rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.save(node, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    loaded.reset()
    torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)
    assert loaded.neuron.source == node.neuron.source
