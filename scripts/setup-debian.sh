#!/usr/bin/env bash
# Installs what flexkit needs to build and test on Debian 12 / Ubuntu 24.04: Debian's packages,
# and a virtual environment .venv (with the system's site packages: Debian's NumPy and PyTorch)
# holding nanobind, scikit-build-core and pytest from PyPI, which the CMake build uses to build
# and test the Python package.
# A CUDA toolkit (nvcc) is used when present at /usr/local/cuda or on PATH; without one the CPU
# backend is built alone.
set -euo pipefail
# libopenblas-dev: the peer of the CPU matrix-product benchmark (the library does not use it).
# zlib1g-dev: gzip'd IDX files; libcli11-dev: the CLI's argument parser; dataset-fashion-mnist:
# what `flexkit train` trains on; python3-torch: the float64 oracle of the layer tests and the
# peer of the training benchmark; python3-dev, python3-venv: the Python package;
# libopenmpi-dev, openmpi-bin: data-parallel training (`flexkit train --distributed`).
packages=(build-essential cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev
          python3 python3-numpy clang-format libopenblas-dev zlib1g-dev libcli11-dev
          dataset-fashion-mnist python3-torch python3-dev python3-venv libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found; the CUDA backend will be built"
else
  echo "setup: no CUDA toolkit; building the CPU backend only"
fi
# The Python package's build and test tools, in the repository's .venv.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -x "$root/.venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$root/.venv"
fi
"$root/.venv/bin/python" -m pip install -q --disable-pip-version-check \
  "nanobind>=2.0" "scikit-build-core>=0.10" "pytest>=7"
echo "setup: Python tools in $root/.venv ($("$root/.venv/bin/python" -m nanobind --version 2>/dev/null \
  | sed 's/^/nanobind /'))"
