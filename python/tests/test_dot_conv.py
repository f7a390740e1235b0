"""fk.dot and fk.conv: flex16 integer products bit-exact against an integer reference written in
Python, float32 against NumPy in float64."""

import numpy as np
import pytest

import flexkit as fk


def _flex16(rng, shape, iwl):
    m = rng.integers(-32768, 32768, size=shape, dtype=np.int64)
    values = (m * 2.0 ** (iwl - 15)).astype(np.float32)
    x = fk.zeros(shape, "flex16")
    x.iwl = iwl
    x[...] = values  # exactly representable at this exponent
    assert np.array_equal(x.mantissas(), m)
    return x, m


def _round_half_even_shift(s, shift):
    """s * 2**shift rounded half to even, for Python ints, then saturated to int16."""
    if shift >= 0:
        r = s << shift
    else:
        d = 1 << -shift
        q, rem = divmod(s, d)
        if 2 * rem > d or (2 * rem == d and q % 2 == 1):
            q += 1
        r = q
    return max(-32768, min(32767, r)), not -32768 <= r <= 32767


def _reference_products(sums, shift):
    out = np.empty(sums.shape, np.int64)
    saturated = 0
    for index, s in np.ndenumerate(sums):
        out[index], sat = _round_half_even_shift(int(s), shift)
        saturated += sat
    return out, saturated


def test_flex16_dot_is_bit_exact(device, rng):
    a, ma = _flex16(rng, (9, 33), 3)
    b, mb = _flex16(rng, (33, 7), -2)
    sums = ma @ mb  # exact in int64: |sum| < 33 * 2**30
    out = fk.zeros((9, 7), "flex16", device=device)
    out_iwl = 12
    fk.dot(a.copy_to(device), b.copy_to(device), out, iwl=out_iwl)
    # value = S * 2**(ia-15) * 2**(ib-15); mantissa at io: S * 2**(ia + ib - 15 - io)
    expected, saturated = _reference_products(sums, 3 + (-2) - 15 - out_iwl)
    assert out.iwl == out_iwl
    np.testing.assert_array_equal(out.mantissas(), expected)
    assert out.stats()["saturated"] == saturated
    # A fresh output takes the smallest exponent that holds the exact result.
    fresh = fk.dot(a.copy_to(device), b.copy_to(device))
    assert fresh.dtype == "flex16"
    exact = sums.astype(np.float64) * 2.0 ** (3 - 2 - 30)
    assert np.abs(exact).max() < 2.0 ** fresh.iwl
    assert np.abs(exact).max() >= 2.0 ** (fresh.iwl - 1) * (1 - 2.0 ** -16)
    ref, sat = _reference_products(sums, 3 + (-2) - 15 - fresh.iwl)
    assert sat == 0
    np.testing.assert_array_equal(fresh.mantissas(), ref)


def test_flex16_times_spikes_and_transposed_views(device, rng):
    w, mw = _flex16(rng, (12, 20), 1)
    spikes = (rng.random((20, 16)) < 0.3).astype(np.uint8)
    out = fk.dot(w.copy_to(device), fk.array(spikes, device=device), out_dtype="f32")
    np.testing.assert_array_equal(out.numpy(), (mw @ spikes.astype(np.int64)) * 2.0 ** (1 - 15))
    # Aᵀ through a view: the same products as the transposed copy.
    wt = fk.array(np.ascontiguousarray(w.numpy().T), dtype="flex16").copy_to(device)
    by_view = fk.dot(wt.T, fk.array(spikes, device=device), out_dtype="f32")
    np.testing.assert_array_equal(by_view.numpy(), out.numpy())


def test_f32_dot_against_float64(device, rng):
    a = rng.standard_normal((3, 17, 29)).astype(np.float32)
    b = rng.standard_normal((29, 11)).astype(np.float32)
    out = fk.dot(fk.array(a, device=device), fk.array(b, device=device))
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    acc = fk.array(np.ones((3, 17, 11), np.float32), device=device)
    fk.dot(fk.array(a, device=device), fk.array(b, device=device), acc, alpha=2.0, beta=0.5)
    np.testing.assert_allclose(acc.numpy(), 2 * (a.astype(np.float64) @ b) + 0.5, rtol=1e-4,
                               atol=1e-4)
    with pytest.raises(fk.ShapeError):
        fk.dot(fk.zeros((3, 4), device=device), fk.zeros((5, 2), device=device))


def _conv2d_reference(x, f, padding, stride):
    """x (C, H, W, N), f (C, R, S, K) -> (K, P, Q, N), float64 or int64, by direct loops."""
    C, H, W, N = x.shape
    _, R, S, K = f.shape
    xp = np.zeros((C, H + 2 * padding, W + 2 * padding, N), x.dtype)
    xp[:, padding:padding + H, padding:padding + W] = x
    P = (H + 2 * padding - R) // stride + 1
    Q = (W + 2 * padding - S) // stride + 1
    out = np.zeros((K, P, Q, N), x.dtype)
    for r in range(R):
        for s in range(S):
            patch = xp[:, r:r + stride * P:stride, s:s + stride * Q:stride]  # (C, P, Q, N)
            out += np.einsum("cpqn,ck->kpqn", patch, f[:, r, s, :])
    return out


