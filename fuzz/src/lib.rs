//! What the fuzz targets share: the panic policy, a scratch directory, the
//! store operations run on an opened file, and seed files written into an
//! empty corpus at start-up (valid queues are made at run time, so no
//! binary file is committed).
//!
//! The panic policy. libFuzzer's Rust glue aborts on every panic, even one
//! that is caught. But redb may panic on a file altered outside it, and the
//! redb store deliberately catches those panics inside redb and answers
//! `Corrupt`; what must never happen is a panic reaching the caller, or a
//! second panic while unwinding (which aborts the process whatever anyone
//! catches). So [`init`] replaces the hook with one that prints each panic
//! as possibly caught (the last of them names a double panic's cause) and
//! records it, and [`run`] aborts, printing this input's panics again, when
//! one escapes the target.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    reason = "a fuzz target fails by aborting, and says why on stderr first"
)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use slothqueue_core::{
    ClaimFilter, ClaimRequest, ClockOnly, ListFilter, NewJob, Owner, Store, StoreError, Timestamp,
};
use slothqueue_store_redb::{RedbOptions, RedbStore};
use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};

/// The time every operation runs at.
pub const T: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// Panic messages seen while running the current input.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Replaces libFuzzer's abort-on-any-panic hook (see the crate docs) and
/// writes `seeds` into the corpus directory when it is empty.
pub fn init(seeds: impl FnOnce() -> Vec<(String, Vec<u8>)>) {
    std::panic::set_hook(Box::new(move |info| {
        let msg = format!("{info}").replace('\n', " ");
        eprintln!("panic (maybe caught): {msg}");
        PANICS.lock().unwrap_or_else(|e| e.into_inner()).push(msg);
    }));
    if let Some(dir) = corpus_dir() {
        let empty = std::fs::read_dir(&dir).map(|mut d| d.next().is_none()).unwrap_or(false);
        if empty {
            for (name, bytes) in seeds() {
                std::fs::write(dir.join(name), bytes).expect("writing a seed");
            }
        }
    }
}

/// The first directory on the command line: libFuzzer's corpus.
fn corpus_dir() -> Option<PathBuf> {
    std::env::args_os()
        .skip(1)
        .map(PathBuf::from)
        .find(|p| !p.as_os_str().to_string_lossy().starts_with('-') && p.is_dir())
}

/// Runs one input; a panic escaping it aborts the process with the panic
/// messages of this input (caught ones included, for context).
pub fn run(f: impl FnOnce()) {
    PANICS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        fail("a panic escaped");
    }
}

/// Aborts with `why` and the panic messages of this input.
pub fn fail(why: &str) -> ! {
    eprintln!("FUZZ FAILURE: {why}");
    for p in PANICS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        eprintln!("  panic: {p}");
    }
    std::process::abort();
}

/// A scratch directory, on tmpfs when there is one: every commit fsyncs.
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().expect("a temporary directory")
}

/// A single-threaded runtime (the stores' blocking pool still has threads).
pub fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
    })
}

/// A backend: the targets take the two file backends.
pub use slothqueue::Backend;

/// Opens the queue file at `path` as `backend`'s store itself, not through
/// `slothqueue::open`, whose look at the header would refuse most
/// arbitrary bytes before the store ever read them.
pub fn open(backend: Backend, path: &Path) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match backend {
        Backend::Sqlite => Arc::new(SqliteStore::open(path, SqliteOptions::default())?),
        Backend::Redb => Arc::new(RedbStore::open(path, RedbOptions::default())?),
        Backend::Postgres => unreachable!("the targets are about queue files"),
    })
}

/// Writes `bytes` as a queue file and opens it: an open store is read and
/// written (any answer will do, but no panic); a refusal must be typed and
/// leave the file as it was.
pub fn open_from_bytes(backend: Backend, bytes: &[u8]) {
    let dir = scratch();
    let path = dir.path().join("queue");
    std::fs::write(&path, bytes).expect("writing the input");
    match open(backend, &path) {
        Ok(store) => rt().block_on(async {
            let _ = store.list(&ListFilter::default()).await;
            let _ = store.stats(T).await;
            let _ = store.push(NewJob::shell("true", "/tmp").key("fuzz"), T).await;
            let owner = Owner::named("fuzz");
            if let Ok(Some(c)) =
                store.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), T).await
            {
                let _ = store.heartbeat(c.job.id, &c.fence, None, T).await;
                let _ = store.complete(c.job.id, &c.fence, Default::default(), T).await;
            }
            let _ = store.events(1).await;
        }),
        Err(e) => {
            let typed = matches!(
                e,
                StoreError::Corrupt { .. }
                    | StoreError::SchemaTooNew { .. }
                    | StoreError::Io { .. }
            );
            if !typed {
                fail(&format!("untyped refusal: {e:?}"));
            }
            if std::fs::read(&path).expect("reading the input back") != bytes {
                fail(&format!("a refused file was changed: {e}"));
            }
        }
    }
}

/// A small valid queue with jobs in several states, as a file's bytes.
pub fn golden(backend: Backend) -> Vec<u8> {
    let dir = scratch();
    let path = dir.path().join("golden");
    {
        let store = open(backend, &path).expect("a new queue");
        rt().block_on(async {
            for i in 0..4 {
                let job = NewJob::shell(format!("echo {i}"), "/tmp").key(format!("k{i}"));
                store.push(job, T).await.expect("push");
            }
            let owner = Owner::named("golden");
            let filter = ClaimFilter::default();
            let c = store.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(filter.clone()), T).await.expect("claim");
            let c = c.expect("a due job");
            store.complete(c.job.id, &c.fence, Default::default(), T).await.expect("complete");
            store.claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)).filter(filter.clone()), T).await.expect("claim");
        });
    }
    std::fs::read(&path).expect("reading the golden queue")
}

/// An empty queue (opened once, nothing pushed), as a file's bytes.
pub fn empty(backend: Backend) -> Vec<u8> {
    let dir = scratch();
    let path = dir.path().join("empty");
    drop(open(backend, &path).expect("a new queue"));
    std::fs::read(&path).expect("reading the empty queue")
}
