"""The README's Python snippets run as written (together, in order)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_snippets_run():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    r = subprocess.run([sys.executable, "-c", "\n".join(blocks)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "array([1, 2.71828, 7.38906, 20.0855], dtype=float32)" in r.stdout
