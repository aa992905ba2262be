"""The first description's behaviours, on the injected clock, no sleeps:
claim/heartbeat/complete, a delayed job, a dead worker's lease, backoff,
a non-owner's heartbeat, attempts running out under expired leases,
idempotency keys, priority order, a stale owner's write refused."""

from __future__ import annotations

import pytest

import slothqueue
from slothqueue import LeaseLostError, ManualClock, Queue


def trail(q: Queue, job_id: int) -> list[str]:
    return [e.kind for e in q.events(job_id)]


def test_claim_heartbeat_complete(q: Queue) -> None:
    pushed = q.push("download", {"url": "https://example.org/a.iso"})
    assert pushed.created and pushed.job.state == "pending"
    job = q.claim("laptop:8123")
    assert job is not None and job.id == pushed.job.id
    assert job.state == "running" and job.attempts == 1 and job.lease_owner == "laptop:8123"
    assert job.payload == {"url": "https://example.org/a.iso"}
    assert q.heartbeat(job.id, "laptop:8123") is True
    done = q.complete(job.id, "laptop:8123", "moved 4 files")
    assert done.state == "done" and done.result == "moved 4 files"
    assert trail(q, job.id) == ["pushed", "claimed", "completed"]
    assert q.claim("laptop:8123") is None


def test_a_delayed_job_is_not_claimed_early(q: Queue, clock: ManualClock) -> None:
    q.push("later", {}, delay=30)
    assert q.claim("w") is None
    clock.advance(29.999)
    assert q.claim("w") is None
    clock.advance(0.001)
    job = q.claim("w")
    assert job is not None and job.kind == "later"


def test_a_dead_workers_lease_is_recovered(q: Queue, clock: ManualClock) -> None:
    pushed = q.push("work", {"n": 1})
    first = q.claim("worker-a")
    assert first is not None
    clock.advance(59)
    assert q.claim("worker-b") is None, "a live lease is not taken"
    clock.advance(2)
    second = q.claim("worker-b")
    assert second is not None and second.id == pushed.job.id
    assert second.attempts == 2 and second.lease_owner == "worker-b"
    assert trail(q, second.id) == ["pushed", "claimed", "reclaimed", "claimed"]
    # The dead worker's late write changes nothing.
    with pytest.raises(LeaseLostError):
        q.complete(first.id, "worker-a", "too late")
    assert q.complete(second.id, "worker-b").state == "done"


def test_backoff_doubles_is_capped_then_fails_with_the_last_error(
    q: Queue, clock: ManualClock
) -> None:
    job_id = q.push("flaky", {}, max_attempts=10).job.id
    delays = []
    for attempt in range(1, 11):
        job = q.claim("w")
        assert job is not None and job.attempts == attempt
        after = q.fail(job_id, "w", f"boom {attempt}")
        if after.state == "failed":
            break
        delay = (after.not_before - clock.now()).total_seconds()
        delays.append(delay)
        assert q.claim("w") is None, "not before the backoff"
        clock.advance(delay)
    assert delays == [2, 4, 8, 16, 32, 64, 128, 256, 300]
    final = q.get(job_id)
    assert final.state == "failed" and final.attempts == 10
    assert final.last_error == "boom 10"


def test_a_non_owners_heartbeat_is_false_and_steals_nothing(q: Queue) -> None:
    job_id = q.push("work", {}).job.id
    assert q.claim("owner") is not None
    before = q.get(job_id)
    assert q.heartbeat(job_id, "intruder") is False
    after = q.get(job_id)
    assert after.lease_owner == "owner" and after.lease_until == before.lease_until
    assert trail(q, job_id) == ["pushed", "claimed"]
    with pytest.raises(LeaseLostError, match=f"job #{job_id} is no longer held"):
        q.complete(job_id, "intruder")


def test_a_lease_that_expires_after_max_attempts_ends_failed(
    q: Queue, clock: ManualClock
) -> None:
    job_id = q.push("work", {}, max_attempts=2).job.id
    for attempt in (1, 2):
        job = q.claim(f"crashing-{attempt}")
        assert job is not None and job.attempts == attempt
        clock.advance(61)
    assert q.claim("next") is None
    final = q.get(job_id)
    assert final.state == "failed" and final.attempts == 2
    assert final.lease_owner is None


def test_a_key_makes_a_push_safe_to_repeat(q: Queue) -> None:
    first = q.push("mail", {"to": "a"}, key="welcome-a")
    again = q.push("mail", {"to": "a"}, key="welcome-a")
    assert first.created and not again.created and again.existing
    assert again.job.id == first.job.id
    newer = q.push("mail", {"to": "b"}, key="welcome-a")
    assert newer.created and newer.superseded == first.job.id
    assert q.get(first.job.id).state == "cancelled"


def test_priority_then_due_time_then_age(q: Queue) -> None:
    low = q.push("a", {}).job.id
    high = q.push("b", {}, priority=5).job.id
    older_low = low
    newer_low = q.push("c", {}).job.id
    order = []
    while (job := q.claim("w")) is not None:
        order.append(job.id)
    assert order == [high, older_low, newer_low]


def test_a_heartbeat_keeps_a_slow_job(q: Queue, clock: ManualClock) -> None:
    job_id = q.push("slow", {}).job.id
    assert q.claim("w") is not None
    for _ in range(5):
        clock.advance(40)
        assert q.heartbeat(job_id, "w")
        assert q.claim("other") is None
    assert q.complete(job_id, "w").attempts == 1


def test_release_does_not_charge_the_attempt(q: Queue) -> None:
    job_id = q.push("work", {}).job.id
    assert q.claim("w") is not None
    released = q.release(job_id, "w")
    assert released.state == "pending"
    again = q.claim("w")
    assert again is not None and again.attempts == 1
    assert trail(q, job_id) == ["pushed", "claimed", "released", "claimed"]


def test_a_permanent_failure_is_not_retried(q: Queue) -> None:
    job_id = q.push("work", {}).job.id
    assert q.claim("w") is not None
    assert q.fail(job_id, "w", "bad input", permanent=True).state == "failed"


def test_push_many_is_all_or_nothing(q: Queue) -> None:
    with pytest.raises(slothqueue.InvalidInputError, match="job 2 of the batch"):
        q.push_many([{"kind": "a"}, {"kind": "b", "after": [999]}])
    assert q.list() == []
    pushed = q.push_many([{"kind": "a", "key": "first"}, {"kind": "b", "after": ["first"]}])
    assert [p.job.kind for p in pushed] == ["a", "b"]
    assert pushed[1].job.after == [pushed[0].job.id]


def test_complete_and_claim_goes_to_the_next_job_in_one_call(q: Queue) -> None:
    first = q.push("a", {}).job.id
    second = q.push("b", {}).job.id
    job = q.claim("w")
    assert job is not None and job.id == first
    done, nxt = q.complete_and_claim(first, "w", {"ok": 1})
    assert done.state == "done" and done.result == '{"ok": 1}'
    assert nxt is not None and nxt.id == second and nxt.lease_owner == "w"
    failed, last = q.fail_and_claim(second, "w", "no", permanent=True)
    assert failed.state == "failed" and last is None
    assert trail(q, second) == ["pushed", "claimed", "failed"]
    with pytest.raises(LeaseLostError):
        q.complete_and_claim(first, "w")
