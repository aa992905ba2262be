//! S13 (a write lock held past the busy timeout), S15 (disk full), S16
//! (truncated, bit-flipped and foreign files), S17 (schema versions).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::process::Signal;

use crate::ctx::{Ctx, Status};
use crate::queue::{self, Backend, Where as _};
use crate::util::{Ended, Procs, run_capture, wait_for};

/// Why a queue on a server cannot take part: these scenarios are about
/// files (main.rs runs them on the file backends alone).
const FILES_ONLY: &str = "a queue on a server has no file";

/// Holds the queue's write lock from this process until told to stop.
fn hold_write_lock(
    backend: Backend,
    db: &Path,
) -> Result<(mpsc::Sender<()>, std::thread::JoinHandle<()>)> {
    let (held_tx, held_rx) = mpsc::channel::<Result<(), String>>();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let db = db.to_path_buf();
    let handle = std::thread::spawn(move || match backend {
        Backend::Sqlite => {
            let conn = match rusqlite::Connection::open(&db) {
                Ok(c) => c,
                Err(e) => {
                    let _ = held_tx.send(Err(e.to_string()));
                    return;
                }
            };
            match conn.execute_batch("BEGIN IMMEDIATE") {
                Ok(()) => {
                    let _ = held_tx.send(Ok(()));
                    let _ = stop_rx.recv();
                    let _ = conn.execute_batch("ROLLBACK");
                }
                Err(e) => {
                    let _ = held_tx.send(Err(e.to_string()));
                }
            }
        }
        Backend::Redb => {
            let mut b = redb::Builder::new();
            b.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
            let db = match b.open(&db) {
                Ok(d) => d,
                Err(e) => {
                    let _ = held_tx.send(Err(e.to_string()));
                    return;
                }
            };
            match db.begin_write() {
                Ok(txn) => {
                    let _ = held_tx.send(Ok(()));
                    let _ = stop_rx.recv();
                    let _ = txn.abort();
                }
                Err(e) => {
                    let _ = held_tx.send(Err(e.to_string()));
                }
            }
        }
        Backend::Postgres => {
            let _ = held_tx.send(Err(FILES_ONLY.to_owned()));
        }
    });
    match held_rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(())) => Ok((stop_tx, handle)),
        Ok(Err(e)) => bail!("cannot take the write lock: {e}"),
        Err(_) => bail!("timed out taking the write lock"),
    }
}

fn count_jobs(ctx: &Ctx, db: &Path) -> Result<usize> {
    Ok(queue::snapshot(ctx.backend, db)?.len())
}

/// S13: a write lock held by another process: a short hold is waited
/// out; one longer than the busy timeout (5 s) ends in a clear "busy"
/// error with exit code 5, after the wait, not at once and not as a raw
/// SQLite or redb code; nothing is written; the next add works.
pub fn s13_busy(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s13")?;
    let db = ctx.db(&dir);
    let e = ctx.sq_run(&db, &["add", "true"])?;
    if e.code() != Some(0) {
        bail!("cannot create the queue: {}", e.describe());
    }
    // A hold shorter than the timeout: the add waits its turn.
    let (stop, holder) = hold_write_lock(ctx.backend, &db)?;
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let _ = stop.send(());
    });
    let t = Instant::now();
    let e = ctx.sq_run(&db, &["add", "true"])?;
    let short = t.elapsed();
    let _ = release.join();
    let _ = holder.join();
    if e.code() != Some(0) {
        ctx.problem(format!("add behind a 1.5 s lock: {}", e.describe()));
    } else if short < Duration::from_millis(1200) {
        ctx.problem(format!("add behind a 1.5 s lock returned after {short:?}: it did not wait"));
    }
    // A hold longer than the timeout.
    let (stop, holder) = hold_write_lock(ctx.backend, &db)?;
    let t = Instant::now();
    let e = ctx.sq_run(&db, &["add", "true"])?;
    let long = t.elapsed();
    let _ = stop.send(());
    let _ = holder.join();
    let msg = e.stderr.trim().to_owned();
    if e.code() != Some(5) {
        ctx.problem(format!("add behind a held lock: expected exit 5 (busy): {}", e.describe()));
    }
    if long < Duration::from_millis(4500) {
        ctx.problem(format!(
            "add behind a held lock failed after {long:?}, before the 5 s timeout"
        ));
    }
    if long > Duration::from_secs(20) {
        ctx.problem(format!("add behind a held lock took {long:?}"));
    }
    let lower = msg.to_lowercase();
    if !lower.contains("busy") {
        ctx.problem(format!("the busy error does not say busy: `{msg}`"));
    }
    for raw in ["database is locked", "sqlite_busy", "code 5", "wouldblock", "would block"] {
        if lower.contains(raw) {
            ctx.problem(format!("the busy error shows a raw engine message ({raw}): `{msg}`"));
        }
    }
    if msg.lines().count() != 1 {
        ctx.problem(format!("the busy error is not one line: `{msg}`"));
    }
    let e = ctx.sq_run(&db, &["add", "true"])?;
    if e.code() != Some(0) {
        ctx.problem(format!("add after the lock was released: {}", e.describe()));
    }
    let n = count_jobs(ctx, &db)?;
    if n != 3 {
        ctx.problem(format!("expected 3 jobs (the refused add wrote nothing), found {n}"));
    }
    ctx.integrity(&db, "after S13");
    Ok(Status::Ran(format!(
        "1.5 s hold waited out in {short:.1?}; a held lock refused after {long:.1?}: `{msg}`"
    )))
}

