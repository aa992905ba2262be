//! [`store_ops!`](crate::store_ops): the `impl Store` glue of the
//! operations, written once. A backend names the operations it runs the
//! ordinary way — one [`super`] call inside its own write transaction — and
//! writes the rest of its `impl Store` (its reads, and any operation it
//! runs in a transaction mode of its own) in the same invocation.
//!
//! The backend provides an inherent method
//! `async fn write<T, F>(&self, f: F) -> Result<T, StoreError>` where
//! `F: FnOnce(&mut ItsTx, &Policy) -> Result<T, ItsError> + Send + 'static`
//! and `T: Send + 'static`: it opens its write transaction, runs `f` on
//! its [`super::Tx`] with its policy, commits, and maps the error. Every
//! generated method clones what it borrows into that closure and awaits
//! it; `push` and `restore` are `push_many` and `restore_many` of one
//! ([`super::alone`]).
//!
//! A macro rather than a blanket impl because `Store` stays object-safe
//! and each backend keeps the right to run one operation its own way (the
//! list says which it leaves to the glue); a `macro_rules!` that emits the
//! whole `#[async_trait]` block, because `async_trait` must see every
//! method already written out.

/// Writes `impl Store for $store` with the listed operations as one call
/// of [`crate::ops`] each, inside `self.write(..)`, followed by the
/// backend's own methods:
///
/// ```text
/// slothqueue_core::store_ops! {
///     impl Store for SqliteStore {
///         ops [push, push_many, claim, complete, /* ... */];
///         async fn get(&self, id: JobId) -> Result<Job, StoreError> { /* ... */ }
///         // ...
///     }
/// }
/// ```
///
/// The operations that can be listed: `push`, `push_many`, `push_stream`,
/// `claim`, `heartbeat`, `complete`, `fail`, `settle_and_claim`, `release`,
/// `note_attempt`, `hold`, `release_hold`, `edit`, `clone_job`,
/// `change_lane`, `put_schedule`, `change_schedule`, `fire_schedules`,
/// `restore_schedules`, `cancel`, `retry`, `reclaim_dead`, `purge`,
/// `restore`, `restore_many`.
#[macro_export]
macro_rules! store_ops {
    (impl Store for $store:ty { ops [$($op:ident),* $(,)?]; $($own:tt)* }) => {
        $crate::__store_ops!(@munch $store; []; [$($own)*]; $($op),*);
    };
}

