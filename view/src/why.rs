//! **Why a job is not running yet, or who is running it**: the one line
//! every face shows for a job that is not finished (`show`'s `why:`, the
//! JSON and HTTP `why`, the page).
//!
//! The answer is the first of these that holds, because each hides the
//! ones after it: held by a user; waiting on parents not done yet; not due
//! yet; its lane paused or full; no runner alive; a runner held by its
//! gate; jobs ahead of it; the runner busy with another job. A pure
//! function of what [`mod@crate::job`] read from the store and what the
//! liveness judge said. A job that a dependency's failure cancelled gets a
//! line too: why, and which `retry` brings it back.

use slothqueue_core::serving::{self, Coverage};
use slothqueue_core::{
    Job, JobState, LaneVerdict, Lanes, Liveness, RunnerActivity, SHELL_KIND, Timestamp,
};

use crate::RunnerView;
use crate::words::{self, activity, format_span, local, runner_name};

/// Everything the explanation depends on.
#[derive(Debug)]
pub struct Situation<'a> {
    /// The job.
    pub job: &'a Job,
    /// Now.
    pub now: Timestamp,
    /// Due pending jobs that claims take before this one.
    pub ahead: usize,
    /// Of them, those of a higher priority (the others have the same one
    /// and come first by the claim order's next keys: due earlier, or
    /// added earlier; `Job::claim_order`).
    pub ahead_higher: usize,
    /// Every recorded runner, judged.
    pub runners: &'a [RunnerView],
    /// The judge's verdict on the job's lease owner (running jobs).
    pub lease_owner: Liveness,
    /// This host's name.
    pub this_host: &'a str,
    /// The job's parents as the store has them now (purged ones left out).
    pub parents: &'a [Job],
    /// Every lane's settings.
    pub lanes: &'a Lanes,
    /// What the job's lane says of a new start now.
    pub lane: LaneVerdict,
    /// The running jobs, read for a pending job that needs GPUs only
    /// (whose GPUs they hold, on which host).
    pub running: &'a [Job],
}

/// The line, or `None` for a finished job (but one a dependency cancelled).
pub fn why(s: &Situation<'_>) -> Option<String> {
    let job = s.job;
    match job.state {
        JobState::Running => Some(running(s)),
        JobState::Pending => Some(pending(s)),
        JobState::Cancelled => words::cancelled_by(job).map(|b| format!("cancelled {b}")),
        _ => None,
    }
}

fn running(s: &Situation<'_>) -> String {
    let job = s.job;
    let Some(lease) = &job.lease else {
        return "running, but without a lease: the next claim takes it".to_owned();
    };
    let who = runner_name(&lease.owner, s.this_host);
    let until = local(lease.until, s.now);
    let mut line = match s.lease_owner {
        Liveness::Alive => format!("held by {who} (alive), lease until {until}"),
        Liveness::Gone => {
            format!("held by {who}, which is gone: the next runner reclaims it at once")
        }
        Liveness::Unknown if lease.until < s.now => format!(
            "held by {who} (cannot be checked from here); its lease expired at {until}, so the next claim reclaims it"
        ),
        Liveness::Unknown => {
            format!("held by {who} (cannot be checked from here), lease until {until}")
        }
    };
    if job.cancel_requested {
        line.push_str(match s.lease_owner {
            Liveness::Gone => {
                "; cancel requested: the next runner ends it (cancelled) as it reclaims it"
            }
            _ => "; cancel requested, the runner stops it at its next heartbeat",
        });
    }
    line
}

