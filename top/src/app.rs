//! The runtime glue, kept thin: it takes the terminal, reads the queue
//! when the queue says it changed (`QueueWatch`: a file watch for a file,
//! `LISTEN` for PostgreSQL; a full read every poll interval as the watch's
//! safety net), follows the open job's log and the clock every second,
//! turns keys into the model's effects, performs actions, and draws. It
//! ends on `q`, Ctrl-C (a key in raw mode), SIGINT, SIGTERM and SIGHUP,
//! giving the terminal back each time (a panic's hook does it too).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ratatui::crossterm::event::{self, Event as TermEvent, KeyEvent};
use slothqueue::runner::{ProcJudge, QueueWatch};
use slothqueue::{Clock, Owner, Store, SystemClock};
use slothqueue_view::Look;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::error::TopError;
use crate::keys::Key;
use crate::model::{Detail, Effect, Model, Screen};
use crate::{act, frame, load, term};

/// What `top` needs besides the store.
#[derive(Clone, Debug)]
pub struct Options {
    /// The queue as its title shows it (a path, or a URL without its password).
    pub title: String,
    /// The queue file (or URL), for the change watch's notice.
    pub queue: PathBuf,
    /// The folder of the job logs.
    pub log_dir: PathBuf,
    /// Who acts, as holds and pauses record it (`ana@laptop`).
    pub who: String,
    /// This host's name, as runners record it.
    pub this_host: String,
}

/// The clock's tick: the title's clock and the open log follow it.
const TICK: Duration = Duration::from_secs(1);

/// The least time between two reads of the queue.
const READ_GAP: Duration = Duration::from_millis(100);

/// What the key reader sends.
enum Input {
    Key(KeyEvent),
    Resize,
}

/// Runs `top` on `store` until the person quits or a signal ends it; the
/// terminal is given back in every case.
pub async fn run(store: Arc<dyn Store>, options: Options) -> Result<(), TopError> {
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let watch = QueueWatch::for_store(&options.queue, store.as_ref());
    let mut screen = term::Screen::take()?;
    let inputs = read_keys();
    let mut model = Model::new(options.title.clone(), options.this_host.clone());
    if let Some(notice) = watch.notice() {
        model.message = Some(notice.to_owned());
    }
    let ended = steer(&store, &options, &watch, &mut screen, inputs, &mut model, async {
        tokio::select! {
            _ = sigterm.recv() => {}
            _ = sigint.recv() => {}
            _ = sighup.recv() => {}
        }
    })
    .await;
    drop(screen);
    ended
}

/// The loop: read when stale, draw, wait for the next thing to happen.
#[allow(clippy::too_many_arguments, reason = "the loop's parts, each named once")]
async fn steer(
    store: &Arc<dyn Store>,
    options: &Options,
    watch: &QueueWatch,
    screen: &mut term::Screen,
    mut inputs: mpsc::UnboundedReceiver<Input>,
    model: &mut Model,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), TopError> {
    tokio::pin!(stop);
    let mut changes = watch.changes();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut poll = tokio::time::interval(watch.poll_interval());
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let judge = ProcJudge::new();
    let judge = move |owner: &Owner| judge.judge_owner(owner);
    let mut stale = true;
    let mut failed_read: Option<String> = None;
    let mut last_read =
        tokio::time::Instant::now().checked_sub(READ_GAP).unwrap_or_else(tokio::time::Instant::now);
    loop {
        if stale {
            stale = false;
            // A queue that changes all the time (a busy runner) is read at
            // most every READ_GAP, not once per commit.
            tokio::time::sleep_until(last_read + READ_GAP).await;
            last_read = tokio::time::Instant::now();
            changes.mark_seen();
            let look = Look {
                store: store.as_ref(),
                now: SystemClock.now(),
                judge: &judge,
                this_host: &options.this_host,
            };
            let log = match (&model.snapshot.detail, model.screen) {
                (Some(Detail::Found { view, log }), Screen::Job(id)) if view.job.id == id => {
                    Some((id, log.clone()))
                }
                _ => None,
            };
            match load::snapshot(&look, model.screen, &model.filters, &options.log_dir, log).await {
                Ok(s) => {
                    model.take(s);
                    // A read that failed before is not the news any more.
                    if model.message.is_some() && model.message == failed_read.take() {
                        model.message = None;
                    }
                }
                Err(e) => {
                    failed_read = Some(e.to_string());
                    model.message.clone_from(&failed_read);
                }
            }
        }
        screen.terminal.draw(|f| frame::draw(f, model))?;
        tokio::select! {
            () = &mut stop => return Ok(()),
            () = changes.changed() => stale = true,
            _ = poll.tick() => stale = true,
            _ = tick.tick() => follow(model, options),
            input = inputs.recv() => match input {
                None => return Ok(()),
                Some(Input::Resize) => {}
                Some(Input::Key(k)) => {
                    let Some(key) = Key::from_event(&k) else { continue };
                    match model.key(key) {
                        Effect::Quit => return Ok(()),
                        Effect::Redraw => {}
                        Effect::Reload => stale = true,
                        Effect::Act(action) => {
                            let said = act::perform(
                                store.as_ref(),
                                &action,
                                &options.who,
                                SystemClock.now(),
                            )
                            .await;
                            model.message = Some(said);
                            stale = true;
                        }
                    }
                }
            },
        }
    }
}

/// The second's work: the clock moves, and the open job's log is read on.
fn follow(model: &mut Model, options: &Options) {
    model.snapshot.now = SystemClock.now();
    if let Some(Detail::Found { view, log }) = &mut model.snapshot.detail {
        let before = std::mem::take(log);
        *log = load::follow_log(&options.log_dir, view.job.id, Some(before));
    }
}

/// Reads the terminal's events on a thread of its own (crossterm's read
/// blocks), handing keys and resizes to the loop. The thread ends when the
/// loop is gone or the terminal cannot be read; at the process's end it
/// is left blocked, which holds nothing.
fn read_keys() -> mpsc::UnboundedReceiver<Input> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        loop {
            let input = match event::read() {
                Ok(TermEvent::Key(k)) => Input::Key(k),
                Ok(TermEvent::Resize(..)) => Input::Resize,
                Ok(_) => continue,
                Err(_) => return,
            };
            if tx.send(input).is_err() {
                return;
            }
        }
    });
    rx
}
