#!/usr/bin/env python3
"""`flexkit train` and `flexkit eval` end to end on Fashion-MNIST subsets: a smoke training that
must learn, the JSON summary, the .npz weights read by NumPy alone (and a NumPy forward pass
that reproduces flexkit's accuracy), reproducibility, bit-exact resume, and the bad inputs.

    train_cli_test.py FLEXKIT [--device=cpu|cuda]
"""
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

FLEXKIT = None
DEVICE = "cpu"
DATA = os.environ.get("FLEXKIT_DATA_DIR") or "/usr/share/datasets/fashion-mnist"
HAVE_DATA = os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz"))


def run(*args, env=None, timeout=600):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([FLEXKIT, *args], capture_output=True, text=True, env=e, timeout=timeout)


def read_idx(path):
    with gzip.open(path) as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def numpy_forward(weights, model, images):
    """The trained mlp-style network from the .npz alone: layers as the model JSON says."""
    x = (images.reshape(len(images), -1).astype(np.float64) / 255.0 - model["input"]["mean"]) \
        / model["input"]["std"]
    T = model["time_steps"]
    seq = None  # (T, N, F) once a spiking layer has run
    for layer in model["layers"]:
        i = layer["index"]
        if layer["type"] == "flatten":
            continue
        if layer["type"] == "linear":
            w = weights[f"{i}.weight"].astype(np.float64)
            b = weights[f"{i}.bias"].astype(np.float64) if layer["bias"] else 0.0
            if seq is None:
                x = x @ w.T + b
            else:
                seq = seq @ w.T + b
        elif layer["type"] == "spiking":
            assert layer["neuron"] == "lif", layer["neuron"]
            p = {k: v["value"] for k, v in layer["parameters"].items()}
            cur = np.broadcast_to(x, (T,) + x.shape) if seq is None else seq
            # This reference implements LIF with decay_input and hard reset only.
            assert p["decay_input"] == 1 and p["soft_reset"] == 0, p
            v = np.full(cur.shape[1:], layer["initial_states"]["v"])
            out = []
            for t in range(T):
                h = v + (cur[t] - (v - p["v_reset"])) / p["tau"]
                s = (h - p["v_threshold"] >= 0).astype(np.float64)
                v = s * p["v_reset"] + (1 - s) * h
                out.append(s)
            seq = np.stack(out)
        else:
            raise AssertionError(layer["type"])
    return seq.mean(0).argmax(1)


