//! The numbers that shape retries and leases.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::job::JobId;

/// Lease, backoff and attempt settings shared by every transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// How long a claim or heartbeat holds a job.
    pub lease_ttl: Duration,
    /// The first retry waits `2 × base`.
    pub backoff_base: Duration,
    /// No retry waits longer than this.
    pub backoff_cap: Duration,
    /// `max_attempts` for jobs pushed without one.
    pub default_max_attempts: u32,
    /// When set, each delay is spread over `[delay/2, delay]` by a hash of
    /// this seed, the job and the attempt, so a burst of failures does not
    /// retry in lockstep, yet a test can predict every delay.
    pub jitter_seed: Option<u64>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            lease_ttl: Duration::from_secs(60),
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(300),
            default_max_attempts: 3,
            jitter_seed: None,
        }
    }
}

impl Policy {
    /// The delay before retrying a job after its `attempts`-th failure:
    /// `min(cap, base × 2^attempts)`, so 2 s, 4 s, 8 s … with the defaults.
    pub fn backoff(&self, job: JobId, attempts: u32) -> Duration {
        let factor = 1u32.checked_shl(attempts).unwrap_or(u32::MAX);
        let delay = self.backoff_base.saturating_mul(factor).min(self.backoff_cap);
        match self.jitter_seed {
            None => delay,
            Some(seed) => {
                let half = delay / 2;
                let spread = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
                if spread == 0 {
                    return delay;
                }
                let r = splitmix64(seed ^ (job as u64).rotate_left(17) ^ u64::from(attempts));
                half + Duration::from_millis(r % (spread + 1))
            }
        }
    }
}

/// A small, well-known mixing function: deterministic jitter without a
/// random-number dependency in `core`.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn backoff_doubles_from_two_seconds_and_caps() {
        let p = Policy::default();
        let secs: Vec<u64> = (1..=10).map(|a| p.backoff(1, a).as_secs()).collect();
        assert_eq!(secs, vec![2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(p.backoff(1, 200), Duration::from_secs(300));
    }

    proptest! {
        #[test]
        fn jitter_stays_within_half_and_full_delay(seed: u64, job in 1i64..1_000_000, attempts in 0u32..40) {
            let plain = Policy::default();
            let jittered = Policy { jitter_seed: Some(seed), ..Policy::default() };
            let full = plain.backoff(job, attempts);
            let got = jittered.backoff(job, attempts);
            prop_assert!(got <= full);
            prop_assert!(got >= full / 2);
            prop_assert_eq!(got, jittered.backoff(job, attempts), "same seed, same delay");
        }
    }
}
