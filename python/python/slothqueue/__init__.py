"""slothqueue: a durable background-job queue in one file, for Python.

The same queue as the `slothqueue` CLI and Rust library, on the same
files: leases fenced by owner and attempt, a dead owner's job taken back,
retries after a backoff until the attempts are used up, idempotency keys,
jobs waiting on others, and a trail of every change. The rules are the
Rust core's; this package calls them (`slothqueue._native`).

    from slothqueue import Queue

    with Queue("jobs.db") as q:
        q.push("download", {"url": "https://example.org/a.iso"})
        job = q.claim("laptop:8123")
        if job is not None:
            q.heartbeat(job.id, "laptop:8123")
            q.complete(job.id, "laptop:8123", "moved 4 files")
"""

from ._native import (
    BusyError,
    Error,
    InvalidInputError,
    InvalidStateError,
    LeaseLostError,
    NotFoundError,
    UnusableFileError,
    default_owner,
)
from ._queue import Event, Job, ManualClock, Pushed, Queue, Stats, Waited
from ._worker import EXIT_INTERRUPTED, RunSummary, Worker

__all__ = [
    "Queue",
    "Job",
    "Pushed",
    "Event",
    "Stats",
    "Waited",
    "ManualClock",
    "Worker",
    "RunSummary",
    "EXIT_INTERRUPTED",
    "default_owner",
    "Error",
    "NotFoundError",
    "InvalidInputError",
    "InvalidStateError",
    "LeaseLostError",
    "BusyError",
    "UnusableFileError",
]
