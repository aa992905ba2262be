//! A piece of a job's log for an agent: the runner's bounded reader
//! (`runner::read_log_piece`, the HTTP log route's too: no symlink
//! followed, a regular file only, no character split) with a chunk size
//! an agent's context can hold, and an optional cut to the last lines, so
//! an agent never pulls the whole 1 MiB log in unless it pages through it
//! on purpose.

use std::path::Path;

use slothqueue::JobId;

/// Bytes one answer holds unless the client asks for fewer.
pub const DEFAULT_CHUNK: u64 = 16 * 1024;
/// The most bytes one answer may hold.
pub const MAX_CHUNK: u64 = 256 * 1024;

/// What was read.
pub type Chunk = slothqueue::runner::LogPiece;

/// Up to `limit` bytes of job `id`'s log from `offset`, or its last
/// `limit` bytes without one (or with one past the end of a log that was
/// since rewritten); with `lines`, only the last that many lines of what
/// was read.
pub fn read(
    dir: &Path,
    id: JobId,
    offset: Option<u64>,
    limit: u64,
    lines: Option<u32>,
) -> std::io::Result<Chunk> {
    let mut chunk = slothqueue::runner::read_log_piece(dir, id, offset, limit.clamp(1, MAX_CHUNK))?;
    if let Some(n) = lines {
        let cut = tail_lines(&chunk.text, n as usize);
        chunk.start += cut as u64;
        chunk.text = chunk.text.split_off(cut);
    }
    Ok(chunk)
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
