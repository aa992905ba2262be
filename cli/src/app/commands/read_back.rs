//! [`ReadBack`]: the jobs of an answer that names many by id (`add
//! --stdin --json`, `wait`), read back one at a time as the answer is
//! written, so that it never holds them all: 200,000 jobs with their
//! recorded environments are gigabytes.
//!
//! Ids asked in increasing order, as such answers mostly ask them, come
//! from one listing read a page at a time (a read each [`PAGE`] jobs, not
//! one a job: 20,000 single reads take seconds); any other is read alone.

use std::collections::VecDeque;

use slothqueue::{Job, JobId, ListFilter, ListOrder, Store, StoreError};

/// The jobs one read of the listing brings.
const PAGE: usize = 500;

/// Jobs read by id, a page of the listing held at a time.
pub struct ReadBack<'a> {
    store: &'a dyn Store,
    /// The rest of the last page read, lowest id first.
    page: VecDeque<Job>,
}

impl<'a> ReadBack<'a> {
    /// Reads from `store`.
    pub fn new(store: &'a dyn Store) -> Self {
        ReadBack { store, page: VecDeque::new() }
    }

    /// Job `id` as the store has it now; `None` when there is none (it
    /// was deleted since it was seen).
    pub async fn job(&mut self, id: JobId) -> Result<Option<Job>, StoreError> {
        while self.page.front().is_some_and(|j| j.id < id) {
            self.page.pop_front();
        }
        if self.page.is_empty() {
            let from = ListFilter {
                cursor: Some(id.saturating_sub(1)),
                limit: Some(PAGE),
                order: ListOrder::Oldest,
                ..ListFilter::default()
            };
            self.page = self.store.list(&from).await?.into();
            // The listing from `id` on does not start with it: it is gone.
            if self.page.front().is_none_or(|j| j.id != id) {
                return Ok(None);
            }
        }
        match self.page.front() {
            Some(j) if j.id == id => Ok(self.page.pop_front()),
            // Below the page held (an id asked out of order): read alone.
            _ => match self.store.get(id).await {
                Ok(job) => Ok(Some(job)),
                Err(StoreError::NotFound(_)) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }
}
