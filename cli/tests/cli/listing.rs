//! `list --search` and `list --state held|waiting` (issue 36): the jobs
//! the store's query admits, the same words in the table as the page's
//! list shows, and a state that is neither refused with the choices.

use crate::both_backends;

/// The ids in `list --json`'s answer, in order.
fn ids(json: &str) -> Vec<i64> {
    let jobs: serde_json::Value = serde_json::from_str(json).unwrap();
    jobs.as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect()
}

both_backends! {
    fn list_searches_commands_and_tells_held_and_waiting_apart(ctx) {
        ctx.ok(&["add", "make backup-nightly", "--key", "nightly"]);
        ctx.ok(&["add", "echo after", "--after", "1"]);
        ctx.ok(&["add", "echo held"]);
        ctx.ok(&["hold", "3"]);
        ctx.ok(&["add", "echo BACKUP"]);

        assert_eq!(ids(&ctx.ok(&["--json", "list", "--search", "backup"])), [1]);
        assert_eq!(ids(&ctx.ok(&["--json", "list", "--search", "BACKUP"])), [4], "case-sensitive");
        assert_eq!(ids(&ctx.ok(&["--json", "list", "--search", "echo"])), [4, 3, 2]);
        assert_eq!(ids(&ctx.ok(&["--json", "list", "--search", "echo", "-n", "1"])), [4]);
        assert_eq!(ids(&ctx.ok(&["--json", "list", "--state", "held"])), [3]);
        assert_eq!(ids(&ctx.ok(&["--json", "list", "--state", "waiting"])), [2]);
        assert_eq!(ids(&ctx.ok(&["--json", "list", "--state", "pending"])), [4, 3, 2, 1]);
        assert_eq!(ids(&ctx.ok(&["--json", "list", "--state", "waiting", "--search", "held"])), Vec::<i64>::new());

        let table = ctx.ok(&["list", "--state", "waiting"]);
        let row = table.lines().nth(1).unwrap();
        assert!(row.contains("waiting") && row.contains("after #1"), "{table}");
        assert_eq!(table.lines().count(), 2, "{table}");

        assert_eq!(ctx.ok(&["list", "--state", "held", "--search", "nightly"]), "no held jobs contain `nightly`\n");
        ctx.ok(&["release", "3"]);
        assert_eq!(ctx.ok(&["list", "--state", "held"]), "no held jobs\n");

        let out = ctx.run(&["list", "--state", "asleep"]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("held") && err.contains("waiting"), "{err}");
    }
}
