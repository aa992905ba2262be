"""slothqueue beside the Python queues people use instead: huey (SqliteHuey),
litequeue and persist-queue (SQLiteAckQueue), in one run on one machine.

Run by hand (not in CI), in a venv with the release build of slothqueue
and the peers installed:

    pip install ./python huey litequeue persist-queue
    python python/bench/bench.py --cli target/release/slothqueue

It measures, for each queue, on a fresh file in the same folder:

- enqueue: one job per call, each its own commit, in this process;
- claim+complete: take the next job and mark it finished, per job;
- drain: 1,000 shell jobs (`true`) run one after the other by a consumer
  (the peers: a loop that takes a job, runs it with `subprocess`, acks it;
  slothqueue: `slothqueue run`, and a Python `Worker` doing the same as the
  peers' loops);

and says each queue's durability as it runs: the SQLite journal mode and
`synchronous` setting read back from its connection (WAL with FULL is an
fsync per commit; NORMAL is not, a crash may lose the last commits).
litequeue ships with NORMAL; it is measured as shipped and set to FULL,
so that each figure has a peer at slothqueue's durability.

Prints a Markdown table (per-job times in ms, drains in jobs/s).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple

import slothqueue


def shell(_payload: Any = None) -> None:
    subprocess.run("true", shell=True, check=True)


class Peer:
    """One queue under test: make it fresh, enqueue, claim+complete, drain."""

    name = ""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def durability(self) -> str:
        raise NotImplementedError

    def enqueue(self, i: int) -> None:
        raise NotImplementedError

    def claim_complete(self) -> bool:
        raise NotImplementedError

    def drain(self, n: int) -> float:
        """Enqueues `n` shell jobs (untimed), then drains them; seconds."""
        for _ in range(n):
            self.enqueue_shell()
        start = time.perf_counter()
        while self.run_one_shell():
            pass
        return time.perf_counter() - start

    def enqueue_shell(self) -> None:
        raise NotImplementedError

    def run_one_shell(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        pass


def pragma(conn: Any) -> str:
    mode = conn.execute("pragma journal_mode").fetchone()[0]
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.execute("pragma synchronous").fetchone()[0]]
    return f"{mode.upper()}, synchronous={sync}"


class Slothqueue(Peer):
    name = "slothqueue (Python)"

    def __init__(self, folder: str) -> None:
        super().__init__(folder)
        self.db = os.path.join(folder, "q.db")
        self.q = slothqueue.Queue(self.db)

    def durability(self) -> str:
        conn = sqlite3.connect(self.db)
        try:
            mode = conn.execute("pragma journal_mode").fetchone()[0]
        finally:
            conn.close()
        # The store sets synchronous=FULL on its own connections
        # (store-sqlite/src/txn.rs); a new connection would read the default.
        return f"{mode.upper()}, synchronous=FULL"

    def enqueue(self, i: int) -> None:
        self.q.push("n", {"i": i})

    held: Optional[slothqueue.Job] = None

    def claim_complete(self) -> bool:
        # A consumer that goes on to the next job settles the last one and
        # claims the next in one transaction (one commit a job), as the
        # worker does.
        if self.held is None:
            self.held = self.q.claim("bench")
            if self.held is None:
                return False
        _, self.held = self.q.complete_and_claim(self.held.id, "bench")
        return True

    def enqueue_shell(self) -> None:
        self.q.push("sh", {"cmd": "true"})

    def drain(self, n: int) -> float:
        for _ in range(n):
            self.enqueue_shell()
        worker = slothqueue.Worker(self.q, "bench-worker")
        worker.handler("sh")(lambda job: shell())
        start = time.perf_counter()
        summary = worker.run()
        elapsed = time.perf_counter() - start
        assert summary.done == n, summary
        return elapsed

    def close(self) -> None:
        self.q.close()


class Huey(Peer):
    name = "huey (SqliteHuey)"

    def __init__(self, folder: str) -> None:
        super().__init__(folder)
        from huey import SqliteHuey

        self.huey = SqliteHuey("bench", filename=os.path.join(folder, "huey.db"))

        @self.huey.task()
        def work(i: int) -> None:
            return None

        @self.huey.task()
        def sh() -> None:
            shell()

        self.work = work
        self.sh = sh

    def durability(self) -> str:
        return pragma(self.huey.storage.conn)

    def enqueue(self, i: int) -> None:
        self.work(i)

    def claim_complete(self) -> bool:
        task = self.huey.dequeue()
        if task is None:
            return False
        self.huey.execute(task)
        return True

    def enqueue_shell(self) -> None:
        self.sh()

    def run_one_shell(self) -> bool:
        return self.claim_complete()


class LiteQueue(Peer):
    name = "litequeue"
    synchronous: Optional[str] = None

    def __init__(self, folder: str) -> None:
        super().__init__(folder)
        from litequeue import LiteQueue as LQ

        self.q = LQ(os.path.join(folder, "lite.db"))
        if self.synchronous:
            self.q.conn.execute(f"pragma synchronous={self.synchronous}")

    def durability(self) -> str:
        return pragma(self.q.conn)

    def enqueue(self, i: int) -> None:
        self.q.put(str(i))

    def claim_complete(self) -> bool:
        message = self.q.pop()
        if message is None:
            return False
        self.q.done(message.message_id)
        return True

    def enqueue_shell(self) -> None:
        self.q.put("true")

    def run_one_shell(self) -> bool:
        message = self.q.pop()
        if message is None:
            return False
        shell()
        self.q.done(message.message_id)
        return True

    def close(self) -> None:
        self.q.close()


class LiteQueueFull(LiteQueue):
    name = "litequeue, synchronous=FULL"
    synchronous = "FULL"


class PersistQueue(Peer):
    name = "persist-queue (SQLiteAckQueue)"

    def __init__(self, folder: str) -> None:
        super().__init__(folder)
        from persistqueue import SQLiteAckQueue

        self.q = SQLiteAckQueue(os.path.join(folder, "pq"), auto_commit=True)

    def durability(self) -> str:
        return pragma(self.q._putter)

    def enqueue(self, i: int) -> None:
        self.q.put(i)

    def claim_complete(self) -> bool:
        try:
            item = self.q.get(block=False)
        except Exception:  # persistqueue.Empty
            return False
        self.q.ack(item)
        return True

    def enqueue_shell(self) -> None:
        self.q.put("true")

    def run_one_shell(self) -> bool:
        try:
            item = self.q.get(block=False)
        except Exception:
            return False
        shell()
        self.q.ack(item)
        return True


PEERS: List[Callable[[str], Peer]] = [Slothqueue, Huey, LiteQueue, LiteQueueFull, PersistQueue]


def per_job_ms(action: Callable[[int], Any], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        action(i)
    return (time.perf_counter() - start) * 1000 / n


def fresh(make: Callable[[str], Peer], root: str, figure: Callable[[Peer], float]) -> Tuple[float, str]:
    """`figure` of a new queue in a new folder, and the queue's durability."""
    folder = tempfile.mkdtemp(dir=root)
    os.chmod(folder, 0o700)
    try:
        peer = make(folder)
        try:
            return figure(peer), peer.durability()
        finally:
            peer.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def enqueue_ms(n: int) -> Callable[[Peer], float]:
    return lambda peer: per_job_ms(peer.enqueue, n)


