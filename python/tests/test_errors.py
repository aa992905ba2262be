"""One exception hierarchy under `slothqueue.Error`, each with the line
the CLI prints after `error: `."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import slothqueue
from slothqueue import Queue

from conftest import run_cli


def test_the_classes_form_one_hierarchy() -> None:
    for cls in (
        slothqueue.NotFoundError,
        slothqueue.InvalidInputError,
        slothqueue.InvalidStateError,
        slothqueue.LeaseLostError,
        slothqueue.BusyError,
        slothqueue.UnusableFileError,
    ):
        assert issubclass(cls, slothqueue.Error) and cls.__module__ == "slothqueue"
    assert issubclass(slothqueue.InvalidStateError, slothqueue.InvalidInputError)


def test_messages_are_the_clis(q: Queue, db: str, cli: str) -> None:
    with pytest.raises(slothqueue.NotFoundError) as missing:
        q.get(42)
    shown = run_cli(cli, db, "show", "42")
    assert shown.returncode != 0
    assert shown.stderr.strip() == f"error: {missing.value}"

    job_id = q.push("x", {}).job.id
    q.cancel(job_id)
    with pytest.raises(slothqueue.InvalidStateError) as finished:
        q.cancel(job_id)
    cancelled = run_cli(cli, db, "cancel", str(job_id))
    assert cancelled.stderr.strip() == f"error: {finished.value}"


def test_a_foreign_file_is_unusable_and_untouched(tmp_path: Path) -> None:
    notes = tmp_path / "notes.db"
    notes.write_text("just some notes\n")
    os.chmod(notes, 0o600)
    with pytest.raises(slothqueue.UnusableFileError, match="notes.db"):
        Queue(str(notes))
    assert notes.read_text() == "just some notes\n"


def test_bad_input_is_refused(q: Queue) -> None:
    with pytest.raises(slothqueue.InvalidInputError):
        q.push()
    with pytest.raises(slothqueue.InvalidInputError):
        q.push("x", {}, delay=-1)
    with pytest.raises(slothqueue.InvalidInputError):
        q.list(state="sleeping")


def test_a_closed_queue_says_so(db: str) -> None:
    queue = Queue(db)
    queue.close()
    with pytest.raises(slothqueue.Error, match="closed"):
        queue.stats()
