"""fk.train / fk.nn: the trainer from Python, its summary, and the weights it saves, checked
against NumPy's own reading of the files."""

import os

import numpy as np
import pytest

import flexkit as fk

DATA = os.environ.get("FLEXKIT_DATA_DIR", "/usr/share/datasets/fashion-mnist")
pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")),
    reason="Fashion-MNIST not installed (dataset-fashion-mnist)")


def test_train_returns_the_summary_and_saves_weights(tmp_path):
    save = tmp_path / "model.npz"
    summary = fk.train({"model": "flatten linear(32) sn linear(10) sn", "epochs": 1},
                       limit=512, batch=64, device="cpu", quiet=True, save=save, seed=3,
                       checkpoint_dir=tmp_path / "ckpt")
    assert len(summary["history"]) == 1
    epoch = summary["history"][0]
    assert 0.0 <= epoch["test_accuracy"] <= 1.0 and np.isfinite(epoch["train_loss"])
    assert summary["test_accuracy"] == epoch["test_accuracy"]
    assert summary["device"] == "cpu" and summary["samples_per_second"] > 0
    weights = fk.nn.load_weights(save)
    with np.load(save) as z:
        numeric = [k for k in z.files if z[k].dtype != np.dtype("<U1") and z[k].dtype.kind != "U"]
        assert sorted(weights) == sorted(numeric)
        for name in weights:
            np.testing.assert_array_equal(weights[name], z[name])
    assert weights["1.weight"].shape == (32, 784) and weights["3.weight"].shape == (10, 32)
    model = fk.nn.load_model(save)
    assert "linear(32" in model["architecture"]
    # The same seed gives the same weights, bit for bit.
    again = tmp_path / "again.npz"
    fk.train(model="flatten linear(32) sn linear(10) sn", epochs=1, limit=512, batch=64,
             device="cpu", quiet=True, save=str(again), seed=3)
    for name, w in fk.nn.load_weights(again).items():
        np.testing.assert_array_equal(w, weights[name])
    evaluated = fk.nn.evaluate(tmp_path / "ckpt" / "best.ckpt", device="cpu", limit=512)
    assert evaluated["samples"] == 512
    assert evaluated["test_accuracy"] == pytest.approx(summary["best_test_accuracy"])


def test_bad_options_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown option"):
        fk.train(epoch=1)
    with pytest.raises(ValueError):
        fk.train(model="flatten linear(", epochs=1, limit=64, quiet=True)
    with pytest.raises(OSError):
        fk.nn.load_weights(tmp_path / "missing.npz")
    assert any(p["name"] == "mlp" for p in fk.nn.presets())


def test_ctrl_c_stops_training_with_keyboard_interrupt():
    """SIGINT during fk.train stops it after the current step (KeyboardInterrupt), and Python's
    own handler is back afterwards."""
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt, match="Ctrl-C"):
            fk.train(model="flatten linear(64) sn linear(10) sn", epochs=50, limit=4096,
                     device="cpu", quiet=True)
    finally:
        timer.cancel()
    assert signal.getsignal(signal.SIGINT) is previous
