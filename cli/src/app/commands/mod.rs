//! One function per command, each taking the validated configuration.
//!
//! Every command writes through a locked stdout and propagates write
//! errors, so `slothqueue list | head -1` ends quietly (a closed pipe maps
//! to exit 0) instead of panicking the way `println!` would.

mod add;
mod demo;
mod edit;
mod inspect;
mod lanes;
#[cfg(feature = "mcp")]
mod mcp;
mod read_back;
mod revise;
mod run;
mod schedules;
#[cfg(feature = "http")]
mod serve;
#[cfg(feature = "top")]
mod top;
mod transfer;
mod wait;

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use slothqueue::core::Schedule;
use slothqueue::{Backend, Clock, Event, Job, NewJob, OpenOptions, Store, SystemClock, Timestamp};

use super::Outcome;
use super::config::{Command, Config};
use super::exit::Code;
#[cfg(any(not(feature = "http"), not(feature = "mcp"), not(feature = "top")))]
use super::exit::usage;

/// What every command needs besides its own arguments.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// The queue file.
    pub db: PathBuf,
    /// It is the default one, whose folder may be created.
    pub default_db: bool,
    /// Where this host keeps the queue's files: its job logs beside it,
    /// the serve token (`Config::files`).
    pub files: PathBuf,
    /// The backend asked for.
    pub backend: Option<Backend>,
    /// JSON output.
    pub json: bool,
    /// Colour on.
    pub color: bool,
}

impl Ctx {
    /// Opens the queue; `create == false` for commands that only look, so
    /// that looking never leaves a file behind.
    pub fn open(&self, create: bool) -> anyhow::Result<Arc<dyn Store>> {
        Ok(slothqueue::open(
            &self.db,
            OpenOptions {
                backend: self.backend,
                create,
                create_folder: self.default_db,
                read_only: false,
                lease_ttl: None,
                full_check: false,
            },
        )?)
    }

    /// Opens (or creates) the queue for a runner whose claims hand out
    /// leases of `lease_ttl` (`None`: the default).
    pub fn open_for_runner(&self, lease_ttl: Option<Duration>) -> anyhow::Result<Arc<dyn Store>> {
        Ok(slothqueue::open(
            &self.db,
            OpenOptions {
                backend: self.backend,
                create: true,
                create_folder: self.default_db,
                read_only: false,
                lease_ttl,
                // A runner's start reads the whole file once: damage no
                // timestamp shows is found before it works for hours.
                full_check: true,
            },
        )?)
    }

    /// Opens the queue if it exists; `None` when there is no file yet.
    pub fn open_existing(&self) -> anyhow::Result<Option<Arc<dyn Store>>> {
        self.existing(OpenOptions {
            backend: self.backend,
            create: false,
            create_folder: false,
            read_only: false,
            lease_ttl: None,
            full_check: false,
        })
    }

    /// Opens the queue for a command that only looks: nothing is created
    /// or written, so the file stays byte-for-byte as it was (a writable
    /// redb open would rewrite its header even then).
    pub fn open_read_only(&self) -> anyhow::Result<Arc<dyn Store>> {
        Ok(slothqueue::open(&self.db, OpenOptions::read_only(self.backend))?)
    }

    /// [`Ctx::open_read_only`] if the file exists; `None` when there is no
    /// file yet.
    pub fn look_existing(&self) -> anyhow::Result<Option<Arc<dyn Store>>> {
        self.existing(OpenOptions::read_only(self.backend))
    }

