//! `top`: a live view of the queue in the terminal, with keys to steer it
//! (`slothqueue-top` holds the view; this opens the queue as the other
//! commands do and hands it over with who acts and where the logs are).

use slothqueue_top::{Options, TopError};

use super::Ctx;
use super::inspect::this_host;
use crate::app::Outcome;
use crate::app::config::log_dir;
use crate::app::exit::{Code, NotFound, usage};

/// Runs the view until `q`, Ctrl-C or a signal; the terminal is given
/// back as it was in every case.
pub async fn top(ctx: &Ctx, by: String) -> Outcome {
    let Some(store) = ctx.open_existing()? else {
        return Err(NotFound(format!(
            "no queue at {} yet: add a job first (`slothqueue add CMD`), then watch it with top",
            slothqueue::shown(&ctx.db)
        ))
        .into());
    };
    let options = Options {
        title: slothqueue::shown(&ctx.db),
        queue: ctx.db.clone(),
        log_dir: log_dir(&ctx.files),
        who: by,
        this_host: this_host(),
    };
    match slothqueue_top::run(store, options).await {
        Ok(()) => Ok(Code::Success),
        Err(e @ TopError::NotATerminal) => Err(usage(e.to_string())),
        Err(e) => Err(e.into()),
    }
}
