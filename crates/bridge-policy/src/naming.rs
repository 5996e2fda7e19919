//! Session titles: `LANE/agent: task`.
//!
//! - LANE: the `lane` argument, else the working directory's name; upper-cased, and every run of
//!   characters other than letters, digits, `_`, `.`, `-` replaced by one `-`, trimmed of `-`,
//!   cut to 24 characters; `ROOT` when nothing is left.
//! - agent: the opencode agent name as is.
//! - task: 3 to 8 words from the first line of the prompt that has words, after stripping
//!   markdown (headings, list and quote markers, emphasis, code ticks, link targets), URLs and a
//!   leading label such as `Task:`; later lines are used only when the first one has fewer than 3
//!   words. An explicit title replaces the whole `LANE/agent: task` and is kept as is, except that
//!   line breaks and other control characters become spaces.
//! - Secrets never reach a title: before the words are taken, in the lane (given or the
//!   directory's name) before it is sanitised, and in an explicit title or a rename
//!   ([`clean_title`]), every value the secret guard matches and every long random-looking token
//!   is replaced by `[secret]` ([`crate::secrets::redact`]); in the lane that becomes `SECRET`.
//!
//! ```
//! use bridge_policy::naming::{check_title, session_title};
//! use std::path::Path;
//! let t = session_title(None, Path::new("/src/my repo"), "librarian", "## Task: collect the **API** notes for `ureq` 3\nmore", None);
//! assert_eq!(t, "MY-REPO/librarian: collect the API notes for ureq 3");
//! assert!(check_title(&t).is_empty());
//! assert!(!check_title("New session - 2026-01-01").is_empty());
//! ```

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::secrets;

/// Fewest words in a task.
pub const MIN_TASK_WORDS: usize = 3;
/// Most words in a task.
pub const MAX_TASK_WORDS: usize = 8;
const MAX_LANE_CHARS: usize = 24;

/// The title for a delegated session.
pub fn session_title(
    lane: Option<&str>,
    cwd: &Path,
    agent: &str,
    prompt: &str,
    explicit: Option<&str>,
) -> String {
    if let Some(title) = explicit.map(clean_title).filter(|t| !t.is_empty()) {
        return title;
    }
    format!("{}/{}: {}", lane_name(lane, cwd), agent, task_words(prompt))
}

/// The LANE part: the lane argument, else the directory name, sanitised.
///
/// ```
/// use bridge_policy::naming::lane_name;
/// use std::path::Path;
/// assert_eq!(lane_name(Some("docs lane"), Path::new("/x")), "DOCS-LANE");
/// assert_eq!(lane_name(None, Path::new("/home/u/opencode_bridge")), "OPENCODE_BRIDGE");
/// assert_eq!(lane_name(None, Path::new("/")), "ROOT");
/// // a secret never reaches the lane, not even its first 24 characters
/// assert_eq!(lane_name(Some("ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi"), Path::new("/x")), "SECRET");
/// ```
pub fn lane_name(lane: Option<&str>, cwd: &Path) -> String {
    let raw = lane
        .map(str::to_owned)
        .filter(|l| !l.trim().is_empty())
        .or_else(|| cwd.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // Before the cut to 24 characters, so the guard sees the whole value.
    let raw = secrets::redact(&raw);
    let mut out = String::new();
    for c in raw.trim().to_uppercase().chars() {
        if c.is_alphanumeric() || matches!(c, '_' | '.' | '-') {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out: String = out.trim_matches('-').chars().take(MAX_LANE_CHARS).collect();
    let out = out.trim_end_matches('-').to_owned();
    if out.is_empty() {
        "ROOT".to_owned()
    } else {
        out
    }
}

/// The task part: 3 to 8 words from the prompt (fewer only when the prompt has fewer).
///
/// ```
/// use bridge_policy::naming::task_words;
/// assert_eq!(task_words("1. **Task:** add retries to `fetch_all`\n"), "add retries to fetch_all");
/// assert_eq!(task_words("Fix\nthe build"), "Fix the build");
/// ```
pub fn task_words(prompt: &str) -> String {
    // secrets never reach a title: the guard's matches and long random tokens become [secret]
    let prompt = secrets::redact(prompt);
    let mut words: Vec<String> = Vec::new();
    let mut in_fence = false;
    for line in prompt.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let line_words = line_words(trimmed);
        if line_words.is_empty() {
            continue;
        }
        words.extend(line_words);
        if words.len() >= MIN_TASK_WORDS {
            break;
        }
    }
    words.truncate(MAX_TASK_WORDS);
    let text = words.join(" ");
    text.trim_end_matches(['.', ',', ':', ';', '-']).to_owned()
}

fn line_words(line: &str) -> Vec<String> {
    static URL: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\b[a-z][a-z0-9+.-]*://\S+").expect("url pattern"));
    static LINK: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"!?\[([^\]]*)\]\([^)]*\)").expect("link pattern"));
    static PREFIX: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(?:#{1,6}\s+|>\s*|[-*+]\s+(?:\[[ xX]\]\s+)?|\d+[.)]\s+)+").expect("prefix")
    });
    static LABEL: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)^(?:task|goal|todo|objective|job|request|please)\s*[:\-—]\s*")
            .expect("label")
    });
    let line = PREFIX.replace(line, "");
    let line = LINK.replace_all(&line, "$1");
    let line = URL.replace_all(&line, " ");
    let line = line.replace("__", "").replace(['*', '`'], "");
    let line = LABEL.replace(line.trim(), "");
    line.split_whitespace()
        .map(|w| {
            let w: String = w.chars().take(40).collect();
            w
        })
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .collect()
}

