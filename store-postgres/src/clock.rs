//! One clock: the offset of the server's clock from this host's, measured
//! when a store opens and every minute after, so that every call is
//! judged on the server's clock (see the crate docs, "One clock"); and the
//! jobs of a stream judged the same way as they are pushed.

use std::sync::{Arc, Mutex};

use slothqueue_core::{Clock, JobSource, NewJob, StoreError, SystemClock, Timestamp};

use crate::error::Error;
use crate::txn::{Db, HostClock};

/// Below this, an offset between the host's clock and the server's is
/// taken for noise (round trips, hosts synced by NTP) and treated as 0, so
/// the times a caller passes go through exactly.
pub(crate) const NEGLIGIBLE_OFFSET_MS: i64 = 250;

/// How often the offset is measured again.
pub(crate) const REMEASURE_EVERY_MS: i64 = 60_000;

/// The offset of the server's clock from this host's, measured at open
/// and again every minute: every call is judged at `now + offset`.
pub(crate) struct ServerClock {
    host: HostClock,
    /// (offset in ms, host time it was measured at).
    state: Mutex<(i64, Option<Timestamp>)>,
}

/// The jobs of a [`slothqueue_core::Store::push_stream`] with their own
/// times on the server's clock, as a batch's are: `judge` applied to each
/// as the push takes it.
pub(crate) struct Judged<F> {
    pub source: Arc<dyn JobSource>,
    pub judge: F,
}

impl<F: Fn(NewJob) -> NewJob + Send + Sync> JobSource for Judged<F> {
    fn jobs(&self) -> Box<dyn Iterator<Item = Result<NewJob, StoreError>> + '_> {
        Box::new(self.source.jobs().map(|job| job.map(&self.judge)))
    }
}

impl ServerClock {
    pub fn new(host: Option<HostClock>) -> ServerClock {
        let host = host.unwrap_or_else(|| Arc::new(|| SystemClock.now()));
        ServerClock { host, state: Mutex::new((0, None)) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (i64, Option<Timestamp>)> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The offset now in force, in milliseconds (0 when negligible).
    pub fn offset_ms(&self) -> i64 {
        self.lock().0
    }

    /// `now` of the host's clock on the server's.
    pub fn judge(&self, now: Timestamp) -> Timestamp {
        Timestamp::from_millis(now.as_millis().saturating_add(self.offset_ms()))
    }

    /// A new job's own times (its due time), given on the host's clock, on
    /// the server's.
    pub fn judge_new(&self, mut job: NewJob) -> NewJob {
        job.not_before = job.not_before.map(|t| self.judge(t));
        job
    }

    /// A time of the server's clock on the host's.
    pub fn to_host(&self, t: Timestamp) -> Timestamp {
        Timestamp::from_millis(t.as_millis().saturating_sub(self.offset_ms()))
    }

    /// Whether the last measure is older than [`REMEASURE_EVERY_MS`].
    pub fn stale(&self) -> bool {
        let at = self.lock().1;
        at.is_none_or(|at| ((self.host)().as_millis() - at.as_millis()).abs() >= REMEASURE_EVERY_MS)
    }

    /// Measures the offset on `db`: a few `clock_timestamp()` samples, the
    /// one with the shortest round trip, its midpoint.
    pub fn measure(&self, db: &Db<'_>) -> Result<i64, Error> {
        let mut best: Option<(i64, i64)> = None;
        for _ in 0..5 {
            let before = (self.host)().as_millis();
            let row =
                db.query_opt("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT", &[])?;
            let after = (self.host)().as_millis();
            let Some(row) = row else { continue };
            let server: i64 = row.try_get(0)?;
            let rtt = after - before;
            let offset = server - (before + rtt / 2);
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, offset));
            }
        }
        let offset = match best {
            Some((_, o)) if o.abs() >= NEGLIGIBLE_OFFSET_MS => o,
            _ => 0,
        };
        *self.lock() = (offset, Some((self.host)()));
        Ok(offset)
    }
}
