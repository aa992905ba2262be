//! `GET /metrics`: the queue in a Prometheus exposition format, chosen by
//! the scraper's `Accept` as Prometheus' own Go client chooses it:
//! OpenMetrics 1.0 (as the official Rust client `prometheus-client` writes
//! it) when asked for, else the 0.0.4 text format (what `promtool check
//! metrics` reads, and what a plain `curl` gets).
//!
//! Gauges are read from the queue file at each scrape, so they hold for
//! every process on it; counters are this server's drain worker's, from
//! its events since the server started (a restart starts them at 0, which
//! Prometheus' `rate()` expects of a counter). docs/metrics.md says what
//! each one means.

use std::sync::atomic::AtomicU64;

use std::collections::HashSet;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use slothqueue_core::{JobState, ListFilter, ListOrder};
use slothqueue_runner::RunnerEvent;

use crate::serving;
use crate::{AppState, HttpError};

/// Where the exposition is served.
pub(crate) const PATH: &str = "/metrics";

/// The content type of the OpenMetrics exposition.
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the 0.0.4 text exposition.
pub(crate) const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition formats a scraper may get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// The Prometheus text format 0.0.4: every family's HELP and TYPE name
    /// its series (`…_total` for a counter), no `# EOF`.
    Text,
    /// OpenMetrics 1.0: a counter's family is named without `_total`, and
    /// the body ends with `# EOF`.
    OpenMetrics,
}

/// The format an `Accept` header asks for, by the rule of Prometheus' Go
/// client (`expfmt.Negotiate`): the media ranges from the highest `q` down
/// (the order given among equals), the first that names one of the two
/// formats wins (`text/plain` with no version or `0.0.4`;
/// `application/openmetrics-text` with no version, `0.0.1` or `1.0.0`);
/// anything else, no header and `*/*` included, gets the text format. A
/// range with `q=0` (or a `q` that is no number from 0 to 1) is left out.
/// Prometheus itself sends OpenMetrics first, so it gets OpenMetrics.
pub(crate) fn negotiate(accept: Option<&str>) -> Format {
    let mut ranges: Vec<(f32, Option<Format>)> = Vec::new();
    for range in accept.unwrap_or("").split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let (mut q, mut version) = (1.0_f32, None);
        for param in parts {
            let Some((name, value)) = param.split_once('=') else { continue };
            let value = value.trim().trim_matches('"');
            match name.trim().to_ascii_lowercase().as_str() {
                "q" => q = value.parse().ok().filter(|q| (0.0..=1.0).contains(q)).unwrap_or(0.0),
                "version" => version = Some(value.to_owned()),
                _ => {}
            }
        }
        let format = match (media.as_str(), version.as_deref()) {
            ("text/plain", None | Some("0.0.4")) => Some(Format::Text),
            ("application/openmetrics-text", None | Some("0.0.1" | "1.0.0")) => {
                Some(Format::OpenMetrics)
            }
            _ => None,
        };
        if q > 0.0 {
            ranges.push((q, format));
        }
    }
    // A stable sort: among equal `q`, the order the client gave.
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranges.into_iter().find_map(|(_, f)| f).unwrap_or(Format::Text)
}

