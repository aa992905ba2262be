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
        } else if q.is_full() {
            LaneHold::Full { running: q.counts.running, limit: q.limit }
        } else {
            return None;
        };
        Some(LaneBlock { queue: Some(q.counts.queue.clone()), hold, due: q.counts.due })
    })
    .collect()
}

/// What one report said, to compare the next one with: the lanes it found
/// holding due jobs (by name, `""` for every queue), and how many due jobs
/// of the queues served sat in lanes that were open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Sight {
    blocked: Vec<String>,
    open_due: u64,
}

impl Sight {
    /// What `report` says for a runner serving `served`, with `blocks` its
    /// [`blocks`].
    pub(super) fn of(report: &QueuesReport, served: &[String], blocks: &[LaneBlock]) -> Sight {
        let blocked: Vec<String> =
            blocks.iter().map(|b| b.queue.clone().unwrap_or_default()).collect();
        let open_due = if report.all_paused.is_some() {
            0
        } else {
            report
                .queues
                .iter()
                .filter(|q| served.is_empty() || served.contains(&q.counts.queue))
                .filter(|q| !blocked.contains(&q.counts.queue))
                .map(|q| q.counts.due)
                .sum()
        };
        Sight { blocked, open_due }
    }
}

/// What the lanes say now (`now`, with `blocks` its lanes), given what the
/// last report since the last change said (`before`): the lanes have
/// opened (claim again) when a lane that held due jobs no longer does, or
/// when more due jobs sit in open lanes than before (a job added to
/// another queue while this runner waits on a paused one; with no report
/// before, any at all: one more claim finds out whether they are ours, and
/// the next report, seeing the same count, waits instead of claiming
/// again); else the lanes wait on a full lane, or only on paused ones, or
/// hold nothing.
pub(super) fn classify(before: Option<&Sight>, now: &Sight, blocks: &[LaneBlock]) -> Blocked {
    let opened = match before {
        Some(b) => b.blocked.iter().any(|q| !now.blocked.contains(q)) || now.open_due > b.open_due,
        None => now.open_due > 0,
    };
    if opened {
        return Blocked::Opened;
    }
    if blocks.is_empty() {
        return Blocked::None;
    }
    if blocks.iter().any(|b| matches!(b.hold, LaneHold::Full { .. })) {
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

    fn names(blocks: &[LaneBlock]) -> Vec<String> {
        blocks.iter().map(|b| b.queue.clone().unwrap_or_default()).collect()
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
        let sight = |r: &QueuesReport| Sight::of(r, &[], &blocks(r, &[]));
        let paused_b = report(vec![lane("b", 1, 0, 0, true)], false);
        let both = report(vec![lane("b", 1, 0, 0, true), lane("d", 1, 1, 1, false)], false);
        let full_d = report(vec![lane("b", 0, 0, 0, true), lane("d", 1, 1, 1, false)], false);
        let nothing = report(vec![], false);
        let class = |before: Option<&QueuesReport>, now: &QueuesReport| {
            classify(before.map(sight).as_ref(), &sight(now), &blocks(now, &[]))
        };
        assert_eq!(class(None, &nothing), Blocked::None);
        assert_eq!(class(None, &paused_b), Blocked::PausedOnly);
        assert_eq!(class(None, &both), Blocked::Full);
        assert_eq!(class(Some(&paused_b), &paused_b), Blocked::PausedOnly);
        assert_eq!(class(Some(&paused_b), &nothing), Blocked::Opened);
        assert_eq!(class(Some(&both), &full_d), Blocked::Opened);
        assert_eq!(class(Some(&full_d), &both), Blocked::Full);
    }

    #[test]
    fn a_job_due_in_an_open_lane_opens_a_wait_on_a_paused_one() {
        let sight = |r: &QueuesReport| Sight::of(r, &[], &blocks(r, &[]));
        let waiting = report(vec![lane("b", 1, 0, 0, true), lane("web", 0, 0, 0, false)], false);
        let added = report(vec![lane("b", 1, 0, 0, true), lane("web", 1, 0, 0, false)], false);
        let now = sight(&added);
        let blocks_now = blocks(&added, &[]);
        assert_eq!(classify(Some(&sight(&waiting)), &now, &blocks_now), Blocked::Opened);
        // The same count again (a job of a kind we cannot run): no second claim.
        assert_eq!(classify(Some(&now), &now, &blocks_now), Blocked::PausedOnly);
        // A queue we do not serve does not count.
        let served = ["b".to_owned()];
        let ours = Sight::of(&added, &served, &blocks(&added, &served));
        assert_eq!(ours.open_due, 0);
    }
}