@unittest.skipUnless(HAVE_DATA, "Debian's dataset-fashion-mnist is not installed")
class TrainCli(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flexkit_train_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def train(self, *args, check=True):
        r = run("train", "--device", DEVICE, *args)
        if check:
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def test_smoke_learns_and_writes_summary_and_weights(self):
        r = self.train("--limit", "3000", "--epochs", "2", "--summary", self.path("s.json"),
                       "--save", self.path("m.npz"), "--checkpoint", self.path("ck"))
        self.assertIn("epoch 2/2", r.stdout)
        self.assertIn("samples/s", r.stdout)
        s = json.load(open(self.path("s.json")))
        for key in ["test_accuracy", "best_test_accuracy", "epochs", "history", "wall_seconds",
                    "samples_per_second", "peak_memory_bytes", "device", "precision", "seed",
                    "model", "flexkit_version"]:
            self.assertIn(key, s)
        self.assertGreaterEqual(s["test_accuracy"], 0.70)  # chance is 0.10
        self.assertLessEqual(s["test_accuracy"], 1.0)
        self.assertEqual(s["epochs"], 2)
        self.assertEqual(len(s["history"]), 2)
        for h in s["history"]:
            for key in ["train_loss", "train_accuracy", "test_accuracy", "seconds"]:
                self.assertIn(key, h)
        self.assertEqual(s["best_test_accuracy"], max(h["test_accuracy"] for h in s["history"]))
        self.assertGreater(s["peak_memory_bytes"]["host"], 1 << 20)
        self.assertEqual(s["precision"], "f32")
        self.assertEqual(s["device"], DEVICE if DEVICE == "cpu" else "cuda:0")
        self.assertIn("linear(784, 512", s["model"])

        # The weights through np.load alone, and a NumPy forward pass of the described model.
        z = np.load(self.path("m.npz"))
        self.assertEqual(sorted(k for k in z.files if k != "model"),
                         ["1.bias", "1.weight", "3.bias", "3.weight"])
        self.assertEqual(z["1.weight"].shape, (512, 784))
        self.assertEqual(z["1.weight"].dtype, np.float32)
        model = json.loads(str(z["model"]))
        self.assertEqual(model["time_steps"], 4)
        images = read_idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz"))[:1000]
        labels = read_idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz"))[:1000]
        numpy_accuracy = (numpy_forward(z, model, images) == labels).mean()
        e = run("eval", "--resume", self.path("ck", "epoch-2.ckpt"), "--device", DEVICE,
                "--limit", "1000")
        self.assertEqual(e.returncode, 0, e.stderr)
        flexkit_accuracy = float(e.stdout.split("test accuracy ")[1].split()[0])
        # f32 against float64: a sample whose spike sits on the threshold may differ.
        self.assertAlmostEqual(numpy_accuracy, flexkit_accuracy, delta=0.01)
        self.assertGreaterEqual(flexkit_accuracy, 0.70)

    def test_same_seed_same_weights_and_resume_equals_uninterrupted(self):
        common = ["--limit", "1500", "--epochs", "3", "--batch", "100"]
        self.train(*common, "--save", self.path("a.npz"), "--summary", self.path("a.json"),
                   "--checkpoint", self.path("ck"))
        self.train(*common, "--save", self.path("b.npz"), "--summary", self.path("b.json"))
        self.train("--resume", self.path("ck", "epoch-1.ckpt"), "--save", self.path("c.npz"),
                   "--summary", self.path("c.json"))
        a, b, c = (np.load(self.path(n)) for n in ["a.npz", "b.npz", "c.npz"])
        for k in a.files:
            if k == "model":
                continue
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
            np.testing.assert_array_equal(a[k], c[k], err_msg=k)

        def timeless(path, how_steps_ran=True):
            with open(path) as f:
                s = json.load(f)
            for key in ["wall_seconds", "samples_per_second", "peak_memory_bytes"]:
                s.pop(key)
            if not how_steps_ran:  # a resumed run captures and replays other steps
                s.pop("cuda_graph")
            for h in s["history"]:
                h.pop("seconds")
            return s

        self.assertEqual(timeless(self.path("a.json")), timeless(self.path("b.json")))
        self.assertEqual(timeless(self.path("a.json"), False), timeless(self.path("c.json"), False))
        graph = timeless(self.path("a.json"))["cuda_graph"]
        if DEVICE == "cuda":  # the steps were replayed from a captured graph
            self.assertTrue(graph["used"], graph)
            self.assertGreater(graph["replays"], 0)
            self.assertEqual(graph["note"], "")
        else:
            self.assertIsNone(graph)
        other = run("train", "--device", DEVICE, *common, "--seed", "7", "--epochs", "1",
                    "--save", self.path("d.npz"), "--quiet")
        self.assertEqual(other.returncode, 0, other.stderr)
        self.assertFalse(np.array_equal(np.load(self.path("d.npz"))["1.weight"], a["1.weight"]))

    def test_flex16_learns_like_f32_reports_and_repeats_bit_for_bit(self):
        common = ["--limit", "3000", "--epochs", "2", "--batch", "100"]
        self.train(*common, "--save", self.path("f32.npz"), "--summary", self.path("f32.json"))
        r = self.train(*common, "--precision", "flex16", "--save", self.path("a.npz"),
                       "--summary", self.path("a.json"))
        self.assertIn("precision flex16", r.stdout)
        self.assertIn("flex16 weights:", r.stdout)
        self.train(*common, "--precision", "flex16", "--save", self.path("b.npz"), "--quiet")
        f32, fa = (json.load(open(self.path(n))) for n in ["f32.json", "a.json"])
        self.assertEqual(fa["precision"], "flex16")
        self.assertEqual(fa["master_weights"], "f32")
        self.assertIn("u8", fa["formats"]["activations"])
        for c in ["weights", "activations", "gradients", "optimizer state"]:
            e = fa["exponents"][c]
            self.assertGreater(e["tensors"], 0, c)
            self.assertGreater(e["writes"], 0, c)
            self.assertLessEqual(e["min_iwl"], e["max_iwl"], c)
            self.assertLessEqual(e["overflow_writes"], e["writes"], c)
            self.assertEqual(e["nan_values"], 0, c)
        # Weights stay in a small range: an iwl above 2 would mean |w| >= 2.
        self.assertLessEqual(fa["exponents"]["weights"]["max_iwl"], 2)
        # Learns as f32 does, on a short run.
        self.assertGreaterEqual(fa["test_accuracy"], 0.70)
        self.assertAlmostEqual(fa["test_accuracy"], f32["test_accuracy"], delta=0.03)
        # The same seed gives the same bits.
        a, b = np.load(self.path("a.npz")), np.load(self.path("b.npz"))
        for k in a.files:
            if k != "model":
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        # The saved weights (the f32 master copies) are not the f32 run's.
        self.assertFalse(np.array_equal(a["1.weight"], np.load(self.path("f32.npz"))["1.weight"]))
        t = ["train", "--device", DEVICE, "--limit", "200", "--epochs", "1"]
        self.expect_error(t + ["--precision", "f16"], "--precision")
        self.expect_error(t + ["--master-weights", "f32"], "--master-weights goes with --precision flex16")
        self.expect_error(t + ["--rounding", "stochastic"], "--rounding goes with --precision flex16")
        self.expect_error(t + ["--precision", "flex16", "--rounding", "up"], "--rounding")

    def test_flex16_resume_continues_bit_for_bit(self):
        # Every flex16 state a run carries (published values, optimizer state, each exponent
        # manager's history, dropout's generator) is in the checkpoint: one epoch, then a resumed
        # second and third, give the uninterrupted run's bits, with either kind of master copy.
        model = "conv(8, 3, padding=1, bias=false) bn sn maxpool(2) flatten dropout(0.2) linear(10) sn"
        for master in ("f32", "flex16"):
            common = ["--model", model, "--limit", "600", "--batch", "100", "--precision", "flex16",
                      "--master-weights", master, "--optimizer", "sgd", "--lr", "0.1", "--quiet"]
            whole, part = self.path(f"whole-{master}.npz"), self.path(f"part-{master}.npz")
            ck = self.path(f"ck-{master}")
            self.train(*common, "--epochs", "3", "--save", whole)
            self.train(*common, "--epochs", "1", "--checkpoint", ck)
            self.train("--resume", os.path.join(ck, "epoch-1.ckpt"), "--epochs", "3",
                       "--save", part, "--quiet")
            a, b = np.load(whole), np.load(part)
            for k in a.files:
                if k != "model":
                    np.testing.assert_array_equal(a[k], b[k], err_msg=f"{master} master: {k}")
        # Its precision is the checkpoint's.
        good = self.path("ck-f32", "epoch-1.ckpt")
        self.expect_error(["train", "--device", DEVICE, "--resume", good, "--precision", "f32"],
                          "trained with --precision flex16 --master-weights f32")
        self.expect_error(["train", "--device", DEVICE, "--resume", good, "--master-weights",
                           "flex16"], "resume it with the same settings")

    def test_flex16_stochastic_rounding_repeats_and_differs_from_nearest(self):
        common = ["--limit", "1000", "--epochs", "1", "--batch", "100", "--precision", "flex16",
                  "--master-weights", "flex16", "--quiet"]
        self.train(*common, "--save", self.path("s1.npz"), "--summary", self.path("s1.json"))
        self.train(*common, "--rounding", "stochastic", "--save", self.path("s2.npz"))
        self.train(*common, "--rounding", "nearest", "--save", self.path("n.npz"))
        s1, s2, n = (np.load(self.path(f)) for f in ("s1.npz", "s2.npz", "n.npz"))
        for k in s1.files:
            if k != "model":
                np.testing.assert_array_equal(s1[k], s2[k], err_msg=k)
        self.assertFalse(np.array_equal(s1["1.weight"], n["1.weight"]))
        summary = json.load(open(self.path("s1.json")))
        self.assertEqual(summary["rounding"], "stochastic")
        self.assertGreaterEqual(summary["test_accuracy"], 0.5)

    def test_flex16_cuda_and_cpu_give_the_same_weights_after_50_steps(self):
        if DEVICE != "cuda":
            self.skipTest("compares a CUDA run with a CPU run")
        # 6400 samples in batches of 128: 50 steps of the default model, exact products and the
        # same float operations on both backends.
        common = ["--limit", "6400", "--epochs", "1", "--precision", "flex16", "--quiet"]
        for device in ("cpu", "cuda"):
            r = run("train", "--device", device, *common, "--save", self.path(device + ".npz"))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        cpu, cuda = np.load(self.path("cpu.npz")), np.load(self.path("cuda.npz"))
        for k in cpu.files:
            if k != "model":
                np.testing.assert_array_equal(cpu[k], cuda[k], err_msg=k)

    def expect_error(self, args, *fragments, env=None, rc=None):
        r = run(*args, env=env)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        if rc is not None:
            self.assertEqual(r.returncode, rc, r.stderr)
        for f in fragments:
            self.assertIn(f, r.stderr + r.stdout)
        self.assertNotIn("Traceback", r.stderr)
        return r

    def test_impossible_options(self):
        t = ["train", "--device", DEVICE, "--limit", "200", "--epochs", "1"]
        self.expect_error(t + ["--T", "0"], "--T")
        self.expect_error(t + ["--batch", "0"], "--batch")
        self.expect_error(t + ["--lr", "-1"], "--lr")
        self.expect_error(t + ["--epochs", "0"], "--epochs")
        self.expect_error(t + ["--neuron", "nosuchneuron"], "nosuchneuron")
        self.expect_error(t + ["--model", "flatten linear(64) sn linear(10 sn"], "position 23")
        self.expect_error(t + ["--model", "flatten linear(64) foo linear(10) sn"], "unknown layer 'foo'",
                          "position 20")
        self.expect_error(t + ["--model", "conv(8, 3) bn sn linear(10) sn"], "layer 3", "flatten")
        self.expect_error(t + ["--model", "flatten linear(64) sn linear(7) sn"], "10")
        self.expect_error(t + ["--set", "tau"], "K=V")
        self.expect_error(t + ["--set", "tau=-3"], "--set tau=-3: neuron lif: tau must be > 0 (got -3)")
        self.expect_error(t + ["--set", "tau=0"], "tau must be > 0")
        self.expect_error(["train", "--no-such-option"], "no-such-option")
        h = run("train", "--help")
        self.assertEqual(h.returncode, 0)
        self.assertIn("--model", h.stdout)
        self.assertIn("csnn", h.stdout)

    def test_missing_and_truncated_dataset(self):
        t = ["train", "--device", DEVICE, "--limit", "200", "--epochs", "1", "--quiet"]
        self.expect_error(t, "train-images-idx3-ubyte.gz", "dataset-fashion-mnist",
                          env={"FLEXKIT_DATA_DIR": self.path("nowhere")})
        broken = self.path("broken")
        os.makedirs(broken)
        for name in os.listdir(DATA):
            shutil.copy(os.path.join(DATA, name), broken)
        with open(os.path.join(DATA, "t10k-images-idx3-ubyte.gz"), "rb") as f:
            data = f.read()
        with open(os.path.join(broken, "t10k-images-idx3-ubyte.gz"), "wb") as f:
            f.write(data[: len(data) // 2])
        self.expect_error(t + ["--summary", self.path("s.json")], "t10k-images-idx3-ubyte.gz",
                          "truncated", env={"FLEXKIT_DATA_DIR": broken})
        self.assertFalse(os.path.exists(self.path("s.json")))

    def test_bad_checkpoints(self):
        self.train("--limit", "300", "--epochs", "1", "--checkpoint", self.path("ck"), "--quiet")
        good = self.path("ck", "epoch-1.ckpt")
        data = open(good, "rb").read()

        def variant(name, content):
            p = self.path(name)
            open(p, "wb").write(content)
            return p

        corrupt = variant("corrupt.ckpt", data[:200] + bytes([data[200] ^ 0xFF]) + data[201:])
        self.expect_error(["eval", "--resume", corrupt, "--device", DEVICE], "checksum")
        self.expect_error(["train", "--resume", corrupt, "--device", DEVICE, "--save",
                           self.path("x.npz")], "checksum")
        self.assertFalse(os.path.exists(self.path("x.npz")))
        truncated = variant("truncated.ckpt", data[: len(data) // 3])
        self.expect_error(["eval", "--resume", truncated, "--device", DEVICE], "truncated.ckpt")
        magic = variant("magic.ckpt", b"NOTACKPT" + data[8:])
        self.expect_error(["eval", "--resume", magic, "--device", DEVICE], "magic")
        version = variant("version.ckpt", data[:12] + (99).to_bytes(4, "little") + data[16:])
        self.expect_error(["eval", "--resume", version, "--device", DEVICE], "version 99")
        self.expect_error(["train", "--resume", good, "--device", DEVICE, "--model",
                           "flatten linear(32) sn linear(10) sn", "--epochs", "2"],
                          "another model")
        self.assertEqual(open(good, "rb").read(), data)  # nothing overwritten

    def test_diverging_loss_stops_and_keeps_checkpoint(self):
        r = run("train", "--device", DEVICE, "--limit", "1000", "--epochs", "3", "--batch", "50",
                "--optimizer", "sgd", "--lr", "1e300", "--momentum", "0", "--quiet")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("epoch 1, step 1", r.stderr)
        self.assertIn("no longer finite", r.stderr)
        self.assertIn("no checkpoint was written", r.stderr)
        self.train("--limit", "1000", "--epochs", "1", "--checkpoint", self.path("ck"), "--quiet")
        good = self.path("ck", "epoch-1.ckpt")
        before = open(good, "rb").read()
        r = run("train", "--device", DEVICE, "--resume", good, "--epochs", "3", "--lr", "1e300",
                "--optimizer", "sgd", "--momentum", "0", "--checkpoint", self.path("ck"),
                "--save", self.path("m.npz"), "--quiet")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("epoch 2, step 1", r.stderr)
        self.assertIn("the last good checkpoint is " + good, r.stderr)
        self.assertEqual(open(good, "rb").read(), before)
        self.assertEqual(sorted(os.listdir(self.path("ck"))), ["best.ckpt", "epoch-1.ckpt"])
        self.assertFalse(os.path.exists(self.path("m.npz")))

    def test_nan_in_a_flex16_tensor_is_named_with_its_step(self):
        # flex16 stores a NaN as 0 and counts it; the write carries its step, so the message
        # names it exactly even though the statistics are read later (here: the resumed
        # epoch 2's first step, global step 21 of 20-step epochs).
        common = ["--limit", "1000", "--batch", "50", "--precision", "flex16",
                  "--master-weights", "flex16", "--optimizer", "sgd", "--momentum", "0", "--quiet"]
        self.train(*common, "--epochs", "1", "--checkpoint", self.path("ck"))
        r = run("train", "--device", DEVICE, "--resume", self.path("ck", "epoch-1.ckpt"),
                "--epochs", "3", "--lr", "1e300", "--quiet")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("a NaN reached the flex16 tensor", r.stderr)
        self.assertIn("at epoch 2, step 1 (global step 21)", r.stderr)

    def test_ctrl_c_stops_cleanly(self):
        p = subprocess.Popen([FLEXKIT, "train", "--device", DEVICE, "--limit", "2000",
                              "--epochs", "50", "--checkpoint", self.path("ck"), "--batch", "50"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while not os.path.exists(self.path("ck", "epoch-1.ckpt")) and time.time() < deadline:
            time.sleep(0.05)
        self.assertTrue(os.path.exists(self.path("ck", "epoch-1.ckpt")))
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 130, out + err)
        self.assertIn("interrupted", out)
        self.assertFalse([n for n in os.listdir(self.path("ck")) if n.endswith(".tmp")])
        e = run("eval", "--resume", self.path("ck", "epoch-1.ckpt"), "--device", DEVICE,
                "--limit", "200")
        self.assertEqual(e.returncode, 0, e.stderr)


class CliHelp(unittest.TestCase):
    """Every command answers --help with its usage and exit code 0; usage errors exit 2."""

    def test_every_command_has_help(self):
        for command in ["info", "demo", "train", "eval", "neuron"]:
            for args in ([command, "--help"], ["help", command]):
                r = run(*args)
                self.assertEqual(r.returncode, 0, f"{args}: {r.stdout}{r.stderr}")
                self.assertIn("flexkit " + command, r.stdout, args)
                self.assertIn("--help", r.stdout, args)
        r = run("--version")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^flexkit \d+\.\d+\.\d+")
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("exit codes: 0 success, 1 runtime error, 2 usage error", r.stdout)

    def test_usage_errors_exit_2(self):
        for args in (["info", "--bogus"], ["demo", "extra"], ["train", "--epochs"],
                     ["train", "--T", "0"], ["train", "--set", "tau"], ["eval"],
                     ["no-such-command"]):
            r = run(*args)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stdout}{r.stderr}")


if __name__ == "__main__":
    FLEXKIT = sys.argv[1]
    for a in sys.argv[2:]:
        if a.startswith("--device="):
            DEVICE = a.split("=", 1)[1]
    unittest.main(argv=[sys.argv[0], "-v"])
