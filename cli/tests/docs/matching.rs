//! Whether what a command printed is what the document shows.
//!
//! The document may leave out what changes from run to run: `…` inside a
//! line stands for any text, and a line that is only `…` for any number of
//! lines. Durations in seconds (`0.02s`), timestamps in milliseconds
//! (13 digits) and SHA-256 hashes are compared by their shape, not their
//! value, on both sides.

use std::sync::LazyLock;

use regex::Regex;

static SECONDS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b\d+\.\d+s\b").expect("a valid pattern"));
static MILLIS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b1\d{12}\b").expect("a valid pattern"));
static HASH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[0-9a-f]{64}\b").expect("a valid pattern"));

/// A line with its changing parts replaced by their shape.
fn shape(line: &str) -> String {
    let line = SECONDS.replace_all(line.trim_end(), "<secs>");
    let line = MILLIS.replace_all(&line, "<ms>");
    HASH.replace_all(&line, "<hash>").into_owned()
}

/// Whether `actual` is what `expected` shows.
pub fn matches(expected: &[String], actual: &[String]) -> bool {
    let expected: Vec<String> = expected.iter().map(|l| shape(l)).collect();
    let actual: Vec<String> = actual.iter().map(|l| shape(l)).collect();
    lines_match(&expected, &actual)
}

fn lines_match(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "…" => {
            (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && lines_match(rest, more)),
    }
}

/// One line, `…` inside it standing for any text.
fn line_matches(expected: &str, actual: &str) -> bool {
    let mut parts = expected.split('…');
    let Some(head) = parts.next() else {
        return actual.is_empty();
    };
    let Some(mut rest) = actual.strip_prefix(head) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn an_ellipsis_stands_for_text_or_lines_and_nothing_else_is_loose() {
        assert!(matches(&v(&["job #1 done in 0.02s"]), &v(&["job #1 done in 3.10s"])));
        assert!(!matches(&v(&["job #1 done in 0.02s"]), &v(&["job #2 done in 0.02s"])));
        assert!(matches(&v(&["a", "…", "d"]), &v(&["a", "b", "c", "d"])));
        assert!(matches(&v(&["a", "…", "d"]), &v(&["a", "d"])));
        assert!(!matches(&v(&["a", "…", "d"]), &v(&["a", "b"])));
        assert!(matches(&v(&["{…,\"id\":3,…}"]), &v(&["{\"a\":1,\"id\":3,\"b\":2}"])));
        assert!(!matches(&v(&["{…,\"id\":3,…}"]), &v(&["{\"a\":1,\"id\":4,\"b\":2}"])));
        assert!(!matches(&v(&["a"]), &v(&["a", "b"])));
        assert!(matches(&v(&["at 1796120529284"]), &v(&["at 1800000000000"])));
    }
}
