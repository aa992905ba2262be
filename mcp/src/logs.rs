//! A piece of a job's log, bounded: the file the runner writes and
//! `slothqueue logs` reads (`runner::log_path` in the queue's log folder),
//! read from an offset or as its tail, at most a chunk at a time, so an
//! agent never pulls the whole 1 MiB log into its context unless it pages
//! through it on purpose.
//!
//! The file is opened without following a symlink and without blocking on
//! a FIFO, and must be a regular file (the HTTP log route's rule): a link
//! planted in the log folder cannot make the server read another file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use slothqueue::JobId;

/// Bytes one answer holds unless the client asks for fewer.
pub const DEFAULT_CHUNK: u64 = 16 * 1024;
/// The most bytes one answer may hold.
pub const MAX_CHUNK: u64 = 256 * 1024;

/// What was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Whether the log exists.
    pub exists: bool,
    /// The log's size when read.
    pub size: u64,
    /// The byte the text starts at.
    pub start: u64,
    /// Where the next read starts.
    pub next_offset: u64,
    /// The bytes read, as UTF-8 (invalid bytes replaced).
    pub text: String,
}

/// Opens the log; `None` when it does not exist.
fn open(dir: &Path, id: JobId) -> std::io::Result<Option<File>> {
    use rustix::fs::{Mode, OFlags};
    let path = slothqueue::runner::log_path(dir, id);
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = match rustix::fs::open(&path, flags, Mode::empty()) {
        Ok(fd) => File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(Some(file))
}

/// Up to `limit` bytes of job `id`'s log from `offset`, or its last
/// `limit` bytes without one (or with one past the end of a log that was
/// since rewritten); with `lines`, only the last that many lines of what
/// was read. A character cut by the chunk's end is left for the next read.
pub fn read(
    dir: &Path,
    id: JobId,
    offset: Option<u64>,
    limit: u64,
    lines: Option<u32>,
) -> std::io::Result<Chunk> {
    let Some(mut file) = open(dir, id)? else {
        return Ok(Chunk { exists: false, size: 0, start: 0, next_offset: 0, text: String::new() });
    };
    let size = file.metadata()?.len();
    let limit = limit.clamp(1, MAX_CHUNK);
    let start = match offset {
        Some(o) if o <= size => o,
        _ => size.saturating_sub(limit),
    };
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    // Leave a character cut by the end for the next read.
    let keep = match std::str::from_utf8(&bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    bytes.truncate(keep);
    let next_offset = start + bytes.len() as u64;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    let mut start = start;
    if let Some(n) = lines {
        let cut = tail_lines(&text, n as usize);
        start += cut as u64;
        text = text[cut..].to_owned();
    }
    Ok(Chunk { exists: true, size, start, next_offset, text })
}

/// The byte where the last `n` lines of `text` start (a final newline
/// ends the last line, it does not start another).
fn tail_lines(text: &str, n: usize) -> usize {
    if n == 0 {
        return text.len();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.rmatch_indices('\n').nth(n - 1).map_or(0, |(i, _)| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_are_cut_at_a_line_start() {
        assert_eq!(tail_lines("a\nb\nc\n", 2), 2);
        assert_eq!(tail_lines("a\nb\nc", 1), 4);
        assert_eq!(tail_lines("a\nb\n", 5), 0);
        assert_eq!(tail_lines("a\n", 0), 2);
    }

    #[test]
    fn a_tail_a_page_and_a_missing_log() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read(dir.path(), 1, None, 10, None).unwrap();
        assert!(!missing.exists);
        std::fs::write(slothqueue::runner::log_path(dir.path(), 1), "one\ntwo\nthree\n").unwrap();
        let tail = read(dir.path(), 1, None, 6, None).unwrap();
        assert_eq!((tail.start, tail.next_offset, tail.text.as_str()), (8, 14, "three\n"));
        let page = read(dir.path(), 1, Some(0), 4, None).unwrap();
        assert_eq!((page.text.as_str(), page.next_offset), ("one\n", 4));
        let lines = read(dir.path(), 1, Some(0), 100, Some(1)).unwrap();
        assert_eq!((lines.text.as_str(), lines.start), ("three\n", 8));
    }

    #[test]
    fn a_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "key").unwrap();
        std::os::unix::fs::symlink(&secret, slothqueue::runner::log_path(dir.path(), 2)).unwrap();
        assert!(read(dir.path(), 2, None, 10, None).is_err());
    }
}
