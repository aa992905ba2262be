//! Why the lanes hold due jobs, from the read-only queues report a runner
//! reads when a claim took nothing though something was due: which lanes
//! (paused, or at their limit) hold due jobs of the queues it serves, what
//! that changed since the last report, and the line it reports. Pure.

use slothqueue_core::QueuesReport;

use crate::event::{LaneBlock, LaneHold};
use crate::run::decide::Blocked;

/// The lanes holding due jobs of `served` (every queue when empty): the
/// pause of every queue first (then no queue is named on its own), then
/// each paused or full queue by name.
pub(super) fn blocks(report: &QueuesReport, served: &[String]) -> Vec<LaneBlock> {
    let ours = report
        .queues
        .iter()
        .filter(|q| q.counts.due > 0)
        .filter(|q| served.is_empty() || served.contains(&q.counts.queue));
    if report.all_paused.is_some() {
        let due: u64 = ours.map(|q| q.counts.due).sum();
        if due == 0 {
            return Vec::new();
        }
        return vec![LaneBlock { queue: None, hold: LaneHold::Paused, due }];
    }
    ours.filter_map(|q| {
        let hold = if q.paused.is_some() {
            LaneHold::Paused
        } else if q.limit > 0 && q.counts.running >= u64::from(q.limit) {
            LaneHold::Full { running: q.counts.running, limit: q.limit }
        } else {
            return None;
        };
        Some(LaneBlock { queue: Some(q.counts.queue.clone()), hold, due: q.counts.due })
    })
    .collect()
}

/// The blocked lanes' names (`""` for every queue), to compare with the
/// next report.
pub(super) fn names(blocks: &[LaneBlock]) -> Vec<String> {
    blocks.iter().map(|b| b.queue.clone().unwrap_or_default()).collect()
}

/// What the lanes say now, given the lanes blocked at the last report
/// (`before`, empty when there was none since the last change): a lane
/// that held due jobs and no longer does has opened (claim again); else
/// the lanes wait on a full lane, or only on paused ones, or hold nothing.
pub(super) fn classify(before: &[String], now: &[LaneBlock]) -> Blocked {
    let names = names(now);
    if before.iter().any(|b| !names.contains(b)) {
        return Blocked::Opened;
    }
    if now.is_empty() {
        return Blocked::None;
    }
    if now.iter().any(|b| matches!(b.hold, LaneHold::Full { .. })) {
        Blocked::Full
    } else {
        Blocked::PausedOnly
    }
}

/// The runner record's reading while lanes hold the next start.
pub(super) fn reading(blocks: &[LaneBlock]) -> String {
    blocks.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use slothqueue_core::{QueueCounts, QueueInfo, Stamp, Timestamp};

    fn lane(name: &str, due: u64, running: u64, limit: u32, paused: bool) -> QueueInfo {
        QueueInfo {
            counts: QueueCounts {
                queue: name.into(),
                pending: due,
                due,
                running,
                ..QueueCounts::default()
            },
            limit,
            paused: paused.then(|| Stamp::new("ana", Timestamp::from_millis(1))),
        }
    }

    fn report(queues: Vec<QueueInfo>, all: bool) -> QueuesReport {
        QueuesReport {
            all_paused: all.then(|| Stamp::new("ana", Timestamp::from_millis(1))),
            queues,
        }
    }

    #[test]
    fn only_lanes_holding_due_jobs_we_serve_count() {
        let r = report(
            vec![
                lane("backups", 3, 0, 0, true),
                lane("disk", 5, 2, 2, false),
                lane("open", 4, 1, 2, false),
                lane("idle", 0, 0, 0, true),
            ],
            false,
        );
        let all = blocks(&r, &[]);
        assert_eq!(
            reading(&all),
            "queue backups paused — 3 due jobs waiting; \
             queue disk full: 2 of 2 running — 5 due jobs waiting"
        );
        assert_eq!(names(&all), ["backups", "disk"]);
        assert_eq!(names(&blocks(&r, &["disk".into()])), ["disk"]);
        assert!(blocks(&r, &["open".into()]).is_empty());
    }

    #[test]
    fn the_pause_of_every_queue_is_one_line() {
        let r = report(vec![lane("a", 3, 0, 0, false), lane("b", 1, 0, 0, true)], true);
        assert_eq!(reading(&blocks(&r, &[])), "every queue paused — 4 due jobs waiting");
        assert_eq!(names(&blocks(&r, &[])), [""]);
        let nothing_due = report(vec![lane("a", 0, 0, 0, false)], true);
        assert!(blocks(&nothing_due, &[]).is_empty());
    }

    #[test]
    fn what_changed_since_the_last_report() {
        let paused = LaneBlock { queue: Some("b".into()), hold: LaneHold::Paused, due: 1 };
        let full = LaneBlock {
            queue: Some("d".into()),
            hold: LaneHold::Full { running: 1, limit: 1 },
            due: 1,
        };
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(classify(&[], &[]), Blocked::None);
        assert_eq!(classify(&[], std::slice::from_ref(&paused)), Blocked::PausedOnly);
        assert_eq!(classify(&[], &[paused.clone(), full.clone()]), Blocked::Full);
        assert_eq!(classify(&s(&["b"]), std::slice::from_ref(&paused)), Blocked::PausedOnly);
        assert_eq!(classify(&s(&["b"]), &[]), Blocked::Opened);
        assert_eq!(classify(&s(&["b", "d"]), std::slice::from_ref(&full)), Blocked::Opened);
        assert_eq!(classify(&s(&["d"]), &[full, paused]), Blocked::Full);
    }
}
