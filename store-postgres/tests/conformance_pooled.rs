//! The shared conformance suite once more, through a PgBouncer in
//! transaction mode with two server connections (`?pooler=transaction`):
//! every scenario's transactions run on whichever server connection is
//! free, with no session state (see `txn::Session`). `cargo xtask pg`
//! starts the pooler with the cluster when `pgbouncer` is installed and
//! sets `SLOTHQUEUE_PG_POOLER_URL`; without it every test says it skipped
//! and passes, unless `CI` is set (CI installs PgBouncer).

use std::path::Path;
use std::sync::Arc;

use slothqueue_core::{Policy, Store, StoreError};
use slothqueue_store_postgres::testing::{schema_url_for_path, url_from_env};
use slothqueue_store_postgres::{PgOptions, PgStore};

/// Where `cargo xtask pg` says its PgBouncer listens.
const POOLER_ENV: &str = "SLOTHQUEUE_PG_POOLER_URL";

fn pooler_url() -> Option<String> {
    url_from_env()?;
    if let Some(url) = std::env::var(POOLER_ENV).ok().filter(|u| !u.is_empty()) {
        return Some(url);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{POOLER_ENV} is not set but CI is: install pgbouncer (.ci/run does) so that \
         `cargo xtask pg` starts one"
    );
    #[expect(clippy::print_stderr, reason = "a skipped test says so where cargo test shows it")]
    let () = eprintln!("SKIPPED: no {POOLER_ENV} (install pgbouncer; `cargo xtask pg` starts it)");
    None
}

fn pooler_available() -> bool {
    pooler_url().is_some()
}

fn open(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
    let base = pooler_url().ok_or_else(|| StoreError::Backend(format!("{POOLER_ENV} unset")))?;
    let url = schema_url_for_path(&base, path);
    Ok(Arc::new(PgStore::open(&url, PgOptions { policy, ..PgOptions::default() })?))
}

slothqueue_conformance::conformance_suite!(open, when = pooler_available);
