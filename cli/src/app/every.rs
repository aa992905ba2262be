//! What `every` says before it is checked: SPEC read as an interval or a
//! cron expression, the zone a schedule is read in when none is given, and
//! the key derived from the command when `--key` is not.
//!
//! The schedule's job is built by `add`'s own path (`config::job`'s `add_spec`,
//! `spec::build`), so each tick queues exactly what `add` would have; what
//! a schedule means (slots, catch-up, overlap) is `core::schedule`'s, and
//! only checked here by calling it.

use slothqueue::NewJob;
use slothqueue::core::machine::{self, TransitionError};
use slothqueue::core::schedule::{self, Spec};

use super::duration;

/// The names a cron SPEC may be instead of five fields.
const CRON_NAMES: &str = "@hourly, @daily, @weekly, @monthly or @yearly";

/// A refusal of `core::schedule` as the words a user reads (without
/// thiserror's `invalid schedule:` prefix, since the line already says
/// what was being done).
pub fn why(e: TransitionError) -> String {
    match e {
        TransitionError::InvalidSchedule(m) | TransitionError::InvalidJob(m) => m,
        other => other.to_string(),
    }
}

/// SPEC: one word that parses as a duration (`2s`, `15m`, `2h`, `90`) is
/// an interval; anything else (five fields, `@daily`) a cron expression.
pub fn parse_spec(text: &str) -> Result<Spec, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err(format!(
            "SPEC is empty: give an interval like 2h or a cron expression like '0 3 * * *' ({CRON_NAMES})"
        ));
    }
    let one_word = !t.contains(char::is_whitespace);
    if one_word && !t.starts_with('@') {
        return match duration::parse(t) {
            Ok(d) => Spec::every(d).map_err(|e| format!("SPEC `{t}`: {}", why(e))),
            Err(as_interval) => Err(format!(
                "SPEC `{t}` is neither an interval ({as_interval}) nor a cron expression (five fields like '0 3 * * *', or {CRON_NAMES})"
            )),
        };
    }
    Spec::cron(t).map_err(why)
}

/// The zone of a schedule created without `--tz`: the machine's own by its
/// IANA name (`local`, as jiff reads `TZ` or `/etc/localtime`) if the
/// bundled database knows it, else `UTC`, with a note saying so.
pub fn default_zone(local: Option<&str>) -> (String, Option<String>) {
    match local {
        Some(name) if schedule::zone(name).is_ok() => (name.to_owned(), None),
        Some(name) => (
            "UTC".to_owned(),
            Some(format!(
                "this machine's time zone `{name}` is not an IANA name slothqueue knows: the schedule reads its times in UTC (--tz ZONE chooses)"
            )),
        ),
        None => (
            "UTC".to_owned(),
            Some(
                "this machine's time zone has no IANA name: the schedule reads its times in UTC (--tz ZONE chooses)"
                    .to_owned(),
            ),
        ),
    }
}

/// Longest slug a derived key starts with.
const SLUG_LEN: usize = 24;

/// The key of a schedule created without `--key`: a slug of what the job
/// runs (the command's first word, as a file name, or the handler kind)
/// and six hex digits of the SHA-256 of SPEC, the command (or kind and
/// payload) and the directory: `make-3fa9c1`. The same `every` line typed
/// again in the same directory names the same schedule (and so changes
/// nothing), while its environment, zone or flags do not count, so typing
/// it again with another of those is refused as another definition under
/// the key instead of silently making a second schedule.
pub fn derived_key(spec: &Spec, job: &NewJob) -> String {
    let command = command_of(job).map(str::to_owned);
    let word = match &command {
        Some(c) => c
            .split_whitespace()
            .find(|w| !w.contains('='))
            .map(|w| w.rsplit('/').next().unwrap_or(w).to_owned())
            .unwrap_or_default(),
        None => job.kind.clone(),
    };
    let mut slug = String::new();
    for c in word.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() || c == '_' {
            slug.push(c);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
        if slug.len() >= SLUG_LEN {
            break;
        }
    }
    let slug = slug.trim_matches('-');
    let slug = if slug.is_empty() { "job" } else { slug };
    let what = serde_json::json!({
        "spec": spec,
        "kind": job.kind,
        "command": command,
        "cwd": job.payload.get("cwd"),
        "payload": if command.is_none() { job.payload.clone() } else { serde_json::Value::Null },
    });
    let hash = machine::payload_hash(&what);
    format!("{slug}-{}", &hash[..6])
}

