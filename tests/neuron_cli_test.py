#!/usr/bin/env python3
"""`flexkit neuron` end to end: .npy files written by NumPy in, .npy results checked by NumPy.

usage: neuron_cli_test.py PATH/TO/flexkit [--device=cpu|cuda[:N]]

Checks the golden LIF case of include/flexkit/neuron.hpp (hard reset, detach_reset, soft reset) forward and
backward, float64 inputs, neurons written in the neuron language (a learnable parameter, state
and final-state gradients, two inputs), zero neurons, continuing a sequence from a final state,
T = 0, bf16 and flex16 storage, the `show` sections, and that every mistake exits with status
2 (command line) or 1 (library) with a one-line message naming the problem while the output
directory keeps only what it held before. Exits 1 listing every failed check.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

USAGE_ERROR = 2
RUNTIME_ERROR = 1
PREFIX = "flexkit neuron: "
RTOL = 1e-5

TOOL = None
DEVICE = "cpu"
WORK = None
FAILURES = []


def check(condition, what):
    if not condition:
        FAILURES.append(what)
    return condition


def path(name):
    return os.path.join(WORK, name)


def save(name, array):
    p = path(name)
    np.save(p, array)
    return p


def write_text(name, text):
    p = path(name)
    with open(p, "w") as f:
        f.write(text)
    return p


def flexkit(*args, device=True, cwd=None, prefix=()):
    command = [TOOL, "neuron"] + list(args)
    if device and args and args[0] == "run":
        command += ["--device", DEVICE]
    command = list(prefix) + command
    p = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       cwd=cwd)
    return p.returncode, p.stdout, p.stderr, command


def run_ok(label, *args, **kwargs):
    rc, out, err, command = flexkit("run", *args, **kwargs)
    if not check(rc == 0, "%s: exit %d, expected 0\n    %s\n    %s" % (
            label, rc, " ".join(command), err.strip())):
        return None
    return out


def load(directory, name):
    return np.load(os.path.join(directory, name + ".npy"))


def close(label, directory, name, expected, rtol=RTOL, atol=1e-7):
    file = os.path.join(directory, name + ".npy")
    if not check(os.path.exists(file), "%s: %s.npy was not written" % (label, name)):
        return
    got = np.load(file)
    expected = np.asarray(expected, dtype=np.float64)
    if not check(got.dtype == np.float32, "%s: %s.npy is %s, expected float32" % (
            label, name, got.dtype)):
        return
    if not check(got.shape == expected.shape, "%s: %s.npy has shape %s, expected %s" % (
            label, name, got.shape, expected.shape)):
        return
    g = got.astype(np.float64)
    ok = np.all(np.abs(g - expected) <= rtol * np.abs(expected) + atol)
    check(ok, "%s: %s = %s, expected %s" % (label, name, g.ravel().tolist(),
                                            expected.ravel().tolist()))


def npy_files(directory):
    return sorted(f for f in os.listdir(directory) if f.endswith(".npy"))


# ---- the golden LIF case (include/flexkit/neuron.hpp) ---------------------------------------------------------

X = np.array([1.5, 0.5, 2.5], dtype=np.float32).reshape(3, 1)
ONES = np.ones((3, 1), dtype=np.float32)


def golden_cases():
    x = save("x.npy", X)
    gs = save("gs.npy", ONES)

    out = path("lif_train")
    os.makedirs(out)
    write_text("lif_train/keep.txt", "unrelated")
    summary = run_ok("lif training", "lif", "--in", "x=" + x, "--grad", "s=" + gs, "--out", out)
    if summary is not None:
        close("lif", out, "s", [[0], [0], [1]])
        close("lif", out, "v", [[0.75], [0.625], [0]])
        close("lif", out, "v_final", [0])
        close("lif", out, "grad_x", [[0.4654924], [0.3523882], [0.1725159]])
        close("lif", out, "grad_v0", [0.4654924])
        check(npy_files(out) == ["grad_v0.npy", "grad_x.npy", "s.npy", "v.npy", "v_final.npy"],
              "lif training wrote %s" % npy_files(out))
        check(os.path.exists(os.path.join(out, "keep.txt")), "lif training removed keep.txt")
        check(not [f for f in os.listdir(WORK) if ".partial-" in f],
              "lif training left a temporary directory in %s" % WORK)
        check(sorted(os.listdir(out)) == ["grad_v0.npy", "grad_x.npy", "keep.txt", "s.npy",
                                          "v.npy", "v_final.npy"],
              "lif training left %s in its output directory" % sorted(os.listdir(out)))
        for word in ("T = 3", DEVICE.split(":")[0], "s.npy", "grad_x.npy", "ms"):
            check(word in summary, "lif summary lacks %r:\n%s" % (word, summary))

    out = path("lif_infer")
    if run_ok("lif inference", "lif", "--in", "x=" + x, "--out", out) is not None:
        close("lif inference", out, "s", [[0], [0], [1]])
        close("lif inference", out, "v", [[0.75], [0.625], [0]])
        close("lif inference", out, "v_final", [0])
        check(npy_files(out) == ["s.npy", "v.npy", "v_final.npy"],
              "lif inference wrote %s" % npy_files(out))

    out = path("lif_detach")
    if run_ok("detach_reset", "lif", "--set", "detach_reset=true", "--in", "x=" + x,
              "--grad", "s=" + gs, "--out", out) is not None:
        close("detach_reset", out, "v", [[0.75], [0.625], [0]])
        close("detach_reset", out, "grad_x", [[0.5854993], [0.3845508], [0.1725159]])

    out = path("lif_soft")
    if run_ok("soft reset", "lif", "--set", "v_reset=none", "--in", "x=" + x,
              "--grad", "s=" + gs, "--out", out) is not None:
        close("soft reset", out, "s", [[0], [0], [1]])
        close("soft reset", out, "v", [[0.75], [0.625], [0.5625]])
        close("soft reset", out, "grad_x", [[0.42879], [0.3330906], [0.1725159]])

    # float64 files, as np.save writes plain Python floats, are converted on the way in.
    x64 = save("x64.npy", X.astype(np.float64))
    gs64 = save("gs64.npy", ONES.astype(np.float64))
    out = path("lif_f64")
    if run_ok("float64 inputs", "lif", "--in", "x=" + x64, "--grad", "s=" + gs64,
              "--out", out) is not None:
        close("float64 inputs", out, "v", [[0.75], [0.625], [0]])
        close("float64 inputs", out, "grad_x", [[0.4654924], [0.3523882], [0.1725159]])

    # The same neuron through the SpikingJelly spellings with their default values.
    out = path("lif_settings")
    if run_ok("settings", "lif", "--set", "tau=2", "--set", "v_threshold=1.0",
              "--set", "surrogate=sigmoid(4)", "--set", "decay_input=true",
              "--in", "x=" + x, "--grad", "s=" + gs, "--out", out) is not None:
        close("settings", out, "grad_x", [[0.4654924], [0.3523882], [0.1725159]])

    # A sequence continued from a final state gives what one call on the whole sequence gives.
    xa, xb = save("xa.npy", X[:2]), save("xb.npy", X[2:])
    first, second = path("lif_first"), path("lif_second")
    if run_ok("first half", "lif", "--in", "x=" + xa, "--out", first) is not None:
        if run_ok("second half", "lif", "--in", "x=" + xb,
                  "--in", "v=" + os.path.join(first, "v_final.npy"), "--out", second) is not None:
            close("second half", second, "s", [[1]])
            close("second half", second, "v_final", [0])

    # T = 0: empty sequences, the initial state unchanged.
    x0 = save("x0.npy", np.zeros((0, 2), dtype=np.float32))
    v0 = save("v0.npy", np.array([0.25, -0.5], dtype=np.float32))
    out = path("lif_t0")
    if run_ok("T = 0", "lif", "--in", "x=" + x0, "--in", "v=" + v0, "--out", out) is not None:
        close("T = 0", out, "s", np.zeros((0, 2)))
        close("T = 0", out, "v_final", [0.25, -0.5])

    # 16-bit storage: x, h and v are exact in bf16 and in flex16 at iwl 4.
    for dtype in ("bf16", "flex16"):
        out = path("lif_" + dtype)
        if run_ok(dtype, "lif", "--dtype", dtype, "--in", "x=" + x, "--grad", "s=" + gs,
                  "--out", out) is not None:
            close(dtype, out, "s", [[0], [0], [1]])
            close(dtype, out, "v", [[0.75], [0.625], [0]], rtol=1e-2, atol=1e-3)
            close(dtype, out, "grad_x", [[0.4654924], [0.3523882], [0.1725159]], rtol=2e-2,
                  atol=1e-3)


# ---- neurons in the language ---------------------------------------------------------------

LEAKY = """# A linear leaky integrator with a learnable leak.
neuron leaky(x; v) -> y {
  learnable param k = 0.5;
  param gain = 2.0;
  v = k * v + x;
  y = gain * v;
}
"""


def leaky_reference(x, v0, k, gain, gy, gv, gfinal):
    """Step-by-step float64 forward and backward of LEAKY."""
    T = x.shape[0]
    vs, v = [], v0.copy()
    for t in range(T):
        v = k * v + x[t]
        vs.append(v)
    vs = np.array(vs)
    grad_x = np.zeros_like(x)
    grad_k = 0.0
    dv = gfinal.copy()
    for t in reversed(range(T)):
        dv = dv + gain * gy[t] + gv[t]
        grad_x[t] = dv
        previous = vs[t - 1] if t > 0 else v0
        grad_k += float(np.sum(dv * previous))
        dv = dv * k
    return vs, gain * vs, grad_x, dv, grad_k


def language_cases():
    neuron = write_text("leaky.neuron", LEAKY)
    rng = np.random.default_rng(7)
    T, shape = 5, (2, 3)
    x = rng.standard_normal((T,) + shape)
    v0 = rng.standard_normal(shape)
    gy, gv = rng.standard_normal((T,) + shape), rng.standard_normal((T,) + shape)
    gfinal = rng.standard_normal(shape)
    k, gain = 0.75, 1.5
    # The files hold float32 values; the reference sees exactly those.
    x, v0, gy, gv, gfinal = (a.astype(np.float32).astype(np.float64)
                             for a in (x, v0, gy, gv, gfinal))
    files = {name: save("leaky_%s.npy" % name, a.astype(np.float32)) for name, a in
             (("x", x), ("v0", v0), ("gy", gy), ("gv", gv), ("gfinal", gfinal))}
    files["k"] = save("leaky_k.npy", np.array(k, dtype=np.float32))
    vs, ys, grad_x, grad_v0, grad_k = leaky_reference(x, v0, k, gain, gy, gv, gfinal)

    out = path("leaky")
    if run_ok("leaky", neuron, "--set", "gain=%r" % gain, "--in", "x=" + files["x"],
              "--in", "v=" + files["v0"], "--in", "k=" + files["k"],
              "--grad", "y=" + files["gy"], "--grad", "v=" + files["gv"],
              "--grad", "v_final=" + files["gfinal"], "--out", out) is not None:
        close("leaky", out, "y", ys)
        close("leaky", out, "v", vs)
        close("leaky", out, "v_final", vs[-1])
        close("leaky", out, "grad_x", grad_x)
        close("leaky", out, "grad_v0", grad_v0)
        # A scalar parameter's gradient has shape [] (NeuronGradients::params).
        close("leaky", out, "grad_k", np.array(grad_k))

    # Any neuron count works, none included: a scalar parameter's gradient is then zero.
    empty = save("empty.npy", np.zeros((3, 0), dtype=np.float32))
    out = path("plif_empty")
    if run_ok("plif without neurons", "plif", "--in", "x=" + empty, "--grad", "s=" + empty,
              "--out", out) is not None:
        close("plif without neurons", out, "s", np.zeros((3, 0)))
        close("plif without neurons", out, "grad_x", np.zeros((3, 0)))
        close("plif without neurons", out, "grad_w", np.array(0.0))

    # Without --in k the learnable parameter keeps its default.
    out = path("leaky_default")
    if run_ok("leaky default k", neuron, "--in", "x=" + files["x"], "--out", out) is not None:
        vs, ys, _, _, _ = leaky_reference(x, np.zeros(shape), 0.5, 2.0, gy * 0, gv * 0,
                                          gfinal * 0)
        close("leaky default k", out, "y", ys)
        close("leaky default k", out, "v_final", vs[-1])


# ---- show ----------------------------------------------------------------------------------

def built_with_cuda():
    info = subprocess.run([TOOL, "info"], stdout=subprocess.PIPE, text=True).stdout
    return re.search(r"cuda backend\s*:\s*not built", info) is None


def show_cases():
    rc, out, err, command = flexkit("show", "lif", "--set", "v_reset=none")
    # Without the CUDA backend there is no CUDA source to show.
    cuda_sections = 4 if built_with_cuda() else 0
    if check(rc == 0, "show lif: exit %d: %s" % (rc, err.strip())):
        for heading in ("neuron source", "forward program", "backward program", "residual plan",
                        "CPU program", "neuron lif", "spike("):
            check(heading in out, "show lif: no %r in its output" % heading)
        check(out.count("CUDA source") == cuda_sections and out.count("CPU program") == 4,
              "show lif: expected %d CUDA sources and the CPU program of all 4 kernel kinds" %
              cuda_sections)
        # include/flexkit/neuron.hpp: the built-in LIF stores one value per neuron-step.
        check("residual plan: 1 value stored per neuron-step" in out,
              "show lif: the residual plan is not one value per neuron-step:\n%s" %
              "\n".join(l for l in out.splitlines() if "residual plan" in l))
    for args in (["--help"], ["show", "--help"], ["run", "--help"]):
        rc, out, err, command = flexkit(*args, device=False)
        check(rc == 0 and "usage: flexkit neuron" in out,
              "%s: exit %d, output %r" % (" ".join(command), rc, out[:200]))


# ---- mistakes ------------------------------------------------------------------------------

TWO_INPUTS = """neuron mix(x, y; v) -> s {
  v = v + x - y;
  s = spike(v - 1);
}
"""

STATELESS = """neuron relu(x) -> y {
  y = maximum(x, 0);
}
"""


def error_cases():
    x = save("e_x.npy", X)
    y2 = save("e_y2.npy", np.ones((2, 1), dtype=np.float32))
    gs = save("e_gs.npy", ONES)
    mix = write_text("mix.neuron", TWO_INPUTS)
    relu = write_text("relu.neuron", STATELESS)
    bad = write_text("bad.neuron", "neuron bad(x; v) -> s {\n  s = vv;\n  v = x;\n}\n")

    # (label, arguments after `run`, expected exit status, words the message must contain)
    cases = [
        ("mismatched T", [mix, "--in", "x=" + x, "--in", "y=" + y2], RUNTIME_ERROR, ["'y'"]),
        ("initial state of a stateless neuron", [relu, "--in", "x=" + x, "--in", "v=" + x],
         USAGE_ERROR, ["'v'"]),
        ("unknown --set name", ["lif", "--set", "bogus=1", "--in", "x=" + x], USAGE_ERROR,
         ["bogus"]),
        ("--in without '='", ["lif", "--in", "x"], USAGE_ERROR, ["--in", "NAME="]),
        ("missing input", [mix, "--in", "x=" + x], USAGE_ERROR, ["--in y"]),
        ("unknown option", ["lif", "--in", "x=" + x, "--frobnicate"], USAGE_ERROR,
         ["--frobnicate"]),
        ("--grad of nothing", ["lif", "--in", "x=" + x, "--grad", "q=" + gs], USAGE_ERROR,
         ["'q'"]),
        ("fixed parameter as --in", ["lif", "--in", "x=" + x, "--in", "tau=" + x],
         USAGE_ERROR, ["tau", "--set"]),
        ("bad --dtype", ["lif", "--in", "x=" + x, "--dtype", "f8"], USAGE_ERROR, ["--dtype"]),
        ("missing file", ["lif", "--in", "x=" + path("absent.npy")], RUNTIME_ERROR,
         ["absent.npy"]),
        ("neuron file with an error", [bad, "--in", "x=" + x], RUNTIME_ERROR, ["vv", "2:"]),
        ("neither built-in nor file", [path("nowhere.neuron"), "--in", "x=" + x],
         RUNTIME_ERROR, ["nowhere.neuron"]),
    ]
    for i, (label, args, status, words) in enumerate(cases):
        out = path("err%02d" % i)
        os.makedirs(out)
        write_text(os.path.join(out, "keep.txt"), "unrelated")
        rc, stdout, err, command = flexkit("run", *(args + ["--out", out]))
        line = err.strip()
        check(rc == status, "%s: exit %d, expected %d (%s)\n    %s" % (
            label, rc, status, line, " ".join(command)))
        check(line.startswith(PREFIX) and "\n" not in line,
              "%s: expected one line starting %r on stderr, got %r" % (label, PREFIX, line))
        for word in words:
            check(word in line, "%s: the message %r does not mention %r" % (label, line, word))
        check(sorted(os.listdir(out)) == ["keep.txt"],
              "%s: the output directory now holds %s" % (label, sorted(os.listdir(out))))
    check(not [f for f in os.listdir(WORK) if ".partial-" in f],
          "a failed run left a temporary directory in %s" % WORK)

    # No --out at all, and an absent DIR that must not appear after a failure.
    rc, _, err, _ = flexkit("run", "lif", "--in", "x=" + x)
    check(rc == USAGE_ERROR and "--out" in err, "missing --out: exit %d, %r" % (rc, err))
    absent = path("never_created")
    rc, _, err, _ = flexkit("run", mix, "--in", "x=" + x, "--in", "y=" + y2, "--out", absent)
    check(rc == RUNTIME_ERROR and not os.path.exists(absent),
          "failed run into an absent DIR: exit %d, exists %s" % (rc, os.path.exists(absent)))
    rc, _, err, _ = flexkit(device=False)
    check(rc == USAGE_ERROR, "flexkit neuron without arguments: exit %d" % rc)


# ---- staging, non-finite values, parameter domains, gradient shapes, sections, names -------

def expect(label, rc_err, status, message):
    """rc_err: (rc, stderr); the stderr must be exactly `message` (one line)."""
    rc, err = rc_err
    check(rc == status, "%s: exit %d, expected %d (%s)" % (label, rc, status, err.strip()))
    check(err.strip() == message, "%s: stderr %r, expected %r" % (label, err.strip(), message))


def staging_cases():
    x = save("st_x.npy", X)
    # The output directory is a mount point: staging beside it, in its parent, made the final
    # rename cross file systems. A private mount namespace needs root; otherwise a parent
    # without write permission shows where staging happens.
    parent = path("st_parent")
    out = os.path.join(parent, "out")
    os.makedirs(out)
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("mount"):
        probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs none '%s'" % out],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if probe.returncode == 0:
            script = ('mount -t tmpfs none "$0" && "$@" && LC_ALL=C ls -A "$0"')
            rc, stdout, err, command = flexkit(
                "run", "lif", "--in", "x=" + x, "--out", out,
                prefix=["unshare", "-m", "sh", "-c", script, out])
            check(rc == 0, "output into a mount point: exit %d: %s" % (rc, err.strip()))
            check(stdout.endswith("s.npy\nv.npy\nv_final.npy\n"),
                  "output into a mount point: the mount holds %r" % stdout)
        else:
            print("neuron_cli_test: no mount namespace; the mount-point case is skipped")
    else:
        os.chmod(parent, 0o555)
        try:
            rc, _, err, _ = flexkit("run", "lif", "--in", "x=" + x, "--out", out)
        finally:
            os.chmod(parent, 0o755)
        check(rc == 0, "output into a directory whose parent is read-only: exit %d: %s" % (
            rc, err.strip()))
        check(npy_files(out) == ["s.npy", "v.npy", "v_final.npy"],
              "read-only parent: wrote %s" % npy_files(out))
    check(os.listdir(parent) == ["out"], "staging left %s beside the output" % os.listdir(parent))

    # One result: "file", not "files".
    relu = write_text("st_relu.neuron", STATELESS)
    summary = run_ok("one result", relu, "--in", "x=" + x, "--out", path("st_relu"))
    if summary is not None:
        check("wrote 1 file to " in summary, "one result: %r" % summary)


def finite_cases():
    bad = X.copy().reshape(3, 1).repeat(5, axis=1)
    bad[1, 4] = np.nan
    bad[2, 0] = np.inf
    bad[2, 3] = -np.inf
    x = save("nf_x.npy", bad)
    out = path("nf_out")
    rc, _, err, _ = flexkit("run", "lif", "--in", "x=" + x, "--out", out)
    lines = err.strip().splitlines()
    check(rc == 0, "non-finite input: exit %d: %s" % (rc, err.strip()))
    check(lines[:1] == [PREFIX + "warning: --in x=%s holds 3 non-finite values (first at index "
                        "[1, 4])" % x], "non-finite input: stderr %r" % lines)
    # x[1, 4] = NaN makes v NaN from step 1 on; x[2, 0] = inf fires, and the reset's
    # 0 * inf is NaN; x[2, 3] = -inf leaves v at -inf.
    check(lines[1:] == [
        PREFIX + "warning: the result v.npy holds 4 non-finite values (first at index [1, 4])",
        PREFIX + "warning: the result v_final.npy holds 3 non-finite values (first at index [0])"],
        "non-finite input: the warnings about the results are %r" % lines[1:])
    rc, _, err, _ = flexkit("run", "lif", "--in", "x=" + x, "--out", out, "--allow-nonfinite")
    expect("--allow-nonfinite", (rc, err), 0, "")
    rc, _, err, _ = flexkit("run", "lif", "--in", "x=" + x, "--out", path("nf_flex16"),
                            "--dtype", "flex16", "--allow-nonfinite")
    check(rc == RUNTIME_ERROR and err.startswith(PREFIX + "--in x=%s: " % x) and
          err.count("\n") == 1, "flex16 with NaN: exit %d, %r" % (rc, err))
    check(not os.path.exists(path("nf_flex16")), "flex16 with NaN created its output directory")
    rc, _, err, _ = flexkit("run", "lif", "--in", "x=" + x, "--out", out, "--allow-nonfinite",
                            "--check-finite")
    check(rc == USAGE_ERROR, "--allow-nonfinite with --check-finite: exit %d" % rc)


def saturation_cases():
    """flex16 sequences clip beyond their exponent's range: the CLI says so (count per result),
    --iwl-policy exact picks an exponent that holds them, --iwl sets one."""
    t, n = 40, 3
    x = save("sat_x.npy", np.full((t, n), 0.5, np.float32))
    v_ref = 0.5 * np.arange(1, t + 1, dtype=np.float64)[:, None].repeat(n, axis=1)
    top = 32767 * 2.0 ** (4 - 15)  # the largest flex16 value at iwl 4
    expected = int(np.sum(v_ref > top))
    out = path("sat_fixed")
    rc, stdout, err, _ = flexkit("run", "if", "--set", "v_threshold=1000", "--in", "x=" + x,
                                 "--dtype", "flex16", "--out", out)
    check(rc == 0, "saturating flex16: exit %d: %s" % (rc, err.strip()))
    check(err.strip().splitlines() == [
        PREFIX + "warning: the result v.npy: %d of %d values saturated at flex16 iwl 4 "
        "(|x| < 16); --iwl-policy exact or a larger --iwl holds them" % (expected, t * n)],
        "saturating flex16: stderr %r" % err)
    close("saturating flex16 (clipped)", out, "v", np.minimum(v_ref, top))
    check("flex16 sequences (fixed): all at iwl 4 (|x| < 16)" in stdout,
          "saturating flex16: stdout %r" % stdout)
    out = path("sat_exact")
    rc, stdout, err, _ = flexkit("run", "if", "--set", "v_threshold=1000", "--in", "x=" + x,
                                 "--dtype", "flex16", "--iwl-policy", "exact", "--out", out)
    check(rc == 0 and err == "", "exact flex16: exit %d, stderr %r" % (rc, err))
    iwl = int(np.floor(np.log2(v_ref.max()))) + 1
    check("flex16 sequences (exact): all at iwl %d" % iwl in stdout,
          "exact flex16: stdout %r" % stdout)
    close("exact flex16", out, "v", v_ref, rtol=0, atol=0)
    # autoflex: a single run is each manager's first write, so it stores exactly; with the
    # states' sequences and residuals kept (--grad), each flex16 sequence has its own exponent.
    out = path("sat_autoflex")
    rc, stdout, err, _ = flexkit("run", "if", "--set", "v_threshold=1000", "--in", "x=" + x,
                                 "--dtype", "flex16", "--iwl-policy", "autoflex", "--out", out)
    check(rc == 0 and err == "", "autoflex flex16: exit %d, stderr %r" % (rc, err))
    check("flex16 sequences (autoflex): all at iwl %d" % iwl in stdout,
          "autoflex flex16: stdout %r" % stdout)
    close("autoflex flex16", out, "v", v_ref, rtol=0, atol=0)
    small = save("sat_small.npy", np.full((t, n), 0.01, np.float32))
    grad = save("sat_grad.npy", np.ones((t, n), np.float32))
    out = path("sat_autoflex_training")
    rc, stdout, err, _ = flexkit("run", "if", "--set", "v_threshold=1000", "--in", "x=" + small,
                                 "--grad", "s=" + grad, "--dtype", "flex16", "--iwl-policy",
                                 "autoflex", "--out", out)
    check(rc == 0 and err == "", "autoflex training flex16: exit %d, stderr %r" % (rc, err))
    check("flex16 sequences (autoflex): all at iwl -1 (|x| < 0.5)" in stdout,
          "autoflex training flex16: stdout %r" % stdout)
    # x is stored as flex16 too, so its rounding adds up over the steps: one unit of v's scale
    v_small = 0.01 * np.arange(1, t + 1, dtype=np.float64)[:, None].repeat(n, axis=1)
    close("autoflex training flex16", out, "v", v_small, rtol=0, atol=2.0 ** -15)
    out = path("sat_iwl")
    rc, stdout, err, _ = flexkit("run", "if", "--set", "v_threshold=1000", "--in", "x=" + x,
                                 "--dtype", "flex16", "--iwl", "7", "--out", out)
    check(rc == 0 and err == "", "--iwl 7: exit %d, stderr %r" % (rc, err))
    close("--iwl 7", out, "v", v_ref, rtol=0, atol=0)
    for bad in (["--iwl", "6"], ["--dtype", "flex16", "--iwl", "300"],
                ["--dtype", "flex16", "--iwl-policy", "nearest"],
                ["--dtype", "flex16", "--iwl-policy", "exact", "--iwl", "3"],
                ["--dtype", "flex16", "--iwl-policy", "autoflex", "--iwl", "3"]):
        rc, _, err, _ = flexkit("run", "if", "--in", "x=" + x, "--out", path("sat_bad"), *bad)
        check(rc == USAGE_ERROR and err.startswith(PREFIX) and err.count("\n") == 1,
              "%s: exit %d, %r" % (" ".join(bad), rc, err))
    check(not os.path.exists(path("sat_bad")), "a refused --iwl created the output directory")


def domain_cases():
    x = save("dm_x.npy", X)
    for value in ("0", "-3"):
        rc, _, err, _ = flexkit("run", "lif", "--set", "tau=" + value, "--in", "x=" + x,
                                "--out", path("dm_out"))
        expect("lif tau=" + value, (rc, err), USAGE_ERROR,
               PREFIX + "--set tau=%s: neuron lif: tau must be > 0 (got %s)" % (value, value))
    rc, _, err, _ = flexkit("show", "alif", "--set", "tau_a=-1")
    expect("alif tau_a=-1", (rc, err), USAGE_ERROR,
           PREFIX + "--set tau_a=-1: neuron alif: tau_a must be > 0 (got -1)")
    check(not os.path.exists(path("dm_out")), "a refused --set created the output directory")


def grad_shape_cases():
    x = save("gr_x.npy", X)
    g = save("gr_final.npy", np.ones(2, dtype=np.float32))
    rc, _, err, _ = flexkit("run", "lif", "--in", "x=" + x, "--grad", "v_final=" + g,
                            "--out", path("gr_out"))
    expect("--grad v_final of the wrong shape", (rc, err), RUNTIME_ERROR,
           PREFIX + "--grad v_final=%s has shape [2], expected [1] (the neuron shape: --in x "
           "without its time axis)" % g)
    rc, _, err, _ = flexkit("run", "lif", "--in", "x=" + x, "--grad", "s=" + g,
                            "--out", path("gr_out"))
    expect("--grad s of the wrong shape", (rc, err), RUNTIME_ERROR,
           PREFIX + "--grad s=%s has shape [2], expected [3, 1] (the shape of --in x)" % g)


def section_cases():
    with_cuda = built_with_cuda()
    rc, out, err, _ = flexkit("show", "lif", "--section", "cuda")
    if with_cuda:
        check(rc == 0 and out.count("CUDA source") == 4 and "CPU program" not in out and
              "neuron source" not in out, "show --section cuda: exit %d, %d lines" % (
                  rc, len(out.splitlines())))
    else:
        check(rc != 0 and "no CUDA backend" in err,
              "show --section cuda without the CUDA backend: exit %d, %r" % (rc, err))
    rc, out, err, _ = flexkit("show", "lif")
    check(rc == 0 and out.count("CPU program") == 4 and
          out.count("CUDA source") == (4 if with_cuda else 0),
          "show (all sections): exit %d, %d CUDA sections" % (rc, out.count("CUDA source")))
    rc, out, err, _ = flexkit("show", "lif", "--section", "source", "--section", "residuals")
    check(rc == 0 and out.startswith("==== neuron source ====") and
          "residual plan: 1 value" in out and "forward program" not in out and
          "CUDA source" not in out, "show --section source --section residuals: %r" % out[:200])
    rc, out, err, _ = flexkit("show", "lif", "--section", "bogus")
    expect("show --section bogus", (rc, err), USAGE_ERROR,
           PREFIX + "--section: unknown section 'bogus'; sections: interface, source, forward, "
           "backward, residuals, cuda, cpu")
    rc, out, err, _ = flexkit("show", "--help")
    check(rc == 0 and "interface, source, forward, backward, residuals, cuda, cpu" in
          " ".join(out.split()), "show --help does not list the sections:\n%s" % out)


def shadow_cases():
    here = path("shadow")
    os.makedirs(here)
    with open(os.path.join(here, "lif"), "w") as f:
        f.write(LEAKY)
    rc, out, err, _ = flexkit("show", "lif", "--section", "interface", cwd=here)
    expect("a file named lif", (rc, err), 0,
           PREFIX + "warning: 'lif' is a built-in neuron; the file ./lif is ignored \u2014 write "
           "./lif to use the file")
    check(out.startswith("==== interface ====\nneuron lif\n"), "lif beside ./lif: %r" % out)
    rc, out, err, _ = flexkit("show", "./lif", "--section", "interface", cwd=here)
    expect("./lif", (rc, err), 0, "")
    check(out.startswith("==== interface ====\nneuron leaky\n"), "./lif: %r" % out)


def usage_cases():
    for args in (["bogus"], ["run", "lif", "--out"], ["show"], ["run", "--in", "x=a.npy"],
                 ["show", "lif", "--in", "x=a.npy"]):
        rc, _, err, command = flexkit(*args, device=False)
        line = err.strip()
        check(rc == USAGE_ERROR and line.startswith(PREFIX) and "\n" not in line,
              "%s: exit %d, %r" % (" ".join(command), rc, line))
    rc, out, err, _ = flexkit("run", "--help", device=False)
    check(rc == 0 and "--allow-nonfinite" in out and "--check-finite" in out,
          "run --help: exit %d, %r" % (rc, out))


def main():
    global TOOL, DEVICE, WORK
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    TOOL = os.path.abspath(sys.argv[1])
    for arg in sys.argv[2:]:
        if arg.startswith("--device="):
            DEVICE = arg[len("--device="):]
        else:
            print("unknown argument %s" % arg, file=sys.stderr)
            return 2
    if not os.access(TOOL, os.X_OK):
        print("%s is not an executable" % TOOL, file=sys.stderr)
        return 2
    WORK = tempfile.mkdtemp(prefix="flexkit_neuron_cli_")
    try:
        golden_cases()
        language_cases()
        show_cases()
        error_cases()
        staging_cases()
        finite_cases()
        saturation_cases()
        domain_cases()
        grad_shape_cases()
        section_cases()
        shadow_cases()
        usage_cases()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    if FAILURES:
        print("neuron_cli_test (%s): %d failed checks" % (DEVICE, len(FAILURES)),
              file=sys.stderr)
        for f in FAILURES:
            print("FAIL " + f, file=sys.stderr)
        return 1
    print("neuron_cli_test (%s): all checks passed" % DEVICE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
