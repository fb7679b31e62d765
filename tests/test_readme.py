"""The README's Python example runs as written."""
import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_runs():
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    scope = {}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - our own documentation
    assert float(scope["rl"].evaluate(scope["d3"], 2.0)) == 48.0
    assert scope["res"].converged
    np.testing.assert_allclose(scope["res"].x, 0.0, atol=1e-6)