/// A tmpfs of `size` mounted at `dir`, unmounted on drop.
struct Mount(PathBuf);

impl Mount {
    fn new(dir: &Path, size: &str) -> Result<Option<Mount>, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if out.status.success() {
            Ok(Some(Mount(dir.to_path_buf())))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// S15: the queue on a small tmpfs: filling it makes `add` fail with a
/// clear "no space left" error and nothing partial; a runner that was
/// running meanwhile carries on once space returns, as does `add`.
pub fn s15_disk_full(ctx: &mut Ctx) -> Result<Status> {
    let dir = ctx.dir("s15")?;
    let mnt = dir.join("mnt");
    let mount = match Mount::new(&mnt, "2m") {
        Ok(Some(m)) => m,
        Ok(None) => unreachable!(),
        Err(why) => return Ok(Status::Skipped(format!("cannot mount a tmpfs here ({why})"))),
    };
    let db = ctx.db(&mnt);
    let filler = mnt.join("filler");
    std::fs::write(&filler, vec![0u8; 600 * 1024]).context("cannot write the filler")?;
    let e = ctx.sq_run(&db, &["add", "true"])?;
    if e.code() != Some(0) {
        bail!("cannot create the queue on the tmpfs: {}", e.describe());
    }
    let mut procs = Procs::new(&dir, &ctx.tag("s15"))?;
    let runner = procs.spawn("runner", ctx.runner_cmd(&db, &["--follow"]))?;
    // Big jobs fill the disk; they wait an hour, so that their output (the
    // log names the command) does not fill it instead. Every fourth job is
    // small and due: the runner completes jobs while the disk fills.
    let big = format!("true {}", "x".repeat(16 * 1024));
    let mut acked = 1usize;
    let mut failure: Option<Ended> = None;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(180) {
        let e = if acked.is_multiple_of(4) {
            ctx.sq_run(&db, &["add", "true"])?
        } else {
            ctx.sq_run(&db, &["add", &big, "--delay", "1h"])?
        };
        if e.code() == Some(0) {
            acked += 1;
        } else {
            failure = Some(e);
            break;
        }
    }
    let Some(full) = failure else { bail!("the tmpfs never filled ({acked} adds)") };
    let msg = full.stderr.trim().to_owned();
    if !msg.to_lowercase().contains("no space left") || msg.lines().count() != 1 {
        ctx.problem(format!("the disk-full error is not clear: {}", full.describe()));
    }
    if matches!(full.code(), None | Some(0) | Some(101)) {
        ctx.problem(format!("the disk-full add: {}", full.describe()));
    }
    // Nothing partial: exactly the acknowledged jobs (read while full).
    let n = count_jobs(ctx, &db)?;
    if n != acked {
        ctx.problem(format!("{acked} adds acknowledged but {n} jobs in the queue"));
    }
    std::fs::remove_file(&filler).context("cannot remove the filler")?;
    let e = ctx.sq_run(&db, &["add", "true"])?;
    if e.code() != Some(0) {
        ctx.problem(format!("add after space returned: {}", e.describe()));
    }
    let drained = wait_for(Duration::from_secs(120), "the runner to finish every due job", || {
        let s = queue::stats(ctx.backend, &db)?;
        Ok((s.due_now == 0 && s.running == 0).then_some(s))
    });
    if let Err(e) = drained {
        ctx.problem(format!("after space returned: {e:#}"));
    }
    procs.signal(runner, Signal::TERM)?;
    let e = procs.wait(runner, Duration::from_secs(20))?;
    ctx.observe(&e, false);
    let warnings = e.stderr.lines().filter(|l| l.contains("no space left")).count();
    if warnings > 10 {
        ctx.problem(format!("the runner warned about the full disk {warnings} times"));
    }
    ctx.integrity(&db, "after S15");
    drop(procs);
    drop(mount);
    Ok(Status::Ran(format!(
        "{acked} adds fit in 2 MiB; then `{msg}` ({}), nothing partial; add and the running runner resumed ({warnings} runner warning(s))",
        full.status
    )))
}

/// Builds a small valid queue: some jobs done, some pending.
fn golden(ctx: &mut Ctx, dir: &Path) -> Result<Vec<u8>> {
    let db = ctx.db(dir);
    for i in 0..6 {
        let e = ctx.sq_run(&db, &["add", &format!("echo {i}")])?;
        if e.code() != Some(0) {
            bail!("golden add: {}", e.describe());
        }
    }
    let e = ctx.sq_run(&db, &["run", "--load-ceiling", "100000"])?;
    if e.code() != Some(0) {
        bail!("golden run: {}", e.describe());
    }
    for i in 0..3 {
        let e = ctx.sq_run(&db, &["add", &format!("echo later {i}"), "--delay", "1h"])?;
        if e.code() != Some(0) {
            bail!("golden add: {}", e.describe());
        }
    }
    std::fs::read(&db).context("cannot read the golden queue")
}

/// The files in `dir` (names), to see what a command left behind.
fn listing(dir: &Path) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        out.insert(e.context("cannot list")?.file_name().to_string_lossy().into_owned());
    }
    Ok(out)
}

