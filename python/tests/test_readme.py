"""Every Python example of the README's Python section, run as written in a fresh interpreter
(each in an empty folder) with the package under test."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _python_section_blocks():
    text = README.read_text()
    match = re.search(r"^## Python\n(.*?)^## ", text, flags=re.S | re.M)
    assert match, "README.md has no '## Python' section"
    return re.findall(r"^```python\n(.*?)^```", match.group(1), flags=re.S | re.M)


BLOCKS = _python_section_blocks()


def test_the_section_has_its_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_example(index, tmp_path):
    block = BLOCKS[index]
    if "import torch" in block:
        pytest.importorskip("torch")
    env = dict(os.environ)
    import flexkit

    package_root = str(pathlib.Path(flexkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([package_root, env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"README example {index + 1}:\n{block}\n{result.stderr}"
