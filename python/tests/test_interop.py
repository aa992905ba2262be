"""Python and the CLI on one file, both ways: a shell job pushed from
Python is run by `slothqueue run`; a handler job added by the CLI is run
by a Python worker, and `slothqueue show` sees what Python did."""

from __future__ import annotations

import json
from pathlib import Path

import slothqueue
from slothqueue import Queue, Worker

from conftest import run_cli


def test_python_pushes_a_shell_job_the_cli_runs_it(db: str, cli: str, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with Queue(db) as q:
        job_id = q.push(command=f"echo ran > {out}").job.id
        assert q.get(job_id).command == f"echo ran > {out}"
    ran = run_cli(cli, db, "run", "--load-ceiling", "1000")
    assert ran.returncode == 0, ran.stderr
    assert out.read_text() == "ran\n"
    with Queue(db) as q:
        job = q.get(job_id)
        assert job.state == "done" and job.attempts == 1
        assert [e.kind for e in q.events(job_id)] == ["pushed", "claimed", "completed"]


def test_the_cli_adds_a_handler_job_a_python_worker_runs_it(db: str, cli: str) -> None:
    added = run_cli(cli, db, "add", "--kind", "resize", "--payload", '{"width": 64}', "--json")
    assert added.returncode == 0, added.stderr
    job_id = json.loads(added.stdout)["id"]
    with Queue(db) as q:
        worker = Worker(q, "py-worker")

        @worker.handler("resize")
        def resize(job: slothqueue.Job) -> str:
            return f"resized to {job.payload['width']} px"

        summary = worker.run()
        assert summary.done == 1
    shown = run_cli(cli, db, "show", str(job_id), "--json")
    assert shown.returncode == 0, shown.stderr
    seen = json.loads(shown.stdout)
    text = json.dumps(seen)
    assert "resized to 64 px" in text and '"done"' in text
    status = run_cli(cli, db, "status")
    assert status.returncode == 0, status.stderr


def test_a_redb_file_is_the_same_queue(tmp_path: Path, cli: str) -> None:
    db = str(tmp_path / "queue.redb")
    with Queue(db) as q:
        job_id = q.push("x", {"a": 1}).job.id
    listed = run_cli(cli, db, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert str(job_id) in listed.stdout and '"x"' in listed.stdout
