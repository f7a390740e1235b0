"""flexkit.array: array-likes into flexkit arrays, zero-copy where the memory allows it."""

from __future__ import annotations

from . import _flexkit

# NumPy dtypes flexkit holds as they are, and those converted on the way in when no dtype is
# asked for (the values must fit: int64 and friends into int32, float16 into float32).
_NUMPY_NATIVE = {"float32": "f32", "float64": "f64", "uint8": "u8", "int32": "i32", "bool": "u8"}
_NUMPY_WIDENED = {
    "float16": "f32",
    "int8": "i32",
    "int16": "i32",
    "uint16": "i32",
    "int64": "i32",
    "uint32": "i32",
    "uint64": "i32",
}


def array(obj, dtype=None, device="cpu", *, copy: bool | None = None) -> _flexkit.Array:
    """A flexkit.Array from `obj`: a flexkit.Array, a NumPy array, a PyTorch or CuPy tensor (any
    object with __dlpack__ or the buffer protocol), or nested sequences and numbers.

    Zero-copy rule: when `obj` holds a flexkit dtype (float32, float64, bfloat16, uint8, bool
    as uint8, int32) on `device` and `dtype` is None or that dtype, the result views the same
    memory with the same strides (non-contiguous layouts included) and keeps `obj` alive.
    Otherwise the values are converted into a new array: to `dtype` (flex16 takes the smallest
    exponent that holds them); NumPy's int64, int16, ... to int32 (the values must fit) and
    float16 to float32; Python floats to float32 (as torch.tensor does), ints to int32.
    copy=True always copies; copy=False raises ValueError where a copy would be needed. A torch
    tensor that requires grad is detached first.
    """
    want = None if dtype is None else _flexkit._dtype_name(dtype)
    target = _flexkit._device_name(device)
    viewed = True
    if isinstance(obj, _flexkit.Array):
        result = obj
    else:
        if _is_torch_tensor(obj) and obj.requires_grad:
            obj = obj.detach()
        result = None
        if hasattr(obj, "__dlpack__") or _supports_buffer(obj):
            try:
                result = _flexkit._import_dlpack(obj, _writable(obj))
            except TypeError:
                result = None  # a dtype flexkit lacks: converted below
        if result is None:
            _refuse_copy(copy, "the values need converting")
            result, viewed = _from_values(obj, want), False
    if want is not None and result.dtype != want:
        _refuse_copy(copy, f"{result.dtype} -> {want} is a conversion")
        result, viewed = _convert(result, want), False
    if result.device != target:
        _refuse_copy(copy, f"{result.device} -> {target} is a copy")
        result, viewed = result.copy_to(target), False
    if copy is True and viewed:
        result = result.clone()
    return result


def _refuse_copy(copy, why: str) -> None:
    if copy is False:
        raise ValueError(f"flexkit.array: copy=False, but {why}")


def _is_torch_tensor(obj) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "requires_grad")


def _writable(obj) -> bool:
    flags = getattr(obj, "flags", None)
    return bool(getattr(flags, "writeable", True)) if flags is not None else True


def _supports_buffer(obj) -> bool:
    try:
        memoryview(obj)
        return True
    except TypeError:
        return False


def _import_numpy(values) -> _flexkit.Array:
    import numpy as np

    return _flexkit._import_dlpack(np.ascontiguousarray(values), True)


def _convert(a: _flexkit.Array, dtype: str) -> _flexkit.Array:
    if dtype == "f64":
        import numpy as np

        return _import_numpy(np.asarray(a.numpy(), dtype=np.float64))
    return _flexkit.evaluate(a, dtype)


def _from_values(obj, want) -> _flexkit.Array:
    import numpy as np

    if _is_torch_tensor(obj):
        obj = obj.detach().cpu().numpy()
    elif type(obj).__module__.startswith("cupy"):
        obj = obj.get()
    values = np.asarray(obj)
    name = values.dtype.name
    if want is None:
        if isinstance(obj, np.ndarray) and name in _NUMPY_NATIVE:
            want = _NUMPY_NATIVE[name]
        elif isinstance(obj, np.ndarray) and name in _NUMPY_WIDENED:
            want = _NUMPY_WIDENED[name]
        elif values.dtype.kind == "f":
            want = "f32"
        elif values.dtype.kind in "iu":
            want = "i32"
        elif values.dtype.kind == "b":
            want = "u8"
        else:
            raise TypeError(f"flexkit.array: no flexkit dtype holds {name} values; pass dtype=")
    if values.dtype.kind not in "fiub":
        raise TypeError(f"flexkit.array: cannot convert {name} values to {want}")
    if want == "i32":
        if values.size and (values.min() < -(2**31) or values.max() >= 2**31):
            raise ValueError("flexkit.array: the values do not fit int32")
        return _import_numpy(values.astype(np.int32))
    if want == "u8":
        if values.size and (values.min() < 0 or values.max() > 255):
            raise ValueError("flexkit.array: the values do not fit uint8")
        return _import_numpy(values.astype(np.uint8))
    if want == "f64":
        return _import_numpy(values.astype(np.float64))
    f32 = _import_numpy(values.astype(np.float32))
    return f32 if want == "f32" else _flexkit.evaluate(f32, want)
