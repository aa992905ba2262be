"""The queue as Python objects: `Queue`, `Job`, `Pushed`, `Event`, `Stats`,
`ManualClock`.

Every rule (what a claim takes, leases, backoff, keys, the trail) is the
Rust library's, called through `slothqueue._native`; this module only
turns arguments into the native call's and its JSON answers into objects
(times as aware UTC `datetime`s, payloads as JSON values).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _native

Seconds = Union[int, float, timedelta]
"""A span of time: seconds, or a `timedelta`."""

JobRef = Union[int, str]
"""A job named by id, or (in `after`) by idempotency key."""


def _seconds(value: Seconds, what: str) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _native.InvalidInputError(f"{what} must be seconds or a timedelta")
    return float(value)


def _ms(value: Optional[Seconds], what: str) -> Optional[int]:
    if value is None:
        return None
    seconds = _seconds(value, what)
    if seconds < 0:
        raise _native.InvalidInputError(f"{what} must be a time of 0 s or more")
    return round(seconds * 1000)


def _time(ms: Optional[int]) -> Optional[datetime]:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _opt_str(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


class ManualClock:
    """A clock for tests that moves only when told to: `advance(seconds)`
    moves it at once, without sleeping, as the Rust tests' clock does.
    It starts now (or at `start`)."""

    def __init__(self, start: Optional[datetime] = None) -> None:
        if start is None:
            start = datetime.now(timezone.utc)
        if start.tzinfo is None:
            raise _native.InvalidInputError("a clock's start must be an aware datetime")
        self._native = _native.NativeClock(round(start.timestamp() * 1000))

    def now(self) -> datetime:
        """The clock's time."""
        return _at(self._native.now_ms())

    def advance(self, seconds: Seconds) -> None:
        """Moves the clock forward by `seconds` (or a `timedelta`)."""
        ms = _ms(seconds, "advance")
        assert ms is not None
        self._native.advance_ms(ms)

    def __repr__(self) -> str:
        return f"ManualClock({self.now().isoformat()})"


