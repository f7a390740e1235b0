#!/usr/bin/env bash
# The GPU machine's one command: configure and build with the CUDA backend, run the cuda (and
# cpu) tests, then the benchmarks beside their peers, and print a short table last.
# Usage: bench/gpu.sh            (BUILD_DIR=build-gpu by default; logs go to $OUT if set;
#                                  TESTS=regex, LABELS="cuda cpu" and BENCHES="names" pick subsets, TARGETS="names"
#                                  builds only those targets; CSNN_EPOCHS sets train_csnn's length,
#                                  CSNN_PRECISION=f32|flex16 its precision)
#   BASELINE_DIR=<source tree> also builds that tree (another version, e.g. `git archive` of the
#   commit before a change) and runs its C++ benchmarks right before this tree's, for a
#   same-run comparison (BASELINE_BENCHES picks them; tables marked "baseline").
# Headers the GPU machine lacks (CLI11, zlib's) and the Fashion-MNIST files travel in .deps/:
#   .deps/cli11 and .deps/zlib unpacked from Debian's libcli11-dev and zlib1g-dev (dpkg -x),
#   .deps/fashion-mnist holding the four .gz files.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-gpu}
logs=${OUT:-$build/logs}
mkdir -p "$logs"
jobs=$(nproc)

step() { printf '\n==== %s ====\n' "$*"; }

step "configure + build ($jobs jobs)"
start=$(date +%s)
zlib_args=()
if [ ! -f /usr/include/zlib.h ] && [ -f .deps/zlib/usr/include/zlib.h ]; then
  zlib_args=(-DZLIB_INCLUDE_DIR="$PWD/.deps/zlib/usr/include"
             -DZLIB_LIBRARY="$PWD/.deps/zlib/usr/lib/x86_64-linux-gnu/libz.a")
fi
[ -d .deps/fashion-mnist ] && export FLEXKIT_DATA_DIR=${FLEXKIT_DATA_DIR:-$PWD/.deps/fashion-mnist}
baseline_benches=${BASELINE_BENCHES-"bench_expr bench_neuron bench_gemm bench_conv"}
baseline_pid=
if [ -n "${BASELINE_DIR:-}" ]; then
  baseline_cli=OFF  # the command line (CLI11) only where it is asked for
  baseline_cli_args=()
  if [[ " $baseline_benches " == *" flexkit_cli "* ]]; then
    baseline_cli=ON
    [ -d .deps/cli11/usr/include ] &&
      baseline_cli_args=(-DFLEXKIT_CLI11_INCLUDE_DIR="$PWD/.deps/cli11/usr/include")
  fi
  # shellcheck disable=SC2086
  (cmake -S "$BASELINE_DIR" -B "$build-baseline" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DFLEXKIT_PYTHON=OFF -DFLEXKIT_TESTS=OFF -DFLEXKIT_CLI=$baseline_cli "${baseline_cli_args[@]}" "${zlib_args[@]}" \
         >"$logs/baseline-build.log" 2>&1 &&
   cmake --build "$build-baseline" -j "$jobs" --target $baseline_benches \
         >>"$logs/baseline-build.log" 2>&1) &
  baseline_pid=$!
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${zlib_args[@]}" >"$logs/configure.log" 2>&1 \
  || { cat "$logs/configure.log"; exit 1; }
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" ${TARGETS:+--target $TARGETS} >"$logs/build.log" 2>&1 || { tail -60 "$logs/build.log"; exit 1; }
if [ -n "$baseline_pid" ]; then
  wait "$baseline_pid" || { tail -40 "$logs/baseline-build.log"; exit 1; }
fi
echo "built in $(( $(date +%s) - start )) s"

step "flexkit info"
"$build/apps/flexkit/flexkit" info | tee "$logs/info.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true

status=0
# The CUDA tests spend most of their time in single-threaded host references: eight at a time on
# the GPU machine's 16 cores (the CUDA tests took 306 s at four; the whole of
# TESTS=cuda BENCHES="bench_conv torch_conv" 260 s at eight).
export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-8}
# LABELS picks the test labels (LABELS=cuda leaves the cpu tests to CI; LABELS="" runs none).
labels=${LABELS-"cuda cpu"}
for label in $labels; do
  step "tests: $label"
  ctest --test-dir "$build" -L "$label" ${TESTS:+-R "$TESTS"} --output-on-failure 2>&1 \
    | tee "$logs/ctest-$label.log" || status=1
done

step "benchmarks"
# BENCHES picks a subset (e.g. BENCHES="bench_neuron torch_lif"; BENCHES="" runs none); all by default.
benches=${BENCHES-"bench_copy bench_expr bench_autoflex torch_peers bench_cpu_expr bench_neuron torch_lif torch_lif_module bench_gemm bench_conv torch_conv"}
# bench_conv writes its rates here and torch_conv merges them into its table; a file left from
# an earlier run must not stand in for this one's.
export CONV_CSV="$logs/conv.csv"
rm -f "$CONV_CSV"
for b in $benches; do
  case $b in
    # The Python benchmarks import the package built in the build tree (flexkit.torch).
    torch_*) PYTHONPATH="$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
               python3 "bench/$b.py" 2>&1 | tee "$logs/$b.md" || status=1 ;;
    train_csnn)
      # The csnn preset beside its PyTorch peer, CSNN_EPOCHS epochs each, flexkit first:
      # CSNN_PRECISION=f32 (the peer in f32, TF32 off) or flex16 (the peer in bf16 autocast with
      # its IF loop compiled); the table from both runs' JSON (bench/csnn_pair.py).
      precision=${CSNN_PRECISION:-f32}
      form=f32
      [ "$precision" = flex16 ] && form=bf16
      "$build/apps/flexkit/flexkit" train --model csnn --device cuda --precision "$precision" \
        --epochs "${CSNN_EPOCHS:-1}" --summary "$logs/csnn-$precision.json" 2>&1 \
        | grep -v "^\s*$" | tail -4 || status=1
      python3 bench/torch_csnn.py --train "${CSNN_EPOCHS:-1}" --form "$form" \
        --json "$logs/csnn-peer-$form.json" 2>&1 | tail -2 || status=1
      python3 bench/csnn_pair.py "$logs/csnn-$precision.json" "$logs/csnn-peer-$form.json" \
        | tee "$logs/$b.md" || status=1
      ;;
    *)
      if [ -n "$baseline_pid" ] && [[ " $baseline_benches " == *" $b "* ]]; then
        echo "baseline ($BASELINE_DIR):"
        "$build-baseline/bench/$b" 2>&1 | tee "$logs/$b.baseline.md" || status=1
        echo "this tree:"
      fi
      "$build/bench/$b" 2>&1 | tee "$logs/$b.md" || status=1 ;;
  esac
done

step "summary"
for label in $labels; do
  printf '%-5s tests: %s\n' "$label" "$(grep -E 'tests passed' "$logs/ctest-$label.log" || echo 'no result')"
done
for f in $benches; do
  if [ -f "$logs/$f.baseline.md" ]; then
    echo "$f, baseline:"
    grep -E '^\|' "$logs/$f.baseline.md" || true
    echo "$f, this tree:"
  fi
  grep -E '^\|' "$logs/$f.md" || true
  echo
done
exit $status
