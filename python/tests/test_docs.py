"""The examples of docs/python.md, the README's Python section and the
typed example run as they are, each in a fresh folder, so they cannot
rot."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from conftest import REPO


def python_blocks(text: str) -> List[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def readme_python_section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("\n## Python\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


DOCS = python_blocks((REPO / "docs" / "python.md").read_text())
README = python_blocks(readme_python_section())


def test_the_docs_have_their_examples() -> None:
    assert len(DOCS) == 3 and len(README) == 1


@pytest.mark.parametrize("code", DOCS + README, ids=lambda c: c.splitlines()[0][:40])
def test_an_example_runs(code: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr


def test_the_typed_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "python" / "examples" / "typed_example.py"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        namespace = runpy.run_path(str(path))
        assert namespace["main"](tmp_path) == 0
    finally:
        os.chdir(cwd)
    assert "resized to 64 px (pushed, claimed, completed)" in capsys.readouterr().out
