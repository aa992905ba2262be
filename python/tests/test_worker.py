"""The worker: sync and async handlers, a handler's exception as the
failure (retried after the core's backoff; a permanent type not at all),
heartbeats while a handler runs, SIGTERM giving the job back and exiting
130, a SIGKILLed worker's job taken back at once by the next, and a
following worker woken by another process's push."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import textwrap
import threading

import pytest

import slothqueue
from slothqueue import ManualClock, Queue, Worker

from conftest import child


def test_sync_and_async_handlers(q: Queue) -> None:
    worker = Worker(q, "w")
    seen: list[int] = []

    @worker.handler("sync")
    def sync(job: slothqueue.Job) -> dict[str, int]:
        seen.append(job.id)
        return {"n": job.payload["n"] * 2}

    @worker.handler("async")
    async def run_async(job: slothqueue.Job) -> str:
        await asyncio.sleep(0)
        return "async ok"

    a = q.push("sync", {"n": 21}).job.id
    b = q.push("async", {}).job.id
    other = q.push("nobody-handles-this", {}).job.id
    summary = worker.run()
    assert summary.done == 2 and seen == [a]
    assert json.loads(q.get(a).result or "") == {"n": 42}
    assert q.get(b).result == "async ok"
    assert q.get(other).state == "pending", "a kind without a handler is left alone"


def test_an_exception_fails_the_attempt_and_is_retried(q: Queue, clock: ManualClock) -> None:
    worker = Worker(q, "w")
    calls: list[int] = []

    @worker.handler("flaky")
    def flaky(job: slothqueue.Job) -> str:
        calls.append(job.attempts)
        if job.attempts < 3:
            raise RuntimeError(f"try {job.attempts}")
        return "third time"

    job_id = q.push("flaky", {}, max_attempts=3).job.id
    assert worker.run().retried == 1
    assert q.get(job_id).last_error == "RuntimeError: try 1"
    clock.advance(2)
    assert worker.run().retried == 1
    clock.advance(4)
    assert worker.run().done == 1
    assert calls == [1, 2, 3] and q.get(job_id).result == "third time"


def test_a_permanent_exception_type_is_not_retried(q: Queue) -> None:
    worker = Worker(q, "w")

    @worker.handler("parse", permanent=(ValueError,))
    def parse(job: slothqueue.Job) -> None:
        raise ValueError("not a number")

    job_id = q.push("parse", {}).job.id
    assert worker.run().failed == 1
    job = q.get(job_id)
    assert job.state == "failed" and job.attempts == 1
    assert job.last_error == "ValueError: not a number"


def test_heartbeats_keep_the_lease_while_a_handler_runs(db: str) -> None:
    # A short real lease: heartbeats every third of it from the worker's
    # thread; the handler waits on an event another thread sets once it
    # has seen the lease extended twice (no sleep decides the outcome).
    with Queue(db, lease=0.3) as q:
        job_id = q.push("slow", {}).job.id
        worker = Worker(q, "w")
        extended = threading.Event()

        def watch() -> None:
            first = None
            while not extended.is_set():
                until = q.get(job_id).lease_until
                if until is not None:
                    if first is None:
                        first = until
                    elif (until - first).total_seconds() >= 0.15:
                        extended.set()

        @worker.handler("slow")
        def slow(job: slothqueue.Job) -> str:
            watcher = threading.Thread(target=watch)
            watcher.start()
            assert extended.wait(30), "the lease was never extended"
            watcher.join()
            return "kept"

        assert worker.run().done == 1
        assert q.get(job_id).attempts == 1


WORKER = textwrap.dedent(
    """
    import sys, slothqueue
    q = slothqueue.Queue(sys.argv[1])
    w = slothqueue.Worker(q, sys.argv[2])

    @w.handler("block")
    def block(job):
        print("started", job.id, flush=True)
        sys.stdin.read()  # until the test closes it, or a signal comes
        return "finished"

    @w.handler("quick")
    def quick(job):
        print("quick", job.id, flush=True)
        return "quick ok"

    summary = w.run(follow=sys.argv[3] == "follow")
    print("summary", summary.done, flush=True)
    """
)


def start_worker(db: str, owner: str, mode: str = "drain") -> subprocess.Popen[str]:
    return subprocess.Popen(
        child(WORKER, db, owner, mode),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_sigterm_releases_the_running_job_and_exits_130(db: str) -> None:
    with Queue(db) as q:
        job_id = q.push("block", {}).job.id
        proc = start_worker(db, "term-me")
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["started", str(job_id)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 130
        job = q.get(job_id)
        assert job.state == "pending" and job.attempts == 0, "the attempt is not charged"
        assert [e.kind for e in q.events(job_id)] == ["pushed", "claimed", "released"]


def test_a_killed_workers_job_is_taken_back_at_once(db: str) -> None:
    with Queue(db) as q:
        job_id = q.push("block", {}).job.id
        first = start_worker(db, "doomed")
        assert first.stdout is not None
        assert first.stdout.readline().split() == ["started", str(job_id)]
        first.kill()
        first.wait(60)
        # Its lease has most of its 60 s left; its pid is dead on this host.
        second = start_worker(db, "next")
        out, _ = second.communicate("", timeout=60)
        assert second.returncode == 0, out
        assert out.split()[:2] == ["started", str(job_id)]
        job = q.get(job_id)
        assert job.state == "done" and job.attempts == 2 and job.result == "finished"
        assert [e.kind for e in q.events(job_id)] == [
            "pushed", "claimed", "reclaimed", "claimed", "completed",
        ]


def test_a_following_worker_wakes_on_another_process_push(db: str) -> None:
    with Queue(db) as q:
        proc = start_worker(db, "follower", "follow")
        try:
            # Pushed by another process (a child), so only the file's
            # change notification (or the long poll) can wake the worker.
            pushed = subprocess.run(
                child(
                    "import sys, slothqueue; "
                    "print(slothqueue.Queue(sys.argv[1]).push('quick', {}).job.id)",
                    db,
                ),
                capture_output=True, text=True, check=True,
            )
            job_id = int(pushed.stdout)
            waited = q.wait([job_id], timeout=5)
            assert waited.states == {job_id: "done"}, "woken well before the 10 s poll"
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(60) == 130


def test_wait_times_out_and_reports_states(q: Queue) -> None:
    job_id = q.push("x", {}).job.id
    waited = q.wait([job_id], timeout=0)
    assert waited.timed_out and waited.states == {job_id: "pending"}
    with pytest.raises(slothqueue.NotFoundError):
        q.wait([job_id + 100], timeout=0)
