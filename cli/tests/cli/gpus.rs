//! GPUs from the command line (issue 35): `add --gpus`, and `run
//! --gpu-file` reading recorded-style `nvidia-smi` CSV (the runner's
//! fixtures, `runner/tests/data/gpus/`), so every test runs without a GPU.
//! Each job writes its `CUDA_VISIBLE_DEVICES` to its log and to a file, and
//! takes a lock directory named after it while it runs: two jobs on one
//! GPU at once, or more jobs at once than free GPUs, leave an `overlap`
//! file. Concurrency is read from what the jobs recorded, never from how
//! long a run took.

use std::path::PathBuf;
use std::time::Duration;

use rustix::process::Signal;
use slothqueue::JobState;

use crate::both_backends;
use crate::support::{TestContext, signal, stdout_of, wait_child, wait_for};

/// Generous: CI machines are small and shared.
const PATIENCE: Duration = Duration::from_secs(60);

/// A GPU fixture's path.
fn fixture(name: &str) -> String {
    let path: PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "..", "runner", "tests", "data", "gpus"].iter().collect();
    path.join(format!("{name}.csv")).to_string_lossy().into_owned()
}

/// A job that records its GPUs and checks, while it runs for a moment,
/// that no other job runs on its GPU and that at most `most` jobs run.
fn gpu_job(most: usize) -> String {
    format!(
        "echo \"gpus=$CUDA_VISIBLE_DEVICES\"; echo \"$CUDA_VISIBLE_DEVICES\" > gpu.$SLOTHQUEUE_JOB_ID; \
         mkdir run.$SLOTHQUEUE_JOB_ID; n=$(ls -d run.* | wc -l); [ \"$n\" -gt {most} ] && echo \"$n at once\" >> overlap; \
         mkdir \"lock.$CUDA_VISIBLE_DEVICES\" 2>/dev/null || echo \"GPU $CUDA_VISIBLE_DEVICES shared\" >> overlap; \
         sleep 0.4; rmdir \"lock.$CUDA_VISIBLE_DEVICES\" run.$SLOTHQUEUE_JOB_ID"
    )
}

/// The GPUs job `id` was handed.
fn gpus_of(ctx: &TestContext, id: i64) -> String {
    std::fs::read_to_string(ctx.path(&format!("gpu.{id}"))).unwrap().trim().to_owned()
}

fn no_overlap(ctx: &TestContext) {
    let overlap = std::fs::read_to_string(ctx.path("overlap")).unwrap_or_default();
    assert!(overlap.is_empty(), "jobs shared a GPU or ran beyond the free GPUs: {overlap}");
}