def test_f32_convolutions_against_float64(device, rng):
    x = rng.standard_normal((3, 9, 8, 4)).astype(np.float32)
    f = rng.standard_normal((3, 3, 3, 5)).astype(np.float32)
    xd, fd = fk.array(x, device=device), fk.array(f, device=device)
    y = fk.conv.fprop(xd, fd, padding=1, stride=2)
    ref = _conv2d_reference(x.astype(np.float64), f.astype(np.float64), 1, 2)
    assert y.shape == ref.shape == tuple(fk.conv.output_shape(x.shape, f.shape, padding=1, stride=2))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-4)
    # bprop and update against finite sums: <fprop(x), e> is linear in x and in f.
    e = rng.standard_normal(ref.shape).astype(np.float32)
    gx = fk.conv.bprop(fd, fk.array(e, device=device), input_shape=x.shape, padding=1, stride=2)
    gf = fk.conv.update(xd, fk.array(e, device=device), filter_shape=f.shape, padding=1, stride=2)
    dx = rng.standard_normal(x.shape)
    df = rng.standard_normal(f.shape)
    lhs_x = np.sum(_conv2d_reference(dx, f.astype(np.float64), 1, 2) * e)
    lhs_f = np.sum(_conv2d_reference(x.astype(np.float64), df, 1, 2) * e)
    np.testing.assert_allclose(np.sum(gx.numpy() * dx), lhs_x, rtol=1e-4)
    np.testing.assert_allclose(np.sum(gf.numpy() * df), lhs_f, rtol=1e-4)


def test_flex16_convolution_is_bit_exact(device, rng):
    x, mx = _flex16(rng, (4, 6, 6, 8), 0)
    f, mf = _flex16(rng, (4, 3, 3, 2), -1)
    out = fk.zeros(fk.conv.output_shape(x.shape, f.shape, padding=1), "flex16", device=device)
    fk.conv.fprop(x.copy_to(device), f.copy_to(device), out, padding=1, iwl=10)
    sums = _conv2d_reference(mx, mf, 1, 1)
    expected, saturated = _reference_products(sums, 0 + (-1) - 15 - 10)
    np.testing.assert_array_equal(out.mantissas(), expected)
    assert out.stats()["saturated"] == saturated


def test_layout_helpers_match_torch_layouts(rng):
    nchw = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    cl = fk.conv.to_layout(nchw)
    np.testing.assert_array_equal(cl.numpy(), np.moveaxis(nchw, 0, -1))
    np.testing.assert_array_equal(fk.conv.from_layout(cl).numpy(), nchw)


CPU_KERNELS = {"cpu.avx512_vnni", "cpu.avx2", "cpu.scalar"}
CUDA_DOT_KERNELS = {"cuda.planar", "cuda.ss", "cuda.simple", "cuda.cublas_f32",
                    "cuda.cublas_f32_split_k"}
CUDA_CONV_KERNELS = {
    "cuda.implicit_gemm.shallow_transposed", "cuda.implicit_gemm.shallow_specialized",
    "cuda.implicit_gemm.shallow", "cuda.deep_k", "cuda.implicit_gemm.stream_k",
    "cuda.implicit_gemm.lean", "cuda.direct"}


def test_kernel_names_are_planned_without_running(device, rng):
    a, _ = _flex16(rng, (9, 33), 3)
    b, _ = _flex16(rng, (33, 7), -2)
    a, b = a.copy_to(device), b.copy_to(device)
    out = fk.zeros((9, 7), "flex16", device=device)
    out.iwl = 12
    before = out.mantissas().copy()
    name = fk.dot_kernel_name(a, b, out, iwl=12)
    assert name in (CPU_KERNELS if device == "cpu" else CUDA_DOT_KERNELS)
    np.testing.assert_array_equal(out.mantissas(), before)  # nothing ran
    assert fk.dot_kernel_name(a, b) == fk.dot_kernel_name(a, b, out, iwl=12)
    with pytest.raises(fk.ShapeError):  # checked as fk.dot checks
        fk.dot_kernel_name(a, a)
    # An empty inner dimension has nothing to multiply.
    empty = fk.zeros((9, 0), "flex16", device=device)
    assert fk.dot_kernel_name(empty, fk.zeros((0, 7), "flex16", device=device), out) == "none"

    x = fk.zeros((4, 6, 6, 8), "flex16", device=device)
    f = fk.zeros((4, 3, 3, 2), "flex16", device=device)
    y = fk.zeros(fk.conv.output_shape(x.shape, f.shape, padding=1), "flex16", device=device)
    names = {fk.conv.kernel_name("fprop", x, f, y, padding=1),
             fk.conv.kernel_name("bprop", f, y, x, padding=1),
             fk.conv.kernel_name("update", x, y, f, padding=1)}
    if device == "cpu":
        # One instruction set for every heavy product on the CPU.
        assert names == {name}
    else:
        assert names <= CUDA_CONV_KERNELS
    with pytest.raises(ValueError):
        fk.conv.kernel_name("forward", x, f, y, padding=1)
    with pytest.raises(fk.ShapeError):
        fk.conv.kernel_name("fprop", x, f, x, padding=1)