/// The muncher behind [`store_ops!`]: one rule per operation, each adding
/// its method to the accumulator, then the block emitted whole.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_ops {
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; ) => {
        #[$crate::ops::__async_trait]
        impl $crate::Store for $store {
            $($acc)*
            $($own)*
        }
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; push $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn push(
                &self,
                job: $crate::NewJob,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Pushed, $crate::StoreError> {
                let mut out = self.push_many(vec![job], now).await.map_err($crate::ops::alone)?;
                out.pop().ok_or_else(|| $crate::StoreError::Backend("push returned nothing".to_owned()))
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; push_many $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn push_many(
                &self,
                jobs: ::std::vec::Vec<$crate::NewJob>,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<::std::vec::Vec<$crate::Pushed>, $crate::StoreError> {
                self.write(move |tx, policy| $crate::ops::push_many(tx, &jobs, now, policy)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; push_stream $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn push_stream(
                &self,
                source: ::std::sync::Arc<dyn $crate::JobSource>,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<::std::vec::Vec<$crate::PushedId>, $crate::StoreError> {
                self.write(move |tx, policy| {
                    $crate::ops::push_stream(tx, source.as_ref(), now, policy)
                })
                .await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; claim $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn claim(
                &self,
                request: &$crate::ClaimRequest,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<::core::option::Option<$crate::Claimed>, $crate::StoreError> {
                let request = request.clone();
                self.write(move |tx, policy| $crate::ops::claim(tx, &request, now, policy)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; heartbeat $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn heartbeat(
                &self,
                id: $crate::JobId,
                fence: &$crate::Fence,
                child_pgid: ::core::option::Option<i32>,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::HeartbeatAck, $crate::StoreError> {
                let fence = fence.clone();
                self.write(move |tx, policy| {
                    $crate::ops::heartbeat(tx, id, &fence, child_pgid, now, policy)
                })
                .await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; complete $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn complete(
                &self,
                id: $crate::JobId,
                fence: &$crate::Fence,
                done: $crate::Completion,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                let fence = fence.clone();
                self.write(move |tx, _| $crate::ops::complete(tx, id, &fence, &done, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; fail $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn fail(
                &self,
                id: $crate::JobId,
                fence: &$crate::Fence,
                failure: $crate::Failure,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                let fence = fence.clone();
                self.write(move |tx, policy| {
                    $crate::ops::fail(tx, id, &fence, &failure, now, policy)
                })
                .await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; settle_and_claim $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn settle_and_claim(
                &self,
                id: $crate::JobId,
                fence: &$crate::Fence,
                settlement: $crate::Settlement,
                next: &$crate::ClaimRequest,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::SettledAndClaimed, $crate::StoreError> {
                let (fence, next) = (fence.clone(), next.clone());
                self.write(move |tx, policy| {
                    $crate::ops::settle_and_claim(tx, id, &fence, &settlement, &next, now, policy)
                })
                .await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; release $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn release(
                &self,
                id: $crate::JobId,
                fence: &$crate::Fence,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                let fence = fence.clone();
                self.write(move |tx, _| $crate::ops::release(tx, id, &fence, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; note_attempt $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn note_attempt(
                &self,
                id: $crate::JobId,
                fence: &$crate::Fence,
                note: &$crate::AttemptNote,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                let (fence, note) = (fence.clone(), note.clone());
                self.write(move |tx, _| $crate::ops::note_attempt(tx, id, &fence, &note, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; hold $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn hold(
                &self,
                id: $crate::JobId,
                stamp: $crate::Stamp,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                self.write(move |tx, _| $crate::ops::hold(tx, id, stamp.clone(), now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; release_hold $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn release_hold(
                &self,
                id: $crate::JobId,
                by: &str,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                let by = by.to_owned();
                self.write(move |tx, _| $crate::ops::release_hold(tx, id, &by, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; edit $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn edit(
                &self,
                id: $crate::JobId,
                edit: &$crate::JobEdit,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                let edit = edit.clone();
                self.write(move |tx, _| $crate::ops::edit(tx, id, &edit, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; clone_job $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn clone_job(
                &self,
                id: $crate::JobId,
                edit: &$crate::JobEdit,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                let edit = edit.clone();
                self.write(move |tx, policy| $crate::ops::clone_job(tx, id, &edit, now, policy))
                    .await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; change_lane $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn change_lane(
                &self,
                scope: &$crate::LaneScope,
                change: &$crate::LaneChange,
            ) -> ::core::result::Result<$crate::Lanes, $crate::StoreError> {
                let (scope, change) = (scope.clone(), change.clone());
                self.write(move |tx, _| $crate::ops::change_lane(tx, &scope, &change)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; put_schedule $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn put_schedule(
                &self,
                new: &$crate::NewSchedule,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::PutSchedule, $crate::StoreError> {
                let new = new.clone();
                self.write(move |tx, _| $crate::ops::put_schedule(tx, &new, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; change_schedule $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn change_schedule(
                &self,
                key: &str,
                change: &$crate::ScheduleChange,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<::core::option::Option<$crate::Schedule>, $crate::StoreError> {
                let (key, change) = (key.to_owned(), change.clone());
                self.write(move |tx, _| $crate::ops::change_schedule(tx, &key, &change, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; fire_schedules $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn fire_schedules(
                &self,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Ticks, $crate::StoreError> {
                self.write(move |tx, policy| $crate::ops::fire_schedules(tx, now, policy)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; restore_schedules $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn restore_schedules(
                &self,
                schedules: ::std::vec::Vec<$crate::Schedule>,
            ) -> ::core::result::Result<(), $crate::StoreError> {
                self.write(move |tx, _| $crate::ops::restore_schedules(tx, &schedules)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; cancel $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn cancel(
                &self,
                id: $crate::JobId,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                self.write(move |tx, _| $crate::ops::cancel(tx, id, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; retry $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn retry(
                &self,
                id: $crate::JobId,
                now: $crate::Timestamp,
            ) -> ::core::result::Result<$crate::Job, $crate::StoreError> {
                self.write(move |tx, _| $crate::ops::retry(tx, id, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; reclaim_dead $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn reclaim_dead(
                &self,
                attempts: &[($crate::JobId, $crate::Fence)],
                now: $crate::Timestamp,
            ) -> ::core::result::Result<::std::vec::Vec<$crate::Job>, $crate::StoreError> {
                if attempts.is_empty() {
                    return Ok(::std::vec::Vec::new());
                }
                let attempts = attempts.to_vec();
                self.write(move |tx, _| $crate::ops::reclaim_dead(tx, &attempts, now)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; purge $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn purge(
                &self,
                filter: &$crate::PurgeFilter,
            ) -> ::core::result::Result<::std::vec::Vec<$crate::JobId>, $crate::StoreError> {
                let filter = filter.clone();
                self.write(move |tx, _| $crate::ops::purge(tx, &filter)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; restore $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn restore(
                &self,
                job: $crate::Job,
                events: ::std::vec::Vec<$crate::Event>,
            ) -> ::core::result::Result<(), $crate::StoreError> {
                self.restore_many(vec![(job, events)]).await.map_err($crate::ops::alone)
            }
        ]; [$($own)*]; $($rest),*);
    };
    (@munch $store:ty; [$($acc:tt)*]; [$($own:tt)*]; restore_many $(, $rest:ident)*) => {
        $crate::__store_ops!(@munch $store; [$($acc)*
            async fn restore_many(
                &self,
                jobs: ::std::vec::Vec<($crate::Job, ::std::vec::Vec<$crate::Event>)>,
            ) -> ::core::result::Result<(), $crate::StoreError> {
                self.write(move |tx, _| $crate::ops::restore_many(tx, &jobs)).await
            }
        ]; [$($own)*]; $($rest),*);
    };
}
