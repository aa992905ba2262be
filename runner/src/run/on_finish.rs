//! The `--on-finish` command: a shell command run after each completed or
//! failed attempt, told how it went through its environment. It is a
//! notification, so it can never decide a job's fate or stop the runner.

use std::path::PathBuf;

use slothqueue_core::Job;
use tokio::time::Instant;

use crate::exec::{ExecOutcome, ProcessSpec, run_process};
use crate::run::drive::Oversight;
use crate::run::worker::Worker;

impl Worker {
    /// Runs the `--on-finish` command for `job` (as recorded after the
    /// attempt), killing its group after the on-finish timeout. Its failure
    /// is a warning.
    pub(super) async fn on_finish(&mut self, job: &Job) {
        let Some(command) = self.cfg.on_finish.clone() else { return };
        let env = vec![
            ("SLOTHQUEUE_STATE".to_owned(), job.state.as_str().to_owned()),
            (
                "SLOTHQUEUE_EXIT_CODE".to_owned(),
                job.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            ),
            ("SLOTHQUEUE_RESULT".to_owned(), job.result.clone().unwrap_or_default()),
            ("SLOTHQUEUE_ERROR".to_owned(), job.last_error.clone().unwrap_or_default()),
        ];
        let spec = ProcessSpec {
            program: PathBuf::from(crate::exec::SHELL),
            args: vec!["-c".into(), command.clone().into()],
            cwd: None,
            env,
            env_mode: slothqueue_core::shell::EnvMode::Inherit,
            limits: None,
            stdin: None,
            what: format!("on-finish: {command}"),
        };
        // Its process group is not recorded anywhere: a successor has no
        // lease of it to sweep.
        let (ctx, stopper, _) = self.exec_context(job.attempts, self.now(), None, None);
        let oversight = Oversight {
            deadline: Some(Instant::now() + self.cfg.on_finish_timeout),
            signals_seen: self.shutdown.count(),
            job: None,
            record_running_at: None,
            news: None,
            containment: None,
            pause: None,
        };
        let driven = self.drive(run_process(job, spec, ctx), stopper, oversight).await;
        let problem = match driven.outcome {
            ExecOutcome::Success { .. } => return,
            ExecOutcome::Failure { error, .. } => error,
            ExecOutcome::Stopped { detail } => format!("stopped ({detail})"),
        };
        self.warn(format!("on-finish command for job #{} failed: {problem}", job.id));
    }
}