both_backends! {
    fn four_one_gpu_jobs_on_two_free_gpus_run_two_at_a_time_under_slots(ctx) {
        let load = ctx.calm_load();
        for _ in 0..4 {
            ctx.ok(&["add", "--gpus", "1", "--max-attempts", "1", &gpu_job(2)]);
        }
        let gpus = fixture("2-gpu");
        let out = ctx.run(&["run", "--load-file", load, "--gpu-file", &gpus, "--slots", "4"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        no_overlap(&ctx);
        for id in 1..=4 {
            assert_eq!(ctx.job(id).state, JobState::Done, "job #{id}");
            assert!(["0", "1"].contains(&gpus_of(&ctx, id).as_str()), "job #{id}");
        }
        assert_ne!(gpus_of(&ctx, 1), gpus_of(&ctx, 2), "the first two ran at once on distinct GPUs");
        let log = ctx.ok(&["logs", "1"]);
        assert!(log.contains(&format!("gpus={}", gpus_of(&ctx, 1))), "{log}");
        let store = ctx.store();
        let trail = crate::support::block_on(store.events(1)).unwrap();
        let said = trail.iter().find(|e| e.kind == slothqueue::EventKind::Claimed).unwrap();
        assert!(said.message.as_deref().unwrap_or("").starts_with("GPU "), "{said:?}");
    }

    fn two_runners_never_hand_one_gpu_to_two_jobs(ctx) {
        let load = ctx.calm_load();
        for _ in 0..4 {
            ctx.ok(&["add", "--gpus", "1", "--max-attempts", "1", &gpu_job(2)]);
        }
        let gpus = fixture("2-gpu");
        let mut runners: Vec<_> = (0..2)
            .map(|_| ctx.spawn(&["run", "--load-file", load, "--gpu-file", &gpus, "--slots", "4"]))
            .collect();
        for r in &mut runners {
            let status = wait_child(r, PATIENCE);
            assert!(status.success(), "a runner failed: {}", stdout_of(r));
        }
        // A runner drains what it can take: one that found both GPUs held
        // may have ended before they freed. Whatever is left, a last one runs.
        let out = ctx.run(&["run", "--load-file", load, "--gpu-file", &gpus, "--slots", "4"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        no_overlap(&ctx);
        for id in 1..=4 {
            assert_eq!(ctx.job(id).state, JobState::Done, "job #{id}");
        }
    }

    fn one_gpu_runs_two_gpu_jobs_one_after_the_other_and_show_says_why(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "--gpus", "1", "touch started.1; while [ ! -e go ]; do sleep 0.05; done"]);
        ctx.ok(&["add", "--gpus", "1", "echo $CUDA_VISIBLE_DEVICES > second"]);
        let gpus = fixture("1-gpu");
        let mut runner = ctx.spawn(&[
            "run", "--follow", "--load-file", load, "--gpu-file", &gpus, "--slots", "2",
        ]);
        wait_for("job #1 to run", PATIENCE, || ctx.path("started.1").exists());
        let mut shown = String::new();
        wait_for("show to say why #2 waits", PATIENCE, || {
            shown = ctx.ok(&["show", "2"]);
            shown.contains("waiting for 1 free GPU: GPU 0 held by job #1")
        });
        assert_eq!(ctx.job(2).state, JobState::Pending, "the only GPU is held");
        let status = ctx.ok(&["status"]);
        assert!(status.contains("GPUs on this host: 1\n  GPU 0 held by job #1 (NVIDIA H100 80GB HBM3)\n"), "{status}");
        let shown = ctx.ok(&["show", "1"]);
        assert!(shown.contains("gpus:         1 GPU\nholds:        GPU 0 (GPU-8d2f4c1a-"), "{shown}");
        std::fs::write(ctx.path("go"), "").unwrap();
        wait_for("job #2 after #1", PATIENCE, || ctx.job(2).state == JobState::Done);
        assert_eq!(std::fs::read_to_string(ctx.path("second")).unwrap(), "0\n");
        assert!(ctx.job(1).finished_at <= ctx.job(2).started_at);
        signal(runner.id(), Signal::TERM);
        let _ = wait_child(&mut runner, PATIENCE);
        let said = stdout_of(&mut runner);
        assert_eq!(said.matches("jobs that need GPUs wait").count(), 1, "said once: {said}");
    }

    fn without_nvidia_smi_a_gpu_job_waits_and_the_runner_says_why(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "--gpus", "1", "echo ran > ran"]);
        ctx.ok(&["add", "echo plain > plain"]);
        let empty = ctx.path("no-tools");
        std::fs::create_dir_all(&empty).unwrap();
        let out = ctx.command(&["run", "--load-file", load]).env("PATH", &empty).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("jobs that need GPUs wait: no GPU found: cannot run nvidia-smi"), "{said}");
        assert_eq!(ctx.job(1).state, JobState::Pending);
        assert!(!ctx.path("ran").exists());
        assert_eq!(ctx.job(2).state, JobState::Done, "a job without GPUs runs on");
    }

    fn a_busy_gpu_is_not_handed_out(ctx) {
        let load = ctx.calm_load();
        for _ in 0..3 {
            ctx.ok(&["add", "--gpus", "1", "--max-attempts", "1", &gpu_job(3)]);
        }
        let gpus = fixture("4-gpu-busy");
        let out = ctx.run(&["run", "--load-file", load, "--gpu-file", &gpus, "--slots", "4"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        no_overlap(&ctx);
        for id in 1..=3 {
            assert_eq!(ctx.job(id).state, JobState::Done);
            assert_ne!(gpus_of(&ctx, id), "1", "GPU 1 is someone else's (38 GiB, 87 %)");
        }
    }

    fn a_lost_gpu_is_not_handed_out_and_a_job_too_big_waits(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "--gpus", "4", "echo never"]);
        ctx.ok(&["add", "--gpus", "3", "echo $CUDA_VISIBLE_DEVICES > three"]);
        let gpus = fixture("4-gpu-one-lost");
        let out = ctx.run(&["run", "--load-file", load, "--gpu-file", &gpus]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(std::fs::read_to_string(ctx.path("three")).unwrap(), "0,1,3\n");
        assert_eq!(ctx.job(1).state, JobState::Pending, "three GPUs are left: four never fit");
    }

    fn a_killed_runners_gpu_is_free_for_the_next_claim(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "--gpus", "1", "--max-attempts", "1", "sleep 30"]);
        let gpus = fixture("1-gpu");
        let mut runner = ctx.spawn(&["run", "--load-file", load, "--gpu-file", &gpus]);
        wait_for("the job to start", PATIENCE, || {
            ctx.job(1).lease.is_some_and(|l| l.child_pgid.is_some())
        });
        assert_eq!(ctx.job(1).lease.unwrap().gpus.len(), 1);
        signal(runner.id(), Signal::KILL);
        let _ = wait_child(&mut runner, PATIENCE);
        ctx.ok(&["add", "--gpus", "1", "echo $CUDA_VISIBLE_DEVICES > next"]);
        let out = ctx.run(&["run", "--load-file", load, "--gpu-file", &gpus]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(ctx.job(1).state, JobState::Failed, "its one attempt died with its runner");
        assert_eq!(ctx.job(2).state, JobState::Done);
        assert_eq!(std::fs::read_to_string(ctx.path("next")).unwrap(), "0\n");
    }

    fn a_big_job_lets_small_ones_backfill_only_until_its_wait_passes_the_bound(ctx) {
        let load = ctx.calm_load();
        // GPU 1 of four is busy: the 4-GPU job fits the box, not now.
        ctx.ok(&["add", "--gpus", "4", "--priority", "9", "echo never"]);
        ctx.ok(&["add", "--gpus", "1", "echo small > small"]);
        ctx.ok(&["add", "echo plain > plain"]);
        let gpus = fixture("4-gpu-busy");
        let reserve = ["run", "--load-file", load, "--gpu-file", &gpus, "--gpu-backfill-for", "0s"];
        let out = ctx.run(&reserve);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(ctx.job(2).state, JobState::Pending, "the free GPUs are kept for #1");
        assert_eq!(ctx.job(3).state, JobState::Done, "a job without GPUs runs on");
        let out = ctx.run(&["run", "--load-file", load, "--gpu-file", &gpus]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(ctx.job(2).state, JobState::Done, "within the default 10m, #2 backfills");
        assert_eq!(ctx.job(1).state, JobState::Pending);
    }

    fn every_clone_and_export_keep_a_jobs_gpus(ctx) {
        ctx.ok(&["every", "1h", "--gpus", "2", "--key", "nightly", "train"]);
        let dump = ctx.ok(&["export"]);
        assert!(dump.contains("\"gpus\":{\"count\":2}"), "{dump}");
    }

    fn hide_gpus_empties_cuda_visible_devices_of_jobs_without_gpus(ctx) {
        let load = ctx.calm_load();
        ctx.ok(&["add", "-e", "CUDA_VISIBLE_DEVICES=0", "echo \"[$CUDA_VISIBLE_DEVICES]\" > plain"]);
        let gpus = fixture("1-gpu");
        let out = ctx.run(&["run", "--load-file", load, "--gpu-file", &gpus, "--hide-gpus"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(std::fs::read_to_string(ctx.path("plain")).unwrap(), "[]\n");
    }

    fn gpu_flags_are_checked(ctx) {
        for (args, says) in [
            (vec!["add", "--gpus", "0", "x"], "--gpus must be at least 1"),
            (vec!["add", "--gpu-memory", "2G", "x"], "--gpu-memory needs --gpus"),
            (vec!["add", "--gpus", "65", "x"], "65"),
            (vec!["run", "--gpu-file", "nowhere.csv"], "--gpu-file"),
        ] {
            let out = ctx.run(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(says), "{args:?}: {err}");
        }
        ctx.ok(&["add", "--gpus", "2", "--gpu-memory", "20G", "x"]);
        assert_eq!(ctx.job(1).gpus.unwrap().memory, Some(20 << 30));
        ctx.ok(&["edit", "1", "--gpus", "1"]);
        assert_eq!(ctx.job(1).gpus.unwrap().count, 1);
        ctx.ok(&["clone", "1"]);
        assert_eq!(ctx.job(2).gpus.unwrap().count, 1, "a clone asks for the same GPUs");
        ctx.ok(&["edit", "2", "--gpus", "0"]);
        assert!(ctx.job(2).gpus.is_none(), "--gpus 0 on edit asks for none any more");
        let mut add = ctx.command(&["add", "--stdin"]);
        add.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        let mut child = add.spawn().unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"{\"command\": \"x\", \"gpus\": 2, \"gpu_memory\": \"1G\"}\n")
            .unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(ctx.job(3).gpus.unwrap().memory, Some(1 << 30));
    }
}
