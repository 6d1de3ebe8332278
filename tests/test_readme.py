"""The README's first example must run as written and print what the README says."""
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_first_example_runs_as_written(tmp_path):
    text = README.read_text()
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    (tmp_path / "example.py").write_text(example)
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "[10. 10. 10. 10.]" in out
    assert "[[8. 8. 8. 8. 8.]]" in out
    # The text form quoted in the README is what print(op) gives, line numbers included.
    quoted = re.search(r"```\n(op add_reduce_sum.*?\n})\n```", text, re.S).group(1)
    assert quoted in out
    assert (tmp_path / "add_reduce_sum_aot" / "add_reduce_sum.cc").exists()


def test_layout_example_runs_as_written(tmp_path):
    """The newcomer's layout example (RoPE and a causal mask) runs as written and is right."""
    text = README.read_text()
    section = text[text.index("## Layout ops and shapes"):]
    example = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    example += ("\nh = 4\nwant = q * cos + np.concatenate([-q[:, h:], q[:, :h]], -1) * sin\n"
                "assert np.allclose(r, want, atol=1e-6)\n"
                "assert np.allclose(lower, np.tril(want[:, :4]), atol=1e-6)\nprint('checked')\n")
    (tmp_path / "layout.py").write_text(example)
    proc = subprocess.run([sys.executable, "layout.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("checked")


def test_ci_reads_the_quick_start_commands():
    """.ci/run walks the newcomer's path with the commands of the README's Quick start block, read by
    a Python snippet inside it: that snippet finds the install with only [test], the demo and the test
    command in this README (it would fail CI's first step otherwise)."""
    script = (README.parent / ".ci" / "run").read_text()
    snippet = re.search(r"<<'EOF'\n(.*?)^EOF$", script, re.S | re.M).group(1)
    proc = subprocess.run([sys.executable, "-c", snippet], cwd=README.parent, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    commands = proc.stdout.splitlines()
    assert commands == ['pip install -e ".[test]" && fusegen demo', "pytest"], commands
    elsewhere = snippet.replace("## Quick start", "## No such section")
    assert elsewhere != snippet
    broken = subprocess.run([sys.executable, "-c", elsewhere], cwd=README.parent, capture_output=True, text=True,
                            timeout=60)
    assert broken.returncode != 0 and "has no ```bash block" in broken.stderr  # never a silently empty path