class Job:
    """A job as the queue holds it. Read-only: the queue changes jobs, a
    `Job` is what it said at one moment."""

    __slots__ = ("_raw",)
    _raw: Dict[str, Any]

    def __init__(self, raw: Dict[str, Any]) -> None:
        object.__setattr__(self, "_raw", raw)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Job.{name} is read-only")

    @property
    def id(self) -> int:
        return int(self._raw["id"])

    @property
    def state(self) -> str:
        """pending, running, done, failed or cancelled."""
        return str(self._raw["state"])

    @property
    def kind(self) -> str:
        return str(self._raw["kind"])

    @property
    def payload(self) -> Any:
        return self._raw["payload"]

    @property
    def command(self) -> Optional[str]:
        """A shell job's command."""
        payload = self._raw["payload"]
        if isinstance(payload, dict) and isinstance(payload.get("command"), str):
            return str(payload["command"])
        return None

    @property
    def queue(self) -> str:
        return str(self._raw["queue"])

    @property
    def priority(self) -> int:
        return int(self._raw["priority"])

    @property
    def attempts(self) -> int:
        """Attempts started so far (the one running included)."""
        return int(self._raw["attempts"])

    @property
    def max_attempts(self) -> int:
        return int(self._raw["max_attempts"])

    @property
    def max_runtime(self) -> Optional[timedelta]:
        ms = self._raw.get("max_runtime")
        return None if ms is None else timedelta(milliseconds=ms)

    @property
    def lease_owner(self) -> Optional[str]:
        lease = self._raw.get("lease")
        return None if lease is None else str(lease["owner"]["id"])

    @property
    def lease_until(self) -> Optional[datetime]:
        lease = self._raw.get("lease")
        return None if lease is None else _at(lease["until"])

    @property
    def not_before(self) -> datetime:
        """When it is due (pending), or was due."""
        return _at(self._raw["not_before"])

    @property
    def last_error(self) -> Optional[str]:
        return _opt_str(self._raw.get("last_error"))

    @property
    def result(self) -> Optional[str]:
        return _opt_str(self._raw.get("result"))

    @property
    def key(self) -> Optional[str]:
        """The idempotency key."""
        return _opt_str(self._raw.get("idempotency_key"))

    @property
    def after(self) -> List[int]:
        """The jobs it waits on."""
        return list(self._raw.get("after", []))

    @property
    def cancel_requested(self) -> bool:
        return bool(self._raw.get("cancel_requested", False))

    @property
    def created_at(self) -> datetime:
        return _at(self._raw["created_at"])

    @property
    def started_at(self) -> Optional[datetime]:
        return _time(self._raw.get("started_at"))

    @property
    def finished_at(self) -> Optional[datetime]:
        return _time(self._raw.get("finished_at"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash((self.id, self.state, self.attempts))

    def __repr__(self) -> str:
        parts = [f"#{self.id}", self.state, f"kind={self.kind!r}"]
        if self.queue != "default":
            parts.append(f"queue={self.queue!r}")
        parts.append(f"attempts={self.attempts}/{self.max_attempts}")
        if self.lease_owner is not None:
            parts.append(f"owner={self.lease_owner!r}")
        if self.key is not None:
            parts.append(f"key={self.key!r}")
        if self.cancel_requested:
            parts.append("cancel_requested")
        if self.last_error is not None:
            parts.append(f"last_error={self.last_error!r}")
        return f"<Job {' '.join(parts)}>"


@dataclass(frozen=True)
class Pushed:
    """What a push did: `job` holds the request's key (or is new);
    `created` is False when an identical job under the key existed and
    nothing was written; `superseded` is the pending job it replaced."""

    job: Job
    created: bool
    superseded: Optional[int]

    @property
    def existing(self) -> bool:
        return not self.created


@dataclass(frozen=True)
class Event:
    """One entry of a job's trail."""

    job_id: int
    at: datetime
    kind: str
    owner: Optional[str]
    attempt: Optional[int]
    message: Optional[str]
    retry_at: Optional[datetime]


@dataclass(frozen=True)
class Stats:
    """Counts per state, what is due now, and when the next job is due."""

    pending: int
    running: int
    done: int
    failed: int
    cancelled: int
    due_now: int
    waiting_on_parents: int
    held: int
    next_due: Optional[datetime]


@dataclass(frozen=True)
class Waited:
    """How a `wait` ended: `timed_out`, and each job's state as last seen."""

    timed_out: bool
    states: Dict[int, str]

    @property
    def all_done(self) -> bool:
        return not self.timed_out and all(s == "done" for s in self.states.values())


def _spec(
    kind: Optional[str],
    payload: Any,
    command: Optional[str],
    key: Optional[str],
    after: Iterable[JobRef],
    queue: str,
    priority: int,
    delay: Optional[Seconds],
    max_attempts: Optional[int],
    max_runtime: Optional[Seconds],
) -> Dict[str, Any]:
    if command is not None:
        if kind not in (None, "shell") or payload is not None:
            raise _native.InvalidInputError(
                "a shell job takes `command` alone, not a kind or a payload"
            )
        kind = "shell"
        payload = {"command": command, "cwd": os.getcwd(), "env": {}}
    elif kind is None:
        raise _native.InvalidInputError("a job needs a kind (or a shell `command`)")
    if isinstance(after, (int, str)):
        after = [after]
    return {
        "kind": kind,
        "payload": payload,
        "queue": queue,
        "priority": priority,
        "key": key,
        "after": list(after),
        "max_attempts": max_attempts,
        "max_runtime_ms": _ms(max_runtime, "max_runtime"),
        "delay_ms": _ms(delay, "delay"),
    }


def _queues(queue: Union[str, Iterable[str], None]) -> Optional[List[str]]:
    if queue is None:
        return None
    return [queue] if isinstance(queue, str) else list(queue)


def _result(result: Any) -> Optional[str]:
    """A job's result as stored: a string as it is, anything else as JSON."""
    if result is None or isinstance(result, str):
        return result
    return json.dumps(result)


def _pushed(raw: Dict[str, Any]) -> Pushed:
    return Pushed(Job(raw["job"]), bool(raw["created"]), raw.get("superseded"))


class Queue:
    """A queue: a file (SQLite, or redb for a `.redb` name; the same files
    and formats the CLI uses) or a `postgres://` URL.

    With `clock` (a `ManualClock`), time is that clock's and leases live
    and die by it alone. Without, time is the system's and an owner on this
    host is judged by its process: a live one is never robbed, a dead one's
    job is taken back at the next claim. `lease` is how long a claim or a
    heartbeat holds a job unless `claim` says otherwise.
    """

    def __init__(
        self,
        db: Union[str, "os.PathLike[str]"],
        *,
        clock: Optional[ManualClock] = None,
        lease: Seconds = 60,
    ) -> None:
        native_clock = None if clock is None else clock._native
        self.db = os.fspath(db)
        self.clock = clock
        self.lease = _seconds(lease, "lease")
        self._native = _native.NativeQueue(self.db, native_clock, self.lease)

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the queue; later calls raise."""
        self._native.close()

    def __repr__(self) -> str:
        return f"Queue({self.db!r})"

    def now(self) -> datetime:
        """The queue's time (its manual clock's, or the system's)."""
        return _at(self._native.now_ms())

    def push(
        self,
        kind: Optional[str] = None,
        payload: Any = None,
        *,
        command: Optional[str] = None,
        key: Optional[str] = None,
        after: Iterable[JobRef] = (),
        queue: str = "default",
        priority: int = 0,
        delay: Optional[Seconds] = None,
        max_attempts: Optional[int] = None,
        max_runtime: Optional[Seconds] = None,
    ) -> Pushed:
        """Adds a job: a `kind` with a JSON-able `payload` for a handler,
        or a shell `command` (run in this folder by `slothqueue run`)."""
        spec = _spec(
            kind, payload, command, key, after, queue, priority, delay,
            max_attempts, max_runtime,
        )
        return _pushed(json.loads(self._native.push_many(json.dumps([spec])))[0])

    def push_many(self, jobs: Sequence[Dict[str, Any]]) -> List[Pushed]:
        """Adds every job (each a dict of `push`'s arguments), all or
        nothing; a job may name earlier ones of the batch in `after`."""
        specs = []
        for job in jobs:
            args = dict(job)
            specs.append(
                _spec(
                    args.pop("kind", None),
                    args.pop("payload", None),
                    args.pop("command", None),
                    args.pop("key", None),
                    args.pop("after", ()),
                    args.pop("queue", "default"),
                    args.pop("priority", 0),
                    args.pop("delay", None),
                    args.pop("max_attempts", None),
                    args.pop("max_runtime", None),
                )
            )
            if args:
                raise _native.InvalidInputError(
                    f"unknown argument(s) of a push: {', '.join(sorted(args))}"
                )
        return [_pushed(p) for p in json.loads(self._native.push_many(json.dumps(specs)))]

    def claim(
        self,
        owner: str,
        *,
        kinds: Optional[Iterable[str]] = None,
        queue: Union[str, Iterable[str], None] = None,
        lease: Optional[Seconds] = None,
    ) -> Optional[Job]:
        """Takes the best due job for `owner` (highest priority, then
        earliest due, then oldest), under a lease of `lease` seconds;
        None when nothing is due."""
        raw = self._native.claim(
            owner,
            None if kinds is None else list(kinds),
            _queues(queue),
            None if lease is None else _seconds(lease, "lease"),
        )
        return None if raw is None else Job(json.loads(raw)["job"])

    def heartbeat(self, job_id: int, owner: str) -> bool:
        """Extends `owner`'s lease; False (nothing changed) when the job is
        no longer this owner's."""
        return self._native.heartbeat(job_id, owner) is not None

    def complete(self, job_id: int, owner: str, result: Any = None) -> Job:
        """Marks the job done with `result` (a string as it is, anything
        else as JSON). Raises `LeaseLostError` unless `owner` still holds it."""
        return Job(json.loads(self._native.complete(job_id, owner, _result(result))))

    def fail(self, job_id: int, owner: str, error: str, *, permanent: bool = False) -> Job:
        """Records a failed attempt: retried after the backoff (2 s, 4 s,
        8 s … capped) while attempts are left, else failed; never retried
        when `permanent`."""
        return Job(json.loads(self._native.fail(job_id, owner, str(error), permanent)))

    def complete_and_claim(
        self,
        job_id: int,
        owner: str,
        result: Any = None,
        *,
        kinds: Optional[Iterable[str]] = None,
        queue: Union[str, Iterable[str], None] = None,
        lease: Optional[Seconds] = None,
    ) -> Tuple[Job, Optional[Job]]:
        """`complete`, then `claim` for the same owner, in one transaction
        (one durable commit from one job to the next): the finished job
        and the next one, or None."""
        return self._settle_and_claim(job_id, owner, None, _result(result), False, kinds, queue, lease)

    def fail_and_claim(
        self,
        job_id: int,
        owner: str,
        error: str,
        *,
        permanent: bool = False,
        kinds: Optional[Iterable[str]] = None,
        queue: Union[str, Iterable[str], None] = None,
        lease: Optional[Seconds] = None,
    ) -> Tuple[Job, Optional[Job]]:
        """`fail`, then `claim` for the same owner, in one transaction."""
        return self._settle_and_claim(job_id, owner, str(error), None, permanent, kinds, queue, lease)

    def _settle_and_claim(
        self,
        job_id: int,
        owner: str,
        error: Optional[str],
        result: Optional[str],
        permanent: bool,
        kinds: Optional[Iterable[str]],
        queue: Union[str, Iterable[str], None],
        lease: Optional[Seconds],
    ) -> Tuple[Job, Optional[Job]]:
        raw = json.loads(
            self._native.settle_and_claim(
                job_id,
                owner,
                error,
                result,
                permanent,
                None if kinds is None else list(kinds),
                _queues(queue),
                None if lease is None else _seconds(lease, "lease"),
            )
        )
        nxt = raw["next"]
        return Job(raw["settled"]), (None if nxt is None else Job(nxt))

    def release(self, job_id: int, owner: str) -> Job:
        """Gives the job back to the queue; the attempt is not charged."""
        return Job(json.loads(self._native.release(job_id, owner)))

    def cancel(self, job_id: int) -> Job:
        """Cancels a pending job, or asks a running one's owner to stop."""
        return Job(json.loads(self._native.cancel(job_id)))

    def retry(self, job_id: int) -> Job:
        """Puts a failed or cancelled job back to pending, attempts reset."""
        return Job(json.loads(self._native.retry(job_id)))

    def get(self, job_id: int) -> Job:
        """One job; `NotFoundError` when there is none."""
        return Job(json.loads(self._native.get(job_id)))

    def events(self, job_id: int) -> List[Event]:
        """The job's trail, oldest first."""
        return [
            Event(
                job_id=e["job_id"],
                at=_at(e["at"]),
                kind=e["kind"],
                owner=e.get("owner"),
                attempt=e.get("attempt"),
                message=e.get("message"),
                retry_at=_time(e.get("retry_at")),
            )
            for e in json.loads(self._native.events(job_id))
        ]

    def list(
        self,
        *,
        state: Optional[str] = None,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        limit: Optional[int] = None,
        order: str = "newest",
    ) -> List[Job]:
        """Jobs, newest first (or `oldest`, or `due_first`: claim order)."""
        raw = self._native.list(state, queue, kind, limit, order)
        return [Job(j) for j in json.loads(raw)]

    def stats(self) -> Stats:
        """Counts per state, due now and next due."""
        s = json.loads(self._native.stats())
        return Stats(
            pending=s["pending"],
            running=s["running"],
            done=s["done"],
            failed=s["failed"],
            cancelled=s["cancelled"],
            due_now=s["due_now"],
            waiting_on_parents=s.get("waiting_on_parents", 0),
            held=s.get("held", 0),
            next_due=_time(s.get("next_due")),
        )

    def wait(self, ids: Union[int, Iterable[int]], timeout: Optional[Seconds] = None) -> Waited:
        """Blocks until every job of `ids` is finished (done, failed or
        cancelled) or `timeout` passes, woken by the queue's changes from
        any process, as `slothqueue wait` is."""
        id_list = [ids] if isinstance(ids, int) else list(ids)
        raw = json.loads(
            self._native.wait(id_list, None if timeout is None else _seconds(timeout, "timeout"))
        )
        return Waited(
            timed_out=bool(raw["timed_out"]),
            states={int(j["id"]): str(j["state"]) for j in raw["jobs"]},
        )
