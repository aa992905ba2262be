//! The shared conformance suite on PostgreSQL: each scenario's queue path
//! names its own schema on the server of `SLOTHQUEUE_PG_URL` (the same path
//! the same schema, also from the child processes the suite starts, which
//! inherit the variable). Without the variable every test says it skipped
//! and passes, unless `SLOTHQUEUE_PG_REQUIRED=1`.

use std::path::Path;
use std::sync::Arc;

use slothqueue_core::{Policy, Store, StoreError};
use slothqueue_store_postgres::testing::{pg_available, schema_url_for_path, url_from_env};
use slothqueue_store_postgres::{PgOptions, PgStore};

fn open(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
    let base =
        url_from_env().ok_or_else(|| StoreError::Backend("SLOTHQUEUE_PG_URL unset".into()))?;
    let url = schema_url_for_path(&base, path);
    Ok(Arc::new(PgStore::open(&url, PgOptions { policy, ..PgOptions::default() })?))
}

slothqueue_conformance::conformance_suite!(open, when = pg_available);
