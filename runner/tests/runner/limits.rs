//! A shell job's environment mode and limits, applied by a real runner to
//! real processes: what the job sees of the runner's environment, the
//! niceness and I/O class read back inside the job and from outside, and
//! a memory ceiling that kills (where a cgroup can be made) or is said not
//! to be enforced.

use std::io::Write;
use std::path::Path;

use slothqueue_core::{JobId, JobState, NewJob};
use slothqueue_runner::RunnerEvent;

use crate::support::{Env, env, eventually, read_when_written};

/// A shell job in the test's folder with `extra` merged into its payload.
fn job(env: &Env, command: &str, extra: serde_json::Value) -> NewJob {
    let mut payload = serde_json::json!({"command": command, "cwd": env.dir.path()});
    if let (Some(p), serde_json::Value::Object(extra)) = (payload.as_object_mut(), extra) {
        p.extend(extra);
    }
    NewJob::new("shell", payload).max_attempts(1)
}

async fn push(env: &Env, job: NewJob) -> JobId {
    env.store.push(job, env.now()).await.unwrap().job.id
}

fn log(env: &Env, id: JobId) -> String {
    std::fs::read_to_string(slothqueue_runner::log_path(&env.logs(), id)).unwrap()
}

/// The log header's `limits:` part (up to the `: what`).
fn limits_said(env: &Env, id: JobId) -> String {
    let log = log(env, id);
    let header = log.lines().next().unwrap_or_default().to_owned();
    let limits = header.split(", limits: ").nth(1).and_then(|r| r.split(": ").next());
    limits.unwrap_or_else(|| panic!("no limits in the header: {header}")).to_owned()
}

/// The `NAME=value` lines a job printed with `env`.
fn env_lines(log: &str) -> Vec<String> {
    log.lines().skip(1).map(str::to_owned).collect()
}

/// A variable of the runner's (this test process's) own environment that
/// a job must not see in exact mode.
fn runner_variable() -> (String, String) {
    std::env::vars()
        .find(|(k, v)| k != "PATH" && !k.starts_with("SLOTHQUEUE_") && !v.contains('\n'))
        .expect("the test process has some environment variable besides PATH")
}

#[tokio::test]
async fn an_exact_job_gets_its_recorded_environment_and_nothing_of_the_runners() {
    let env = env();
    let (leak, leak_value) = runner_variable();
    let exact = job(
        &env,
        "env",
        serde_json::json!({"env_mode": "exact", "env": {"PATH": "/usr/bin:/bin", "MINE": "yes"}}),
    );
    let exact = push(&env, exact).await;
    let inherit = push(&env, job(&env, "env", serde_json::json!({"env": {"MINE": "yes"}}))).await;
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(summary.done, 2, "{lines:?}");

    let seen = env_lines(&log(&env, exact));
    assert!(seen.contains(&"PATH=/usr/bin:/bin".to_owned()), "{seen:?}");
    assert!(seen.contains(&"MINE=yes".to_owned()), "{seen:?}");
    assert!(seen.contains(&format!("SLOTHQUEUE_JOB_ID={exact}")), "{seen:?}");
    assert!(seen.contains(&"SLOTHQUEUE_ATTEMPT=1".to_owned()), "{seen:?}");
    assert!(seen.iter().any(|l| l.starts_with("SLOTHQUEUE_LEASE=")), "{seen:?}");
    assert!(!seen.iter().any(|l| l.starts_with(&format!("{leak}="))), "{leak} leaked: {seen:?}");
    // Only what was recorded, the job's own variables, and what the shell
    // itself sets (PWD, SHLVL, `_`).
    for line in &seen {
        let name = line.split('=').next().unwrap_or_default();
        assert!(
            ["PATH", "MINE", "PWD", "SHLVL", "_", "OLDPWD"].contains(&name)
                || name.starts_with("SLOTHQUEUE_"),
            "unexpected variable in an exact job: {line}"
        );
    }

    let seen = env_lines(&log(&env, inherit));
    assert!(seen.contains(&format!("{leak}={leak_value}")), "inherit sees the runner's: {seen:?}");
    assert!(seen.contains(&"MINE=yes".to_owned()), "{seen:?}");
}