/// Counts of what hostile files got.
#[derive(Default)]
struct Hostile {
    runs: usize,
    refused: usize,
    accepted: usize,
}

/// Runs every command against a fresh copy of `bytes` (and a sidecar),
/// checking: no panic or signal, a defined exit code, and on refusal a
/// message naming the file, and the file byte-identical with nothing left
/// beside it; a read-only command leaves the file as it was in any case.
fn hostile(
    ctx: &mut Ctx,
    base: &Path,
    name: &str,
    bytes: &[u8],
    sidecar: Option<(&str, &[u8])>,
    tally: &mut Hostile,
) -> Result<()> {
    let cmds: &[(&[&str], bool)] = &[
        (&["list"], true),
        (&["status"], true),
        (&["export"], true),
        (&["show", "1"], true),
        (&["add", "true"], false),
        (&["run", "--once", "--load-ceiling", "100000"], false),
    ];
    // Quick: one read-only and both writing commands.
    let quick: Vec<(&[&str], bool)> = vec![cmds[0], cmds[4], cmds[5]];
    let cmds: &[(&[&str], bool)] = if ctx.quick() { &quick } else { cmds };
    for (args, read_only) in cmds {
        let dir = base.join(format!("{name}-{}", args[0]));
        std::fs::create_dir_all(&dir).context("cannot create a case directory")?;
        let db = ctx.db(&dir);
        std::fs::write(&db, bytes).context("cannot write a case file")?;
        if let Some((suffix, side)) = sidecar {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            std::fs::write(PathBuf::from(p), side).context("cannot write a sidecar")?;
        }
        let before = listing(&dir)?;
        let e = ctx.sq_run(&db, args)?;
        tally.runs += 1;
        let what = format!("{name}: {}", args.join(" "));
        if e.signal().is_some() || e.code().is_none_or(|c| !(0..=6).contains(&c)) {
            ctx.problem(format!("{what}: undefined ending: {}", e.describe()));
            continue;
        }
        let after = listing(&dir)?;
        if e.code() == Some(0) {
            tally.accepted += 1;
            // Both backends: read-only commands open redb read-only (a
            // writable redb open rewrites the header even when nothing is
            // written), so not even its header is rewritten.
            if *read_only && queue::same_bytes(&db, bytes).is_err() {
                ctx.problem(format!("{what}: a read-only command changed the file"));
            }
            continue;
        }
        tally.refused += 1;
        let msg = e.stderr.trim();
        if msg.lines().count() != 1
            || !msg.contains(&*db.to_string_lossy()) && !msg.contains("no job #1")
        {
            ctx.problem(format!("{what}: the refusal does not name the file in one line: `{msg}`"));
        }
        if let Err(err) = queue::same_bytes(&db, bytes) {
            ctx.problem(format!("{what}: refused, yet the file changed: {err:#}"));
        }
        // SQLite's shared-memory index (`-shm`) may stay behind a
        // read-only look at a file with a `-wal`; it holds no data.
        let left: Vec<&String> = after
            .difference(&before)
            .filter(|f| !f.ends_with(".logs") && !f.ends_with("-shm"))
            .collect();
        if !left.is_empty() {
            ctx.problem(format!("{what}: refused, yet left {left:?} beside the file"));
        }
    }
    Ok(())
}

