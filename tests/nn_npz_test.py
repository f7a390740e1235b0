#!/usr/bin/env python3
"""np.load as the oracle for flexkit's .npz archives, and Python's json for its JSON text.

usage: nn_npz_test.py PATH/TO/nn_npz_tool [--device=cpu|cuda[:N]]

The tool writes a fixed archive (arrays of every dtype, strided views, flex16 and bf16 decoded,
0-d and empty arrays, strings) that must load with np.load as the values, dtypes and shapes
below; archives np.savez writes must survive load_npz and save_npz unchanged; np.savez_compressed
archives must be refused; the JSON documents must parse to the expected values. Exits 1 with a
description of the first mismatch.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

TOOL_ERROR = 3  # the tool's exit status when flexkit throws


class Mismatch(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Mismatch(message)


def run(tool, args, device_args, expect_status=0):
    p = subprocess.run([tool] + args + device_args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    check(p.returncode == expect_status,
          "%s exited %d (expected %d): %s" % (" ".join(args), p.returncode, expect_status,
                                               p.stderr.strip()))
    return p.stderr


def expected_arrays():
    weights = (np.arange(12, dtype=np.float64) * 0.25 - 1).astype(np.float32).reshape(3, 4)
    return {
        "weights": weights,
        "transposed": weights.T,
        "reversed": weights[::-1, 1:],
        "labels": np.array([-2**31, -1, 0, 1, 2**31 - 1], dtype=np.int32),
        "spikes": np.array([0, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200, 255],
                           dtype=np.uint8).reshape(2, 2, 3),
        "reference": np.array([0.1, 1.0 / 3.0, -1e300], dtype=np.float64),
        "flex": np.array([[0.5, -0.75], [1.25, 3.0]], dtype=np.float32),
        "bf": np.array([1.5, -2.0], dtype=np.float32),
        "scalar": np.array(42.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "gr\u00f6\u00dfe": np.array([7], dtype=np.uint8),
    }


EXPECTED_STRINGS = {
    "model": "neuron lif(x; v) -> s {\n  h = v + (x - v) / tau;\n}\n",
    "unicode": "\u00fcn\u00efc\u00f8d\u00e9 \u2713 \U0001F680 \"q\" \\ tab\t",
    "empty_string": "",
}


def check_archive(path, arrays, strings):
    with np.load(path) as z:
        check(sorted(z.files) == sorted(list(arrays) + list(strings)),
              "%s holds %s, expected %s" % (path, sorted(z.files),
                                            sorted(list(arrays) + list(strings))))
        for name, want in arrays.items():
            got = z[name]
            check(got.dtype == want.dtype, "%s: dtype %s, expected %s" % (name, got.dtype,
                                                                          want.dtype))
            check(got.shape == want.shape, "%s: shape %s, expected %s" % (name, got.shape,
                                                                          want.shape))
            check(np.array_equal(got, want), "%s: values\n%s\nexpected\n%s" % (name, got, want))
        for name, want in strings.items():
            got = z[name]
            check(got.shape == () and got.dtype.kind == "U",
                  "%s: a %s array of shape %s, expected a 0-d unicode array" %
                  (name, got.dtype, got.shape))
            check(got.item() == want and str(got) == want,
                  "%s: %r, expected %r" % (name, got.item(), want))


def check_zip_structure(path, names):
    with zipfile.ZipFile(path) as zf:
        check(zf.testzip() is None, "%s: a CRC check fails" % path)
        infos = zf.infolist()
        check([i.filename for i in infos] == [n + ".npy" for n in names],
              "%s: entries %s, expected %s" % (path, [i.filename for i in infos], names))
        for info in infos:
            check(info.compress_type == zipfile.ZIP_STORED,
                  "%s: %s is compressed" % (path, info.filename))
            check(info.date_time == (1980, 1, 1, 0, 0, 0),
                  "%s: %s has date %s" % (path, info.filename, info.date_time))


def test_write(tool, device_args, work):
    path = os.path.join(work, "fixed.npz")
    run(tool, ["write", path], device_args)
    check(sorted(os.listdir(work)) == ["fixed.npz"],
          "temporary files left behind: %s" % os.listdir(work))
    arrays = expected_arrays()
    check_archive(path, arrays, EXPECTED_STRINGS)
    check_zip_structure(path, list(arrays) + list(EXPECTED_STRINGS))
    # Overwriting an existing archive replaces it.
    with open(path, "r+b") as f:
        f.write(b"garbage")
    run(tool, ["write", path], device_args)
    check_archive(path, arrays, EXPECTED_STRINGS)
    # A path in a missing directory fails and creates nothing.
    missing = os.path.join(work, "missing", "x.npz")
    err = run(tool, ["write", missing], device_args, TOOL_ERROR)
    check("missing" in err, "the error does not name the path: " + err)
    check(sorted(os.listdir(work)) == ["fixed.npz"], "files left: %s" % os.listdir(work))


def test_numpy_archives(tool, device_args, work):
    rng = np.random.default_rng(7)
    arrays = {
        "a": rng.standard_normal((3, 5)).astype(np.float32),
        "b": rng.integers(-2**31, 2**31, size=(4, 2, 3), dtype=np.int32),
        "c": rng.integers(0, 256, size=(17,), dtype=np.uint8),
        "d": np.asfortranarray(rng.standard_normal((2, 3))),  # fortran_order True, float64
        "e": np.array(3.5, dtype=np.float32),
        "f": np.zeros((2, 0), dtype=np.int32),
    }
    strings = {"s": "from NumPy \u2713", "t": ""}
    src = os.path.join(work, "numpy.npz")
    np.savez(src, **arrays, **{k: np.array(v) for k, v in strings.items()})
    out = os.path.join(work, "copied.npz")
    run(tool, ["copy", src, out], device_args)
    check_archive(out, arrays, strings)
    check_zip_structure(out, sorted(arrays) + sorted(strings))

    compressed = os.path.join(work, "compressed.npz")
    np.savez_compressed(compressed, a=arrays["a"])
    err = run(tool, ["copy", compressed, os.path.join(work, "never.npz")], device_args,
              TOOL_ERROR)
    check("compressed" in err, "the refusal does not say why: " + err)
    check(not os.path.exists(os.path.join(work, "never.npz")), "a file was written")

    unsupported = os.path.join(work, "int64.npz")
    np.savez(unsupported, a=np.arange(3, dtype=np.int64))
    err = run(tool, ["copy", unsupported, os.path.join(work, "never.npz")], device_args,
              TOOL_ERROR)
    check("<i8" in err, "the refusal does not name the dtype: " + err)


EXPECTED_JSON = {
    "name": "run \"1\"",
    "text": ("tab\t nl\n cr\r ctrl\x01\x1f del\x7f uni \u00e9\u2713\U0001F680 back\\ slash/ "
             "nul\x00!"),
    "int": 2**63 - 1,
    "neg": -2**63,
    "float": 0.1,
    "third": 1.0 / 3.0,
    "tiny": 5e-324,
    "big": sys.float_info.max,
    "one": 1.0,
    "negzero": -0.0,
    "single": float(np.float32(0.1)),
    "list": [1, 2.5, "x", None, True, False, [], {}],
    "nested": {"a": {"b": [1, {"c": "d"}]}},
}


def test_json(tool, device_args, work):
    for indent in (2, 0):
        path = os.path.join(work, "doc%d.json" % indent)
        run(tool, ["json", path, str(indent)], device_args)
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")  # strict: the file must be valid UTF-8
        doc = json.loads(text, object_pairs_hook=list)
        check([k for k, _ in doc] == list(EXPECTED_JSON),
              "keys out of order: %s" % [k for k, _ in doc])
        doc = json.loads(text)
        check(doc == EXPECTED_JSON, "JSON (indent %d) reads back as %r" % (indent, doc))
        for key in ("one", "negzero", "float", "big", "tiny", "single"):
            check(isinstance(doc[key], float), "%s reads back as %r" % (key, doc[key]))
        check(math.copysign(1.0, doc["negzero"]) < 0, "-0.0 lost its sign")
        check(isinstance(doc["int"], int), "int reads back as %r" % doc["int"])
        if indent == 0:
            check("\n" not in text.rstrip("\n"), "the compact form has line breaks")
        else:
            check(text.startswith('{\n  "name": '), "the indented form starts %r" % text[:20])


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = sys.argv[1]
    device_args = [a for a in sys.argv[2:] if a.startswith("--device=")]
    try:
        for test in (test_write, test_numpy_archives, test_json):
            with tempfile.TemporaryDirectory(prefix="flexkit_nn_npz_") as work:
                test(tool, device_args, work)
                print("ok   %s" % test.__name__)
    except Mismatch as e:
        print("FAIL %s" % e, file=sys.stderr)
        return 1
    print("all .npz and JSON checks passed%s" %
          (" (%s)" % device_args[0] if device_args else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
