//! Session listings and transcripts (`opencode_sessions`, `opencode_session_output`,
//! `opencode_session_rename`).

use crate::human::{age, clip, clock, dir_tail, keep_end, one_line, table, tokens};
use opencode_client::{Message, Part, Role, Session, SessionList, SessionTranscript};

/// How much of a transcript to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// The final assistant answer only.
    Last,
    /// The newest messages, condensed.
    Tail,
    /// Every fetched message, condensed.
    Full,
}

impl OutputMode {
    /// `last`, `tail` or `full`.
    pub fn parse(s: &str) -> Option<OutputMode> {
        match s {
            "last" => Some(OutputMode::Last),
            "tail" => Some(OutputMode::Tail),
            "full" => Some(OutputMode::Full),
            _ => None,
        }
    }
}

/// Clip of a tool input in a transcript line.
const TOOL_INPUT_CHARS: usize = 160;
/// Clip of a tool result in a transcript line.
const TOOL_OUTPUT_CHARS: usize = 200;
/// A user message shows its start and its end (delegated prompts put long rules first and the
/// task last).
const USER_HEAD_CHARS: usize = 120;
const USER_TAIL_CHARS: usize = 280;

fn user_line(text: &str) -> String {
    let flat = one_line(text, usize::MAX);
    let total = flat.chars().count();
    if total <= USER_HEAD_CHARS + USER_TAIL_CHARS + 10 {
        return flat;
    }
    let head: String = flat.chars().take(USER_HEAD_CHARS).collect();
    let tail: String = flat.chars().skip(total - USER_TAIL_CHARS).collect();
    format!("{head} … {tail}")
}

/// `opencode_sessions`: a header line, then one aligned line per session.
///
/// `filter` describes the filter in words (`state=running, agent=worker`), empty for none.
pub fn session_list(list: &SessionList, filter: &str, now_ms: i64) -> String {
    let mut out = format!("{} session(s)", list.sessions.len());
    if !filter.is_empty() {
        out.push_str(&format!(" ({filter})"));
    }
    out.push_str(&format!(
        "; scanned {}; backend {}",
        list.scanned, list.backend
    ));
    if let Some(why) = &list.partial {
        out.push_str(&format!("; PARTIAL: {why}"));
    }
    out.push('\n');
    let header: Vec<String> = [
        "ID",
        "STATE",
        "AGENT",
        "AGE",
        "TOKENS in/out",
        "DIR",
        "TITLE",
    ]
    .map(String::from)
    .to_vec();
    let rows: Vec<Vec<String>> = std::iter::once(header)
        .filter(|_| !list.sessions.is_empty())
        .chain(list.sessions.iter().map(|s| session_row(s, now_ms)))
        .collect();
    for line in table(&rows, &[4]) {
        out.push_str(&line);
        out.push('\n');
    }
    if list.sessions.is_empty() {
        out.push_str("(no session matches)\n");
    }
    out
}

/// `opencode_sessions` before opencode ever ran on this machine: no store yet at `store`
/// (the normal first state, not a failure).
pub fn no_sessions_yet(store: &std::path::Path) -> String {
    format!(
        "0 sessions (opencode has not run yet: its store {} does not exist or is empty; it appears with the first opencode run)\n",
        store.display()
    )
}

fn session_row(s: &Session, now_ms: i64) -> Vec<String> {
    let mut title = s.title.clone();
    if s.parent_id.is_some() {
        title = format!("[child] {title}");
    }
    if let Some(err) = &s.error {
        title = format!("{title}  !! {}", one_line(err, 120));
    }
    vec![
        s.id.clone(),
        s.state.as_str().to_string(),
        s.agent.clone().unwrap_or_else(|| "-".into()),
        age(s.updated_ms, now_ms),
        tokens(s.tokens.input, s.tokens.output),
        dir_tail(&s.directory),
        title,
    ]
}

