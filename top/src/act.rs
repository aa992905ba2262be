//! The actions a key asks for, each through the store operation the CLI's
//! command of the same name calls (`cancel`, `retry`, `hold`, `release`,
//! `pause`, `resume`): no rule is decided here, only the outcome worded
//! for the message line.

use slothqueue::core::{LaneChange, LaneScope, Stamp};
use slothqueue::{JobState, Store, Timestamp};

use crate::model::Action;

/// Performs `action` as `by` at `now`, and says what happened (or why
/// not) in one line.
pub async fn perform(store: &dyn Store, action: &Action, by: &str, now: Timestamp) -> String {
    match action {
        Action::Cancel(id) => match store.cancel(*id, now).await {
            Ok(job) if job.state == JobState::Cancelled => format!("cancelled job #{id}"),
            Ok(_) => {
                format!("cancel requested for job #{id}: its runner stops it at the next heartbeat")
            }
            Err(e) => format!("cannot cancel job #{id}: {e}"),
        },
        Action::Retry(id) => match store.retry(*id, now).await {
            Ok(_) => format!("job #{id} is pending again (attempts reset)"),
            Err(e) => format!("cannot retry job #{id}: {e}"),
        },
        Action::Hold(id) => {
            let mine = Stamp::new(by, now);
            match store.hold(*id, mine.clone(), now).await {
                Ok(job) if job.held.as_ref() == Some(&mine) => {
                    format!("held #{id} (h releases it)")
                }
                Ok(_) => format!("#{id} was already held"),
                Err(e) => format!("cannot hold job #{id}: {e}"),
            }
        }
        Action::Release(id) => match store.release_hold(*id, by, now).await {
            Ok(_) => format!("released #{id}"),
            Err(e) => format!("cannot release job #{id}: {e}"),
        },
        Action::Pause(queue) => {
            let scope = scope(queue);
            match store.change_lane(&scope, &LaneChange::Pause(Stamp::new(by, now))).await {
                Ok(_) => match queue {
                    Some(q) => format!("paused queue {q}: no new job of it starts (p resumes it)"),
                    None => "paused every queue: no new job starts (P resumes)".to_owned(),
                },
                Err(e) => format!("cannot pause {scope}: {e}"),
            }
        }
        Action::Resume(queue) => {
            let scope = scope(queue);
            match store.change_lane(&scope, &LaneChange::Resume).await {
                Ok(_) => format!("resumed {scope}"),
                Err(e) => format!("cannot resume {scope}: {e}"),
            }
        }
    }
}

fn scope(queue: &Option<String>) -> LaneScope {
    match queue {
        Some(q) => LaneScope::Queue(q.clone()),
        None => LaneScope::All,
    }
}
