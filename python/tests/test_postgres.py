"""A queue on a PostgreSQL server (`postgres://` URL), in a fresh schema of
the test server `cargo xtask ci` (or `cargo xtask pg`) starts. Without a
server it is skipped, loudly, unless SLOTHQUEUE_PG_REQUIRED=1."""

from __future__ import annotations

import os
import secrets

import pytest

from slothqueue import LeaseLostError, Queue


def server_url() -> str:
    url = os.environ.get("SLOTHQUEUE_PG_URL", "")
    if not url:
        if os.environ.get("SLOTHQUEUE_PG_REQUIRED") == "1":
            pytest.fail("SLOTHQUEUE_PG_REQUIRED=1 but SLOTHQUEUE_PG_URL is not set")
        pytest.skip("no PostgreSQL server: run it under `cargo xtask pg -- …`")
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}schema=py{secrets.token_hex(6)}"


def test_a_queue_on_a_server() -> None:
    with Queue(server_url()) as q:
        job_id = q.push("x", {"n": 1}, key="once").job.id
        assert not q.push("x", {"n": 1}, key="once").created
        job = q.claim("host-a:1")
        assert job is not None and job.id == job_id
        assert q.heartbeat(job_id, "host-a:1") and not q.heartbeat(job_id, "host-b:2")
        with pytest.raises(LeaseLostError):
            q.complete(job_id, "host-b:2")
        assert q.complete(job_id, "host-a:1", {"ok": True}).result == '{"ok": true}'
        assert [e.kind for e in q.events(job_id)] == ["pushed", "claimed", "completed"]
