"""The GIL is released while the store works: one thread blocked in the
store (a `wait`) does not stop another from using the queue."""

from __future__ import annotations

import threading

from slothqueue import Queue, Waited


def test_a_thread_waiting_in_the_store_lets_others_run(db: str) -> None:
    with Queue(db) as q:
        job_id = q.push("x", {}).job.id
        seen: list[Waited] = []
        waiter = threading.Thread(target=lambda: seen.append(q.wait([job_id], timeout=20)))
        waiter.start()
        # Were the GIL held during the wait, this thread would not run
        # until the wait timed out, and the wait would report it pending.
        job = q.claim("w")
        assert job is not None
        q.complete(job.id, "w")
        waiter.join()
        assert not seen[0].timed_out and seen[0].states == {job_id: "done"}
