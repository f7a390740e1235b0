"""Zero-copy exchange of CUDA memory with PyTorch and CuPy (the same device pointer both ways),
and the stream a module's kernels run on. Needs a GPU (the `cuda` mark)."""

import numpy as np
import pytest

import flexkit as fk

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(fk.cuda.device_count() == 0, reason="no CUDA device")]


def test_torch_cuda_tensors_are_viewed_not_copied():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    x = fk.array(t, device="cuda")
    assert x.device == "cuda:0" and x.data_ptr == t.data_ptr()
    strided = t.t()
    y = fk.from_dlpack(strided)
    assert y.strides == tuple(strided.stride()) and y.data_ptr == strided.data_ptr()
    np.testing.assert_array_equal(y.numpy(), strided.cpu().numpy())
    out = fk.empty((3, 4), device="cuda")
    out[...] = x * 2 + 1
    back = torch.from_dlpack(out)
    assert back.data_ptr() == out.data_ptr and back.device.type == "cuda"
    torch.testing.assert_close(back, t * 2 + 1)
    x[0] = 7.0  # writes through flexkit land in torch's tensor
    torch.cuda.synchronize()
    assert float(t[0, 2]) == 7.0


def test_cupy_arrays_are_viewed_not_copied():
    cupy = pytest.importorskip("cupy")
    c = cupy.arange(10, dtype=cupy.float32)
    x = fk.from_dlpack(c)
    assert x.device == "cuda:0" and x.data_ptr == c.data.ptr
    y = fk.evaluate(fk.sqrt(x))
    back = cupy.from_dlpack(y)
    assert back.data.ptr == y.data_ptr
    np.testing.assert_allclose(cupy.asnumpy(back), np.sqrt(np.arange(10, dtype=np.float64)),
                               rtol=1e-6)
    with pytest.raises(TypeError):
        fk.from_dlpack(cupy.zeros(3, dtype=cupy.float16))


def test_module_runs_on_torchs_current_stream():
    torch = pytest.importorskip("torch")
    node = fk.torch.LIFNode()
    x = (torch.rand((8, 4, 1000), device="cuda") * 2).requires_grad_()
    expected = node(x)
    node.reset()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = node(x)
        got.sum().backward()
    side.synchronize()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert x.grad is not None and torch.isfinite(x.grad).all()
