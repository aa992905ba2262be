//! GPUs (issue 35): a runner reading recorded-style `nvidia-smi` output
//! (`tests/data/gpus/`, through `gpu::GpuFile`) hands each job that asks
//! for GPUs free ones of its own, names them in the job's environment, and
//! never runs more GPU jobs at once than there are free GPUs, whatever its
//! slots. Concurrency is read from what the jobs recorded.

use std::sync::Arc;

use slothqueue_core::JobState;
use slothqueue_core::gpu::{GpuOffer, GpuRequest};
use slothqueue_runner::gpu::GpuFile;

use crate::support::env;

fn fixture(name: &str) -> String {
    format!("{}/tests/data/gpus/{name}.csv", env!("CARGO_MANIFEST_DIR"))
}

fn gpus(n: u32) -> impl FnOnce(slothqueue_core::NewJob) -> slothqueue_core::NewJob {
    move |j| j.gpus(GpuRequest { count: n, memory: None }).max_attempts(1)
}

#[tokio::test]
async fn four_one_gpu_jobs_on_two_gpus_never_run_more_than_two_at_once_under_four_slots() {
    let env = env();
    let job = "echo \"$CUDA_VISIBLE_DEVICES\" > gpu.$SLOTHQUEUE_JOB_ID; \
               mkdir run.$SLOTHQUEUE_JOB_ID; [ \"$(ls -d run.* | wc -l)\" -gt 2 ] && echo many >> overlap; \
               mkdir \"lock.$CUDA_VISIBLE_DEVICES\" || echo shared >> overlap; \
               sleep 0.3; rmdir \"lock.$CUDA_VISIBLE_DEVICES\" run.$SLOTHQUEUE_JOB_ID";
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(env.add(job, gpus(1)).await);
    }
    let mut cfg = env.config();
    cfg.slots = 4;
    cfg.gpus = Some(GpuOffer::new(Arc::new(GpuFile::new(fixture("2-gpu")))));
    let (summary, lines) = env.drain(env.runner(cfg)).await;
    assert_eq!(summary.exit_code(), 0, "{lines:?}");
    assert!(
        !env.path("overlap").exists(),
        "{}",
        std::fs::read_to_string(env.path("overlap")).unwrap()
    );
    for id in &ids {
        assert_eq!(env.job(*id).await.state, JobState::Done);
        let got = std::fs::read_to_string(env.path(&format!("gpu.{id}"))).unwrap();
        assert!(got == "0\n" || got == "1\n", "job #{id} got {got:?}");
    }
    assert!(
        lines.iter().any(|l| l.starts_with("jobs that need GPUs wait: too few of the 2 GPUs")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_jobs_gpus_are_named_in_its_environment_in_pci_bus_order() {
    let env = env();
    let id = env
        .add("echo \"$CUDA_VISIBLE_DEVICES|$CUDA_DEVICE_ORDER|$SLOTHQUEUE_GPUS\" > seen", gpus(2))
        .await;
    let mut cfg = env.config();
    cfg.gpus = Some(GpuOffer::new(Arc::new(GpuFile::new(fixture("4-gpu-busy")))));
    let (summary, lines) = env.drain(env.runner(cfg)).await;
    assert_eq!(summary.exit_code(), 0, "{lines:?}");
    assert_eq!(env.job(id).await.state, JobState::Done);
    assert_eq!(
        std::fs::read_to_string(env.path("seen")).unwrap(),
        "0,2|PCI_BUS_ID|GPU-1f6b2a3c-9d4e-4a75-8b06-c3d2e1f0a9b8,GPU-3b8d4c5e-1f60-4c97-8d28-e5f4a3b2c1d0\n",
        "GPU 1 is busy: the job gets 0 and 2"
    );
}