    fn existing(&self, options: OpenOptions) -> anyhow::Result<Option<Arc<dyn Store>>> {
        match slothqueue::open(&self.db, options) {
            Ok(s) => Ok(Some(s)),
            Err(slothqueue::OpenError::Missing(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The wall clock, read once per decision.
    pub fn now(&self) -> Timestamp {
        SystemClock.now()
    }
}

/// Runs the configured command.
pub async fn execute(config: Config) -> Outcome {
    let ctx = Ctx {
        db: config.db,
        default_db: config.default_db,
        files: config.files,
        backend: config.backend,
        json: config.json,
        color: config.color,
    };
    match config.command {
        Command::Add(add) => add::add(&ctx, add).await,
        Command::AddStdin(batch) => add::add_stdin(&ctx, batch).await,
        Command::Run(run) => run::run(&ctx, run).await,
        Command::Status => inspect::status(&ctx).await,
        Command::List { filter, show_secrets } => inspect::list(&ctx, filter, show_secrets).await,
        Command::Show { id, show_secrets } => inspect::show(&ctx, id, show_secrets).await,
        Command::Logs { id, follow } => inspect::logs(&ctx, id, follow).await,
        Command::Cancel(ids) => edit::cancel(&ctx, &ids).await,
        Command::Retry(ids) => edit::retry(&ctx, &ids).await,
        Command::Clear { include_pending, older_than } => {
            edit::clear(&ctx, include_pending, older_than).await
        }
        Command::Export => transfer::export(&ctx).await,
        Command::Import(file) => transfer::import(&ctx, file).await,
        Command::Completions(shell) => {
            let mut out = io::stdout().lock();
            crate::app::complete::registration(shell, &mut out)?;
            out.flush()?;
            Ok(Code::Success)
        }
        Command::Man(dir) => crate::app::man::write(&dir),
        Command::Demo => demo::demo(&ctx).await,
        Command::Wait { target, timeout } => wait::wait(&ctx, target, timeout).await,
        Command::Parallel { queue, limit } => lanes::parallel(&ctx, &queue, limit).await,
        Command::Pause { scope, by } => lanes::pause(&ctx, scope, by).await,
        Command::Resume(scope) => lanes::resume(&ctx, scope).await,
        Command::Hold { ids, by } => lanes::hold(&ctx, &ids, &by).await,
        Command::Release { ids, by } => lanes::release(&ctx, &ids, &by).await,
        Command::Queues => lanes::queues(&ctx).await,
        #[cfg(feature = "top")]
        Command::Top { by } => top::top(&ctx, by).await,
        #[cfg(not(feature = "top"))]
        Command::Top { .. } => Err(usage(
            "top needs the terminal view, and this slothqueue was built without the \"top\" feature",
        )),
        Command::Edit(r) => revise::edit(&ctx, r).await,
        Command::Clone(r) => revise::clone(&ctx, r).await,
        Command::Every(every) => schedules::every(&ctx, every).await,
        Command::EveryChange { key, change } => schedules::change(&ctx, &key, change).await,
        Command::Schedules => schedules::schedules(&ctx).await,
        #[cfg(feature = "http")]
        Command::Serve(sc) => serve::serve(&ctx, sc).await,
        #[cfg(not(feature = "http"))]
        Command::Serve(_) => Err(usage(
            "serve needs the HTTP API, and this slothqueue was built without the \"http\" feature",
        )),
        #[cfg(feature = "mcp")]
        Command::Mcp(mc) => mcp::mcp(&ctx, mc).await,
        #[cfg(not(feature = "mcp"))]
        Command::Mcp(_) => Err(usage(
            "mcp needs the MCP server, and this slothqueue was built without the \"mcp\" feature",
        )),
    }
}

/// How a job's secret-looking environment values (`core::shell::
/// looks_secret`) appear in what a command prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secrets {
    /// As [`slothqueue::core::shell::MASK`]: what every look prints unless
    /// asked, so a terminal, a log or a screen share shows no token.
    Masked,
    /// As stored (`--show-secrets`).
    Shown,
    /// As stored, and named in a `secrets` list beside the job: `export`,
    /// whose lines must restore the job as it is and say what they hold.
    Marked,
}

/// A job as JSON, with its trail when given: the job table's field names,
/// secret-looking values masked. Every presenter of a job goes through
/// here or [`job_json_with`].
pub fn job_json(job: &Job, events: Option<&[Event]>) -> anyhow::Result<serde_json::Value> {
    job_json_with(job, events, Secrets::Masked)
}

/// [`job_json`] with the secrets as asked (which jobs have any is
/// `core::shell::masked_payload`'s rule: shell jobs only).
pub fn job_json_with(
    job: &Job,
    events: Option<&[Event]>,
    secrets: Secrets,
) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(job)?;
    if let Some(obj) = v.as_object_mut() {
        match secrets {
            Secrets::Masked => {
                obj.insert("payload".to_owned(), slothqueue::core::shell::masked_payload(job));
            }
            Secrets::Marked => {
                let names = slothqueue::core::shell::marked_secrets(job);
                if !names.is_empty() {
                    obj.insert("secrets".to_owned(), names.into());
                }
            }
            Secrets::Shown => {}
        }
        if let Some(events) = events {
            obj.insert("events".to_owned(), serde_json::to_value(events)?);
        }
    }
    Ok(v)
}

/// The secret-looking names of a schedule's job, and its payload as shown
/// without them, by the rule a queued job follows
/// (`core::shell::masked_payload_of`, `marked_secrets_of`).
fn new_job_secrets(job: &NewJob) -> (serde_json::Value, Vec<String>) {
    use slothqueue::core::shell;
    (
        shell::masked_payload_of(&job.kind, &job.payload),
        shell::marked_secrets_of(&job.kind, &job.payload),
    )
}

/// A schedule as `every`, `schedules` and the changes print it: its
/// stored fields and `next_fire` (UTC ms, `null` while paused or with no
/// slot left), its job's secret-looking values masked as every look masks
/// a job's.
pub fn schedule_json(s: &Schedule) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(s)?;
    let (masked, _) = new_job_secrets(&s.job);
    if let Some(obj) = v.as_object_mut() {
        if let Some(job) = obj.get_mut("job").and_then(|j| j.as_object_mut()) {
            job.insert("payload".to_owned(), masked);
        }
        obj.insert("next_fire".to_owned(), serde_json::to_value(s.next_fire())?);
    }
    Ok(v)
}

/// A schedule as an export line holds it: `{"schedule": SCHEDULE}` with
/// its stored fields only (what `import` restores as it was), and
/// `"secrets": [NAME…]` beside it when its job holds secret-looking
/// variables (their values are in the line, as a job line's are).
pub fn schedule_line(s: &Schedule) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::json!({ "schedule": serde_json::to_value(s)? });
    let (_, names) = new_job_secrets(&s.job);
    if !names.is_empty() {
        v["secrets"] = names.into();
    }
    Ok(v)
}

/// Writes `value` as one line of JSON.
pub fn print_json(out: &mut impl Write, value: &serde_json::Value) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}
