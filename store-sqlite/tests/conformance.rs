//! The shared conformance suite on SQLite, twice: with the default options
//! (WAL), and again with the rollback journal, to show correctness does not
//! hang on WAL.

use std::path::Path;
use std::sync::Arc;

use slothqueue_core::{Policy, Store, StoreError};
use slothqueue_store_sqlite::{Journal, SqliteOptions, SqliteStore};

fn open(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(SqliteStore::open(path, SqliteOptions { policy, ..SqliteOptions::default() })?))
}

fn open_rollback_journal(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
    let options = SqliteOptions { policy, journal: Journal::Rollback, ..SqliteOptions::default() };
    Ok(Arc::new(SqliteStore::open(path, options)?))
}

slothqueue_conformance::conformance_suite!(open);
slothqueue_conformance::conformance_suite!(open_rollback_journal, rollback_journal);