/// `ioprio_get` of `pid`, decoded the way `ionice` prints it.
fn io_class_of(pid: i32) -> String {
    #[expect(unsafe_code, reason = "ioprio_get has no wrapper; integer arguments only")]
    // SAFETY: the system call takes two integers and reads no memory.
    let prio = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, pid) };
    match (prio >> 13, prio & 0x1fff) {
        (3, _) => "idle".to_owned(),
        (2, level) => format!("best-effort:{level}"),
        (class, level) => format!("class {class} level {level}"),
    }
}

fn nice_of(stat: &str) -> Option<i32> {
    stat.rsplit_once(')')?.1.split_whitespace().nth(16)?.parse().ok()
}

/// The job waits on a FIFO after writing its pid: the test reads the
/// leader's manners from outside, then lets it go on to read its own from
/// inside (a process it starts after they were set).
async fn manners_seen(cgroups: bool, limits: serde_json::Value, nice: i32, class: &str) {
    let env = env();
    let fifo = env.path("go");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let ionice = Path::new("/usr/bin/ionice").exists();
    let command = format!(
        "echo $$ > pid; read x < go; cat /proc/self/stat; {}",
        if ionice { "/usr/bin/ionice -p $$" } else { "true" }
    );
    let id = push(&env, job(&env, &command, serde_json::json!({"limits": limits}))).await;
    let mut cfg = env.config();
    cfg.cgroups = cgroups;
    let mut running = env.start(env.runner(cfg));
    let pid: i32 = read_when_written(&env.path("pid")).await.trim().parse().unwrap();
    eventually(&format!("the job at nice {nice} and {class}"), || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        nice_of(&stat) == Some(nice) && io_class_of(pid) == class
    })
    .await;
    tokio::task::spawn_blocking(move || std::fs::write(fifo, "go\n")).await.unwrap().unwrap();
    let summary = running.finish().await.unwrap();
    assert_eq!(summary.done, 1, "{:?}", running.events.lines());

    let log = log(&env, id);
    let stat = log.lines().nth(1).unwrap_or_default();
    assert_eq!(nice_of(stat), Some(nice), "inside the job: {log}");
    if ionice {
        let said = log.lines().nth(2).unwrap_or_default();
        let expected = match class.split_once(':') {
            Some((_, level)) => format!("best-effort: prio {level}"),
            None => class.to_owned(),
        };
        assert_eq!(said, expected, "{log}");
    }
    assert_eq!(limits_said(&env, id), format!("nice {nice}, ionice {class}"));
}

#[tokio::test]
async fn asked_niceness_and_io_class_are_in_force_inside_the_job() {
    manners_seen(true, serde_json::json!({"nice": 5, "ionice": "idle"}), 5, "idle").await;
}

/// Without a cgroup the spawn takes the `posix_spawn` path (no hook): the
/// manners are set on the group from outside, and the defaults apply.
#[tokio::test]
async fn defaults_are_in_force_without_a_cgroup_too() {
    manners_seen(false, serde_json::Value::Null, 10, "best-effort:7").await;
}

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" }
}

/// The v1 memory cgroup directory of this process, if there is one.
fn own_v1_memory() -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| {
        let mut p = l.splitn(3, ':');
        let (_, names, path) = (p.next()?, p.next()?, p.next()?);
        names.split(',').any(|n| n == "memory").then(|| path.to_owned())
    })?;
    let dir = Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

#[tokio::test]
async fn a_job_over_its_memory_ceiling_is_killed_and_says_so() {
    let env = env();
    let command = format!("{} -c 'bytearray(200 << 20)'", python());
    let limits = serde_json::json!({"limits": {"memory_max": 50 << 20}});
    let id = push(&env, job(&env, &command, limits)).await;
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    let said = limits_said(&env, id);
    if said.contains("not enforced") {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED a_job_over_its_memory_ceiling_is_killed_and_says_so: no cgroup can hold a \
             memory ceiling here ({said})"
        );
        return;
    }
    assert_eq!(said, "nice 10, ionice best-effort:7, memory-max 50 MiB");
    assert_eq!(summary.failed, 1, "{lines:?}");
    let job = env.job(id).await;
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.last_error.as_deref(), Some("killed: memory limit 50 MiB exceeded"));
    assert!(lines[0].ends_with("(killed: memory limit 50 MiB exceeded)"), "{lines:?}");
    // The attempt's v1 child, if one was made, is gone with it.
    if let Some(dir) = own_v1_memory() {
        let prefix = format!("slothqueue-{id}-1-{}-", std::process::id());
        let left: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert_eq!(left, Vec::<String>::new(), "the attempt's memory cgroup was left");
    }
}

