"""`slothqueue mcp` driven by a real client: the official MCP Python SDK's
`stdio_client` and `ClientSession`, the server started as a subprocess on
a queue in a temporary folder. The binary is `$SLOTHQUEUE_BIN` (`cargo
xtask ci` builds it and sets it).

Every answer is read from `structuredContent` (which the SDK checks
against the tool's `outputSchema`), never by parsing text. Nothing sleeps
to make time pass: a wait is the server's `wait_jobs`, with a deadline.
"""

import asyncio
import os
import signal
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from pydantic import AnyUrl

BIN = os.environ.get("SLOTHQUEUE_BIN", "")

TOOLS = [
    "add_job",
    "list_jobs",
    "show_job",
    "job_logs",
    "queue_status",
    "wait_jobs",
    "cancel_job",
    "retry_job",
    "hold_job",
    "release_job",
    "pause_queue",
    "resume_queue",
]
LOOKING = ["list_jobs", "show_job", "job_logs", "queue_status", "wait_jobs"]

pytestmark = pytest.mark.skipif(not BIN, reason="SLOTHQUEUE_BIN names the slothqueue binary")


def environment():
    """What the server runs with: no secrets of this process."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}


@asynccontextmanager
async def session(db: Path, *flags: str):
    params = StdioServerParameters(
        command=BIN, args=["--db", str(db), "mcp", *flags], env=environment(), cwd=str(db.parent)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            yield s


async def call(s: ClientSession, name: str, args: dict):
    """A tool's structured answer; fails the test on a tool error."""
    r = await s.call_tool(name, args)
    assert not r.isError, r.content
    return r.structuredContent


async def refused(s: ClientSession, name: str, args: dict) -> str:
    """The one sentence of a tool error."""
    r = await s.call_tool(name, args)
    assert r.isError, r.structuredContent
    return r.content[0].text


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "q.db"


@pytest.fixture
def runner(db: Path):
    """`slothqueue run --follow` beside the server, stopped at the end."""
    proc = subprocess.Popen(
        [BIN, "--db", str(db), "run", "--follow", "--load-ceiling", "1000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environment(),
    )
    yield proc
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def test_initialize_and_the_tools_with_their_schemas(db: Path):
    async def main():
        params = StdioServerParameters(command=BIN, args=["--db", str(db), "mcp"], env=environment())
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                assert init.serverInfo.name == "slothqueue"
                assert init.capabilities.tools is not None
                assert init.capabilities.resources is not None
                await s.send_ping()
                tools = (await s.list_tools()).tools
                assert [t.name for t in tools] == TOOLS
                for t in tools:
                    assert t.inputSchema["type"] == "object", t.name
                    assert t.outputSchema["type"] == "object", t.name
                add = next(t for t in tools if t.name == "add_job")
                assert {"command", "kind", "payload", "key", "after", "queue"} <= set(
                    add.inputSchema["properties"]
                )

    asyncio.run(main())


def test_add_wait_and_read_the_log_under_a_runner(db: Path, runner):
    async def main():
        async with session(db) as s:
            added = await call(s, "add_job", {"command": "echo hello", "key": "greet"})
            assert added["outcome"] == "created"
            job = added["job"]["id"]
            again = await call(s, "add_job", {"command": "echo hello", "key": "greet"})
            assert (again["outcome"], again["job"]["id"]) == ("existing", job)
            waited = await call(s, "wait_jobs", {"ids": [job], "timeout_s": 30})
            assert (waited["outcome"], waited["done"]) == ("done", [job])
            logs = await call(s, "job_logs", {"id": job})
            assert "hello" in logs["text"] and logs["finished"]
            shown = await call(s, "show_job", {"id": job})
            assert shown["job"]["state"] == "done"
            assert [e["kind"] for e in shown["events"]][0] == "pushed"
            resource = await s.read_resource(AnyUrl(shown["log_uri"]))
            assert "hello" in resource.contents[0].text
            listed = await s.list_resources()
            assert shown["log_uri"] in [str(r.uri) for r in listed.resources]

    asyncio.run(main())


def test_cancel_and_retry(db: Path, runner):
    async def main():
        async with session(db) as s:
            later = await call(s, "add_job", {"command": "true", "delay": 3600})
            job = later["job"]["id"]
            cancelled = await call(s, "cancel_job", {"id": job})
            assert cancelled["job"]["state"] == "cancelled"
            again = await refused(s, "cancel_job", {"id": job})
            assert again == f"cannot cancel job #{job}: it is cancelled"
            retried = await call(s, "retry_job", {"id": job})
            assert retried["job"]["state"] == "pending"
            waited = await call(s, "wait_jobs", {"ids": [job], "timeout_s": 30})
            assert waited["done"] == [job]

    asyncio.run(main())


def test_the_users_flags_refuse_with_a_sentence(db: Path):
    async def main():
        async with session(db) as s:
            await call(s, "add_job", {"command": "true"})
        async with session(db, "--read-only") as s:
            assert [t.name for t in (await s.list_tools()).tools] == LOOKING
            why = await refused(s, "add_job", {"command": "echo hi"})
            assert "--read-only" in why
            assert (await call(s, "list_jobs", {}))["jobs"][0]["id"] == 1
        async with session(db, "--kinds", "render,mail") as s:
            why = await refused(s, "add_job", {"command": "rm -rf ~"})
            assert "no shell command" in why and "--kinds render, mail" in why
            why = await refused(s, "add_job", {"kind": "other"})
            assert "kind `other`" in why
            ok = await call(s, "add_job", {"kind": "render", "payload": {"page": 3}})
            assert ok["job"]["kind"] == "render" and not ok["served"]

    asyncio.run(main())


def test_bad_input_and_a_wait_that_times_out(db: Path):
    async def main():
        async with session(db) as s:
            assert await refused(s, "show_job", {"id": 999}) == "no job #999"
            why = await refused(s, "show_job", {"id": "seven"})
            assert why.startswith("show_job: bad arguments")
            job = (await call(s, "add_job", {"command": "true"}))["job"]["id"]
            notes = []

            async def progress(done, total, message):
                notes.append(message)

            r = await s.call_tool(
                "wait_jobs", {"ids": [job], "timeout_s": 6}, progress_callback=progress
            )
            assert not r.isError
            assert r.structuredContent["outcome"] == "timed_out"
            assert r.structuredContent["pending"] == [job]
            assert notes and "waiting on 1" in notes[0], notes

    asyncio.run(main())


def test_a_worker_inside_the_server_runs_the_jobs(db: Path):
    async def main():
        async with session(db, "--worker", "--load-ceiling", "1000") as s:
            added = await call(s, "add_job", {"command": "echo from the worker"})
            job = added["job"]["id"]
            waited = await call(s, "wait_jobs", {"ids": [job], "timeout_s": 30})
            assert waited["done"] == [job]
            logs = await call(s, "job_logs", {"id": job})
            assert "from the worker" in logs["text"]

    asyncio.run(main())