/// The 0.0.4 text form of an OpenMetrics exposition as `prometheus-client`
/// writes it: a counter family's HELP and TYPE lines name its `_total`
/// series (the 0.0.4 parser, promtool's, knows a family only by its
/// series' name), `# UNIT` and `# EOF` go, and a HELP text loses the
/// `\"` escape the 0.0.4 format does not have. The samples are the same
/// lines in both formats.
pub(crate) fn text_004(open_metrics: &str) -> String {
    let counters: HashSet<&str> = open_metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .filter(|(_, kind)| *kind == "counter")
        .map(|(name, _)| name)
        .collect();
    let mut text = String::with_capacity(open_metrics.len());
    for line in open_metrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)))
            .and_then(|(p, rest)| rest.split_once(' ').map(|(name, tail)| (p, name, tail)));
        match meta {
            Some((prefix, name, tail)) => {
                let total = if counters.contains(name) { "_total" } else { "" };
                let tail =
                    if prefix == "# HELP " { tail.replace("\\\"", "\"") } else { tail.to_owned() };
                text.push_str(&format!("{prefix}{name}{total} {tail}"));
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

/// A label set: `(name, value)` pairs.
type Labels = Vec<(&'static str, String)>;

/// The outcomes `slothqueue_attempts_total` counts, each present from the
/// start (at 0).
const OUTCOMES: [&str; 5] = ["done", "failed", "cancelled", "lease_lost", "released"];

/// What the drain worker did since the server started, counted from its
/// events. Cloning shares the counts.
#[derive(Clone, Debug)]
pub(crate) struct WorkerCounters {
    /// Attempts that ended, by outcome.
    attempts: Family<Labels, Counter>,
    /// Failed attempts that will be tried again.
    retries: Counter,
    /// Jobs that failed for good (no attempt left).
    failures: Counter,
    /// Attempts stopped because no renewal of their lease reached the
    /// store in time (the self-fence). Each also ends later as an attempt
    /// (`failed` or `lease_lost`) once the store answers again, so it is a
    /// counter of its own rather than an outcome.
    fences: Counter,
}

impl Default for WorkerCounters {
    fn default() -> Self {
        let attempts = Family::<Labels, Counter>::default();
        for outcome in OUTCOMES {
            let _ = attempts.get_or_create(&vec![("outcome", outcome.to_owned())]);
        }
        WorkerCounters {
            attempts,
            retries: Counter::default(),
            failures: Counter::default(),
            fences: Counter::default(),
        }
    }
}

impl WorkerCounters {
    /// Counts one of the worker's events.
    pub(crate) fn count(&self, event: &RunnerEvent) {
        let outcome = match event {
            RunnerEvent::Done { .. } => "done",
            RunnerEvent::Failed { retry, .. } => {
                if retry.is_some() {
                    self.retries.inc();
                } else {
                    self.failures.inc();
                }
                "failed"
            }
            RunnerEvent::Cancelled { .. } => "cancelled",
            RunnerEvent::LeaseLost { .. } => "lease_lost",
            RunnerEvent::Released { .. } => "released",
            RunnerEvent::Fenced { .. } => {
                self.fences.inc();
                return;
            }
            _ => return,
        };
        self.attempts.get_or_create(&vec![("outcome", outcome.to_owned())]).inc();
    }
}

/// One gauge per label set, set once.
fn gauges(values: impl IntoIterator<Item = (Labels, i64)>) -> Family<Labels, Gauge> {
    let family = Family::<Labels, Gauge>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).set(value);
    }
    family
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The exposition: read the queue file now, add the worker's counters.
pub(crate) async fn metrics(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, HttpError> {
    let format = negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let store = app.store.as_ref();
    let now = app.api.clock.now();
    // What `status` says (the read model's), and each queue's counts
    // whether or not a lane has settings.
    let (judge, host) = (serving::judge(), serving::this_host());
    let look = serving::look(&app, &judge, &host);
    let status = slothqueue_view::status(&look).await.map_err(serving::view_error)?;
    let (stats, live, unserved, schedules, host_gpus) =
        (status.stats, status.live, status.unserved, status.schedules, status.gpus);
    let lanes = store.queue_counts(now).await?;
    let oldest = store
        .list(&ListFilter {
            state: Some(JobState::Pending),
            order: ListOrder::Oldest,
            limit: Some(1),
            ..ListFilter::default()
        })
        .await?;

    let mut registry = Registry::with_prefix("slothqueue");
    let states = [
        ("pending", stats.pending),
        ("running", stats.running),
        ("done", stats.done),
        ("failed", stats.failed),
        ("cancelled", stats.cancelled),
    ];
    registry.register(
        "jobs",
        "Jobs in the queue file by state",
        gauges(states.map(|(s, n)| (vec![("state", s.to_owned())], count(n)))),
    );
    let due = Gauge::<i64>::default();
    due.set(count(stats.due_now));
    registry.register(
        "jobs_due",
        "Pending jobs a runner could start now (due, no parent left, not held)",
        due,
    );
    let per_lane = lanes.iter().flat_map(|l| {
        [
            ("pending", l.pending),
            ("due", l.due),
            ("held", l.held),
            ("waiting_on_parents", l.waiting_on_parents),
            ("running", l.running),
        ]
        .map(|(s, n)| (vec![("queue", l.queue.clone()), ("state", s.to_owned())], count(n)))
    });
    registry.register(
        "queue_jobs",
        "Pending (and of them due, held, waiting on parents) and running jobs by queue",
        gauges(per_lane),
    );
    let oldest_age = oldest.first().map_or(0.0, |j| now.duration_since(j.created_at).as_secs_f64());
    let age = Gauge::<f64, AtomicU64>::default();
    age.set(oldest_age);
    registry.register(
        "oldest_pending_age_seconds",
        "Seconds since the oldest pending job was added (0 when none is pending)",
        age,
    );
    let runners = Gauge::<i64>::default();
    runners.set(i64::try_from(live.len()).unwrap_or(i64::MAX));
    registry.register(
        "runners_alive",
        "Runners alive on the queue file (this server's worker among them)",
        runners,
    );
    registry.register(
        "unserved_jobs",
        "Pending jobs no live runner can run (no handler for their kind, or no runner of their queue), by queue and kind",
        gauges(unserved.iter().map(|u| {
            (vec![("queue", u.queue.clone()), ("kind", u.kind.clone())], count(u.pending))
        })),
    );
    register_gpus(&mut registry, &host_gpus);
    let lag = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for s in schedules.iter().filter(|s| s.paused.is_none()) {
        let behind =
            s.next_fire().filter(|t| *t < now).map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        lag.get_or_create(&vec![("schedule", s.key.clone())]).set(behind);
    }
    registry.register(
        "schedule_lag_seconds",
        "How long a schedule's next tick is overdue (0 while it is not yet due), by schedule; paused ones left out",
        lag,
    );
    let counters = &app.api.counters;
    registry.register(
        "attempts",
        "Attempts this server's drain worker ended since it started, by outcome",
        counters.attempts.clone(),
    );
    registry.register(
        "retries",
        "Failed attempts of this server's drain worker that will be tried again",
        counters.retries.clone(),
    );
    registry.register(
        "failures",
        "Jobs this server's drain worker failed for good (no attempt left)",
        counters.failures.clone(),
    );
    registry.register(
        "fences",
        "Attempts this server's drain worker stopped because no renewal of their lease reached the store in time",
        counters.fences.clone(),
    );
    let mut text = String::new();
    encode(&mut text, &registry).map_err(|_| HttpError::Internal)?;
    let (content_type, body) = match format {
        Format::OpenMetrics => (OPENMETRICS, text),
        Format::Text => (TEXT, text_004(&text)),
    };
    Ok(([(header::CONTENT_TYPE, content_type), (header::VARY, "Accept")], body))
}

/// The GPUs the live runners last saw (`status`'s list): how many of each
/// host's are free, held by a job or busy with other work, and each one's
/// memory in use and utilization.
fn register_gpus(registry: &mut Registry, hosts: &[slothqueue_view::HostGpus]) {
    let by_use = Family::<Labels, Gauge>::default();
    let memory = Family::<Labels, Gauge>::default();
    let utilization = Family::<Labels, Gauge>::default();
    for h in hosts {
        for u in ["free", "held", "busy"] {
            let _ = by_use.get_or_create(&vec![("host", h.host.clone()), ("use", u.to_owned())]);
        }
        for g in &h.gpus {
            let u = match g.used {
                slothqueue_core::gpu::GpuUse::Free => "free",
                slothqueue_core::gpu::GpuUse::Held { .. } => "held",
                slothqueue_core::gpu::GpuUse::Busy => "busy",
            };
            by_use.get_or_create(&vec![("host", h.host.clone()), ("use", u.to_owned())]).inc();
            let gpu = vec![("host", h.host.clone()), ("gpu", g.gpu.index.to_string())];
            memory.get_or_create(&gpu).set(i64::try_from(g.gpu.memory_used).unwrap_or(i64::MAX));
            if let Some(p) = g.gpu.utilization {
                utilization.get_or_create(&gpu).set(i64::from(p));
            }
        }
    }
    registry.register(
        "gpus",
        "GPUs the live runners last saw, by host and use: free, held by a running job, busy with other work",
        by_use,
    );
    registry.register(
        "gpu_memory_used_bytes",
        "Memory in use on each GPU the live runners last saw, by host and index",
        memory,
    );
    registry.register(
        "gpu_utilization_percent",
        "Utilization of each GPU the live runners last saw, by host and index",
        utilization,
    );
}

/// The OpenAPI operation of `GET /metrics`.
pub(crate) fn op_metrics() -> Value {
    json!({
        "operationId": "metrics",
        "summary": "the queue in a Prometheus exposition format: OpenMetrics 1.0 when `Accept` asks for it first (as Prometheus does), else the text format 0.0.4 (promtool's); jobs by state and by queue, the oldest pending job's age, runners alive, jobs no runner can run, schedule lag, and the drain worker's attempts, retries and failures (docs/metrics.md)",
        "responses": {
            "200": {
                "description": "the exposition",
                "content": {
                    TEXT: { "schema": { "type": "string" } },
                    OPENMETRICS: { "schema": { "type": "string" } }
                }
            },
            "401": { "$ref": "#/components/responses/Error" },
            "403": { "$ref": "#/components/responses/Error" },
            "405": { "$ref": "#/components/responses/Error" },
            "503": { "$ref": "#/components/responses/Error" }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_text_format() {
        // What Prometheus 2.42 sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(negotiate(Some("application/openmetrics-text")), Format::OpenMetrics);
        for text in [
            None,
            Some(""),
            Some("*/*"),
            Some("text/plain"),
            Some("text/plain;version=0.0.4"),
            Some("text/plain; version=0.0.4; charset=utf-8"),
            Some("application/json"),
            Some("application/openmetrics-text;version=2.0.0"),
            Some("application/openmetrics-text;q=0"),
            Some("application/openmetrics-text;q=0.2, text/plain;q=0.9"),
            Some("text/plain, application/openmetrics-text"),
            Some("application/openmetrics-text;q=x"),
        ] {
            assert_eq!(negotiate(text), Format::Text, "{text:?}");
        }
        assert_eq!(
            negotiate(Some("text/plain;q=0.5, application/openmetrics-text;q=0.6")),
            Format::OpenMetrics
        );
        assert_eq!(negotiate(Some("*/*, application/openmetrics-text")), Format::OpenMetrics);
    }

    #[test]
    fn the_text_format_names_a_counter_by_its_series() {
        let om = "# HELP q_attempts Attempts \\\"ended\\\".\n# TYPE q_attempts counter\n# UNIT q_attempts seconds\nq_attempts_total{outcome=\"done\"} 1\n# HELP q_jobs Jobs.\n# TYPE q_jobs gauge\nq_jobs 2\n# EOF\n";
        assert_eq!(
            text_004(om),
            "# HELP q_attempts_total Attempts \"ended\".\n# TYPE q_attempts_total counter\nq_attempts_total{outcome=\"done\"} 1\n# HELP q_jobs Jobs.\n# TYPE q_jobs gauge\nq_jobs 2\n"
        );
    }

    #[test]
    fn a_fence_is_counted_apart_from_the_attempts_outcomes() {
        let counters = WorkerCounters::default();
        let fenced = RunnerEvent::Fenced {
            job: 3,
            silent: Duration::from_secs(57),
            grace: Duration::from_secs(2),
        };
        counters.count(&fenced);
        counters.count(&fenced);
        assert_eq!(counters.fences.get(), 2);
        let ended: u64 = OUTCOMES
            .iter()
            .map(|o| counters.attempts.get_or_create(&vec![("outcome", (*o).to_owned())]).get())
            .sum();
        assert_eq!(ended, 0, "a fence is not an attempt's end: that is counted when it comes");
    }
}