/// The two header lines of a session (used by transcripts and renames).
pub fn session_header(s: &Session, now_ms: i64) -> String {
    let mut first = format!(
        "{}  {}  {}  updated {}  {}",
        s.id,
        s.state.as_str(),
        s.agent.as_deref().unwrap_or("-"),
        age(s.updated_ms, now_ms),
        tokens(s.tokens.input, s.tokens.output)
    );
    if let Some(model) = &s.model {
        first.push_str(&format!("  {model}"));
    }
    let mut out = format!("{first}\n{}  |  {}\n", s.directory, s.title);
    if let Some(parent) = &s.parent_id {
        out.push_str(&format!("child of {parent}\n"));
    }
    if let Some(err) = &s.error {
        out.push_str(&format!("error: {}\n", one_line(err, 400)));
    }
    out
}

/// `opencode_session_output`: the header, a rule, then the body for the mode, cut to
/// `max_chars` (the end is kept).
pub fn transcript(
    t: &SessionTranscript,
    mode: OutputMode,
    max_chars: usize,
    now_ms: i64,
) -> String {
    let mut head = session_header(&t.session, now_ms);
    let shown = t.messages.len();
    if mode != OutputMode::Last && shown < t.total_messages {
        head.push_str(&format!(
            "showing the last {shown} of {} messages\n",
            t.total_messages
        ));
    }
    head.push_str(&"-".repeat(40));
    head.push('\n');
    let body = match mode {
        OutputMode::Last => last_answer(&t.messages),
        OutputMode::Tail | OutputMode::Full => {
            let mut body = String::new();
            for m in &t.messages {
                body.push_str(&message_lines(m));
            }
            body.push_str(&format!("- {} -\n", t.session.state.as_str()));
            body
        }
    };
    let budget = max_chars.saturating_sub(head.chars().count()).max(100);
    format!("{head}{}", keep_end(&body, budget))
}

fn last_answer(messages: &[Message]) -> String {
    let answer = messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant)
        .find_map(|m| {
            let text = texts(m);
            (!text.is_empty()).then_some(text)
        });
    match answer {
        Some(text) => format!("{text}\n"),
        None => "(no assistant answer yet)\n".into(),
    }
}

fn texts(m: &Message) -> String {
    m.parts
        .iter()
        .filter_map(|p| match p {
            Part::Text {
                text,
                synthetic: false,
                ..
            } => Some(text.trim()),
            _ => None,
        })
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn message_lines(m: &Message) -> String {
    let mut out = String::new();
    let stamp = format!("[{}]", clock(m.created_ms));
    match m.role {
        Role::User => {
            let text = texts(m);
            out.push_str(&format!("{stamp} user: {}\n", user_line(&text)));
        }
        Role::Assistant => {
            let who = m.agent.as_deref().unwrap_or("assistant");
            let mut said = false;
            for p in &m.parts {
                match p {
                    Part::Text {
                        text,
                        synthetic: false,
                        ..
                    } if !text.trim().is_empty() => {
                        let prefix = if said {
                            "  ".to_string()
                        } else {
                            format!("{stamp} {who}: ")
                        };
                        out.push_str(&format!("{prefix}{}\n", text.trim()));
                        said = true;
                    }
                    Part::Tool {
                        tool,
                        status,
                        input,
                        output,
                        ..
                    } => {
                        if !said {
                            out.push_str(&format!("{stamp} {who}:\n"));
                            said = true;
                        }
                        let result = output
                            .as_deref()
                            .map(|o| format!(" => {}", one_line(o, TOOL_OUTPUT_CHARS)))
                            .unwrap_or_default();
                        out.push_str(&format!(
                            "  -> {tool}({}) [{}]{result}\n",
                            clip(input, TOOL_INPUT_CHARS),
                            status.as_str()
                        ));
                    }
                    Part::Patch { files } if !files.is_empty() => {
                        out.push_str(&format!("  changed: {}\n", files.join(", ")));
                    }
                    _ => {}
                }
            }
            if let Some(err) = &m.error {
                if !said {
                    out.push_str(&format!("{stamp} {who}:\n"));
                }
                out.push_str(&format!(
                    "  !! {}: {}\n",
                    err.name,
                    one_line(&err.message, 300)
                ));
            }
        }
    }
    out
}

/// `opencode_session_rename`: the session after the rename, plus a warning when the title
/// breaks the naming convention.
pub fn renamed(s: &Session, warning: Option<&str>, now_ms: i64) -> String {
    let mut out = format!("renamed {} to \"{}\"\n", s.id, s.title);
    out.push_str(&session_header(s, now_ms));
    if let Some(w) = warning {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}
