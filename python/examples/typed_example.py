"""A typed caller of slothqueue: `mypy --strict` checks it against the
package's stubs in CI (xtask/src/python.rs), and pytest runs it
(tests/test_docs.py), so neither the stubs nor the example can rot.

Pushes two jobs, runs them with a worker (one handler sync, one async),
then reads the results and the trail back."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import List, Optional

import slothqueue
from slothqueue import Job, Pushed, Queue, RunSummary, Worker


def main(folder: Path) -> int:
    with Queue(folder / "jobs.db") as queue:
        worker = Worker(queue, "typed-example")

        @worker.handler("resize", permanent=(ValueError,))
        def resize(job: Job) -> str:
            width = int(job.payload["width"])
            return f"resized to {width} px"

        @worker.handler("notify")
        async def notify(job: Job) -> dict[str, str]:
            return {"sent": str(job.payload["to"])}

        pushed: List[Pushed] = queue.push_many(
            [
                {"kind": "resize", "payload": {"width": 64}, "key": "cat-64"},
                {"kind": "notify", "payload": {"to": "me"}, "after": ["cat-64"]},
            ]
        )
        summary: RunSummary = worker.run()
        assert summary.done == 2, summary
        first: Job = queue.get(pushed[0].job.id)
        result: Optional[str] = first.result
        kinds: List[str] = [e.kind for e in queue.events(first.id)]
        print(f"{first!r}: {result} ({', '.join(kinds)})")
        try:
            queue.get(9999)
        except slothqueue.NotFoundError as e:
            print(f"error: {e}")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        sys.exit(main(Path(tmp)))
