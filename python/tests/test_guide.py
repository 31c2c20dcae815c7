"""docs/guide-python.md runs as a test: its ``python`` blocks, in order, in one namespace."""

import importlib.util
import pathlib
import re

import pytest

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide-python.md"


def blocks():
    return re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), flags=re.S | re.M)


@pytest.mark.skipif(not GUIDE.exists(), reason="run from the repository: the guide is not packaged")
def test_the_guide_runs() -> None:
    code = blocks()
    assert len(code) >= 4
    namespace: dict[str, object] = {}
    for i, block in enumerate(code):
        if "import cgx.jax" in block:
            pytest.importorskip("jax")
        if "import cgx.torch" in block and importlib.util.find_spec("torch") is None:
            continue  # PyTorch is optional (CI does not install it): skip only its block
        exec(compile(block, f"{GUIDE.name}[block {i}]", "exec"), namespace)