def claim_ms(n: int) -> Callable[[Peer], float]:
    def figure(peer: Peer) -> float:
        for i in range(n):
            peer.enqueue(i)

        def take(_: int) -> None:
            assert peer.claim_complete()

        ms = per_job_ms(take, n)
        assert not peer.claim_complete(), "the queue is empty after n claims"
        return ms

    return figure


def drain_rate(n: int) -> Callable[[Peer], float]:
    return lambda peer: n / peer.drain(n)


def cli_drain(cli: str, root: str, drain: int) -> Dict[str, Any]:
    folder = tempfile.mkdtemp(dir=root)
    os.chmod(folder, 0o700)
    try:
        db = os.path.join(folder, "q.db")
        with slothqueue.Queue(db) as q:
            q.push_many([{"command": "true"} for _ in range(drain)])
        start = time.perf_counter()
        subprocess.run([cli, "--db", db, "run", "--load-ceiling", "1000"], check=True, capture_output=True)
        elapsed = time.perf_counter() - start
        with slothqueue.Queue(db) as q:
            assert q.stats().done == drain
        return {"name": "slothqueue run (CLI)", "drain": drain / elapsed}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def median_rows(rounds: List[List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """Each queue's median of every figure over the rounds."""
    out = []
    for i, first in enumerate(rounds[0]):
        row = dict(first)
        for key in ("enqueue", "claim", "drain"):
            if key in first:
                row[key] = statistics.median(r[i][key] for r in rounds)
        out.append(row)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="jobs enqueued and claimed")
    parser.add_argument("--drain", type=int, default=1000, help="shell jobs drained")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; medians are shown")
    parser.add_argument("--cli", help="the slothqueue binary, for the CLI's drain")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the queue files go")
    args = parser.parse_args()
    figures = [
        ("enqueue", enqueue_ms(args.n)),
        ("claim", claim_ms(args.n)),
        ("drain", drain_rate(args.drain)),
    ]
    rounds = []
    for r in range(args.rounds):
        # Each figure of every queue once a round, the queues' order turned
        # each round, so that a noisy stretch of a shared disk falls on each
        # in turn; the table shows medians.
        order = list(range(len(PEERS)))
        order = order[r % len(order):] + order[: r % len(order)]
        results: Dict[int, Dict[str, Any]] = {i: {} for i in order}
        for key, figure in figures:
            for i in order:
                value, durability = fresh(PEERS[i], args.dir, figure)
                results[i][key] = value
                results[i]["durability"] = durability
                results[i]["name"] = PEERS[i].name  # type: ignore[attr-defined]
        row = [results[i] for i in range(len(PEERS))]
        if args.cli:
            row.insert(1, cli_drain(args.cli, args.dir, args.drain))
        rounds.append(row)
    rows = median_rows(rounds)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{when}, {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"files in {args.dir}, n={args.n}, drain={args.drain}, medians of {args.rounds} rounds")
    print()
    print("| queue | durability | enqueue (ms/job) | claim+complete (ms/job) | drain of shell jobs (jobs/s) |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        enqueue = f"{row['enqueue']:.3f}" if "enqueue" in row else "—"
        claim = f"{row['claim']:.3f}" if "claim" in row else "—"
        print(f"| {row['name']} | {row.get('durability', 'as above')} | {enqueue} | {claim} | {row['drain']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