/// S16: truncated, bit-flipped and foreign files, and a stale `-wal`.
pub fn s16_hostile_files(ctx: &mut Ctx) -> Result<Status> {
    let base = ctx.dir("s16")?;
    let gdir = base.join("golden");
    std::fs::create_dir_all(&gdir).context("cannot create a directory")?;
    let good = golden(ctx, &gdir)?;
    let len = good.len() as u64;
    let mut tally = Hostile::default();
    let (cuts, flips) = ctx.pick((6, 6), (20, 20));
    // Truncations, including the header's edges (0 bytes is an empty file,
    // which is a new queue by design: checked separately below).
    let mut offsets: Vec<u64> = vec![1, 16, 99, 100, len / 2, len - 1];
    while offsets.len() < cuts {
        offsets.push(ctx.rng.range(1, len));
    }
    offsets.truncate(cuts.max(6));
    for off in offsets {
        hostile(ctx, &base, &format!("cut{off}"), &good[..off as usize], None, &mut tally)?;
    }
    for i in 0..flips {
        let mut bad = good.clone();
        let n = ctx.rng.range(1, 5);
        for _ in 0..n {
            let at =
                if i % 2 == 0 { ctx.rng.range(0, len.min(4096)) } else { ctx.rng.range(0, len) };
            bad[at as usize] ^= ctx.rng.range(1, 256) as u8;
        }
        hostile(ctx, &base, &format!("flip{i}"), &bad, None, &mut tally)?;
    }
    hostile(ctx, &base, "text", b"just some notes\nnot a queue\n", None, &mut tally)?;
    let noise = random_bytes(ctx, 8192);
    hostile(ctx, &base, "random", &noise, None, &mut tally)?;
    let foreign = foreign_file(ctx.backend, &base)?;
    hostile(ctx, &base, "foreign-app", &foreign, None, &mut tally)?;
    let other = other_backend_golden(ctx, &base)?;
    hostile(ctx, &base, "other-backend", &other, None, &mut tally)?;
    let mut notes = Vec::new();
    if ctx.backend == Backend::Sqlite {
        let wal = stale_wal(&base)?;
        let before = tally.refused;
        hostile(ctx, &base, "stale-wal", &good, Some(("-wal", &wal)), &mut tally)?;
        // SQLite replays whatever `-wal` lies beside a file (nothing in it
        // names its database), so the other database's pages shadow the
        // queue's: it must then be refused, or else show the queue intact.
        let check = base.join("stale-wal-list");
        match queue::snapshot(ctx.backend, &ctx.db(&check)) {
            Ok(snap) if snap.len() != 9 => ctx.problem(format!(
                "with a stale -wal beside it the queue has {} jobs, not 9",
                snap.len()
            )),
            Ok(_) => notes.push("stale -wal: the queue reads intact".to_owned()),
            Err(_) => notes.push(format!(
                "stale -wal: refused as another program's database ({} refusals)",
                tally.refused - before
            )),
        }
    } else {
        notes.push("no -wal for redb".to_owned());
    }
    // An empty file that nobody is making a queue: SQLite refuses it
    // untouched (only a file it created itself becomes a queue); redb's
    // writable open still initialises one (its own creation makes one).
    let edir = base.join("empty");
    std::fs::create_dir_all(&edir).context("cannot create a directory")?;
    let edb = ctx.db(&edir);
    std::fs::write(&edb, b"").context("cannot write")?;
    let e = ctx.sq_run(&edb, &["add", "true"])?;
    let size = std::fs::metadata(&edb).map(|m| m.len()).unwrap_or(u64::MAX);
    match ctx.backend {
        Backend::Sqlite if e.code() != Some(6) || size != 0 => ctx.problem(format!(
            "add on an empty file was not refused untouched ({} bytes after): {}",
            size,
            e.describe()
        )),
        Backend::Redb if e.code() != Some(0) => {
            ctx.problem(format!("add on an empty file: {}", e.describe()))
        }
        _ => {}
    }
    Ok(Status::Ran(format!(
        "{} runs on {cuts} truncations, {flips} bit flips, text, random, another program's file, the other backend's file: {} refused cleanly, {} accepted; {}",
        tally.runs,
        tally.refused,
        tally.accepted,
        notes.join("; ")
    )))
}

