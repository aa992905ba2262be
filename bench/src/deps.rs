//! The dependency figures, in this process through the `Store` trait: a
//! chain of jobs each after the one before (is a claim as cheap at its end
//! as at its start?), and a fan-out of one parent and many children (what
//! does the one transaction that makes them all due cost, against a parent
//! of one child?).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, ensure};
use slothqueue_core::{
    ClaimRequest, Claimed, Clock, ClockOnly, Completion, JobId, NewJob, Owner, Parent, Store,
    SystemClock, Timestamp,
};

use crate::Sizes;
use crate::setting::{QueueFile as _, Setting};
use crate::stats::{Figures, median};

/// How many claims at each end of the chain are compared.
const ENDS: usize = 100;

/// Settles of a one-child parent timed, for a median.
const SMALL_FAN_OUTS: usize = 5;

fn now() -> Timestamp {
    SystemClock.now()
}

fn job(dir: &Path) -> NewJob {
    NewJob::shell("true", dir.to_string_lossy())
}

async fn claim(store: &dyn Store, owner: &Owner) -> Result<Claimed> {
    store
        .claim(&ClaimRequest::new(owner.clone(), Arc::new(ClockOnly)), now())
        .await?
        .context("a claim found nothing due")
}

async fn complete(store: &dyn Store, c: &Claimed) -> Result<()> {
    let done = Completion { result: None, exit_code: Some(0) };
    store.complete(c.job.id, &c.fence, done, now()).await?;
    Ok(())
}

/// Both figures for `setting`.
pub async fn measure(setting: Setting, sizes: &Sizes, dir: &Path) -> Result<Figures> {
    let mut f = Figures::new();
    chain(setting, sizes.graph_jobs, dir, &mut f).await?;
    fan_out(setting, sizes.graph_jobs, dir, &mut f).await?;
    Ok(f)
}

/// `n` jobs, each after the one before (named by key, in one batch), run
/// through claim and complete; the median claim at each end.
async fn chain(setting: Setting, n: usize, dir: &Path, f: &mut Figures) -> Result<()> {
    let store = setting.open(&setting.backend.file(dir, "chain"))?;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| {
            let mut j = job(dir);
            j.idempotency_key = Some(format!("step-{i}"));
            if i > 0 {
                j.after = vec![Parent::Key(format!("step-{}", i - 1))];
            }
            j
        })
        .collect();
    let start = Instant::now();
    let pushed = store.push_many(jobs, now()).await?;
    f.insert("chain_push_ms", start.elapsed().as_secs_f64() * 1e3);
    let ids: Vec<JobId> = pushed.iter().map(|p| p.job.id).collect();
    ensure!(ids.len() == n, "push_many returned {} of {n}", ids.len());
    let stats = store.stats(now()).await?;
    ensure!(
        stats.due_now == 1 && stats.waiting_on_parents == n as u64 - 1,
        "a chain of {n} should have its head due and the rest waiting: {stats:?}"
    );
    let owner = Owner::named("bench");
    let mut claims = Vec::with_capacity(n);
    for &expected in &ids {
        let start = Instant::now();
        let c = claim(store.as_ref(), &owner).await?;
        claims.push(start.elapsed().as_secs_f64() * 1e3);
        ensure!(c.job.id == expected, "the chain ran #{} before #{expected}", c.job.id);
        complete(store.as_ref(), &c).await?;
    }
    let ends = ENDS.min(n / 2).max(1);
    let (first, last) = (median(&claims[..ends]), median(&claims[n - ends..]));
    f.insert("chain_jobs", n as f64);
    f.insert("chain_claim_first_ms", first);
    f.insert("chain_claim_last_ms", last);
    f.insert("chain_claim_ratio", last / first);
    Ok(())
}

/// A parent of `n` children (pushed in one batch after it): the time of
/// the complete that makes them all due, against that of a parent of one.
async fn fan_out(setting: Setting, n: usize, dir: &Path, f: &mut Figures) -> Result<()> {
    let store = setting.open(&setting.backend.file(dir, "fan-out"))?;
    let owner = Owner::named("bench");
    let mut narrow = Vec::new();
    for _ in 0..SMALL_FAN_OUTS {
        narrow.push(settle_parent_of(store.as_ref(), &owner, 1, dir).await?);
        // Its child, out of the way of the next parent.
        let child = claim(store.as_ref(), &owner).await?;
        complete(store.as_ref(), &child).await?;
    }
    let narrow = median(&narrow);
    // Last: its children are left due, nothing else comes after them.
    let wide = settle_parent_of(store.as_ref(), &owner, n, dir).await?;
    f.insert("fan_out_children", n as f64);
    f.insert("fan_out_settle_ms", wide);
    f.insert("fan_out_settle_1_ms", narrow);
    f.insert("fan_out_settle_per_child_us", (wide - narrow) / n as f64 * 1e3);
    Ok(())
}

/// Pushes a parent and `children` after it, claims the parent, times its
/// complete, and checks the children became due.
async fn settle_parent_of(
    store: &dyn Store,
    owner: &Owner,
    children: usize,
    dir: &Path,
) -> Result<f64> {
    let mut parent = job(dir);
    // Claimed first even by a store that would not hold the children back.
    parent.priority = 10;
    let parent_id = store.push(parent, now()).await?.job.id;
    let kids: Vec<NewJob> = (0..children)
        .map(|_| {
            let mut j = job(dir);
            j.after = vec![Parent::Id(parent_id)];
            j
        })
        .collect();
    store.push_many(kids, now()).await?;
    let stats = store.stats(now()).await?;
    ensure!(
        stats.waiting_on_parents == children as u64,
        "{children} children should wait on their parent: {stats:?}"
    );
    let c = claim(store, owner).await?;
    ensure!(c.job.id == parent_id, "claimed #{} before the parent #{parent_id}", c.job.id);
    let start = Instant::now();
    complete(store, &c).await?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let stats = store.stats(now()).await?;
    ensure!(
        stats.waiting_on_parents == 0 && stats.due_now == children as u64 && stats.running == 0,
        "the parent's settle should make its {children} children due: {stats:?}"
    );
    Ok(ms)
}
