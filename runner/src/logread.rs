//! Reading a piece of a job's log, bounded and without trusting the log
//! folder: what the HTTP log route and the MCP server's `job_logs` tool
//! and log resources answer, written once.
//!
//! The log is the file the runner writes and `slothqueue logs` reads:
//! `<id>.log` in the queue's log folder. It is opened without following a
//! symlink, neither the directory nor the file (each opened by its own
//! descriptor, the file relative to the directory's), and must be a regular
//! file: a link planted there cannot make a server read anything else, and
//! a FIFO cannot hang it. A piece never splits a character: one cut at the
//! end is left for the next read, one cut at the start of a tail skipped.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use slothqueue_core::JobId;

/// A piece of a job's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogPiece {
    /// Whether the log file exists (no attempt has started, or it was
    /// purged, when not).
    pub exists: bool,
    /// The log's size when read, in bytes.
    pub size: u64,
    /// The byte offset `text` starts at: the asked offset, or, without one
    /// (or past the end of a log that was since rewritten), the start of
    /// its last `limit` bytes.
    pub start: u64,
    /// Where the next read should start.
    pub next_offset: u64,
    /// The bytes read, as UTF-8 (invalid bytes replaced).
    pub text: String,
}

/// Opens `dir/<id>.log` without following a symlink; `None` when either is
/// missing.
fn open_log(dir: &Path, id: JobId) -> std::io::Result<Option<std::fs::File>> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dirfd = match rustix::fs::open(dir, flags | OFlags::DIRECTORY, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let name = crate::logfile::log_file_name(id);
    let fd = match rustix::fs::openat(&dirfd, &name, flags | OFlags::NONBLOCK, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not a regular file"));
    }
    Ok(Some(file))
}

/// Up to `limit` bytes of job `id`'s log in `dir` from `offset`, or its
/// last `limit` bytes without one (or with one past the end of a log that
/// was since rewritten).
pub fn read_log_piece(
    dir: &Path,
    id: JobId,
    offset: Option<u64>,
    limit: u64,
) -> std::io::Result<LogPiece> {
    let Some(mut file) = open_log(dir, id)? else {
        let start = offset.unwrap_or(0);
        return Ok(LogPiece {
            exists: false,
            size: 0,
            start,
            next_offset: start,
            text: String::new(),
        });
    };
    let size = file.metadata()?.len();
    let tail = size.saturating_sub(limit);
    let start = match offset {
        Some(o) if o <= size => o,
        _ => tail,
    };
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    let mut begin = 0;
    if offset != Some(start) {
        // A tail starts wherever the size put it: skip the rest of a
        // character cut in two.
        while begin < bytes.len() && begin < 3 && (bytes[begin] & 0b1100_0000) == 0b1000_0000 {
            begin += 1;
        }
    }
    let mut end = bytes.len();
    if let Err(e) = std::str::from_utf8(&bytes[begin..]) {
        if e.error_len().is_none() {
            // The last character is not all here yet: leave it for next time.
            end = begin + e.valid_up_to();
        }
    }
    let text = String::from_utf8_lossy(&bytes[begin..end]).into_owned();
    Ok(LogPiece {
        exists: true,
        size,
        start: start + begin as u64,
        next_offset: start + end as u64,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::Mode;

    #[test]
    fn a_log_is_read_from_an_offset_and_its_tail_without_one() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!read_log_piece(dir.path(), 1, None, 10).unwrap().exists);
        std::fs::write(dir.path().join("1.log"), "hello\nworld\n").unwrap();
        let all = read_log_piece(dir.path(), 1, Some(0), 100).unwrap();
        assert_eq!((all.start, all.next_offset, all.size), (0, 12, 12));
        assert_eq!(all.text, "hello\nworld\n");
        let tail = read_log_piece(dir.path(), 1, None, 6).unwrap();
        assert_eq!((tail.start, tail.text.as_str()), (6, "world\n"));
        let more = read_log_piece(dir.path(), 1, Some(12), 100).unwrap();
        assert_eq!((more.start, more.next_offset, more.text.as_str()), (12, 12, ""));
        let rewritten = read_log_piece(dir.path(), 1, Some(99), 100).unwrap();
        assert_eq!(rewritten.start, 0, "an offset past the end starts over");
    }

    #[test]
    fn a_character_cut_in_two_is_never_split() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("2.log"), "aé").unwrap(); // 61 c3 a9
        let first = read_log_piece(dir.path(), 2, Some(0), 2).unwrap();
        assert_eq!((first.text.as_str(), first.next_offset), ("a", 1));
        let next = read_log_piece(dir.path(), 2, Some(1), 2).unwrap();
        assert_eq!((next.text.as_str(), next.next_offset), ("é", 3));
        let tail = read_log_piece(dir.path(), 2, None, 1).unwrap();
        assert_eq!((tail.text.as_str(), tail.start), ("", 3));
    }

    #[test]
    fn symlinks_and_fifos_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "do not read").unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        std::os::unix::fs::symlink(&secret, logs.join("3.log")).unwrap();
        assert!(read_log_piece(&logs, 3, None, 100).is_err());
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(&logs, &linked).unwrap();
        std::fs::write(logs.join("4.log"), "fine").unwrap();
        assert!(read_log_piece(&logs, 4, None, 100).is_ok());
        assert!(read_log_piece(&linked, 4, None, 100).is_err(), "the directory is no link either");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            logs.join("5.log"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(read_log_piece(&logs, 5, None, 100).is_err());
    }
}