fn random_bytes(ctx: &mut Ctx, n: usize) -> Vec<u8> {
    (0..n).map(|_| ctx.rng.next_u64() as u8).collect()
}

/// A database of another program in this backend's format.
fn foreign_file(backend: Backend, base: &Path) -> Result<Vec<u8>> {
    let p = base.join(format!("foreign.{}", backend.as_str()));
    match backend {
        Backend::Sqlite => {
            let c =
                rusqlite::Connection::open(&p).context("cannot create a foreign sqlite file")?;
            c.execute_batch(
                "PRAGMA application_id = 1234; CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);
                 INSERT INTO notes (body) VALUES ('hello'), ('world');",
            )
            .context("cannot fill the foreign sqlite file")?;
        }
        Backend::Redb => {
            let db = redb::Database::create(&p).context("cannot create a foreign redb file")?;
            let txn = db.begin_write().context("redb")?;
            {
                let def: redb::TableDefinition<'_, &str, &str> =
                    redb::TableDefinition::new("notes");
                let mut t = txn.open_table(def).context("redb")?;
                t.insert("hello", "world").context("redb")?;
            }
            txn.commit().context("redb")?;
        }
        Backend::Postgres => bail!(FILES_ONLY),
    }
    std::fs::read(&p).context("cannot read the foreign file")
}

/// A valid queue of the other backend, to open as this one.
fn other_backend_golden(ctx: &mut Ctx, base: &Path) -> Result<Vec<u8>> {
    let dir = base.join("other-golden");
    std::fs::create_dir_all(&dir).context("cannot create a directory")?;
    let db = dir.join(ctx.backend.other().file_name().context(FILES_ONLY)?);
    let mut cmd = Command::new(&ctx.opts.bin);
    cmd.arg("--db").arg(&db).args(["--backend", ctx.backend.other().as_str(), "add", "true"]);
    let e = run_capture("add (other backend)", cmd, Duration::from_secs(60), &ctx.tag("other"))?;
    if e.code() != Some(0) {
        bail!("cannot make the other backend's queue: {}", e.describe());
    }
    std::fs::read(&db).context("cannot read the other backend's queue")
}

/// The `-wal` of another SQLite database, with committed frames in it.
fn stale_wal(base: &Path) -> Result<Vec<u8>> {
    let p = base.join("other.db");
    let c = rusqlite::Connection::open(&p).context("cannot create a sqlite file")?;
    c.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
         CREATE TABLE jobs (id INTEGER PRIMARY KEY, x TEXT);
         INSERT INTO jobs (x) VALUES ('from another database');",
    )
    .context("cannot write the other database")?;
    let mut wal = p.as_os_str().to_owned();
    wal.push("-wal");
    let bytes = std::fs::read(PathBuf::from(wal)).context("cannot read the other -wal")?;
    drop(c);
    Ok(bytes)
}

