#!/usr/bin/env python3
"""`mpirun -np 2 flexkit train --distributed` on the CPU: the same weights as one process training
on the same global batches (f32: within float rounding, the sums taken in another order), rank 0
alone writing the files, every rank's throughput in the summary; flex16: the same weights bit
for bit, on 2 and 3 processes; and the failures: a process started with other options, a process
that dies, too few samples for the processes, flex16 with a layer whose gradients are not exact.

    train_distributed_test.py FLEXKIT MPIRUN
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

FLEXKIT = None
MPIRUN = None
DATA = os.environ.get("FLEXKIT_DATA_DIR") or "/usr/share/datasets/fashion-mnist"
HAVE_DATA = os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz"))
# Root in CI containers; two processes on a two-core machine (or fewer cores).
MPI_FLAGS = ["--oversubscribe", "--allow-run-as-root"]
# A small model with a convolution, pooling, linear layers and two kinds of neuron, no BatchNorm
# (whose batch statistics are per process unless synchronised).
MODEL = "conv(4, 3, padding=1) sn maxpool(2) flatten linear(32) sn linear(10) sn"
COMMON = ["--device", "cpu", "--limit", "384", "--epochs", "2", "--batch", "64", "--quiet"]


def mpirun(*ranks, timeout=300):
    """ranks: one argument list per process (flexkit's arguments), joined MPMD-style."""
    cmd = [MPIRUN, *MPI_FLAGS]
    for i, args in enumerate(ranks):
        if i:
            cmd.append(":")
        cmd += ["-np", "1", FLEXKIT, "train", *args]
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def single(*args, timeout=300):
    return subprocess.run([FLEXKIT, "train", *args], capture_output=True, text=True,
                          timeout=timeout)


@unittest.skipUnless(HAVE_DATA, "Fashion-MNIST not found (set FLEXKIT_DATA_DIR)")
class Distributed(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flexkit_dp_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_two_processes_train_what_one_does(self):
        # Dropout draws its masks for the global batch, so each sample gets the mask it gets in
        # one process.
        dropout = "flatten linear(64) sn dropout(0.3) linear(10) sn"
        for model, name in [("mlp", "mlp"), (MODEL, "conv"), (dropout, "dropout")]:
            with self.subTest(model=name):
                dp = [*COMMON, "--model", model, "--distributed", "--save", self.path(name + "_dp.npz"),
                      "--summary", self.path(name + "_dp.json"),
                      "--checkpoint", self.path(name + "_ckpt")]
                r = mpirun(dp, dp)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                r1 = single(*COMMON, "--model", model, "--save", self.path(name + "_one.npz"),
                            "--summary", self.path(name + "_one.json"))
                self.assertEqual(r1.returncode, 0, r1.stdout + r1.stderr)
                a, b = np.load(self.path(name + "_dp.npz")), np.load(self.path(name + "_one.npz"))
                weights = [k for k in b.files if b[k].dtype.kind == "f"]
                self.assertTrue(weights)
                for k in weights:
                    scale = float(np.abs(b[k]).max())
                    self.assertGreater(scale, 0, k)
                    diff = float(np.abs(a[k].astype(np.float64) - b[k]).max())
                    # Two steps' worth of Adam updates from gradients summed in another order.
                    self.assertLess(diff, 1e-4 * scale, f"{k}: {diff} against scale {scale}")
                dp_summary = read_json(self.path(name + "_dp.json"))
                one_summary = read_json(self.path(name + "_one.json"))
                self.assertEqual(dp_summary["processes"], 2)
                self.assertEqual(len(dp_summary["rank_samples_per_second"]), 2)
                self.assertTrue(all(s > 0 for s in dp_summary["rank_samples_per_second"]))
                self.assertEqual(one_summary["processes"], 1)
                # Both processes saw the whole test set between them.
                self.assertAlmostEqual(dp_summary["test_accuracy"], one_summary["test_accuracy"],
                                       delta=1.5 / 384)
                # Rank 0 alone writes checkpoints: one per epoch and the best.
                self.assertEqual(sorted(os.listdir(self.path(name + "_ckpt"))),
                                 ["best.ckpt", "epoch-1.ckpt", "epoch-2.ckpt"])

    def test_synchronised_batchnorm_trains_what_one_process_does(self):
        # BatchNorm's statistics over both shards are those of the global batch. SGD: Adam's
        # normalised steps would turn the float-level differences of near-zero gradients (a
        # BatchNorm bias's) into full-size steps.
        model = ("conv(4, 3, padding=1, bias=false) bn sn maxpool(2) flatten "
                 "linear(32, bias=false) bn sn linear(10) sn")
        args = [*COMMON, "--model", model, "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"]
        dp = [*args, "--distributed", "--sync-bn", "--save", self.path("bn_dp.npz")]
        r = mpirun(dp, dp)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r1 = single(*args, "--save", self.path("bn_one.npz"))
        self.assertEqual(r1.returncode, 0, r1.stdout + r1.stderr)
        a, b = np.load(self.path("bn_dp.npz")), np.load(self.path("bn_one.npz"))
        for k in [k for k in b.files if b[k].dtype.kind == "f"]:
            scale = float(np.abs(b[k]).max())
            diff = float(np.abs(a[k].astype(np.float64) - b[k]).max())
            self.assertLess(diff, 1e-5 * scale, f"{k}: {diff} against scale {scale}")
        # Per-process statistics (the default) are another computation: the weights differ.
        dp = [*args, "--distributed", "--save", self.path("bn_local.npz")]
        r = mpirun(dp, dp)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        c = np.load(self.path("bn_local.npz"))
        worst = max(float(np.abs(c[k].astype(np.float64) - b[k]).max() / np.abs(b[k]).max())
                    for k in b.files if b[k].dtype.kind == "f" and np.abs(b[k]).max() > 0)
        self.assertGreater(worst, 1e-4)

    def test_resume_continues_bit_for_bit(self):
        # flex16: the exponent histories travel in the checkpoint, and every process restores
        # the same ones.
        for precision in ["f32", "flex16"]:
            with self.subTest(precision=precision):
                dp = [*COMMON, "--distributed", "--precision", precision]
                ck = self.path("ck_" + precision)
                full = [*dp, "--save", self.path(precision + "_full.npz"), "--checkpoint", ck]
                r = mpirun(full, full)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                resume = ["--resume", os.path.join(ck, "epoch-1.ckpt"), "--distributed", "--quiet",
                          "--device", "cpu", "--save", self.path(precision + "_resumed.npz")]
                r = mpirun(resume, resume)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                a = np.load(self.path(precision + "_full.npz"))
                b = np.load(self.path(precision + "_resumed.npz"))
                self.assertEqual(sorted(a.files), sorted(b.files))
                for k in a.files:
                    self.assertTrue(np.array_equal(a[k], b[k]), k)

    def test_sync_bn_without_distributed_is_a_usage_error(self):
        r = single(*COMMON, "--sync-bn")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)

    def test_other_options_on_one_rank_are_refused(self):
        base = [*COMMON, "--model", "mlp", "--distributed"]
        start = time.time()
        r = mpirun(base, [*base, "--lr", "0.01"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("rank(s) 1 were started with other options", r.stdout + r.stderr)
        self.assertLess(time.time() - start, 120)

    def test_a_process_that_dies_stops_the_job(self):
        # Rank 1 is killed a few seconds into a long run; rank 0 must not wait for it for ever.
        long = ["--device", "cpu", "--epochs", "50", "--batch", "64", "--quiet", "--distributed",
                "--collective-timeout", "20"]
        start = time.time()
        cmd = [MPIRUN, *MPI_FLAGS, "-np", "1", FLEXKIT, "train", *long, ":", "-np", "1",
               "timeout", "-s", "KILL", "4", FLEXKIT, "train", *long]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        self.assertNotEqual(r.returncode, 0)
        self.assertLess(time.time() - start, 120, r.stdout + r.stderr)
        out = r.stdout + r.stderr
        self.assertTrue("rank 1" in out or "did not complete" in out, out)

    def test_too_few_samples_for_the_processes(self):
        args = ["--device", "cpu", "--limit", "129", "--epochs", "1", "--batch", "64", "--quiet",
                "--distributed"]
        # 129 samples in batches of 64: the last batch holds one sample for two processes.
        r = mpirun(args, args)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("every process needs at least one sample", r.stdout + r.stderr)

    def test_flex16_processes_train_what_one_does_bit_for_bit(self):
        # flex16 gradients are summed as exact integers and every write's exponent is agreed over
        # the processes: the same weights, bit for bit, as one process, for any process count
        # (batches of 64 over 3 processes are shards of 22, 21 and 21).
        dropout = "flatten linear(64) sn dropout(0.3) linear(10) sn"
        cases = [("mlp", "mlp", 2), (MODEL, "conv", 2), (dropout, "dropout", 2), ("mlp", "mlp3", 3)]
        for model, name, processes in cases:
            with self.subTest(model=name):
                args = [*COMMON, "--model", model, "--precision", "flex16"]
                dp = [*args, "--distributed", "--save", self.path(name + "_dp.npz"),
                      "--summary", self.path(name + "_dp.json")]
                r = mpirun(*[dp] * processes)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                r1 = single(*args, "--save", self.path(name + "_one.npz"),
                            "--summary", self.path(name + "_one.json"))
                self.assertEqual(r1.returncode, 0, r1.stdout + r1.stderr)
                a, b = np.load(self.path(name + "_dp.npz")), np.load(self.path(name + "_one.npz"))
                self.assertEqual(sorted(a.files), sorted(b.files))
                weights = [k for k in b.files if b[k].dtype.kind == "f"]
                self.assertTrue(weights)
                for k in weights:
                    self.assertGreater(float(np.abs(b[k]).max()), 0, k)
                    self.assertTrue(np.array_equal(a[k], b[k]),
                                    f"{k}: differs in {int((a[k] != b[k]).sum())} of {b[k].size}")
                dp_summary = read_json(self.path(name + "_dp.json"))
                one_summary = read_json(self.path(name + "_one.json"))
                self.assertEqual(dp_summary["processes"], processes)
                self.assertEqual(dp_summary["precision"], "flex16")
                # The same test predictions: the same counts over the whole test set.
                self.assertEqual(dp_summary["test_accuracy"], one_summary["test_accuracy"])

    def test_flex16_with_batchnorm_is_refused_with_the_reason(self):
        model = "conv(4, 3, padding=1, bias=false) bn sn maxpool(2) flatten linear(10) sn"
        args = [*COMMON, "--model", model, "--distributed", "--precision", "flex16"]
        r = mpirun(args, args)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not exact integer products", r.stdout + r.stderr)
        self.assertIn("layer 2, bn(4)", r.stdout + r.stderr)

    def test_distributed_without_mpirun_is_a_usage_error(self):
        r = single(*COMMON, "--distributed")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("mpirun -np N", r.stderr)


if __name__ == "__main__":
    FLEXKIT, MPIRUN = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]], verbosity=2)
