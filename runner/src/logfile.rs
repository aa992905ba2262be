//! Per-job log files: the child's stdout and stderr, size-capped, plus the
//! last non-empty line as the job's one-line story.
//!
//! The pipe is read on a plain thread, not a tokio task: a process that
//! escaped its group (`setsid`) may hold the pipe open forever, and a
//! blocking read must then neither stall the runtime's shutdown nor the
//! runner — the runner waits a bounded time for the end of output and goes
//! on with what it has.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use slothqueue_core::JobId;

/// Longest line kept as a result or error summary, in bytes read.
const MAX_LINE: usize = 4096;
/// Longest summary stored, in characters.
const MAX_SUMMARY: usize = 500;

/// The log file of job `id` in the log directory `dir`. `slothqueue logs`
/// reads what the runner wrote here, so both must use this.
pub fn log_path(dir: &Path, id: JobId) -> PathBuf {
    dir.join(log_file_name(id))
}

/// Removes the log files of jobs a purge deleted (`clear`, from the CLI
/// or the page). Best effort: a log left behind is harmless, and a clear
/// that failed over one would be worse.
pub fn remove_logs(dir: &Path, ids: &[JobId]) {
    for id in ids {
        let _ = std::fs::remove_file(log_path(dir, *id));
    }
}

/// The name of job `id`'s log file inside the log directory, for a reader
/// that opens it relative to the directory's descriptor (the HTTP log
/// route, which follows no symlink).
pub fn log_file_name(id: JobId) -> String {
    format!("{id}.log")
}

/// The log directory beside a queue file: `queue.db` → `queue.db.logs`,
/// named after the queue so that two queues in one directory never mix
/// their logs. The CLI, the HTTP worker and `logs` all call this.
pub fn log_dir_for(queue_file: &Path) -> PathBuf {
    let mut name = queue_file.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".logs");
    queue_file.with_file_name(name)
}

/// Refuses `path` unless this user owns it and nobody else may write it
/// ([`check_private`](crate::private::check_private), the queue file's rule).
fn check_private(
    path: &Path,
    meta: &std::fs::Metadata,
    what: &str,
    chmod: &str,
) -> std::io::Result<()> {
    use crate::private::{AlsoOwnedBy, NotPrivate};
    crate::private::check_private(meta, AlsoOwnedBy::Nobody).map_err(|why| {
        let hint = match why {
            NotPrivate::Owner { .. } => String::new(),
            NotPrivate::Writable { .. } => format!(": chmod {chmod} it"),
        };
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{what} {} {why}{hint}", path.display()),
        )
    })
}

/// A log file opened for appending, with how much more it may grow.
///
/// Past its cap a log keeps the head *and* the tail of the output: the
/// first half of the room is written as it comes, the last half is kept in
/// memory (at most half the cap) and written when the output ends, after a
/// line saying how much was dropped in between. The error at the end of a
/// chatty job is what a user looks for.
pub(crate) struct JobLog {
    file: File,
    /// Bytes still written straight through.
    head_left: u64,
    /// The newest output past the head, at most `tail_room` bytes.
    tail: std::collections::VecDeque<u8>,
    tail_room: usize,
    /// Bytes that fell out of the tail.
    dropped: u64,
    cap: u64,
}

