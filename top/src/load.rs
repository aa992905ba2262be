//! One read of the queue for the frame: `status`'s facts, the queues, the
//! job list the filters let through, and the open job as `show` sees it
//! with the end of its log. Every fact comes from the read model
//! (`slothqueue_view`) or a plain store read; the log through
//! `runner::read_log_piece`, the one log reader.

use std::path::Path;

use slothqueue::runner::read_log_piece;
use slothqueue::{Job, JobId, StoreError};
use slothqueue_view::{Look, ViewError};

use crate::error::{TopError, read as named};
use crate::model::{Detail, Filters, LOG_KEPT, LogTail, Screen, Snapshot};

/// The most jobs the list holds (a screen shows a few dozen; the rest are
/// there to scroll to).
pub const LISTED: usize = 500;

/// Reads what the frame shows for `screen` and `filters`; `log` is the
/// open job's log as last read, which this read follows on.
pub async fn snapshot(
    look: &Look<'_>,
    screen: Screen,
    filters: &Filters,
    log_dir: &Path,
    log: Option<(JobId, LogTail)>,
) -> Result<Snapshot, TopError> {
    let status = slothqueue_view::status(look).await?;
    let queues = look.store.queues(look.now).await.map_err(named("cannot read the queues"))?;
    let (jobs, more) = jobs(look, filters).await?;
    let detail = match screen {
        Screen::List => None,
        Screen::Job(id) => Some(detail(look, id, log_dir, log).await?),
    };
    Ok(Snapshot { now: look.now, status, queues, jobs, more, detail })
}

/// The jobs `filters` let through, newest first, at most [`LISTED`]; and
/// whether more matched. The store answers every filter in its query.
async fn jobs(look: &Look<'_>, filters: &Filters) -> Result<(Vec<Job>, bool), TopError> {
    let mut jobs = look
        .store
        .list(&filters.list_filter(LISTED + 1))
        .await
        .map_err(named("cannot list the jobs"))?;
    let more = jobs.len() > LISTED;
    jobs.truncate(LISTED);
    Ok((jobs, more))
}

/// The open job as `show` sees it, and its log followed from `log`.
async fn detail(
    look: &Look<'_>,
    id: JobId,
    log_dir: &Path,
    log: Option<(JobId, LogTail)>,
) -> Result<Detail, TopError> {
    let view = match slothqueue_view::job(look, id).await {
        Ok(v) => v,
        Err(ViewError::Store(StoreError::NotFound(_))) => return Ok(Detail::Missing(id)),
        Err(e) => return Err(e.into()),
    };
    let before = log.filter(|(of, _)| *of == id).map(|(_, t)| t);
    Ok(Detail::Found { view: Box::new(view), log: follow_log(log_dir, id, before) })
}

/// The end of job `id`'s log: what `before` held and what was written
/// since, or the last [`LOG_KEPT`] bytes when read for the first time (or
/// when the log was rewritten shorter).
pub fn follow_log(log_dir: &Path, id: JobId, before: Option<LogTail>) -> LogTail {
    let offset = before.as_ref().filter(|t| t.exists).map(|t| t.next_offset);
    match read_log_piece(log_dir, id, offset, LOG_KEPT as u64) {
        Ok(piece) => {
            let mut tail = match before {
                Some(t) if offset == Some(piece.start) => t,
                _ => LogTail::default(),
            };
            tail.exists = piece.exists;
            tail.error = None;
            tail.push(&piece.text, piece.next_offset);
            tail
        }
        Err(e) => {
            LogTail { error: Some(format!("cannot read its log: {e}")), ..LogTail::default() }
        }
    }
}
