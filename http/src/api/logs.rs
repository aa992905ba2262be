//! `GET /api/tasks/outbox/{id}/log`: a job's log from a byte offset, so a
//! client (the web page) can follow it while it grows.
//!
//! The log is the file the server's worker writes and `slothqueue logs`
//! reads: `<id>.log` in `<queue>.logs`. It is opened without following a
//! symlink, neither the directory nor the file (each opened by its own
//! descriptor, the file relative to the directory's), and must be a regular
//! file: a link planted there cannot make the server read anything else,
//! and a FIFO cannot hang it.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use axum::Json;
use axum::extract::State;
use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use slothqueue_core::JobId;

use crate::extract::{IdParam, QueryParams};
use crate::{AppState, HttpError};

/// The most bytes one answer holds unless the client asks for fewer.
pub(crate) const DEFAULT_LOG_CHUNK: u64 = 64 * 1024;
/// The most bytes one answer may hold.
pub(crate) const MAX_LOG_CHUNK: u64 = 1024 * 1024;

/// The query: where to start and how much at most.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogQuery {
    offset: Option<String>,
    limit: Option<String>,
}

/// A piece of a job's log.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct LogChunk {
    id: JobId,
    /// Whether the log file exists (no attempt has started, or it was
    /// purged, when not).
    exists: bool,
    /// The log's size now, in bytes.
    size: u64,
    /// The byte offset `text` starts at: the asked offset, or, without one
    /// (or past the end of a log that was since rewritten), the start of
    /// its last `limit` bytes.
    start: u64,
    /// Where the next request should start.
    next_offset: u64,
    /// The bytes read, as UTF-8 (invalid bytes replaced); a character cut
    /// by the end of the chunk is left for the next one.
    text: String,
}

fn number(raw: Option<&str>, what: &str, max: u64) -> Result<Option<u64>, HttpError> {
    raw.map(|r| {
        r.parse::<u64>().ok().filter(|n| *n <= max).ok_or_else(|| {
            HttpError::BadRequest(format!("{what} must be a whole number from 0 to {max}"))
        })
    })
    .transpose()
}

/// The handler.
pub(crate) async fn log(
    State(app): State<AppState>,
    IdParam(id): IdParam,
    QueryParams(q): QueryParams<LogQuery>,
) -> Result<Json<LogChunk>, HttpError> {
    let offset = number(q.offset.as_deref(), "offset", i64::MAX as u64)?;
    let limit = number(q.limit.as_deref(), "limit", MAX_LOG_CHUNK)?
        .filter(|l| *l > 0)
        .unwrap_or(DEFAULT_LOG_CHUNK);
    // A job that does not exist is a 404, whatever files lie about.
    app.store.get(id).await?;
    let Some(dir) = app.api.log_dir.clone() else {
        return Err(HttpError::NotFound(
            "this server does not know where job logs are kept".to_owned(),
        ));
    };
    let read = tokio::task::spawn_blocking(move || read_chunk(&dir, id, offset, limit)).await;
    match read {
        Ok(Ok(chunk)) => Ok(Json(chunk)),
        Ok(Err(e)) => Err(HttpError::Conflict(format!("cannot read the log of job #{id}: {e}"))),
        Err(_) => Err(HttpError::Internal),
    }
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
    let name = slothqueue_runner::log_file_name(id);
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

/// Up to `limit` bytes of job `id`'s log from `offset` (its tail without).
pub(crate) fn read_chunk(
    dir: &Path,
    id: JobId,
    offset: Option<u64>,
    limit: u64,
) -> std::io::Result<LogChunk> {
    let Some(mut file) = open_log(dir, id)? else {
        let start = offset.unwrap_or(0);
        return Ok(LogChunk {
            id,
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
    Ok(LogChunk {
        id,
        exists: true,
        size,
        start: start + begin as u64,
        next_offset: start + end as u64,
        text,
    })
}

/// The OpenAPI operation.
pub(crate) fn op_log() -> Value {
    json!({
        "operationId": "jobLog",
        "summary": "a piece of a job's log (its stdout and stderr as the worker wrote them): from `offset`, or its last bytes; follow a running job by asking again from `next_offset`",
        "parameters": [
            super::id_param(),
            {
                "name": "offset", "in": "query", "required": false,
                "schema": { "type": "integer", "minimum": 0 },
                "description": "the byte to start at (a `next_offset`); absent, or past the end of a log that was rewritten: the last `limit` bytes"
            },
            {
                "name": "limit", "in": "query", "required": false,
                "schema": { "type": "integer", "minimum": 1, "maximum": MAX_LOG_CHUNK, "default": DEFAULT_LOG_CHUNK },
                "description": "the most bytes to answer with"
            }
        ],
        "responses": super::responses(
            &[("200", json!({
                "description": "the piece (empty, `exists` false, before the job's first attempt)",
                "content": { "application/json": { "schema": {
                    "type": "object",
                    "properties": {
                        "id": { "type": "integer", "format": "int64" },
                        "exists": { "type": "boolean" },
                        "size": { "type": "integer", "description": "the log's size now, in bytes" },
                        "start": { "type": "integer", "description": "the byte offset `text` starts at" },
                        "next_offset": { "type": "integer", "description": "where to ask next" },
                        "text": { "type": "string", "description": "the bytes as UTF-8, invalid ones replaced" }
                    },
                    "required": ["id", "exists", "size", "start", "next_offset", "text"]
                } } }
            }))],
            &["400", "401", "403", "404", "405", "409", "413", "415", "503"],
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_read_from_an_offset_and_its_tail_without_one() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!read_chunk(dir.path(), 1, None, 10).unwrap().exists);
        std::fs::write(dir.path().join("1.log"), "hello\nworld\n").unwrap();
        let all = read_chunk(dir.path(), 1, Some(0), 100).unwrap();
        assert_eq!((all.start, all.next_offset, all.size), (0, 12, 12));
        assert_eq!(all.text, "hello\nworld\n");
        let tail = read_chunk(dir.path(), 1, None, 6).unwrap();
        assert_eq!((tail.start, tail.text.as_str()), (6, "world\n"));
        let more = read_chunk(dir.path(), 1, Some(12), 100).unwrap();
        assert_eq!((more.start, more.next_offset, more.text.as_str()), (12, 12, ""));
        let rewritten = read_chunk(dir.path(), 1, Some(99), 100).unwrap();
        assert_eq!(rewritten.start, 0, "an offset past the end starts over");
    }

    #[test]
    fn a_character_cut_in_two_is_never_split() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("2.log"), "aé").unwrap(); // 61 c3 a9
        let first = read_chunk(dir.path(), 2, Some(0), 2).unwrap();
        assert_eq!((first.text.as_str(), first.next_offset), ("a", 1));
        let next = read_chunk(dir.path(), 2, Some(1), 2).unwrap();
        assert_eq!((next.text.as_str(), next.next_offset), ("é", 3));
        let tail = read_chunk(dir.path(), 2, None, 1).unwrap();
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
        assert!(read_chunk(&logs, 3, None, 100).is_err());
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(&logs, &linked).unwrap();
        std::fs::write(logs.join("4.log"), "fine").unwrap();
        assert!(read_chunk(&logs, 4, None, 100).is_ok());
        assert!(read_chunk(&linked, 4, None, 100).is_err(), "the directory is no link either");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            logs.join("5.log"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(read_chunk(&logs, 5, None, 100).is_err());
    }
}
