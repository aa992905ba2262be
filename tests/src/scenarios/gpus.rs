//! GPUs as a claim condition (`slothqueue_core::gpu`): a job that asks for
//! GPUs is taken only with that many free on the claimer's host, the GPUs
//! it got are held with its attempt (in its lease, so every store keeps
//! them), no other claim on that host hands them out while it runs, and
//! they are free again once the attempt ends or is reclaimed.

use std::sync::Arc;

use slothqueue_core::gpu::{Gpu, GpuLook, GpuOffer, GpuRequest, GpuSight, visible_devices};
use slothqueue_core::{Claimed, Completion, EventKind, Job, Liveness, Store, Timestamp};

use crate::{Harness, job, secs, shell};

/// Two idle GPUs, as a runner on the harness's host would measure them.
struct TwoIdleGpus;

impl GpuSight for TwoIdleGpus {
    fn look(&self) -> GpuLook {
        let gpu = |index: u32| Gpu {
            index,
            uuid: format!("GPU-conformance-{index}"),
            name: "NVIDIA H100 80GB HBM3".to_owned(),
            memory_used: 0,
            memory_total: 80 << 30,
            utilization: Some(0),
            processes: Vec::new(),
        };
        GpuLook { gpus: vec![gpu(0), gpu(1)], error: None }
    }
}

async fn claim_gpu(h: &Harness, s: &dyn Store, owner: &str, now: Timestamp) -> Option<Claimed> {
    let request = h.request(owner).gpus(GpuOffer::new(Arc::new(TwoIdleGpus)));
    s.claim(&request, now).await.expect("claim must not error")
}

fn devices(job: &Job) -> String {
    visible_devices(&job.lease.as_ref().expect("a running job has a lease").gpus)
}

/// Three jobs asking for one GPU each, two GPUs free: two claims (by two
/// claimers on one host) get one distinct GPU each, recorded in the lease
/// as stored and in the `claimed` event; the third claim takes nothing
/// while both are held, and the GPU of the first is handed out again once
/// it is done. A claimer that offers no GPUs never takes such a job.
pub async fn a_gpu_hold_is_a_claim_condition(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let one = GpuRequest { count: 1, memory: Some(8 << 30) };
    let ids: Vec<_> = [
        h.push(&*s, shell("train a").gpus(one.clone()), t).await.id,
        h.push(&*s, shell("train b").gpus(one.clone()), t).await.id,
        h.push(&*s, shell("train c").gpus(one.clone()), t).await.id,
    ]
    .into();
    assert_eq!(job(&*s, ids[0]).await.gpus, Some(one), "the request is stored with the job");
    assert!(h.claim(&*s, "blind", t).await.is_none(), "a claimer that sees no GPU takes none");

    let a = claim_gpu(h, &*s, "w1", t).await.expect("the first GPU job");
    let b = claim_gpu(h, &*s, "w2", t).await.expect("the second GPU job");
    assert_eq!((a.job.id, b.job.id), (ids[0], ids[1]));
    assert_eq!((devices(&a.job), devices(&b.job)), ("0".to_owned(), "1".to_owned()));
    assert_eq!(job(&*s, ids[0]).await, a.job, "the holds are stored with the attempt");
    let claimed = s.events(ids[1]).await.expect("events");
    let claimed = claimed.iter().find(|e| e.kind == EventKind::Claimed).expect("claimed");
    assert_eq!(claimed.message.as_deref(), Some("GPU 1 (GPU-conformance-1)"));
    assert!(claim_gpu(h, &*s, "w3", t).await.is_none(), "both GPUs are held");

    let later = h.at(secs(5));
    s.complete(ids[0], &a.fence, Completion::default(), later).await.expect("complete");
    let c = claim_gpu(h, &*s, "w3", later).await.expect("the third, on the freed GPU");
    assert_eq!((c.job.id, devices(&c.job)), (ids[2], "0".to_owned()));
    assert!(job(&*s, ids[0]).await.lease.is_none());
}

/// A runner that died holding a GPU keeps it held while its attempt is
/// still running in the queue (its processes may live on); once the sweep
/// reclaims the attempt, the next claim on that host gets the GPU.
pub async fn a_dead_owners_gpus_are_free_again_once_its_attempt_is_reclaimed(h: &Harness) {
    let s = h.store();
    let t = h.start();
    let two = GpuRequest { count: 2, memory: None };
    let first = h.push(&*s, shell("train big").gpus(two.clone()), t).await;
    let a = claim_gpu(h, &*s, "dead", t).await.expect("the first job");
    assert_eq!(devices(&a.job), "0,1");
    let second = h.push(&*s, shell("train next").gpus(two), t).await;
    h.set_liveness("dead", Liveness::Gone);
    let soon = h.at(secs(1));
    let request = h
        .request("w2")
        .reclaim(slothqueue_core::Reclaim::ExpiredOnly)
        .gpus(GpuOffer::new(Arc::new(TwoIdleGpus)))
        .refusing([first.id]);
    assert!(
        s.claim(&request, soon).await.expect("claim").is_none(),
        "held until the dead attempt is reclaimed"
    );
    assert_eq!(h.reclaim_gone(&*s, soon).await.len(), 1);
    let b = s.claim(&request, soon).await.expect("claim").expect("the second job");
    assert_eq!((b.job.id, devices(&b.job)), (second.id, "0,1".to_owned()));
}
