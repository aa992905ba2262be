//! Change notifications: one dedicated connection `LISTEN`s on the
//! queue's channel and calls back on every notification; every write that
//! can make work claimable or change what a waiter waits for sends one
//! (`pg_notify`) inside its transaction, delivered when it commits.
//!
//! A lost connection is retried after a pause, and the callback called
//! once each time listening (re)starts: notifications sent while nobody
//! listened are gone.
//!
//! Through a pooler in transaction mode (`?pooler=transaction`) there is
//! no session to `LISTEN` on: the pooler hands the server connection to
//! another client after each transaction, and the notifications would go
//! to whoever holds it. There the callback is called every
//! [`POLL_EVERY`] instead (and once at once), and the caller looks for
//! itself: a waiting runner makes one claim a second (one transaction of
//! a few statements) where a direct connection would wake it only on a
//! change, and a change is seen up to a second late.

use std::future::poll_fn;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_postgres::{AsyncMessage, NoTls};

/// Listening for a queue's changes; stops when dropped.
#[derive(Debug)]
pub struct ChangeListener {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChangeListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pause after a failed or lost connection.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Through a pooler: how often the callback is called.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

pub(crate) fn spawn(
    rt: &Handle,
    session: crate::txn::Session,
    channel: String,
    f: Box<dyn Fn() + Send + Sync>,
) -> ChangeListener {
    if session.per_transaction.is_some() {
        let task = rt.spawn(async move {
            let mut every = tokio::time::interval(POLL_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                f();
            }
        });
        return ChangeListener { task };
    }
    let config = session.config;
    let task = rt.spawn(async move {
        loop {
            // Each return is a lost connection (or one never made).
            let _ = listen_once(&config, &channel, &*f).await;
            tokio::time::sleep(RETRY_AFTER).await;
        }
    });
    ChangeListener { task }
}

/// Connects, listens, calls `f` once (changes may have been missed until
/// now) and then on every notification, until the connection ends.
async fn listen_once(
    config: &tokio_postgres::Config,
    channel: &str,
    f: &(dyn Fn() + Send + Sync),
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(_)) => {
                    if tx.send(()).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    let listening = client.batch_execute(&format!("LISTEN \"{channel}\"")).await;
    if let Err(e) = listening {
        driver.abort();
        return Err(e);
    }
    f();
    // Ends when the driver does (the connection is gone); the client
    // stays alive until then, so the connection is not closed under it.
    while rx.recv().await.is_some() {
        f();
    }
    drop(client);
    Ok(())
}
