//! The shared conformance suite on redb, once with the default options and
//! once asking for eventual durability (which redb 4.6 grants as immediate
//! on a shared file; the run proves the option changes no behaviour).

use std::path::Path;
use std::sync::Arc;

use slothqueue_core::{Policy, Store, StoreError};
use slothqueue_store_redb::{DurabilityMode, RedbOptions, RedbStore};

fn open(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(RedbStore::open(path, RedbOptions { policy, ..RedbOptions::default() })?))
}

fn open_eventual(path: &Path, policy: Policy) -> Result<Arc<dyn Store>, StoreError> {
    let options =
        RedbOptions { policy, durability: DurabilityMode::Eventual, ..RedbOptions::default() };
    Ok(Arc::new(RedbStore::open(path, options)?))
}

slothqueue_conformance::conformance_suite!(open);
slothqueue_conformance::conformance_suite!(open_eventual, eventual);