/// S17: a file from a newer slothqueue is refused by every command,
/// byte-identical afterwards; checked-in fixtures of earlier schemas open
/// (and migrate); several processes creating one file at once agree.
pub fn s17_schema(ctx: &mut Ctx) -> Result<Status> {
    let base = ctx.dir("s17")?;
    let gdir = base.join("golden");
    std::fs::create_dir_all(&gdir).context("cannot create a directory")?;
    golden(ctx, &gdir)?;
    let gdb = ctx.db(&gdir);
    bump_schema(ctx.backend, &gdb)?;
    let newer = std::fs::read(&gdb).context("cannot read")?;
    let mut refused = 0;
    for args in [
        &["list"][..],
        &["status"],
        &["export"],
        &["add", "true"],
        &["run", "--load-ceiling", "100000"],
        &["cancel", "7"],
    ] {
        let dir = base.join(format!("newer-{}", args[0]));
        std::fs::create_dir_all(&dir).context("cannot create a directory")?;
        let db = ctx.db(&dir);
        std::fs::write(&db, &newer).context("cannot write")?;
        let before = listing(&dir)?;
        let e = ctx.sq_run(&db, args)?;
        let msg = e.stderr.trim();
        if e.code() != Some(6) || !msg.contains("newer slothqueue") {
            ctx.problem(format!("{} on a newer file: {}", args.join(" "), e.describe()));
        } else {
            refused += 1;
        }
        if let Err(err) = queue::same_bytes(&db, &newer) {
            ctx.problem(format!("{} changed a newer file: {err:#}", args.join(" ")));
        }
        let after = listing(&dir)?;
        let left: Vec<&String> = after.difference(&before).collect();
        if !left.is_empty() {
            ctx.problem(format!("{} left {left:?} beside a newer file", args.join(" ")));
        }
    }
    // Fixtures of every schema so far (v1 is the first; each later schema
    // adds the fixture of the one before).
    let fixtures = fixtures(ctx.backend);
    let mut opened = 0;
    for fixture in &fixtures {
        let dir = base.join("fixture");
        std::fs::create_dir_all(&dir).context("cannot create a directory")?;
        let db = ctx.db(&dir);
        std::fs::copy(fixture, &db)
            .with_context(|| format!("cannot copy {}", fixture.display()))?;
        for args in
            [&["--json", "list"][..], &["run", "--load-ceiling", "100000"], &["add", "true"]]
        {
            let e = ctx.sq_run(&db, args)?;
            if !matches!(e.code(), Some(0 | 1)) {
                ctx.problem(format!(
                    "fixture {}: {}: {}",
                    fixture.display(),
                    args.join(" "),
                    e.describe()
                ));
            }
        }
        ctx.integrity(&db, &format!("after opening fixture {}", fixture.display()));
        opened += 1;
    }
    if fixtures.is_empty() {
        ctx.problem(format!("no checked-in fixture for {}", ctx.backend.as_str()));
    }
    // Several processes create one new file at once.
    let cdir = base.join("concurrent");
    std::fs::create_dir_all(&cdir).context("cannot create a directory")?;
    let cdb = ctx.db(&cdir);
    let mut procs = Procs::new(&cdir, &ctx.tag("s17"))?;
    let pids: Vec<i32> = (0..6)
        .map(|i| procs.spawn("add", ctx.sq(&cdb, &["add", &format!("echo {i}")])))
        .collect::<Result<_>>()?;
    for pid in pids {
        let e = procs.wait(pid, Duration::from_secs(60))?;
        ctx.observe(&e, false);
        if e.code() != Some(0) {
            ctx.problem(format!("concurrent creation: {}", e.describe()));
        }
    }
    let n = count_jobs(ctx, &cdb)?;
    if n != 6 {
        ctx.problem(format!("6 processes created the queue at once; it holds {n} jobs"));
    }
    ctx.integrity(&cdb, "after concurrent creation");
    Ok(Status::Ran(format!(
        "newer schema refused by {refused} commands, file untouched; {opened} fixture(s) opened; 6 concurrent creators agreed"
    )))
}

/// The checked-in fixtures of earlier schemas for `backend`.
fn fixtures(backend: Backend) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates = match backend {
        Backend::Sqlite => {
            vec![
                root.join("../store-sqlite/tests/data/v1.sqlite"),
                root.join("tests/data/v1.sqlite"),
                root.join("../store-sqlite/tests/data/v3.sqlite"),
                root.join("../store-sqlite/tests/data/v4.sqlite"),
            ]
        }
        Backend::Redb => {
            vec![root.join("tests/data/v1.redb"), root.join("../store-redb/tests/data/v2.redb")]
        }
        Backend::Postgres => Vec::new(),
    };
    candidates.into_iter().filter(|p| p.exists()).collect()
}

/// Writes schema version + 1 into the file, as a newer slothqueue would.
fn bump_schema(backend: Backend, db: &Path) -> Result<()> {
    match backend {
        Backend::Sqlite => {
            let c = rusqlite::Connection::open(db).context("cannot open")?;
            let v = slothqueue_store_sqlite::SCHEMA_VERSION + 1;
            c.execute_batch(&format!(
                "PRAGMA user_version = {v}; PRAGMA wal_checkpoint(TRUNCATE);"
            ))
            .context("cannot set user_version")?;
        }
        Backend::Redb => {
            let mut b = redb::Builder::new();
            b.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
            let db = b.open(db).context("cannot open")?;
            let txn = db.begin_write().context("redb")?;
            {
                let def: redb::TableDefinition<'_, &str, u64> =
                    redb::TableDefinition::new("slothqueue_meta");
                let mut t = txn.open_table(def).context("redb")?;
                t.insert("schema_version", u64::from(slothqueue_store_redb::SCHEMA_VERSION) + 1)
                    .context("redb")?;
            }
            txn.commit().context("redb")?;
        }
        Backend::Postgres => bail!(FILES_ONLY),
    }
    Ok(())
}
