#!/usr/bin/env python3
"""NumPy as the oracle for flexkit's .npy files and view semantics.

usage: npy_numpy_interop.py PATH/TO/npy_view_tool [--device=cpu|cuda[:N]] [--seed=N]

Arrays written by np.save are loaded and re-saved by the tool and must come back bit-exact;
random index expressions, permutations, reshapes and assignments are applied both by NumPy and
by the tool and must agree on shape and values, and every expression NumPy rejects must make
the tool fail with exit status 3. Exits 1 with a description of the first mismatch.
"""

import concurrent.futures
import itertools
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np

TOOL_ERROR = 3  # the tool's exit status when flexkit throws
MAX_RANK = 8  # flexkit's rank limit; NumPy allows more

TOOL = None
DEVICE_ARGS = []
WORK = None


class Mismatch(Exception):
    pass


def fail(message):
    raise Mismatch(message)


class Case:
    """One tool invocation and the check of its result."""

    counter = itertools.count()

    def __init__(self, group, label, args, check, out_name="out.npy"):
        self.group = group
        self.label = label
        self.out = os.path.join(WORK, "case%05d_%s" % (next(Case.counter), out_name))
        self.args = [TOOL] + [self.out if a is OUT else a for a in args]
        self.check = check
        self.result = None

    def run(self):
        p = subprocess.run(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.result = (p.returncode, p.stderr.strip())


OUT = object()  # placeholder for a case's output path in its argument list


def on_cuda():
    return any(a.startswith("--device=cuda") for a in DEVICE_ARGS)


def expect_success(case):
    rc, err = case.result
    if rc != 0:
        fail("tool failed (exit %d) where NumPy succeeds: %s" % (rc, err))
    return np.load(case.out)


def expect_tool_error(case, reason):
    rc, err = case.result
    if rc != TOOL_ERROR:
        fail("the tool should fail (%s) but exited %d, not %d; stderr: %r"
             % (reason, rc, TOOL_ERROR, err))
    if not err.startswith("error: "):
        fail("the tool's error message does not start with 'error: ': %r" % err)


def expect_equal(actual, expected, what):
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        fail("%s: shape %s, NumPy gives %s" % (what, actual.shape, expected.shape))
    if actual.dtype != expected.dtype.newbyteorder("<"):
        fail("%s: dtype %s, expected %s" % (what, actual.dtype, expected.dtype))
    if not actual.flags.c_contiguous:
        fail("%s: the tool's file is not in C order" % what)
    # Bytes, not values: NaN payloads and -0.0 must survive too.
    expected_le = np.ascontiguousarray(expected.astype(expected.dtype.newbyteorder("<")))
    if actual.tobytes() != expected_le.tobytes():
        fail("%s: values differ\n tool:  %s\n NumPy: %s" % (what, actual.ravel()[:50],
                                                          expected_le.ravel()[:50]))


def save(name, array, sidecar=None):
    path = os.path.join(WORK, name)
    np.save(path, array)
    if sidecar is not None:
        with open(path + ".iwl", "w") as f:
            f.write(sidecar)
    return path


def check_header(path):
    """The tool's files: version 1.0 or 2.0, C order, data aligned to 64 bytes."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            _, fortran, _ = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            _, fortran, _ = np.lib.format.read_array_header_2_0(f)
        else:
            fail("%s: unexpected .npy version %s" % (path, version))
        if fortran:
            fail("%s: written with fortran_order True" % path)
        if f.tell() % 64:
            fail("%s: data starts at offset %d, not a multiple of 64" % (path, f.tell()))


# ---- round trips of files NumPy wrote -------------------------------------------------------

def roundtrip_cases(rng):
    cases = []
    f32 = (rng.standard_normal((3, 4, 5)) * 1e3).astype(np.float32)
    f32.ravel()[:5] = [np.nan, np.inf, -np.inf, -0.0, np.float32(1e-45)]
    inputs = [
        ("f4", f32, None),
        ("f8", rng.standard_normal((6, 7)) * 1e100, None),
        ("u1", rng.integers(0, 256, (2, 3, 4, 5), dtype=np.uint8), None),
        ("i4", rng.integers(-2**31, 2**31, (11,), dtype=np.int32), None),
        ("u2", rng.integers(0, 2**16, (4, 4), dtype=np.uint16), None),
        ("i2", rng.integers(-2**15, 2**15, (3, 5), dtype=np.int16), "3\n"),
        ("i2neg", rng.integers(-2**15, 2**15, (8,), dtype=np.int16), "-20\n"),
        ("fortran", np.asfortranarray(rng.standard_normal((3, 4, 5)).astype(np.float32)), None),
        ("fortran_i4", np.asfortranarray(rng.integers(-99, 99, (2, 7), dtype=np.int32)), None),
        ("big_f4", rng.standard_normal((5, 3)).astype(">f4"), None),
        ("big_i4", rng.integers(-2**31, 2**31, (9,), dtype=np.int64).astype(">i4"), None),
        ("big_f8_fortran", np.asfortranarray(rng.standard_normal((4, 3)).astype(">f8")), None),
        ("scalar", np.array(2.5, dtype=np.float32), None),
        ("empty", np.zeros((0, 3), dtype=np.float32), None),
        ("empty_i4", np.zeros((4, 0, 2), dtype=np.int32), None),
        ("rank8", rng.standard_normal((1, 2, 1, 2, 1, 2, 1, 2)).astype(np.float32), None),
    ]
    for name, array, sidecar in inputs:
        path = save(name + ".npy", array, sidecar)
        if name == "u2":  # flexkit reads <u2 only as bf16 bits, marked by this sidecar
            with open(path + ".bf16", "w") as f:
                f.write("bf16\n")
        if "fortran" in name and np.load(path).flags.c_contiguous and array.ndim > 1:
            fail("%s: NumPy did not write a Fortran-ordered file" % name)

        def check(case, array=array, sidecar=sidecar, name=name):
            if array.dtype.kind == "f" and array.dtype.itemsize == 8 and on_cuda():
                expect_tool_error(case, "f64 arrays live on the cpu only")
                return
            out = expect_success(case)
            check_header(case.out)
            expect_equal(out, array, "roundtrip " + name)
            if sidecar is not None:
                if not os.path.exists(case.out + ".iwl"):
                    fail("roundtrip %s: the iwl sidecar was not written" % name)
                with open(case.out + ".iwl") as f:
                    if int(f.read().strip()) != int(sidecar):
                        fail("roundtrip %s: the sidecar iwl changed" % name)

        cases.append(Case("roundtrip", name, ["roundtrip", path, OUT] + DEVICE_ARGS, check,
                          out_name=name + ".npy"))
    return cases


# ---- views ----------------------------------------------------------------------------------

BASE_SHAPES = [(7,), (4, 6), (5, 6), (3, 4, 5), (2, 3, 4, 5), (3, 0, 2)]


def base_array(shape):
    return np.arange(int(np.prod(shape))).reshape(shape).astype(np.float32)


def numpy_index(a, expr):
    """a[expr] as NumPy evaluates it (the empty expression being a[()]), or the exception."""
    try:
        if expr.strip() == "":
            return a[()], None
        return eval("a[" + expr + "]", {"a": a}), None
    except (IndexError, ValueError) as e:
        return None, e


def random_bound(rng, n):
    return "" if rng.random() < 0.3 else str(rng.randint(-n - 3, n + 3))


def random_slice(rng, n):
    start, stop = random_bound(rng, n), random_bound(rng, n)
    r = rng.random()
    if r < 0.3:
        return "%s:%s" % (start, stop)
    if r < 0.35:
        return "%s:%s:" % (start, stop)
    step = rng.choice([1, 2, 3, -1, -2, -3, max(n, 1) + 1, -(max(n, 1) + 1)])
    return "%s:%s:%d" % (start, stop, step)


def random_index(rng, shape):
    """A NumPy index expression over `shape`: mostly valid, sometimes out of range or too long."""
    rank = len(shape)
    consumed = rng.randint(0, rank + (1 if rng.random() < 0.1 else 0))
    kinds = ["axis"] * consumed
    if rng.random() < 0.4:
        kinds.insert(rng.randint(0, len(kinds)), "...")
        if rng.random() < 0.05:
            kinds.insert(rng.randint(0, len(kinds)), "...")
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
        kinds.insert(rng.randint(0, len(kinds)), "None")
    if not kinds:
        kinds = ["..."]
    # Which axis each entry addresses: those before an ellipsis count from the front, the
    # rest from the back, as NumPy resolves them.
    ellipsis_at = kinds.index("...") if "..." in kinds else len(kinds)
    before = sum(1 for k in kinds[:ellipsis_at] if k == "axis")
    after = consumed - before
    entries, axis_front, axis_back = [], 0, rank - after
    for i, kind in enumerate(kinds):
        if kind != "axis":
            entries.append(kind)
            continue
        if i < ellipsis_at:
            axis, axis_front = axis_front, axis_front + 1
        else:
            axis, axis_back = axis_back, axis_back + 1
        n = shape[axis] if 0 <= axis < rank else 3
        if rng.random() < 0.35:
            if rng.random() < 0.9 and n > 0:
                entries.append(str(rng.randint(-n, n - 1)))
            else:
                entries.append(str(rng.choice([n, n + 2, -n - 1, -n - 5])))
        else:
            entries.append(random_slice(rng, n))
    sep = rng.choice([", ", ",", " , "])
    return sep.join(entries)


FIXED_VIEWS = [
    ((4, 6), ":, 0:5:2"),  # 3 columns
    ((4, 6), "::-1, ::-1"),
    ((4, 6), "1,"),  # a trailing comma, as in a Python tuple
    ((4, 6), "-1, -6"),
    ((4, 6), "+1, -0"),
    ((4, 6), ""),
    ((4, 6), "..."),
    ((4, 6), "None, ..., None"),
    ((4, 6), "4"),  # out of range
    ((4, 6), "-5"),
    ((4, 6), "0, 0, 0"),  # too many indices
    ((4, 6), "..., ..."),
    ((4, 6), "::0"),  # step zero
    ((4, 6), "10:20, -100:100:7"),
    ((4, 6), "3:0:-1, 6:-7:-2"),
    ((7,), "-8:8:-3"),
    ((7,), "::-100"),
    ((7,), "5:2"),
    ((2, 3, 4, 5), "1, ..., 2"),
    ((2, 3, 4, 5), "..., None, 1, None"),
    ((2, 3, 4, 5), ":, :, :, :, None"),
    ((3, 0, 2), ":, ::-1, 1"),
    ((3, 0, 2), "0, 0"),
]


def view_cases(rng, base_paths, count):
    exprs = list(FIXED_VIEWS)
    for _ in range(count):
        shape = rng.choice(BASE_SHAPES)
        exprs.append((shape, random_index(rng, shape)))
    cases = []
    for shape, expr in exprs:
        a = base_array(shape)
        expected, error = numpy_index(a, expr)
        if error is None and np.ndim(expected) > MAX_RANK:
            error = IndexError("flexkit's rank limit")

        def check(case, expected=expected, error=error, expr=expr, shape=shape):
            if error is not None:
                expect_tool_error(case, "NumPy raises %s for a%s[%s]"
                                  % (type(error).__name__, shape, expr))
            else:
                expect_equal(expect_success(case), expected, "a%s[%s]" % (shape, expr))

        cases.append(Case("view", "a%s[%s]" % (shape, expr),
                          ["view", base_paths[shape], expr, OUT] + DEVICE_ARGS, check))
    if not any(e == ":, 0:5:2" for _, e in exprs):
        fail("the required case A[:, 0:5:2] is missing")
    return cases


def check_three_columns(cases):
    """A[:, 0:5:2] on a (4, 6) array keeps columns 0, 2 and 4."""
    for case in cases:
        if case.label == "a(4, 6)[:, 0:5:2]":
            out = np.load(case.out)
            if out.shape != (4, 3) or not np.array_equal(out[0], [0, 2, 4]):
                fail("A[:, 0:5:2] gave %s" % out)
            return
    fail("A[:, 0:5:2] did not run")


# ---- transposes -----------------------------------------------------------------------------

def transpose_cases(rng, base_paths):
    cases = []
    for shape in BASE_SHAPES:
        a = base_array(shape)
        rank = len(shape)
        perms = [list(p) for p in itertools.permutations(range(rank))]
        chosen = rng.sample(perms, min(len(perms), 6))
        # Negative axes count from the end, as in NumPy.
        chosen += [[p - rank if rng.random() < 0.5 else p for p in perm] for perm in chosen[:2]]
        specs = [(",".join(map(str, p)), p) for p in chosen] + [("T", None)]
        # Too short, too long, repeated and out-of-range axes: NumPy raises, the tool must fail.
        bad = [list(range(rank - 1)), list(range(rank + 1)), [0] * rank,
               [rank] + list(range(1, rank))]
        specs += [(",".join(map(str, p)), p) for p in bad]
        for text, perm in specs:
            try:
                expected, error = (a.T if perm is None else np.transpose(a, perm)), None
            except (ValueError, IndexError) as e:
                expected, error = None, e

            def check(case, expected=expected, error=error, text=text, shape=shape):
                what = "a%s.transpose(%s)" % (shape, text)
                if error is not None:
                    expect_tool_error(case, "NumPy raises %s for %s"
                                      % (type(error).__name__, what))
                else:
                    expect_equal(expect_success(case), expected, what)

            cases.append(Case("transpose", text, ["transpose", base_paths[shape], text, OUT],
                              check))
    # Transposes of strided views.
    for shape, pre, perm in [((5, 6), "::2, ::-3", "1,0"), ((3, 4, 5), "1:, None, ::-2", "T"),
                             ((2, 3, 4, 5), "..., 1:3", "3,1,0,2")]:
        v = numpy_index(base_array(shape), pre)[0]
        expected = v.T if perm == "T" else np.transpose(v, [int(p) for p in perm.split(",")])

        def check(case, expected=expected, what="a%s[%s].transpose(%s)" % (shape, pre, perm)):
            expect_equal(expect_success(case), expected, what)

        cases.append(Case("transpose", perm, ["transpose", base_paths[shape], perm, OUT,
                                              "--pre-index=" + pre], check))
    return cases


# ---- reshapes -------------------------------------------------------------------------------

def numpy_reshape_is_view(b, shape):
    """Whether NumPy reshapes b to shape without copying (a size-0 array always can)."""
    r = b.reshape(shape)
    if b.size == 0:
        return True
    return np.shares_memory(r, b)


def random_factorisation(rng, size):
    dims = []
    rest = size
    while rest > 1 and len(dims) < 4:
        divisors = [d for d in range(2, rest + 1) if rest % d == 0]
        d = rng.choice(divisors)
        dims.append(d)
        rest //= d
    if rest != 1:
        dims.append(rest)
    for _ in range(rng.choice([0, 0, 1, 2])):
        dims.insert(rng.randint(0, len(dims)), 1)
    rng.shuffle(dims)
    if dims and rng.random() < 0.4:
        dims[rng.randrange(len(dims))] = -1
    return dims


def reshape_cases(rng, base_paths):
    cases = []
    no_view = 0

    def add(shape, dims, pre_args, b, what):
        nonlocal no_view
        text = ",".join(map(str, dims))
        try:
            is_view = numpy_reshape_is_view(b, dims)
            expected, error = b.reshape(dims), None
        except ValueError as e:
            expected, error, is_view = None, e, None
        if error is None and not is_view:
            no_view += 1
            error = "NumPy can only reshape this layout by copying"

        def check(case, expected=expected, error=error, what=what + ".reshape(%s)" % text):
            if error is not None:
                reason = error if isinstance(error, str) else "NumPy raises " + type(error).__name__
                expect_tool_error(case, "%s: %s" % (reason, what))
            else:
                expect_equal(expect_success(case), expected, what)

        cases.append(Case("reshape", what + " " + text,
                          ["reshape", base_paths[shape], text, OUT] + pre_args, check))

    # C-contiguous inputs: every valid reshape is a view.
    for shape in BASE_SHAPES:
        a = base_array(shape)
        for _ in range(8):
            add(shape, random_factorisation(rng, a.size), [], a, "a%s" % (shape,))
        add(shape, [a.size + 1], [], a, "a%s" % (shape,))  # wrong element count
        add(shape, [-1, -1], [], a, "a%s" % (shape,))  # two inferred extents
    add((4, 6), [], [], base_array((4, 6)), "a(4, 6)")  # 24 elements into shape ()
    add((7,), [5, -1], [], base_array((7,)), "a(7,)")  # 7 is not a multiple of 5

    # Transposed and strided inputs: NumPy decides which reshapes can be views.
    strided = [("--pre-transpose=T", (5, 6)), ("--pre-transpose=1,0,2", (3, 4, 5)),
               ("--pre-transpose=0,2,1,3", (2, 3, 4, 5)), ("--pre-index=:, ::2", (5, 6)),
               ("--pre-index=::-1, 1:3", (3, 4, 5)), ("--pre-index=..., None, 1", (2, 3, 4, 5)),
               ("--pre-index=1:, :, ::3", (3, 4, 5))]
    for option, shape in strided:
        a = base_array(shape)
        name, value = option[2:].split("=", 1)
        if name == "pre-transpose":
            b = a.T if value == "T" else np.transpose(a, [int(p) for p in value.split(",")])
        else:
            b = numpy_index(a, value)[0]
        what = "a%s %s" % (shape, option)
        for _ in range(6):
            add(shape, random_factorisation(rng, b.size), [option], b, what)
        add(shape, [-1], [option], b, what)  # flattening: a copy for all but trivial layouts
        add(shape, list(b.shape), [option], b, what)  # the same shape: always a view
    if no_view < 3:
        fail("only %d reshapes needed a copy; the oracle does not test refusals" % no_view)
    return cases


# ---- assignment through views ---------------------------------------------------------------

def assign_cases(rng, base_paths, count):
    cases = []
    exprs = [((4, 6), ":, 0:5:2"), ((4, 6), "::-1, 1"), ((2, 3, 4, 5), "..., ::-2, None"),
             ((3, 0, 2), ":, :, 1"), ((7,), "-1"), ((4, 6), "9")]
    while len(exprs) < count:
        shape = rng.choice(BASE_SHAPES)
        exprs.append((shape, random_index(rng, shape)))
    for shape, expr in exprs:
        a = base_array(shape)
        value = rng.choice([-1.5, 1000.0, 0.25, -7.0, 3.0])
        c = a.copy()
        mask = np.zeros(a.shape, dtype=bool)
        try:
            exec("c[" + expr + "] = value\nmask[" + expr + "] = True" if expr.strip() else
                 "c[()] = value\nmask[()] = True", {"c": c, "mask": mask, "value": value})
            error = None
        except (IndexError, ValueError) as e:
            error = e
        if error is None and np.ndim(numpy_index(a, expr)[0]) > MAX_RANK:
            error = IndexError("flexkit's rank limit")

        def check(case, c=c, mask=mask, error=error, expr=expr, shape=shape, a=a, value=value):
            what = "a%s[%s] = %s" % (shape, expr, value)
            if error is not None:
                expect_tool_error(case, "NumPy raises %s for %s" % (type(error).__name__, what))
                return
            out = expect_success(case)
            expect_equal(out, c, what)
            if not np.all(out[mask] == value) or not np.array_equal(out[~mask], a[~mask]):
                fail("%s: elements outside the view changed" % what)

        cases.append(Case("assign", expr, ["assign", base_paths[shape], expr, repr(value), OUT],
                          check))

    # flex16: the int16 mantissas change to value * 2^(15 - iwl), the sidecar stays.
    iwl = 3
    m = np.arange(-30, 30, dtype=np.int16).reshape(6, 10) * 7
    path = save("flex16_base.npy", m, "%d\n" % iwl)
    for expr, value in [("::2, 1::3", 1.5), ("-1", -0.125), ("..., ::-4", 2.0)]:
        c = m.copy()
        exec("c[" + expr + "] = np.int16(value * 2 ** (15 - iwl))",
             {"c": c, "np": np, "value": value, "iwl": iwl})

        def check(case, c=c, what="flex16 m[%s] = %s" % (expr, value)):
            expect_equal(expect_success(case), c, what)
            with open(case.out + ".iwl") as f:
                if int(f.read()) != iwl:
                    fail("%s: the iwl changed" % what)

        cases.append(Case("assign", "flex16 " + expr, ["assign", path, expr, str(value), OUT],
                          check))
    return cases


# ---- driver ---------------------------------------------------------------------------------

def main():
    global TOOL, DEVICE_ARGS, WORK
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    TOOL = os.path.abspath(sys.argv[1])
    seed = 20240611
    for arg in sys.argv[2:]:
        if arg.startswith("--device="):
            DEVICE_ARGS = [arg]
        elif arg.startswith("--seed="):
            seed = int(arg[len("--seed="):])
        else:
            print("unknown argument %s" % arg, file=sys.stderr)
            return 2
    if not os.access(TOOL, os.X_OK):
        print("%s is not an executable" % TOOL, file=sys.stderr)
        return 2

    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    WORK = tempfile.mkdtemp(prefix="flexkit_npy_interop_")
    try:
        base_paths = {s: save("base_%s.npy" % "x".join(map(str, s)), base_array(s))
                      for s in BASE_SHAPES}
        views = view_cases(rng, base_paths, 300)
        cases = (roundtrip_cases(np_rng) + views + transpose_cases(rng, base_paths) +
                 reshape_cases(rng, base_paths) + assign_cases(rng, base_paths, 60))
        # Each case is a process; run them side by side, check them in order.
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            list(pool.map(Case.run, cases))
        passed = {}
        for case in cases:
            try:
                case.check(case)
            except Mismatch as e:
                print("MISMATCH [%s] %s\n  command: %s\n  %s" % (
                    case.group, case.label, " ".join(repr(a) for a in case.args), e),
                    file=sys.stderr)
                return 1
            passed[case.group] = passed.get(case.group, 0) + 1
        check_three_columns(views)
        refused = sum(1 for c in cases if c.result[0] == TOOL_ERROR)
        print("npy_numpy_interop: %d cases passed (%s); %d of them checked that the tool refuses "
              "what NumPy refuses" % (len(cases), ", ".join("%s %d" % kv for kv in passed.items()),
                                      refused))
        return 0
    except Mismatch as e:
        print("MISMATCH: %s" % e, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
