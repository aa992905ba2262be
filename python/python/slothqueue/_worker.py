"""`Worker`: runs Python handlers for the jobs of a queue, with the
runner's promises: a lease kept alive by heartbeats from a background
thread while a handler runs, a handler's exception recorded as the
attempt's failure (retried after the core's backoff while attempts are
left, never for an exception type marked permanent), and SIGTERM/SIGINT
giving the running job back (attempt not charged) and exiting 130.

Nothing here decides a job's fate: claim, heartbeat, complete, fail and
release are the store's, through `Queue`.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Type, TypeVar, Union

from . import _native
from ._queue import Job, Queue, Seconds, _result, _seconds

Handler = Callable[[Job], Any]
H = TypeVar("H", bound=Handler)

EXIT_INTERRUPTED = 130
"""The exit status of a worker stopped by SIGTERM or SIGINT, as `slothqueue run`'s."""

POLL = 10.0
"""How long a following worker sleeps at most without a change notification
(they can be missed on some filesystems)."""


class _Stop(BaseException):
    """Raised into the running handler by SIGTERM/SIGINT."""


@dataclass
class RunSummary:
    """What a `run` did."""

    done: int = 0
    retried: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0
    """Attempts whose lease was gone by the time the handler finished."""


@dataclass(frozen=True)
class _Registered:
    fn: Handler
    permanent: Tuple[Type[BaseException], ...]


class _Heartbeat:
    """Extends the running job's lease every third of the lease from one
    background thread per `run` (the GIL is released during each store
    call, so a busy handler does not starve it of the store, only of
    Python time). `begin` and `end` bracket each job."""

    def __init__(self, queue: Queue, owner: str, every: float) -> None:
        self._queue = queue
        self._owner = owner
        self._every = every
        self._cond = threading.Condition()
        self._job: Optional[int] = None
        self._turn = 0  # bumped by begin and end: a beat of an old turn is skipped
        self._closed = False
        self._thread = threading.Thread(target=self._beat, name="slothqueue-heartbeat", daemon=True)
        self._thread.start()

    def begin(self, job_id: int) -> None:
        with self._cond:
            self._job = job_id
            self._turn += 1
            self._cond.notify()

    def end(self) -> None:
        with self._cond:
            self._job = None
            self._turn += 1
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def _beat(self) -> None:
        while True:
            with self._cond:
                while self._job is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                turn, job = self._turn, self._job
                assert job is not None
                self._cond.wait_for(lambda: self._turn != turn or self._closed, self._every)
                if self._turn != turn or self._closed:
                    continue
            try:
                kept = self._queue.heartbeat(job, self._owner)
            except _native.BusyError:
                continue  # the next beat tries again; the lease has time left
            except _native.Error:
                kept = False
            if not kept:
                # Lost: nothing more to extend; the settle will say so.
                with self._cond:
                    if self._turn == turn:
                        self._job = None