impl JobLog {
    /// Opens (creating `dir` and the file, private to the user: output may
    /// hold secrets) and writes `header` as its own line. The header is
    /// written even past the cap so every attempt leaves a trace.
    ///
    /// The directory is created when missing. It must be this user's and writable by
    /// nobody else, and the file is opened without following a symlink
    /// (and without blocking on a FIFO) and must be a regular file of this
    /// user's: whoever shares a folder with the queue must not be able to
    /// point a job's output at another file (`1.log` → `~/.bashrc`).
    pub(crate) fn open(dir: &Path, id: JobId, cap: u64, header: &str) -> std::io::Result<JobLog> {
        let path = log_path(dir, id);
        let open = || {
            OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&path)
        };
        match std::fs::metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        check_private(dir, &std::fs::metadata(dir)?, "log folder", "700")?;
        let opened = open();
        let mut file = opened.map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("{} is a symlink: refusing to follow it", path.display()),
                )
            } else {
                e
            }
        })?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{} is not a regular file", path.display()),
            ));
        }
        check_private(&path, &meta, "log", "600")?;
        let used = meta.len();
        file.write_all(format!("{header}\n").as_bytes())?;
        let room = cap.saturating_sub(used);
        let tail_room = usize::try_from(room / 2).unwrap_or(usize::MAX);
        Ok(JobLog {
            file,
            head_left: room - room / 2,
            tail: std::collections::VecDeque::new(),
            tail_room,
            dropped: 0,
            cap,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let take = usize::try_from(self.head_left).unwrap_or(usize::MAX).min(bytes.len());
        self.file.write_all(&bytes[..take])?;
        self.head_left -= take as u64;
        self.tail.extend(&bytes[take..]);
        if self.tail.len() > self.tail_room {
            let excess = self.tail.len() - self.tail_room;
            self.tail.drain(..excess);
            self.dropped += excess as u64;
        }
        Ok(())
    }

    /// The output ended: writes the kept tail, after a note of what was
    /// dropped before it.
    fn finish(&mut self) -> std::io::Result<()> {
        if self.dropped > 0 {
            let note = format!(
                "\n[slothqueue: the log's cap of {} bytes was reached: {} bytes dropped here, the last {} follow]\n",
                self.cap,
                self.dropped,
                self.tail.len()
            );
            self.file.write_all(note.as_bytes())?;
        }
        let (a, b) = self.tail.as_slices();
        self.file.write_all(a)?;
        self.file.write_all(b)?;
        self.tail.clear();
        Ok(())
    }
}

/// Where a job's log goes, opened by the capture thread.
pub(crate) struct LogTarget {
    pub dir: PathBuf,
    pub id: JobId,
    pub cap: u64,
    /// The attempt's first line.
    pub header: String,
}

impl LogTarget {
    fn open(&self) -> std::io::Result<JobLog> {
        JobLog::open(&self.dir, self.id, self.cap, &self.header)
    }
}

/// What the reader saw so far.
#[derive(Debug, Default)]
struct Tail {
    current: Vec<u8>,
    last: Option<String>,
    log_error: Option<String>,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' || b == b'\r' {
                self.end_line();
            } else if self.current.len() < MAX_LINE {
                self.current.push(b);
            }
        }
    }

    fn end_line(&mut self) {
        let line = String::from_utf8_lossy(&self.current);
        let line = line.trim();
        if !line.is_empty() {
            self.last = Some(line.chars().take(MAX_SUMMARY).collect());
        }
        self.current.clear();
    }
}

/// What a finished capture reports.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    /// The last non-empty line of output.
    pub last_line: Option<String>,
    /// Writing the log failed (the output was still read and summarised).
    pub log_error: Option<String>,
}

/// A running capture of one pipe.
pub(crate) struct Capture {
    tail: Arc<Mutex<Tail>>,
    done: tokio::sync::oneshot::Receiver<()>,
}

