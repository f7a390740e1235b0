"""Fused expressions from Python against NumPy in float64: operators, functions, reductions,
broadcasting, evaluation on assignment and with fk.evaluate."""

import numpy as np
import pytest

import flexkit as fk


def _close(actual, expected, rtol=2e-6, atol=1e-6):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol, atol=atol)


def test_operators_and_functions(device, rng):
    a64 = rng.standard_normal((5, 7))
    b64 = rng.random((5, 7)) + 0.5
    c64 = rng.standard_normal(7)
    a = fk.array(a64.astype(np.float32), device=device)
    b = fk.array(b64.astype(np.float32), device=device)
    c = fk.array(c64.astype(np.float32), device=device)
    a64, b64, c64 = (v.astype(np.float32).astype(np.float64) for v in (a64, b64, c64))
    cases = [
        (a * b + c, a64 * b64 + c64),
        (a - 2.5 / b, a64 - 2.5 / b64),
        (-a + 1, -a64 + 1),
        (1 - a, 1 - a64),
        (b ** 2, b64 ** 2),
        (2 ** a, 2 ** a64),
        (abs(a), np.abs(a64)),
        (fk.exp(a), np.exp(a64)),
        (fk.log(b), np.log(b64)),
        (fk.sqrt(b), np.sqrt(b64)),
        (fk.sig(a * 3), 1 / (1 + np.exp(-a64 * 3))),
        (fk.tanh(a), np.tanh(a64)),
        (fk.maximum(a, c), np.maximum(a64, c64)),
        (fk.minimum(a, 0), np.minimum(a64, 0)),
        (fk.clip(a, -0.5, 0.5), np.clip(a64, -0.5, 0.5)),
        (fk.where(a > 0, a, b), np.where(a64 > 0, a64, b64)),
        (a < c, (a64 < c64).astype(np.float64)),
        (fk.floor(a * 4), np.floor(a64 * 4)),
        (fk.sign(a), np.sign(a64)),
        (fk.reciprocal(b), 1 / b64),
    ]
    for expr, expected in cases:
        assert isinstance(expr, fk.Expr)
        assert expr.shape == expected.shape
        _close(fk.evaluate(expr).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_reductions_and_softmax(device, rng):
    x64 = rng.standard_normal((6, 9)).astype(np.float32).astype(np.float64)
    x = fk.array(x64.astype(np.float32), device=device)
    _close(fk.evaluate(fk.sum(x, 1)).numpy(), x64.sum(1, keepdims=True), rtol=1e-5)
    _close(fk.evaluate(fk.max(x, 0)).numpy(), x64.max(0, keepdims=True))
    _close(fk.evaluate(fk.mean(x)).numpy(), x64.mean(keepdims=True), atol=1e-6)
    np.testing.assert_array_equal(fk.evaluate(fk.argmax(x, 1)).numpy().ravel(), x64.argmax(1))
    out = fk.empty((6, 9), device=device)
    out[...] = fk.exp(x - fk.max(x, 1)) / fk.sum(fk.exp(x - fk.max(x, 1)), 1)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    _close(out.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5)


def test_assignment_forms_and_dtypes(device, rng):
    x64 = rng.standard_normal((4, 8))
    x = fk.array(x64.astype(np.float32), device=device)
    out = fk.zeros((4, 8), device=device)
    out[:, ::2] = x[:, ::2] * 3
    expected = np.zeros((4, 8))
    expected[:, ::2] = x64.astype(np.float32)[:, ::2] * 3
    _close(out.numpy(), expected)
    out *= 2
    _close(out.numpy(), expected * 2)
    b = fk.evaluate(x * 1, "bf16")
    assert b.dtype == "bf16"
    _close(b.numpy(), x64, rtol=1e-2, atol=1e-2)
    f = fk.evaluate(x + 0, "flex16")  # the exact policy: the smallest exponent, no saturation
    assert f.stats()["saturated"] == 0
    _close(f.numpy(), x64.astype(np.float32), rtol=0, atol=2.0 ** (f.iwl - 15))
    g = fk.zeros((4, 8), "flex16", device=device)
    fk.assign(g, x * 100, iwl_policy="exact")
    _close(g.numpy(), x64.astype(np.float32) * 100, rtol=0, atol=2.0 ** (g.iwl - 15))


def test_numpy_operands_and_errors(rng):
    a = rng.standard_normal(5).astype(np.float32)
    x = fk.array(a)
    _close(fk.evaluate(x + a).numpy(), 2 * a.astype(np.float64))
    with pytest.raises(fk.ShapeError):
        fk.evaluate(x + fk.zeros((4,)))
    with pytest.raises(TypeError):
        bool(x > 0)
    with pytest.raises(ValueError):
        fk.assign(fk.zeros((5,)), x, iwl_policy="nearest")


def test_stochastic_rounding(device):
    """rounding='stochastic': each flex16 value rounds to one of its two neighbours, up with
    probability equal to the fraction dropped; one seed gives one result, and the mean is
    unbiased where round-to-nearest is off by a quarter unit."""
    unit = 2.0 ** -15  # iwl 0
    x = fk.array(np.full(1 << 16, 700.25 * unit, np.float32), device=device)
    runs = []
    for seed in (5, 5, 6):
        y = fk.zeros((1 << 16,), "flex16", device=device)
        fk.assign(y, x * 1, iwl=0, rounding="stochastic", seed=seed)
        runs.append(y.numpy().astype(np.float64) / unit)
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])
    assert set(np.unique(runs[0])) == {700.0, 701.0}
    assert abs(runs[0].mean() - 700.25) < 0.01
    nearest = fk.zeros((4,), "flex16", device=device)
    fk.assign(nearest, x[:4] * 1, iwl=0)
    np.testing.assert_array_equal(nearest.numpy().astype(np.float64) / unit, 700.0)
    with pytest.raises(ValueError):
        fk.assign(nearest, x[:4] * 1, rounding="up")
