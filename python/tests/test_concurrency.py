"""Two Python processes × four threads claiming 2,000 jobs from one file:
each job is taken exactly once. The GIL is released while the store
works, so the threads of one process really overlap."""

from __future__ import annotations

import subprocess
import textwrap
from collections import Counter

from slothqueue import Queue

from conftest import child

JOBS = 2000

CLAIMER = textwrap.dedent(
    """
    import sys, threading, slothqueue
    q = slothqueue.Queue(sys.argv[1])
    taken = []
    lock = threading.Lock()

    def claim(n):
        owner = f"{sys.argv[2]}-{n}"
        mine = []
        while (job := q.claim(owner)) is not None:
            q.complete(job.id, owner, owner)
            mine.append(job.id)
        with lock:
            taken.extend(mine)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(" ".join(map(str, taken)))
    """
)


def test_each_job_is_taken_exactly_once(db: str) -> None:
    with Queue(db) as q:
        pushed = q.push_many([{"kind": "n", "payload": i} for i in range(JOBS)])
        ids = {p.job.id for p in pushed}
        procs = [
            subprocess.Popen(child(CLAIMER, db, name), stdout=subprocess.PIPE, text=True)
            for name in ("a", "b")
        ]
        taken: Counter[int] = Counter()
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0
            taken.update(int(i) for i in out.split())
        assert set(taken) == ids and max(taken.values()) == 1
        stats = q.stats()
        assert stats.done == JOBS and stats.pending == 0 and stats.running == 0
        for job in q.list(limit=50):
            assert [e.kind for e in q.events(job.id)] == ["pushed", "claimed", "completed"]
