"""Fixtures of the Python package's tests: a fresh queue file per test, a
manual clock, the CLI binary for the interop tests (`SLOTHQUEUE_BIN`, set
by `cargo xtask ci`; else the workspace's debug build), and a helper to
run Python code in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List

import pytest

import slothqueue

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "queue.db")


@pytest.fixture
def clock() -> slothqueue.ManualClock:
    return slothqueue.ManualClock()


@pytest.fixture
def q(db: str, clock: slothqueue.ManualClock) -> Iterator[slothqueue.Queue]:
    with slothqueue.Queue(db, clock=clock) as queue:
        yield queue


@pytest.fixture(scope="session")
def cli() -> str:
    """The `slothqueue` binary: the interop tests need it, so its absence
    fails them rather than skipping them."""
    path = os.environ.get("SLOTHQUEUE_BIN") or str(REPO / "target" / "debug" / "slothqueue")
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"no slothqueue binary at {path}: `cargo build -p slothqueue-cli`, "
            "or set SLOTHQUEUE_BIN"
        )
    return path


def run_cli(cli: str, db: str, *args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli, "--db", db, *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def child(code: str, *args: str) -> List[str]:
    """The command line that runs `code` in a fresh Python of this venv."""
    return [sys.executable, "-c", code, *args]
