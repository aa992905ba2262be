//! The shared conformance suite on redb, with the default options (redb
//! has one durability, `Immediate`, so there is no second variant to run).

use std::path::Path;
use std::sync::Arc;

use slothqueue_core::{Policy, Store, StoreError};
use slothqueue_store_redb::{RedbOptions, RedbStore};

fn open(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(RedbStore::open(path, RedbOptions { policy, ..RedbOptions::default() })?))
}

slothqueue_conformance::conformance_suite!(open);
