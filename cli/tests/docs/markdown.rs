//! The command blocks of a Markdown file, and what the comment above each
//! says about checking it.
//!
//! A block is a fence whose info string is `sh` or `bash` (commands, each checked for
//! its exit status) or `console` (a transcript: `$ command` lines, each
//! followed by what it prints). Other blocks (`json`, `rust`, `text`, …)
//! are not commands. An HTML comment on the lines right above a block —
//! invisible where the Markdown is rendered — tells the checker:
//!
//! - `<!-- not checked: REASON -->`: the block is not run (a server on
//!   another host, a command that never returns); the reason is required,
//!   and the report lists it.
//! - `<!-- before: SHELL -->`: run SHELL first, silently, in the block's
//!   own shell (a Makefile the example's jobs call, a folder it names, a
//!   server in the background, `TOKEN=…`). It must exit 0.
//!
//! Commands run in bash, one shell per block, in a home folder shared by
//! the document's blocks (`session.rs`). A command that ends in `&` is
//! waited on until it prints its first line, as a reader would before
//! typing the next (unless its output is sent to a file with `>`).

/// How a block is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Commands; each is run and must exit 0 unless its comment says `# exit N`.
    Sh,
    /// A transcript: commands and what they print.
    Console,
}

/// One command block of a file.
#[derive(Debug)]
pub struct Block {
    /// The line of its opening fence, from 1.
    pub line: usize,
    /// How it is read.
    pub kind: Kind,
    /// Its lines, between the fences.
    pub body: Vec<String>,
    /// Why it is not run, if it is not.
    pub not_checked: Option<String>,
    /// What runs before it, silently.
    pub before: Vec<String>,
}

/// The `sh` and `console` blocks of `text`, with their comments.
pub fn blocks(text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        // A fence may be indented (a block inside a list item); its lines
        // are read without that indent.
        let indent = lines[i].len() - lines[i].trim_start().len();
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i;
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim() == "```")
            .ok_or_else(|| format!("line {}: a fence that is never closed", start + 1))?;
        let kind = match info.trim() {
            "sh" | "bash" => Some(Kind::Sh),
            "console" => Some(Kind::Console),
            _ => None,
        };
        if let Some(kind) = kind {
            let (not_checked, before) = comments_above(&lines[..start])?;
            let pad = &lines[start][..indent];
            let unindent = |l: &&str| l.strip_prefix(pad).unwrap_or(l.trim_start()).to_owned();
            out.push(Block {
                line: start + 1,
                kind,
                body: lines[start + 1..end].iter().map(unindent).collect(),
                not_checked,
                before,
            });
        }
        i = end + 1;
    }
    Ok(out)
}

/// The checker's comments on the lines right above a block (blank lines
/// between them allowed).
fn comments_above(above: &[&str]) -> Result<(Option<String>, Vec<String>), String> {
    let mut not_checked = None;
    let mut before = Vec::new();
    for line in above.iter().rev() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some(inner) = line.strip_prefix("<!--").and_then(|l| l.strip_suffix("-->")) else {
            break;
        };
        let inner = inner.trim();
        if let Some(reason) = inner.strip_prefix("not checked:") {
            if reason.trim().is_empty() {
                return Err("`not checked:` needs a reason".to_owned());
            }
            not_checked = Some(reason.trim().to_owned());
        } else if let Some(shell) = inner.strip_prefix("before:") {
            before.insert(0, shell.trim().to_owned());
        } else {
            break;
        }
    }
    Ok((not_checked, before))
}

/// The logical lines of an `sh` block: continuation lines (`\` at the end)
/// joined, blank and comment-only lines left out.
pub fn commands(body: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for line in body {
        if open {
            if let Some(last) = out.last_mut() {
                last.push('\n');
                last.push_str(line);
            }
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            out.push(line.clone());
        } else {
            continue;
        }
        open = line.trim_end().ends_with('\\');
    }
    out
}

/// One command of a transcript and what it prints.
#[derive(Debug)]
pub struct Step {
    /// The command, continuation lines included.
    pub command: String,
    /// The lines it prints (stdout and stderr as one stream).
    pub expected: Vec<String>,
    /// The exit status the transcript gives it (`(exit N)` at the end of
    /// its last line), else 0.
    pub status: i32,
}

/// The steps of a `console` block.
pub fn steps(body: &[String]) -> Result<Vec<Step>, String> {
    let mut out: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in body {
        if continued {
            let step = out.last_mut().ok_or("a continuation with no command")?;
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.trim_end().ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            out.push(Step { command: command.to_owned(), expected: Vec::new(), status: 0 });
            continued = command.trim_end().ends_with('\\');
        } else {
            let step = out
                .last_mut()
                .ok_or_else(|| format!("output before any `$ ` command: {line:?}"))?;
            step.expected.push(line.clone());
        }
    }
    for step in &mut out {
        if let Some(last) = step.expected.last_mut() {
            if let Some((text, status)) = exit_note(last) {
                *last = text;
                step.status = status;
                if last.trim().is_empty() {
                    step.expected.pop();
                }
            }
        }
    }
    Ok(out)
}

/// `…   (exit 3)` → (`…`, 3).
fn exit_note(line: &str) -> Option<(String, i32)> {
    let trimmed = line.trim_end();
    let open = trimmed.rfind("(exit ")?;
    let status = trimmed[open + "(exit ".len()..].strip_suffix(')')?.parse().ok()?;
    Some((trimmed[..open].trim_end().to_owned(), status))
}

/// The exit status an `sh` command's comment gives it (`# exit 1: …`), else 0.
pub fn sh_status(command: &str) -> i32 {
    let Some(at) = command.rfind("# exit ") else {
        return 0;
    };
    let digits: String =
        command[at + "# exit ".len()..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}
