"""flexkit.Array from Python: properties, views and writes against NumPy, and zero-copy
exchange with NumPy and PyTorch (the same memory, checked by address and by writes)."""

import numpy as np
import pytest

import flexkit as fk


def test_properties_and_views_match_numpy(rng):
    a = rng.standard_normal((4, 5, 6)).astype(np.float32)
    x = fk.array(a)
    assert x.shape == (4, 5, 6) and x.dtype == "f32" and x.device == "cpu"
    assert x.strides == tuple(s // 4 for s in a.strides)
    assert x.ndim == 3 and x.size == a.size and x.nbytes == a.nbytes and len(x) == 4
    for key in [1, -1, (1, 2), (slice(1, None), slice(None, None, 2)), (Ellipsis, 3),
                (slice(None, None, -1), None, 2), (0, slice(4, 0, -2), slice(None)),
                (None, Ellipsis, None)]:
        view = x[key]
        expected = a[key]
        assert view.shape == expected.shape, key
        np.testing.assert_array_equal(view.numpy(), expected)
        assert np.shares_memory(view.numpy(), a), key
    np.testing.assert_array_equal(x.T.numpy(), a.T)
    np.testing.assert_array_equal(x.transpose(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.reshape(20, 6).numpy(), a.reshape(20, 6))
    np.testing.assert_array_equal(x.reshape(-1).numpy(), a.reshape(-1))
    np.testing.assert_array_equal(x[:1].broadcast_to((3, 5, 6)).numpy(),
                                  np.broadcast_to(a[:1], (3, 5, 6)))


def test_writes_through_views_reach_the_numpy_memory(rng):
    a = np.zeros((4, 6), np.float32)
    x = fk.array(a)
    x[1:3, ::2] = 7.5
    expected = np.zeros((4, 6), np.float32)
    expected[1:3, ::2] = 7.5
    np.testing.assert_array_equal(a, expected)
    row = rng.standard_normal(6).astype(np.float32)
    x[3] = fk.array(row)  # an array of the same dtype: copied
    expected[3] = row
    np.testing.assert_array_equal(a, expected)
    x[0] = row  # a NumPy array: broadcast and written
    expected[0] = row
    np.testing.assert_array_equal(a, expected)
    x[...] = x * 2 + 1  # an expression over the array itself
    np.testing.assert_allclose(a, expected * 2 + 1, rtol=1e-6)
    x += 1
    np.testing.assert_allclose(a, expected * 2 + 2, rtol=1e-6)


def test_index_errors_are_python_exceptions():
    x = fk.zeros((3, 4))
    with pytest.raises(IndexError):
        x[3]
    with pytest.raises(IndexError):
        x[0, 0, 0]
    with pytest.raises(ValueError):
        x[::0]
    with pytest.raises(TypeError):
        x["a"]
    with pytest.raises(ValueError):  # ShapeError is a ValueError
        x.reshape(5, 5)
    with pytest.raises(fk.ShapeError):
        x[...] = fk.zeros((2, 4))


def test_numpy_round_trip_is_zero_copy_both_ways(rng):
    for dtype in (np.float32, np.float64, np.uint8, np.int32):
        a = (rng.random((3, 5)) * 100).astype(dtype)
        x = fk.array(a)
        assert x.data_ptr == a.ctypes.data
        back = x.numpy()
        assert back.ctypes.data == a.ctypes.data and back.dtype == a.dtype
        assert np.from_dlpack(x).ctypes.data == a.ctypes.data
        assert fk.from_dlpack(a).data_ptr == a.ctypes.data
    # A view that keeps its own strides (no copy).
    a = rng.standard_normal((6, 8)).astype(np.float32)
    strided = a[::2, 1::3]
    x = fk.array(strided)
    assert x.data_ptr == strided.ctypes.data
    assert x.strides == (16, 3)
    np.testing.assert_array_equal(x.numpy(), strided)
    reversed_view = a[::-1]
    y = fk.array(reversed_view)
    np.testing.assert_array_equal(y.numpy(), reversed_view)
    assert y.data_ptr == reversed_view.ctypes.data


def test_memory_outlives_the_exporter():
    x = fk.arange(10)
    view = x.numpy()
    del x
    np.testing.assert_array_equal(view, np.arange(10, dtype=np.float32))
    a = np.arange(5, dtype=np.float32)
    y = fk.array(a)
    del a
    np.testing.assert_array_equal(y.numpy(), np.arange(5, dtype=np.float32))


def test_torch_round_trip_is_zero_copy_both_ways():
    torch = pytest.importorskip("torch")
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    x = fk.array(t)
    assert x.data_ptr == t.data_ptr() and x.shape == (4, 6)
    t2 = torch.from_dlpack(x)
    assert t2.data_ptr() == t.data_ptr()
    x[0] = 100.0
    assert float(t[0, 3]) == 100.0
    # Non-contiguous: viewed with its strides.
    tt = t.t()
    y = fk.array(tt)
    assert y.strides == tuple(tt.stride()) and y.data_ptr == tt.data_ptr()
    np.testing.assert_array_equal(y.numpy(), tt.numpy())
    # bf16 crosses as bf16 (NumPy has none; .numpy() gives its float32 values).
    b = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
    xb = fk.array(b)
    assert xb.dtype == "bf16" and xb.data_ptr == b.data_ptr()
    np.testing.assert_array_equal(xb.numpy(), b.float().numpy())
    back = torch.from_dlpack(xb)
    assert back.dtype == torch.bfloat16 and back.data_ptr() == b.data_ptr()
    # A tensor that requires grad is detached (same memory).
    w = torch.ones(3, requires_grad=True)
    assert fk.array(w).data_ptr == w.data_ptr()


def test_unsupported_dtypes_and_devices_are_clear_errors():
    with pytest.raises(TypeError, match="int64"):
        fk.from_dlpack(np.arange(3, dtype=np.int64))
    with pytest.raises(TypeError, match="float16"):
        fk.from_dlpack(np.zeros(3, np.float16))
    with pytest.raises(TypeError):
        fk.from_dlpack(object())
    with pytest.raises(TypeError):
        fk.array({"a": 1})
    x = fk.zeros((2,), "flex16")
    with pytest.raises(TypeError, match="flex16"):
        x.__dlpack__()
    with pytest.raises(ValueError):
        fk.zeros((2,), "f32", device="tpu")
    with pytest.raises(TypeError):
        fk.zeros((2,), "complex64")


def test_array_converts_what_it_cannot_view(rng):
    ints = rng.integers(-1000, 1000, size=(3, 4))  # int64
    x = fk.array(ints)
    assert x.dtype == "i32"
    np.testing.assert_array_equal(x.numpy(), ints)
    with pytest.raises(ValueError):
        fk.array(np.array([2**40]))
    f = fk.array([[0.5, 1.5], [2.5, -3.0]])
    assert f.dtype == "f32" and f.shape == (2, 2)
    a = rng.standard_normal(5).astype(np.float32)
    copied = fk.array(a, copy=True)
    assert copied.data_ptr != a.ctypes.data
    np.testing.assert_array_equal(copied.numpy(), a)
    with pytest.raises(ValueError, match="copy=False"):
        fk.array(a, dtype="f64", copy=False)
    as_f64 = fk.array(a, dtype="f64")
    assert as_f64.dtype == "f64"
    np.testing.assert_array_equal(as_f64.numpy(), a.astype(np.float64))


def test_flex16_values_exponent_and_statistics():
    x = fk.array(np.array([0.4, -1.25, 3.0], np.float32), dtype="flex16")
    assert x.dtype == "flex16"
    assert x.iwl == 2  # the smallest exponent holding 3.0: 3 < 2**2
    m = x.mantissas()
    expected_m = np.round(np.array([0.4, -1.25, 3.0]) * 2.0 ** (15 - 2))
    np.testing.assert_array_equal(m, expected_m)
    np.testing.assert_array_equal(x.numpy(), m * 2.0 ** (x.iwl - 15))
    y = fk.empty((3,), "flex16")
    y.iwl = 0
    y[...] = fk.array(np.array([0.5, 2.0, -4.0], np.float32))
    stats = y.stats()
    assert stats["saturated"] == 2 and stats["max_abs_mantissa"] == 32768
    np.testing.assert_array_equal(y.numpy(), [0.5, 32767 * 2.0**-15, -1.0])


def test_factories_and_copies(device):
    x = fk.arange(2, 12, 2, device=device)
    np.testing.assert_array_equal(x.numpy(), np.arange(2, 12, 2))
    assert x.device.startswith(device)
    z = fk.zeros((2, 3), "i32", device=device)
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3)))
    f = fk.full((2, 2), 1.5, device=device)
    np.testing.assert_array_equal(f.numpy(), np.full((2, 2), 1.5))
    back = f.copy_to("cpu")
    assert back.device == "cpu"
    np.testing.assert_array_equal(back.numpy(), np.full((2, 2), 1.5))


def test_npy_files_round_trip(tmp_path, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    path = tmp_path / "a.npy"
    fk.save_npy(str(path), fk.array(a)[:, 1:])
    np.testing.assert_array_equal(np.load(path), a[:, 1:])
    np.save(tmp_path / "b.npy", a.T)
    b = fk.load_npy(str(tmp_path / "b.npy"))
    np.testing.assert_array_equal(b.numpy(), a.T)
    with pytest.raises(OSError):
        fk.load_npy(str(tmp_path / "missing.npy"))
    (tmp_path / "bad.npy").write_bytes(b"not a numpy file")
    with pytest.raises(fk.FormatError):
        fk.load_npy(str(tmp_path / "bad.npy"))


def test_read_only_numpy_stays_read_only():
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    x = fk.array(a)
    assert x.data_ptr == a.ctypes.data and not x.writable
    with pytest.raises(ValueError, match="read-only"):
        x[0] = 1.0
    np.testing.assert_array_equal(fk.evaluate(x * 2).numpy(), a * 2)
