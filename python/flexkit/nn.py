"""The trainer behind `flexkit train`, and the files it writes, from Python."""

from __future__ import annotations

import json
import os

from . import _flexkit


def train(config: dict | None = None, **options) -> dict:
    """Trains a spiking classifier on Fashion-MNIST as `flexkit train` does and returns what the
    run measured: history (one dict per epoch), test_accuracy, best_test_accuracy,
    samples_per_second, wall_seconds, peak memory, device and architecture.

    Options (a dict and/or keywords, by the command line's names with '_' for '-'): model (a
    preset such as 'mlp' or 'csnn', or an architecture string), neuron, neuron_settings (a
    dict), time_steps, epochs, batch, lr, momentum, weight_decay, nesterov, optimizer, loss,
    schedule, step_size, gamma, seed, limit, device, data_dir, checkpoint_dir, resume, save,
    summary, quiet, cuda_graph (False: no captured CUDA graph steps). Unset ones take the
    preset's values.
    """
    merged = dict(config or {})
    merged.update(options)
    for key in ("data_dir", "checkpoint_dir", "resume", "save", "summary"):
        if key in merged and merged[key] is not None:
            merged[key] = os.fspath(merged[key])
    return _flexkit._train(merged)


def evaluate(checkpoint, device: str = "auto", data_dir: str = "", limit: int = 0) -> dict:
    """The test-set loss and accuracy of a checkpoint's weights."""
    return _flexkit._evaluate_checkpoint(os.fspath(checkpoint), device, os.fspath(data_dir), limit)


def presets() -> list[dict]:
    """The named models `train` knows, with the hyper-parameters they train with."""
    return _flexkit._presets()


def load_weights(path) -> dict:
    """The arrays of a saved model (.npz, as `flexkit train --save` writes it) as NumPy arrays
    by name, e.g. '0.weight' (PyTorch's layouts: Linear (out, in), Conv2d (K, C, R, S))."""
    return {name: array.numpy() for name, array in _flexkit._load_npz(os.fspath(path)).items()}


def load_model(path) -> dict:
    """The model description a saved .npz carries (architecture, neuron, settings), as a dict."""
    strings = _flexkit._load_npz_strings(os.fspath(path))
    if "model" not in strings:
        raise _flexkit.FormatError(f"{os.fspath(path)}: no 'model' entry (not a flexkit model)")
    return json.loads(strings["model"])
