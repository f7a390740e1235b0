#!/usr/bin/env python3
"""Every shell block of the README, after the first (the set-up commands, which CI itself runs),
run as written as one bash script in a fresh folder, with `flexkit` and a python3 that has NumPy
first on PATH. Lines that ask for `--device cuda` are left out where no GPU is found (and said so).

    readme_shell_test.py README.md FLEXKIT
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def blocks(readme):
    return re.findall(r"^```sh\n(.*?)^```", open(readme).read(), flags=re.S | re.M)


def main():
    readme, flexkit = sys.argv[1], os.path.abspath(sys.argv[2])
    has_gpu = subprocess.run([flexkit, "info"], capture_output=True, text=True).stdout
    has_gpu = re.search(r"cuda devices\s*:\s*[1-9]", has_gpu) is not None
    found = blocks(readme)
    assert len(found) >= 3, f"expected the README's shell blocks, found {len(found)}"
    failures = 0
    for n, block in enumerate(found[1:], start=2):
        work = tempfile.mkdtemp(prefix=f"readme_sh{n}_")
        bin_dir = os.path.join(work, ".bin")
        os.makedirs(bin_dir)
        os.symlink(flexkit, os.path.join(bin_dir, "flexkit"))
        # A wrapper, not a link: a virtual environment's python finds its packages from the path
        # it was started by, which a link in another folder would change.
        wrapper = os.path.join(bin_dir, "python3")
        with open(wrapper, "w") as f:
            f.write(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        os.chmod(wrapper, 0o755)
        lines = []
        for line in block.splitlines():
            if "--device cuda" in line and not has_gpu:
                print(f"block {n}: skipped without a GPU: {line.strip()}")
                line = ":"
            lines.append(line)
        script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
        r = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                           timeout=1200)
        if r.returncode != 0:
            failures += 1
            print(f"block {n} failed (exit {r.returncode}):\n{block}\n--- stdout\n{r.stdout[-4000:]}"
                  f"\n--- stderr\n{r.stderr[-4000:]}")
        else:
            print(f"block {n}: ran ({len(block.splitlines())} lines)")
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        sys.exit(1)
    print(f"{len(found) - 1} README shell blocks ran as written")


if __name__ == "__main__":
    main()
