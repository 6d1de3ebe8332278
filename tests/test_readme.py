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