/// A title given by the caller (`title` of a start, or a rename) as it is stored: control
/// characters become spaces, the ends are trimmed, and every secret is replaced by `[secret]`.
///
/// ```
/// use bridge_policy::naming::clean_title;
/// assert_eq!(clean_title("DOCS/worker: use\nAKIAZ7Q4M2KD8XW3PL6T "), "DOCS/worker: use [secret]");
/// ```
pub fn clean_title(title: &str) -> String {
    secrets::redact(&clean_explicit(title))
}

fn clean_explicit(title: &str) -> String {
    title
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

/// Why a title breaks the convention; empty when it follows it.
///
/// ```
/// use bridge_policy::naming::check_title;
/// assert!(check_title("DOCS/librarian: collect API notes").is_empty());
/// assert_eq!(check_title("docs/librarian: collect API notes"), vec!["LANE \"docs\" is not in capitals".to_owned()]);
/// ```
pub fn check_title(title: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let Some((head, task)) = title.split_once(": ") else {
        problems.push(
            "missing \": \" between LANE/agent and the task (expected LANE/agent: task)".to_owned(),
        );
        return problems;
    };
    let Some((lane, agent)) = head.split_once('/') else {
        problems.push(format!(
            "{head:?} has no \"/\" between LANE and agent (expected LANE/agent: task)"
        ));
        return problems;
    };
    if lane.is_empty() {
        problems.push("LANE is empty".to_owned());
    } else if lane.chars().any(char::is_whitespace) {
        problems.push(format!("LANE {lane:?} contains spaces"));
    } else if lane.to_uppercase() != lane || !lane.chars().any(|c| c.is_ascii_alphanumeric()) {
        problems.push(format!("LANE {lane:?} is not in capitals"));
    }
    if agent.trim().is_empty() {
        problems.push("agent is empty".to_owned());
    } else if agent.chars().any(char::is_whitespace) {
        problems.push(format!("agent {agent:?} contains spaces"));
    }
    let words = task.split_whitespace().count();
    if words < MIN_TASK_WORDS {
        problems.push(format!(
            "task has {words} word(s); use {MIN_TASK_WORDS} to {MAX_TASK_WORDS}"
        ));
    } else if words > MAX_TASK_WORDS {
        problems.push(format!(
            "task has {words} words; use {MIN_TASK_WORDS} to {MAX_TASK_WORDS}"
        ));
    }
    problems
}
