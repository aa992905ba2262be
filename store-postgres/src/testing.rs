//! Helpers for the tests of every crate that runs something on
//! PostgreSQL (this crate's, the CLI's, the torture suite's): where the
//! test server is, and one schema per test queue path. Not part of the
//! API.

use std::path::Path;
use std::sync::Once;

use crate::txn::fnv64;

/// The URL of the server the tests use, e.g.
/// `postgres://slothqueue@localhost/postgres?host=/tmp/pgdev`.
pub const URL_ENV: &str = "SLOTHQUEUE_PG_URL";

/// Set to `1` (CI) to make a missing [`URL_ENV`] a failure, not a skip.
pub const REQUIRED_ENV: &str = "SLOTHQUEUE_PG_REQUIRED";

/// How to run the PostgreSQL tests, as the skip message says it.
pub const HOW_TO_RUN: &str = "cargo xtask pg -- cargo test -p slothqueue-store-postgres";

/// The test server's URL from [`URL_ENV`]; `None`, said loudly on stderr
/// (once per test binary), when it is unset, so the caller skips. Panics
/// instead when [`REQUIRED_ENV`] is `1`: CI must not pass by skipping.
#[expect(clippy::print_stderr, reason = "a skipped test must say so where cargo test shows it")]
pub fn url_from_env() -> Option<String> {
    if let Ok(url) = std::env::var(URL_ENV) {
        if !url.trim().is_empty() {
            return Some(url);
        }
    }
    assert!(
        std::env::var(REQUIRED_ENV).as_deref() != Ok("1"),
        "{URL_ENV} is not set but {REQUIRED_ENV}=1: the PostgreSQL tests must run here; \
         run them with `{HOW_TO_RUN}`"
    );
    static LOUD: Once = Once::new();
    LOUD.call_once(|| {
        // Straight to the process's stderr: `cargo test` captures what
        // `eprintln!` prints in a passing test, and this must be seen.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: the PostgreSQL tests need a server, and {URL_ENV} is not set.\n\
             *** Run them with: {HOW_TO_RUN}\n\
             *** (or set {URL_ENV}=postgres://USER@HOST/DB yourself)\n"
        );
    });
    eprintln!("skipped: {URL_ENV} is not set");
    None
}

/// Whether the PostgreSQL tests can run ([`url_from_env`]): the
/// precondition of `conformance_suite!(open, when = ...)`.
pub fn pg_available() -> bool {
    url_from_env().is_some()
}

/// The schema a test queue at `path` lives in: `q_` and 16 hex digits of
/// a hash of the path, so the same path (from a second handle, or a child
/// process) names the same queue, and two paths two queues.
pub fn schema_for_path(path: &Path) -> String {
    format!("q_{:016x}", fnv64(path.to_string_lossy().as_bytes()))
}

/// `url` with its `schema` parameter set to `schema` (replaced if it had
/// one).
pub fn with_schema(url: &str, schema: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut params: Vec<&str> =
        query.split('&').filter(|p| !p.is_empty() && !p.starts_with("schema=")).collect();
    let param = format!("schema={schema}");
    params.push(&param);
    format!("{base}?{}", params.join("&"))
}

/// The URL of the test queue at `path` on the server at `base`.
pub fn schema_url_for_path(base: &str, path: &Path) -> String {
    with_schema(base, &schema_for_path(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_one_schema() {
        let a = schema_for_path(Path::new("/tmp/x/queue"));
        assert_eq!(a, schema_for_path(Path::new("/tmp/x/queue")));
        assert_ne!(a, schema_for_path(Path::new("/tmp/y/queue")));
        assert!(crate::txn::valid_schema_name(&a), "{a}");
        assert_eq!(a.len(), 18);
    }

    #[test]
    fn the_schema_parameter_is_set_or_replaced() {
        assert_eq!(with_schema("postgres://u@h/db", "q"), "postgres://u@h/db?schema=q");
        assert_eq!(
            with_schema("postgres://u@h/db?host=/tmp/s&schema=old", "q"),
            "postgres://u@h/db?host=/tmp/s&schema=q"
        );
    }
}
