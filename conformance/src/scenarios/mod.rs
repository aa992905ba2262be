//! The scenarios, by area. Each is a `pub async fn name(h: &Harness)`
//! whose doc comment states the contract it checks.

pub mod after;
pub mod cancel;
pub mod claim;
pub mod concurrency;
pub mod edit;
pub mod idempotency;
pub mod lanes;
pub mod lease;
pub mod persistence;
pub mod purge;
pub mod push;
pub mod queries;
pub mod retry;
pub mod settle;

/// The one list of scenarios: calls back `$crate::$cb!` with the given
/// context and `[area::name, …]`. The test macro, [`crate::run_all`] and
/// [`crate::SCENARIOS`] are all generated from it, so a scenario added here
/// runs everywhere.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_scenarios {
    ($cb:ident { $($ctx:tt)* }) => {
        $crate::$cb! { { $($ctx)* } [
            claim::delayed_job_is_not_claimed_early,
            claim::claim_order_is_priority_then_not_before_then_id,
            claim::claim_filters_by_queue,
            claim::claim_filters_by_kind,
            claim::claim_hands_out_a_lease_with_the_claimers_identity,
            claim::claim_returns_none_when_nothing_is_due,
            claim::claim_retires_abandoned_jobs_behind_the_job_it_takes,
            claim::claim_retires_only_jobs_its_filter_admits,
            claim::claim_takes_a_dead_owners_job_only_when_the_request_allows,
            push::push_records_the_job_as_asked,
            push::invalid_pushes_are_rejected_and_write_nothing,
            push::push_many_is_all_or_nothing,
            push::ids_are_never_reused_after_purge,
            lease::dead_worker_lease_is_recovered_after_expiry,
            lease::non_owner_heartbeat_is_refused_and_changes_nothing,
            lease::non_owner_complete_fail_and_release_are_refused,
            lease::stale_attempt_of_the_same_owner_is_fenced_out,
            lease::old_owner_cannot_write_after_another_reclaimed,
            lease::expired_lease_after_max_attempts_fails_never_pending,
            lease::owner_heartbeat_after_expiry_extends_the_lease,
            lease::heartbeat_records_child_pgid,
            lease::alive_owner_is_never_reclaimed,
            lease::gone_owner_is_reclaimed_before_expiry,
            lease::reclaim_dead_returns_gone_owners_jobs_to_pending,
            lease::reclaim_dead_fails_a_job_out_of_attempts,
            lease::release_returns_the_job_without_charging_the_attempt,
            lease::complete_records_the_result_and_ends_the_lease,
            settle::settle_and_claim_settles_then_claims_the_next_job,
            settle::settle_and_claim_with_a_lost_lease_changes_nothing,
            settle::settle_and_claim_follows_the_claim_order_and_filter,
            settle::settle_and_claim_writes_the_trail_of_the_two_calls,
            settle::settle_and_claim_claims_nothing_when_nothing_is_due,
            retry::failures_back_off_2_4_8_seconds_then_fail,
            retry::backoff_caps_at_300_seconds,
            retry::retry_puts_a_failed_job_back_with_attempts_reset,
            retry::retry_puts_a_cancelled_job_back,
            retry::retry_of_a_live_or_done_job_is_refused,
            cancel::cancel_pending_job_ends_it,
            cancel::cancel_running_job_is_seen_by_the_owner_and_ends_cancelled,
            cancel::cancel_of_a_terminal_job_is_refused,
            cancel::missing_ids_are_not_found,
            cancel::cancel_requested_job_of_a_dead_owner_ends_cancelled,
            cancel::release_with_cancel_requested_ends_cancelled,
            idempotency::same_key_same_payload_returns_the_existing_job,
            idempotency::same_key_new_payload_supersedes_the_pending_job,
            idempotency::same_key_new_payload_leaves_a_running_job_running,
            idempotency::duplicate_of_a_finished_job_is_not_queued_again,
            idempotency::same_key_new_payload_over_a_finished_job_supersedes_nothing,
            queries::stats_count_states_due_now_and_next_due,
            queries::next_due_is_the_earliest_wake_up,
            queries::list_filters_by_state_queue_and_kind,
            queries::list_orders_limits_and_pages,
            purge::purge_deletes_only_terminal_jobs_and_their_trails,
            purge::purge_with_pending_never_touches_running,
            purge::purge_respects_older_than,
            persistence::reopen_keeps_jobs_events_and_counters,
            persistence::two_handles_on_one_file_work_at_once,
            persistence::restore_keeps_ids_states_and_events,
            persistence::restore_many_keeps_ids_states_and_events,
            persistence::restore_many_is_all_or_nothing,
            persistence::runner_records_are_put_listed_and_removed,
            concurrency::claim_race_across_handles_hands_each_job_once,
            concurrency::pushes_across_handles_get_distinct_ids,
            concurrency::claim_race_across_processes_hands_each_job_once,
            concurrency::pushes_across_processes_get_distinct_ids,
            after::a_child_waits_until_its_parent_is_done,
            after::an_unknown_parent_is_refused_and_writes_nothing,
            after::a_failed_parent_cancels_its_dependents_transitively,
            after::a_cancelled_parent_cancels_its_dependents,
            after::retry_of_the_root_brings_its_dependents_back,
            after::a_parent_retrying_with_backoff_keeps_its_children_waiting,
            after::a_child_pushed_after_a_failed_parent_starts_cancelled,
            after::push_many_may_name_earlier_jobs_of_the_batch,
            after::an_expired_lease_with_no_attempts_left_cancels_dependents,
            after::reclaim_dead_out_of_attempts_cancels_dependents,
            after::settle_and_claim_hands_out_the_child_it_made_ready,
            after::purge_keeps_a_pending_parent_a_pending_child_waits_on,
            after::restore_many_keeps_the_edges,
            after::a_superseded_parent_cancels_its_dependents,
            after::a_diamond_is_due_only_after_both_parents,
            after::a_job_cannot_wait_on_the_job_it_replaces,
            after::dependents_outlive_a_purged_parent,
            lanes::a_limit_closes_its_lane_at_the_boundary,
            lanes::a_limit_holds_across_claimers_and_handles,
            lanes::a_limit_holds_under_a_claim_race_across_handles,
            lanes::a_limit_of_zero_lifts_it,
            lanes::an_expired_job_of_a_full_lane_is_taken_back_but_no_new_one_starts,
            lanes::settle_and_claim_honours_a_limit,
            lanes::a_paused_lane_starts_nothing_while_others_go_on,
            lanes::a_pause_of_every_queue_starts_nothing,
            lanes::resume_lets_a_paused_lane_start_again,
            lanes::running_jobs_of_a_paused_lane_go_on,
            lanes::lanes_and_holds_survive_a_reopen,
            lanes::change_lane_refuses_a_limit_for_every_queue_and_a_bad_name,
            lanes::a_held_job_is_not_claimed,
            lanes::hold_and_release_of_a_job_not_pending_are_refused,
            lanes::release_makes_a_held_job_claimable,
            lanes::a_held_job_waiting_on_parents_stays_held_after_they_finish,
            lanes::cancel_of_a_held_job_ends_it_and_clears_the_hold,
            lanes::stats_and_next_due_leave_held_jobs_out,
            lanes::queue_counts_count_each_queue,
            lanes::note_attempt_writes_its_event_only_under_the_right_fence,
            lanes::restore_keeps_held_jobs_held,
            edit::edit_changes_a_pending_job_and_says_what,
            edit::edit_of_a_held_job_keeps_it_held,
            edit::edit_of_a_job_not_pending_is_refused_and_changes_nothing,
            edit::an_invalid_edit_changes_nothing,
            edit::edit_of_the_queue_moves_the_job_to_the_other_lane,
            edit::edit_of_the_priority_reorders_claims,
            edit::edit_of_the_due_time_makes_a_job_due_or_not,
            edit::edit_keeps_the_key_and_the_hash_follows_the_payload,
            edit::clone_of_a_failed_job_is_a_new_pending_job_tied_both_ways,
            edit::clone_of_a_done_or_pending_job_adds_the_same_work_again,
            edit::clone_of_a_missing_job_or_with_a_bad_edit_writes_nothing,
        ] }
    };
}