class Worker:
    """Runs the jobs of `queue` whose kinds have a handler.

    ```
    worker = Worker(queue)

    @worker.handler("download", permanent=(ValueError,))
    def download(job: Job) -> str:
        ...

    worker.run()              # until nothing is due
    worker.run(follow=True)   # until SIGTERM/SIGINT
    ```

    A handler takes the `Job` and returns its result (a string as it is,
    anything else as JSON); `async def` handlers run on an event loop. An
    exception fails the attempt with `Type: message`; one of the types in
    `permanent` fails the job at once.
    """

    def __init__(
        self,
        queue: Queue,
        owner: Optional[str] = None,
        *,
        queues: Union[str, Iterable[str], None] = None,
        lease: Optional[Seconds] = None,
    ) -> None:
        self.queue = queue
        self.owner = owner if owner is not None else _native.default_owner()
        self._queues = [queues] if isinstance(queues, str) else (
            None if queues is None else list(queues)
        )
        self._lease = None if lease is None else _seconds(lease, "lease")
        self._handlers: Dict[str, _Registered] = {}
        self._interruptible = False
        self._stopping = False
        self._heartbeat: Optional[_Heartbeat] = None

    def handler(
        self, kind: str, *, permanent: Iterable[Type[BaseException]] = ()
    ) -> Callable[[H], H]:
        """Registers the decorated function as the handler of `kind`."""

        def register(fn: H) -> H:
            self._handlers[kind] = _Registered(fn, tuple(permanent))
            return fn

        return register

    def run(self, *, follow: bool = False) -> RunSummary:
        """Runs due jobs until none is left (or, with `follow`, until
        SIGTERM/SIGINT, sleeping until the queue changes or a job falls
        due). A signal gives the running job back and raises
        `SystemExit(130)`."""
        summary = RunSummary()
        previous = self._install_signals()
        changes = self.queue._native.changes() if follow else None
        lease = self._lease if self._lease is not None else self.queue.lease
        self._heartbeat = _Heartbeat(self.queue, self.owner, max(lease / 3, 0.01))
        job: Optional[Job] = None
        try:
            while not self._stopping:
                if changes is not None:
                    # Before each look, so that a commit during it wakes the wait.
                    changes.mark_seen()
                if job is not None:
                    job = self._run_one(job, summary)
                    continue
                job = self.queue.claim(
                    self.owner, kinds=list(self._handlers), queue=self._queues, lease=self._lease
                )
                if job is not None:
                    continue
                if changes is None:
                    break
                self._interruptible = True
                try:
                    if self._stopping:
                        raise _Stop()
                    changes.wait(self._idle_for())
                finally:
                    self._interruptible = False
        except _Stop:
            # From a handler (its job already given back) or from a wait.
            self._stopping = True
            job = None
        finally:
            self._heartbeat.close()
            self._restore_signals(previous)
        if job is not None:
            # Claimed with the last settle, then stopped before it ran.
            self._write(lambda: self.queue.release(job.id, self.owner), summary, "released")
        if self._stopping:
            raise SystemExit(EXIT_INTERRUPTED)
        return summary

    def _idle_for(self) -> float:
        due = self.queue._native.next_due_ms()
        if due is None:
            return POLL
        now = self.queue._native.now_ms()
        return min(POLL, max(0.01, (due - now) / 1000))

    def _run_one(self, job: Job, summary: RunSummary) -> Optional[Job]:
        """Runs `job`'s handler and settles it; returns the next job,
        claimed in the settle's transaction (none once stopping)."""
        registered = self._handlers[job.kind]
        beat = self._heartbeat
        assert beat is not None, "a job runs inside run()"
        beat.begin(job.id)
        outcome: Optional[BaseException] = None
        result: Any = None
        self._interruptible = True
        try:
            if self._stopping:
                raise _Stop()
            result = registered.fn(job)
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
        except _Stop:
            self._interruptible = False
            beat.end()
            self._write(lambda: self.queue.release(job.id, self.owner), summary, "released")
            raise
        except Exception as e:  # noqa: BLE001: a handler's failure is the job's
            outcome = e
        finally:
            self._interruptible = False
        beat.end()
        error: Optional[str] = None
        permanent = False
        if outcome is not None:
            error = f"{type(outcome).__name__}: {outcome}"
            permanent = isinstance(outcome, registered.permanent)
        settled: Optional[Job]
        nxt: Optional[Job] = None
        try:
            if self._stopping:
                settled = self._settle(job, error, result, permanent)
            else:
                settled, nxt = self.queue._settle_and_claim(
                    job.id,
                    self.owner,
                    error,
                    _result(result) if error is None else None,
                    permanent,
                    list(self._handlers),
                    self._queues,
                    self._lease,
                )
        except _native.LeaseLostError:
            summary.lost += 1
            return None
        if settled.state == "done":
            summary.done += 1
        elif settled.state == "pending":
            summary.retried += 1
        else:
            summary.failed += 1
        return nxt

    def _settle(self, job: Job, error: Optional[str], result: Any, permanent: bool) -> Job:
        if error is None:
            return self.queue.complete(job.id, self.owner, result)
        return self.queue.fail(job.id, self.owner, error, permanent=permanent)

    def _write(self, write: Callable[[], Job], summary: RunSummary, count: str) -> None:
        try:
            write()
        except _native.LeaseLostError:
            summary.lost += 1
            return
        setattr(summary, count, getattr(summary, count) + 1)

    def _on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        self._stopping = True
        if self._interruptible:
            self._interruptible = False
            raise _Stop()

    def _install_signals(self) -> Dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: Dict[int, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    def _restore_signals(self, previous: Dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


__all__ = ["Worker", "RunSummary", "EXIT_INTERRUPTED"]
