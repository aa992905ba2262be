//! Torture S17 on a new queue: several `slothqueue add` processes racing to
//! create the same file must all succeed, and every job must be in it.
//!
//! Before the SQLite probe trusted a lock-free read only when the file and
//! its WAL looked the same after it (store-sqlite `schema::probe`), about 1
//! round in 40 refused the queue another process was creating as "a SQLite
//! database of another program". The race is timing-dependent, so this test
//! runs many rounds: with the probe reduced to a single look it failed 3
//! of 6 runs on SQLite here (in rounds 2, 9 and 13).

use std::process::Stdio;

use crate::support::{Backend, TestContext};

const PROCESSES: usize = 6;
const ROUNDS: usize = 25;

fn racing_creators_all_succeed(backend: Backend) {
    for round in 0..ROUNDS {
        let ctx = TestContext::new(backend);
        let children: Vec<_> = (0..PROCESSES)
            .map(|i| {
                ctx.command(&["add", &format!("echo {i}")])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: a creator failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let list = ctx.ok(&["list"]);
        for i in 0..PROCESSES {
            assert!(list.contains(&format!("echo {i}")), "round {round}: job {i} missing:\n{list}");
        }
    }
}

#[cfg(feature = "sqlite")]
#[test]
fn s17_processes_creating_one_sqlite_queue_at_once_all_succeed() {
    racing_creators_all_succeed(Backend::Sqlite);
}

#[cfg(feature = "redb")]
#[test]
fn s17_processes_creating_one_redb_queue_at_once_all_succeed() {
    racing_creators_all_succeed(Backend::Redb);
}