fn pending(s: &Situation<'_>) -> String {
    let job = s.job;
    if let Some(h) = job.held.as_ref() {
        let mut line = format!(
            "held {} — `slothqueue release {}` lets it run",
            words::stamp(h, s.now),
            job.id
        );
        if job.is_waiting_on_parents() {
            line.push_str(&format!(" (it also waits: {})", words::waiting_on(job, s.parents)));
        }
        return line;
    }
    if job.is_waiting_on_parents() {
        return words::waiting_on(job, s.parents);
    }
    if job.not_before > s.now {
        let why = if job.attempts > 0 { "retrying: not due until" } else { "not due until" };
        return format!(
            "{why} {} (in {})",
            local(job.not_before, s.now),
            format_span(job.not_before.duration_since(s.now))
        );
    }
    if let Some(line) = words::lane_reason(&job.queue, &s.lane, s.lanes, s.now) {
        return line;
    }
    let alive: Vec<&RunnerView> = s.runners.iter().filter(|r| r.live).collect();
    let live: Vec<&RunnerView> = alive
        .iter()
        .copied()
        .filter(|r| r.record.serves_queue(&job.queue) && r.record.runs_kind(&job.kind))
        .collect();
    let ahead = match (s.ahead, s.ahead_higher) {
        (0, _) => String::new(),
        (n, higher) if higher >= n => format!("waiting behind {n} due job(s) of higher priority"),
        (n, 0) => format!(
            "waiting behind {n} due job(s) ahead of it in the queue (the same priority, due or added earlier)"
        ),
        (n, higher) => format!(
            "waiting behind {n} due job(s): {higher} of higher priority, {} of the same priority due or added earlier",
            n - higher
        ),
    };
    let coverage = serving::coverage(&job.queue, &job.kind, alive.iter().map(|r| &r.record));
    // A plain `run` runs shell jobs only: another kind needs its handler,
    // and a runner refuses one that another user could change.
    let handler = |kind: &str| {
        format!(
            "--handlers DIR, where DIR/{kind} is an executable of yours that nobody else can write"
        )
    };
    if let Coverage::NoHandler { kind } = &coverage {
        // A live runner of its queue that found the handler and refused it
        // said why in its record: the exact reason, not the general one.
        let refusal = alive.iter().filter(|r| r.record.serves_queue(&job.queue)).find_map(|r| {
            r.record.refused.iter().find(|x| &x.kind == kind).map(|x| (&r.record.owner, &x.why))
        });
        if let Some((owner, why)) = refusal {
            return format!(
                "{coverage}: {} refused it: {why}; fix that and restart the runner",
                runner_name(owner, s.this_host)
            );
        }
        return format!(
            "{coverage}: no live runner of its queue has one; start one with {}",
            handler(kind)
        );
    }
    if live.is_empty() {
        // Runners alive, but none takes its queue: say so, not "none alive".
        let shell = job.kind == SHELL_KIND;
        let start = match (alive.is_empty(), shell) {
            (true, true) => {
                "no runner is alive: it runs when one starts (slothqueue run)".to_owned()
            }
            (true, false) => format!(
                "no runner is alive: it runs when one with a handler for kind {} starts (slothqueue run {})",
                job.kind,
                handler(&job.kind)
            ),
            (false, true) => format!(
                "{coverage}: it runs when one that does starts (slothqueue run --queue {})",
                job.queue
            ),
            (false, false) => format!(
                "{coverage}: it runs when one that does starts (slothqueue run --queue {} {})",
                job.queue,
                handler(&job.kind)
            ),
        };
        return if ahead.is_empty() { start } else { format!("{ahead}; {start}") };
    }
    if let Some(gated) =
        live.iter().find(|r| matches!(r.record.activity, RunnerActivity::Gated { .. }))
    {
        return format!("{} is {}", gated.name(s.this_host), activity(&gated.record, s.now));
    }
    if let Some(line) = gpu_wait(s, &live) {
        return line;
    }
    if !ahead.is_empty() {
        return ahead;
    }
    if let Some(busy) =
        live.iter().find(|r| matches!(r.record.activity, RunnerActivity::Running { .. }))
    {
        if live.iter().all(|r| matches!(r.record.activity, RunnerActivity::Running { .. })) {
            return format!(
                "next in line: {} is {}",
                busy.name(s.this_host),
                activity(&busy.record, s.now)
            );
        }
    }
    "next in line: a runner takes it at its next look".to_owned()
}