/// A shell job's command; `None` for a handler job.
pub fn command_of(job: &NewJob) -> Option<&str> {
    if job.kind == slothqueue::core::SHELL_KIND {
        job.payload.get("command").and_then(|c| c.as_str())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn one_word_durations_are_intervals_and_the_rest_cron() {
        assert_eq!(parse_spec("2h"), Ok(Spec::Every(Duration::from_secs(7200))));
        assert_eq!(parse_spec(" 90 "), Ok(Spec::Every(Duration::from_secs(90))));
        assert_eq!(parse_spec("1h30m"), Ok(Spec::Every(Duration::from_secs(5400))));
        assert_eq!(parse_spec("@daily"), Ok(Spec::Cron("@daily".into())));
        assert_eq!(parse_spec("0 3 * * *"), Ok(Spec::Cron("0 3 * * *".into())));
        for (bad, fragment) in [
            ("5x", "neither an interval"),
            ("0s", "an interval must be from 1s"),
            ("", "SPEC is empty"),
            ("@sometimes", "cron expression `@sometimes`"),
            ("0 3 * *", "expected five fields"),
            ("61 * * * *", "cron expression `61 * * * *`"),
            ("0 0 30 2 *", "never fires"),
        ] {
            let err = parse_spec(bad).expect_err(bad);
            assert!(err.contains(fragment), "{bad}: {err}");
        }
    }

    #[test]
    fn the_local_zone_is_kept_when_known() {
        assert_eq!(default_zone(Some("Europe/Berlin")), ("Europe/Berlin".into(), None));
        let (zone, note) = default_zone(Some("Mars/Olympus"));
        assert_eq!(zone, "UTC");
        assert!(note.unwrap().contains("`Mars/Olympus`"));
        assert_eq!(default_zone(None).0, "UTC");
    }

    #[test]
    fn derived_keys_name_the_command_and_follow_what_runs() {
        let spec = Spec::Every(Duration::from_secs(7200));
        let job = NewJob::shell("FOO=1 /usr/bin/Make backup", "/work");
        let key = derived_key(&spec, &job);
        assert!(key.starts_with("make-"), "{key}");
        assert_eq!(key.len(), "make-".len() + 6);
        assert_eq!(derived_key(&spec, &job), key, "stable");
        let mut with_env = job.clone();
        with_env.payload["env"] = serde_json::json!({"PATH": "/bin"});
        with_env.priority = 5;
        assert_eq!(derived_key(&spec, &with_env), key, "environment and flags do not count");
        let elsewhere = NewJob::shell("FOO=1 /usr/bin/Make backup", "/other");
        assert_ne!(derived_key(&spec, &elsewhere), key, "the directory counts");
        assert_ne!(derived_key(&Spec::Cron("@daily".into()), &job), key, "SPEC counts");
        let handler = NewJob::new("resize", serde_json::json!({"w": 3}));
        assert!(derived_key(&spec, &handler).starts_with("resize-"));
        let odd = NewJob::shell("./../ëx!!", "/");
        assert!(derived_key(&spec, &odd).starts_with("x-"), "{}", derived_key(&spec, &odd));
        for job in [job, odd, handler, NewJob::shell("a".repeat(300), "/")] {
            let key = derived_key(&spec, &job);
            assert!(machine::is_plain_name(&key) && key.len() <= schedule::MAX_KEY_LEN, "{key}");
        }
    }
}