#[tokio::test]
async fn without_cgroups_a_memory_ceiling_is_said_not_enforced_and_the_job_runs() {
    let env = env();
    let limits = serde_json::json!({"limits": {"memory_max": 50 << 20, "cpu_weight": 50}});
    let id = push(&env, job(&env, "true", limits)).await;
    let mut cfg = env.config();
    cfg.cgroups = false;
    let mut running = env.start(env.runner(cfg));
    let event = running
        .events
        .wait_for("the limit said not enforced", |e| {
            matches!(e, RunnerEvent::LimitNotEnforced { limit, .. } if limit.starts_with("memory"))
        })
        .await;
    assert_eq!(
        event.to_string(),
        format!("#{id}: memory-max 50 MiB not enforced: this runner uses no cgroups")
    );
    let summary = running.finish().await.unwrap();
    assert_eq!(summary.done, 1);
    assert!(
        running
            .events
            .lines()
            .contains(&format!("#{id}: cpu-weight 50 not enforced: this runner uses no cgroups")),
        "{:?}",
        running.events.lines()
    );
    assert_eq!(
        limits_said(&env, id),
        "nice 10, ionice best-effort:7, memory-max 50 MiB not enforced (this runner uses no \
         cgroups), cpu-weight 50 not enforced (this runner uses no cgroups)"
    );
}

/// A CPU weight reaches the job's cgroup: `cpu.weight` in v2, else
/// `cpu.shares` (weight × 1024 / 100) in a v1 child, read by the job itself.
#[tokio::test]
async fn a_cpu_weight_is_written_into_the_jobs_cgroup() {
    let env = env();
    let command = "for l in $(cat /proc/self/cgroup); do \
                     case $l in *:cpu:*|*:cpu,*) d=/sys/fs/cgroup/cpu${l##*:}; \
                       cat $d/cpu.shares;; \
                     0::*) for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do \
                       [ -e $m${l#0::}/cpu.weight ] && cat $m${l#0::}/cpu.weight; done;; \
                     esac; done; true";
    let id =
        push(&env, job(&env, command, serde_json::json!({"limits": {"cpu_weight": 50}}))).await;
    let (summary, lines) = env.drain(env.runner(env.config())).await;
    assert_eq!(summary.done, 1, "{lines:?}");
    let said = limits_said(&env, id);
    if said.contains("not enforced") {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED a_cpu_weight_is_written_into_the_jobs_cgroup: {said}"
        );
        return;
    }
    let log = log(&env, id);
    let values: Vec<&str> = log.lines().skip(1).collect();
    assert!(values.contains(&"512") || values.contains(&"50"), "{log}");
}

/// The runner's limits fill what a shell job leaves unset; a handler job
/// gets the runner's only, whatever its payload says (it is its handler's).
#[tokio::test]
async fn runner_limits_are_defaults_and_a_handlers_payload_is_not_read() {
    use std::os::unix::fs::PermissionsExt;
    let env = env();
    let dir = env.path("handlers");
    std::fs::create_dir(&dir).unwrap();
    let handler = dir.join("work");
    std::fs::write(&handler, "#!/bin/sh\ncat > /dev/null\n").unwrap();
    std::fs::set_permissions(&handler, std::fs::Permissions::from_mode(0o755)).unwrap();
    let own = push(&env, job(&env, "true", serde_json::json!({"limits": {"nice": 12}}))).await;
    let unset = push(&env, job(&env, "true", serde_json::Value::Null)).await;
    let payload = serde_json::json!({"limits": {"nice": 3, "ionice": "idle"}});
    let handled = push(&env, NewJob::new("work", payload)).await;
    let mut cfg = env.config();
    cfg.limits = slothqueue_core::Limits {
        nice: Some(7),
        ionice: Some(slothqueue_core::IoClass::BestEffort(Some(5))),
        ..Default::default()
    };
    let mut runner = env.runner(cfg);
    runner.register_handlers(slothqueue_runner::HandlerDirExecutor::open(&dir).unwrap());
    let (summary, lines) = env.drain(runner).await;
    assert_eq!(summary.done, 3, "{lines:?}");
    assert_eq!(limits_said(&env, own), "nice 12, ionice best-effort:5");
    assert_eq!(limits_said(&env, unset), "nice 7, ionice best-effort:5");
    assert_eq!(limits_said(&env, handled), "nice 7, ionice best-effort:5");
}