/// Why a job that needs GPUs waits for them, from what the live runners
/// that could take it last saw of their hosts' GPUs (this host's first)
/// and the holds of the running jobs on each: `None` when it needs none,
/// when no such runner has looked yet, or when one host has enough free.
fn gpu_wait(s: &Situation<'_>, live: &[&RunnerView]) -> Option<String> {
    let request = s.job.gpus.as_ref()?;
    let mut seen: Vec<&RunnerView> =
        live.iter().copied().filter(|r| r.record.gpus.is_some()).collect();
    seen.sort_by_key(|r| r.record.owner.host != s.this_host);
    let mut first = None;
    for r in seen {
        let gpus = r.record.gpus.as_ref()?;
        let holds = slothqueue_core::gpu::holds_on(&r.record.owner.host, s.running);
        let line = slothqueue_core::gpu::wait_words(request, gpus, &holds)?;
        first.get_or_insert(if r.record.owner.host == s.this_host {
            line
        } else {
            format!("{line} (on {})", r.record.owner.host)
        });
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use slothqueue_core::machine;
    use slothqueue_core::{Lease, NewJob, Owner, Policy, RunnerRecord};

    const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    fn job(not_before: Timestamp) -> Job {
        let new = NewJob::shell("true", "/").not_before(not_before);
        machine::create(1, &new, &[], NOW, &Policy::default()).job
    }

    /// `job` as a claim by runner pid 42 on `box` leaves it: attempt 1.
    fn running(mut job: Job) -> Job {
        let owner = Owner { pid: Some(42), host: "box".into(), ..Owner::named("box:42:1:ff") };
        job.state = JobState::Running;
        job.attempts = 1;
        job.started_at = Some(NOW);
        job.lease = Some(Lease {
            owner,
            attempt: 1,
            until: NOW.saturating_add(std::time::Duration::from_secs(60)),
            child_pgid: None,
            gpus: Vec::new(),
        });
        job
    }

    fn runner(activity: RunnerActivity) -> RunnerRecord {
        RunnerRecord {
            owner: Owner { pid: Some(42), host: "box".into(), ..Owner::named("box:42:1:ff") },
            queues: vec![],
            kinds: None,
            refused: Vec::new(),
            started_at: NOW,
            updated_at: NOW,
            activity,
            slots: 1,
            running: Vec::new(),
            gpus: None,
        }
    }

    fn why_of(job: &Job, ahead: usize, runners: &[RunnerView]) -> String {
        why_with(job, ahead, ahead, runners)
    }

    /// With `higher` of the `ahead` jobs of a higher priority.
    fn why_with(job: &Job, ahead: usize, higher: usize, runners: &[RunnerView]) -> String {
        why(&Situation {
            job,
            now: NOW,
            ahead,
            ahead_higher: higher,
            runners,
            lease_owner: Liveness::Unknown,
            this_host: "box",
            parents: &[],
            lanes: &Lanes::default(),
            lane: LaneVerdict::Open,
            running: &[],
        })
        .unwrap()
    }

    #[test]
    fn a_gpu_job_says_which_gpus_hold_it_up() {
        use slothqueue_core::gpu::{Gpu, GpuHold, GpuLook, GpuProcess, GpuRequest, GpuSeen};
        let gpu = |index: u32, used: u64, processes: Vec<GpuProcess>| Gpu {
            index,
            uuid: format!("GPU-{index}"),
            name: "A100".into(),
            memory_used: used << 30,
            memory_total: 80 << 30,
            utilization: Some(0),
            processes,
        };
        let mut record = runner(RunnerActivity::Running { job: 12, also: Vec::new() });
        record.gpus = Some(GpuSeen {
            look: GpuLook {
                gpus: vec![
                    gpu(0, 1, Vec::new()),
                    gpu(1, 38, vec![GpuProcess { pid: 4242, memory: Some(38 << 30) }]),
                ],
                error: None,
            },
            busy_above_pct: 10,
        });
        let runners = [RunnerView { record, live: true }];
        let mut holder = running(job(NOW));
        holder.id = 12;
        if let Some(l) = holder.lease.as_mut() {
            l.gpus = vec![GpuHold { index: 0, uuid: "GPU-0".into() }];
        }
        let mut waiting = job(NOW);
        waiting.gpus = Some(GpuRequest { count: 2, memory: None });
        let line = why(&Situation {
            job: &waiting,
            now: NOW,
            ahead: 0,
            ahead_higher: 0,
            runners: &runners,
            lease_owner: Liveness::Unknown,
            this_host: "box",
            parents: &[],
            lanes: &Lanes::default(),
            lane: LaneVerdict::Open,
            running: std::slice::from_ref(&holder),
        })
        .unwrap();
        assert_eq!(
            line,
            "waiting for 2 free GPUs: GPU 0 held by job #12, GPU 1 in use by pid 4242 (38 GiB, not a slothqueue job)"
        );
    }

    #[test]
    fn each_reason_in_its_turn() {
        let later = job(NOW.saturating_add(std::time::Duration::from_secs(300)));
        assert!(why_of(&later, 0, &[]).starts_with("not due until"), "{}", why_of(&later, 0, &[]));
        let due = job(NOW);
        assert!(why_of(&due, 0, &[]).starts_with("no runner is alive"));
        assert!(why_of(&due, 2, &[]).starts_with("waiting behind 2 due job(s)"));
        let gated = runner(RunnerActivity::Gated {
            reading: "load 3.00 >= ceiling 2.00".into(),
            since: NOW,
            cause: slothqueue_core::WaitCause::Gate,
        });
        let seen = [RunnerView { record: gated, live: true }];
        assert!(why_of(&due, 2, &seen).starts_with(
            "runner pid 42 on this host is waiting on its gate: load 3.00 >= ceiling 2.00 (since "
        ));
        let busy = runner(RunnerActivity::Running { job: 7, also: Vec::new() });
        let seen = [RunnerView { record: busy.clone(), live: true }];
        assert_eq!(why_of(&due, 3, &seen), "waiting behind 3 due job(s) of higher priority");
        assert_eq!(
            why_of(&due, 0, &seen),
            "next in line: runner pid 42 on this host is running job #7"
        );
        // Only jobs of a higher priority are said to be of one.
        assert_eq!(
            why_with(&due, 1, 0, &seen),
            "waiting behind 1 due job(s) ahead of it in the queue (the same priority, due or added earlier)"
        );
        assert_eq!(
            why_with(&due, 3, 1, &seen),
            "waiting behind 3 due job(s): 1 of higher priority, 2 of the same priority due or added earlier"
        );
        let dead = [RunnerView { record: busy, live: false }];
        assert!(why_of(&due, 0, &dead).starts_with("no runner is alive"));
    }

    #[test]
    fn a_kind_no_live_runner_runs_names_the_missing_handler() {
        let new = NewJob::new("download", serde_json::json!({})).not_before(NOW);
        let download = machine::create(1, &new, &[], NOW, &Policy::default()).job;
        let mut shell_only = runner(RunnerActivity::Idle { until: None });
        shell_only.kinds = Some(vec!["shell".into()]);
        let seen = [RunnerView { record: shell_only.clone(), live: true }];
        assert_eq!(
            why_of(&download, 0, &seen),
            "no handler for kind download: no live runner of its queue has one; start one with --handlers DIR, where DIR/download is an executable of yours that nobody else can write"
        );
        let mut both = shell_only.clone();
        both.kinds = Some(vec!["download".into(), "shell".into()]);
        let seen = [RunnerView { record: both, live: true }];
        assert_eq!(why_of(&download, 0, &seen), "next in line: a runner takes it at its next look");
        let older = runner(RunnerActivity::Idle { until: None });
        let seen = [RunnerView { record: older, live: true }];
        assert_eq!(
            why_of(&download, 0, &seen),
            "next in line: a runner takes it at its next look",
            "a record naming no kinds runs every kind"
        );
    }

    #[test]
    fn live_runners_of_other_queues_are_not_none_alive() {
        let mut other = job(NOW);
        other.queue = "other".into();
        let mut default_only = runner(RunnerActivity::Idle { until: None });
        default_only.queues = vec!["default".into()];
        let seen = [RunnerView { record: default_only, live: true }];
        assert_eq!(
            why_of(&other, 0, &seen),
            "no live runner serves queue other: it runs when one that does starts (slothqueue run --queue other)"
        );
        assert!(why_of(&other, 0, &[]).starts_with("no runner is alive"));
    }

    /// Issue 31 deliver 1: a handler the runner found but refused (others
    /// could change it) is named with the runner's own reason, not the
    /// general "no live runner has one".
    #[test]
    fn a_refused_handler_is_named_with_the_runners_reason() {
        let new = NewJob::new("resize", serde_json::json!({})).not_before(NOW);
        let resize = machine::create(1, &new, &[], NOW, &Policy::default()).job;
        let why = "handler /h/resize is writable by other users (mode 0777): whoever can change it can run commands as you; refusing to run handler /h/resize";
        let mut refusing = runner(RunnerActivity::Idle { until: None });
        refusing.kinds = Some(vec!["shell".into()]);
        refusing.refused =
            vec![slothqueue_core::RefusedKind { kind: "resize".into(), why: why.into() }];
        let seen = [RunnerView { record: refusing.clone(), live: true }];
        assert_eq!(
            why_of(&resize, 0, &seen),
            format!(
                "no handler for kind resize: runner pid 42 on this host refused it: {why}; fix that and restart the runner"
            )
        );
        // A runner of another queue, or a dead one, does not speak for it.
        refusing.queues = vec!["other".into()];
        let mut shell_only = runner(RunnerActivity::Idle { until: None });
        shell_only.kinds = Some(vec!["shell".into()]);
        let seen = [
            RunnerView { record: refusing, live: true },
            RunnerView { record: shell_only, live: true },
        ];
        assert!(why_of(&resize, 0, &seen).contains("no live runner of its queue has one"));
    }

    /// Issue 31 finding 10: a plain `run` does not run a handler job, so
    /// the explanation names what will.
    #[test]
    fn a_handler_job_with_no_runner_says_a_runner_needs_its_handler() {
        let new = NewJob::new("download", serde_json::json!({})).not_before(NOW);
        let download = machine::create(1, &new, &[], NOW, &Policy::default()).job;
        assert_eq!(
            why_of(&download, 0, &[]),
            "no runner is alive: it runs when one with a handler for kind download starts (slothqueue run --handlers DIR, where DIR/download is an executable of yours that nobody else can write)"
        );
        let mut elsewhere = download.clone();
        elsewhere.queue = "other".into();
        let mut default_only = runner(RunnerActivity::Idle { until: None });
        default_only.queues = vec!["default".into()];
        let seen = [RunnerView { record: default_only, live: true }];
        assert_eq!(
            why_of(&elsewhere, 0, &seen),
            "no live runner serves queue other: it runs when one that does starts (slothqueue run --queue other --handlers DIR, where DIR/download is an executable of yours that nobody else can write)"
        );
    }

    #[test]
    fn a_cancel_of_a_gone_owners_job_promises_no_heartbeat() {
        let mut flagged = running(job(NOW));
        flagged.cancel_requested = true;
        let line = |lease_owner| {
            why(&Situation {
                job: &flagged,
                now: NOW,
                ahead: 0,
                ahead_higher: 0,
                runners: &[],
                lease_owner,
                this_host: "box",
                parents: &[],
                lanes: &Lanes::default(),
                lane: LaneVerdict::Open,
                running: &[],
            })
            .unwrap()
        };
        assert!(line(Liveness::Alive).ends_with("the runner stops it at its next heartbeat"));
        assert!(
            line(Liveness::Gone).ends_with("the next runner ends it (cancelled) as it reclaims it"),
            "{}",
            line(Liveness::Gone)
        );
    }

    #[test]
    fn waiting_on_parents_comes_first_and_names_them() {
        let policy = Policy::default();
        let mut parent = job(NOW);
        parent.id = 12;
        let running = running(parent.clone());
        let later = NOW.saturating_add(std::time::Duration::from_secs(300));
        let child_new = NewJob::shell("true", "/").not_before(later).after(12);
        let child =
            machine::create(13, &child_new, std::slice::from_ref(&running), NOW, &policy).job;
        assert!(child.is_waiting_on_parents());
        let line = |parents: &[Job]| {
            why(&Situation {
                job: &child,
                now: NOW,
                ahead: 0,
                ahead_higher: 0,
                runners: &[],
                lease_owner: Liveness::Unknown,
                this_host: "box",
                parents,
                lanes: &Lanes::default(),
                lane: LaneVerdict::Open,
                running: &[],
            })
            .unwrap()
        };
        assert_eq!(
            line(std::slice::from_ref(&running)),
            "waiting on #12 (running, attempt 1)",
            "before `not due until`"
        );
        let mut keyed = parent;
        keyed.idempotency_key = Some("build-7".into());
        assert_eq!(line(&[keyed]), "waiting on key build-7 (#12, pending)");
        assert_eq!(line(&[]), "waiting on 1 parent(s) not done yet");
    }

    #[test]
    fn a_job_cancelled_by_a_dependency_says_which_retry_brings_it_back() {
        let policy = Policy::default();
        let mut failed = job(NOW);
        failed.id = 12;
        failed.state = JobState::Failed;
        let child_new = NewJob::shell("true", "/").after(12);
        let child = machine::create(13, &child_new, &[failed], NOW, &policy).job;
        assert_eq!(child.state, JobState::Cancelled);
        let line = why(&Situation {
            job: &child,
            now: NOW,
            ahead: 0,
            ahead_higher: 0,
            runners: &[],
            lease_owner: Liveness::Unknown,
            this_host: "box",
            parents: &[],
            lanes: &Lanes::default(),
            lane: LaneVerdict::Open,
            running: &[],
        });
        assert_eq!(
            line.as_deref(),
            Some(
                "cancelled because dependency #12 failed: `slothqueue retry 12` runs #12 again and brings this job back"
            )
        );
    }

    #[test]
    fn a_hold_comes_first_then_the_lane_before_the_runners() {
        use slothqueue_core::{LaneChange, LaneScope, Stamp};
        let due = job(NOW);
        let mut held = due.clone();
        held.held = Some(Stamp::new("ana@laptop", NOW));
        let mut lanes = Lanes::default();
        lanes
            .apply(
                &LaneScope::Queue("default".into()),
                &LaneChange::Pause(Stamp::new("bo@box", NOW)),
            )
            .unwrap();
        let line = |job: &Job, lanes: &Lanes, lane: LaneVerdict| {
            why(&Situation {
                job,
                now: NOW,
                ahead: 0,
                ahead_higher: 0,
                runners: &[],
                lease_owner: Liveness::Unknown,
                this_host: "box",
                parents: &[],
                lanes,
                lane,
                running: &[],
            })
            .unwrap()
        };
        let paused = LaneVerdict::Paused(Stamp::new("bo@box", NOW));
        assert_eq!(
            line(&held, &lanes, paused.clone()),
            "held since 22:13:20 by ana@laptop — `slothqueue release 1` lets it run"
        );
        assert_eq!(
            line(&due, &lanes, paused.clone()),
            "its queue default is paused since 22:13:20 by bo@box (`slothqueue resume --queue default` lets it run)"
        );
        assert_eq!(
            line(&due, &Lanes::default(), paused),
            "every queue is paused since 22:13:20 by bo@box (`slothqueue resume` lets it run)",
            "no pause of its own: the pause of every queue"
        );
        assert_eq!(
            line(&due, &Lanes::default(), LaneVerdict::Full { running: 2, limit: 2 }),
            "lane full: 2 of 2 running in queue default (it starts when one ends; `slothqueue parallel N --queue default` changes the limit)"
        );
    }
}