impl Capture {
    /// Starts reading `pipe` into the log `target` describes on its own
    /// thread. The thread opens the log too: creating a file can take a
    /// while (a directory's inode allocation), and the job need not wait
    /// for it to start; its output waits in the pipe meanwhile.
    pub(crate) fn start(mut pipe: File, target: LogTarget) -> std::io::Result<Capture> {
        let tail = Arc::new(Mutex::new(Tail::default()));
        let (tx, done) = tokio::sync::oneshot::channel();
        let shared = Arc::clone(&tail);
        std::thread::Builder::new().name("slothqueue-log".into()).spawn(move || {
            let mut log = match target.open() {
                Ok(l) => Some(l),
                Err(e) => {
                    shared.lock().unwrap_or_else(PoisonError::into_inner).log_error =
                        Some(format!("cannot open log in {}: {e}", target.dir.display()));
                    None
                }
            };
            let mut buf = [0u8; 8192];
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let mut tail = shared.lock().unwrap_or_else(PoisonError::into_inner);
                tail.push(&buf[..n]);
                if let Some(l) = log.as_mut() {
                    if let Err(e) = l.write(&buf[..n]) {
                        tail.log_error = Some(format!("cannot write the job's log: {e}"));
                        log = None;
                    }
                }
            }
            let mut tail = shared.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(Err(e)) = log.as_mut().map(JobLog::finish) {
                tail.log_error = Some(format!("cannot write the job's log: {e}"));
            }
            tail.end_line();
            drop(tail);
            let _ = tx.send(());
        })?;
        Ok(Capture { tail, done })
    }

    /// Waits up to `wait` for the end of output (every writer closed), then
    /// reports what was seen. A writer that escaped the job's group may keep
    /// the pipe open; the thread then keeps draining it into the log.
    pub(crate) async fn finish(self, wait: Duration) -> Captured {
        let _ = tokio::time::timeout(wait, self.done).await;
        let mut tail = self.tail.lock().unwrap_or_else(PoisonError::into_inner);
        let mut last_line = tail.last.clone();
        if !tail.current.is_empty() {
            let partial = String::from_utf8_lossy(&tail.current).trim().to_owned();
            if !partial.is_empty() {
                last_line = Some(partial.chars().take(MAX_SUMMARY).collect());
            }
        }
        Captured { last_line, log_error: tail.log_error.take() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_live_beside_the_queue_file() {
        assert_eq!(log_dir_for(Path::new("/q/queue.db")), Path::new("/q/queue.db.logs"));
        assert_eq!(
            log_path(Path::new("/q/queue.db.logs"), 12),
            Path::new("/q/queue.db.logs/12.log")
        );
    }

    #[test]
    fn a_symlinked_log_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("q.db.logs");
        std::fs::DirBuilder::new().mode(0o700).create(&logs).unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, "keep me\n").unwrap();
        std::os::unix::fs::symlink(&target, log_path(&logs, 1)).unwrap();
        let err = JobLog::open(&logs, 1, 1000, "--- header ---").err().unwrap();
        assert!(err.to_string().contains("is a symlink"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");
        // A FIFO in its place neither blocks nor is written to.
        let fifo = log_path(&logs, 2);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let err = JobLog::open(&logs, 2, 1000, "--- header ---").err().unwrap();
        assert!(!err.to_string().is_empty());
    }

    #[test]
    fn the_log_folder_is_private_and_a_shared_one_is_refused() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("q.db.logs");
        JobLog::open(&logs, 1, 1000, "--- header ---").unwrap();
        assert_eq!(std::fs::metadata(&logs).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o777)).unwrap();
        for id in [1, 2] {
            let err = JobLog::open(&logs, id, 1000, "--- header ---").err().unwrap();
            assert!(err.to_string().contains("writable by other users (mode 0777)"), "{err}");
        }
        assert!(!log_path(&logs, 2).exists());
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o700)).unwrap();
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&logs, Some(4242), None).unwrap();
            let err = JobLog::open(&logs, 3, 1000, "--- header ---").err().unwrap();
            assert!(err.to_string().contains("owned by uid 4242"), "{err}");
        }
    }

    #[test]
    fn tail_keeps_the_last_non_empty_line() {
        let mut t = Tail::default();
        t.push(b"first\nsecond\n\n   \n");
        assert_eq!(t.last.as_deref(), Some("second"));
        t.push(b"progress 10%\rprogress 100%\r\n");
        assert_eq!(t.last.as_deref(), Some("progress 100%"));
    }

    #[test]
    fn a_capped_log_keeps_the_head_and_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = JobLog::open(dir.path(), 7, 10, "--- header ---").unwrap();
        log.write(b"01234").unwrap();
        log.write(b"56789abcdef").unwrap();
        log.write(b"error: X").unwrap();
        log.finish().unwrap();
        let text = std::fs::read_to_string(log_path(dir.path(), 7)).unwrap();
        // The header counts against later attempts' room, not this one's.
        assert_eq!(
            text,
            "--- header ---\n01234\n[slothqueue: the log's cap of 10 bytes was reached: 14 bytes dropped here, the last 5 follow]\nor: X"
        );
        // A second attempt's output finds the file full: only its note and
        // nothing of the middle.
        let mut again = JobLog::open(dir.path(), 7, 10, "--- again ---").unwrap();
        again.write(b"x").unwrap();
        again.finish().unwrap();
        let text = std::fs::read_to_string(log_path(dir.path(), 7)).unwrap();
        assert!(text.ends_with("--- again ---\n\n[slothqueue: the log's cap of 10 bytes was reached: 1 bytes dropped here, the last 0 follow]\n"), "{text}");
    }

    #[test]
    fn a_log_under_its_cap_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = JobLog::open(dir.path(), 8, 1000, "--- header ---").unwrap();
        for chunk in [&b"one\n"[..], b"two\n", b"three\n"] {
            log.write(chunk).unwrap();
        }
        log.finish().unwrap();
        let text = std::fs::read_to_string(log_path(dir.path(), 8)).unwrap();
        assert_eq!(text, "--- header ---\none\ntwo\nthree\n");
    }
}
