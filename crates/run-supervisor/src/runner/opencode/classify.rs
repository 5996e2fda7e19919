//! How a finished `opencode run` attempt is judged: its events, its stderr and its exit.

use crate::classify::{
    ExitInfo, Failure, FailureKind, agent_fallback_line, classify_error, classify_text,
    rejected_permission_lines, stderr_tail, unknown_option_line,
};
use crate::events::RunSummary;

/// Classifies a finished run. `None` means it succeeded.
///
/// Order of the rules: an agent fallback on stderr; an error event not followed by a finished
/// step (a recovered error does not fail the run even though 1.x exits 1); a permission that
/// was auto-rejected with nothing after it; a last step cut by the output limit; a signal or a
/// non-zero exit with no error event; a run that printed no event at all.
pub fn classify(summary: &RunSummary, stderr: &str, exit: ExitInfo) -> Option<Failure> {
    if let Some(line) = agent_fallback_line(stderr) {
        return Some(Failure::with_advice(
            FailureKind::Agent,
            line,
            "opencode ran its default agent instead of the one asked for. Check the name with `opencode agent list`; an agent with `mode: subagent` must be started by the bridge with its mode overridden (pass its opencode mode in the task).",
        ));
    }
    if let Some(last) = summary.errors().last()
        && !summary.finished_after_error()
    {
        let mut f = classify_error(last);
        if summary.errors().len() > 1 {
            f.message = format!("{} ({} error events)", f.message, summary.errors().len());
        }
        return Some(f);
    }
    let rejected = rejected_permission_lines(stderr);
    let last_tool_rejected = summary
        .tool_calls()
        .last()
        .is_some_and(|c| c.permission_rejected());
    if last_tool_rejected && summary.last_finish_reason().as_deref() != Some("stop") {
        let call = summary.tool_calls().last().cloned();
        let what = rejected.first().cloned().unwrap_or_else(|| {
            call.map(|c| format!("tool `{}` was refused", c.tool))
                .unwrap_or_default()
        });
        return Some(Failure::with_advice(
            FailureKind::Agent,
            format!("permission auto-rejected, the run stopped: {what}"),
            "A tool call needed a permission that non-interactive runs refuse (e.g. a path outside the task's directory) and opencode stopped the run. Keep the work inside the task's cwd, or use an agent whose permissions allow it.",
        ));
    }
    if summary.last_finish_reason().as_deref() == Some("length") {
        return Some(Failure::new(
            FailureKind::OutputLimit,
            "the model stopped at its output-token limit (finish reason `length`); the answer is cut off",
        ));
    }
    let stderr_tail = stderr_tail(stderr);
    if let Some(sig) = exit.signal {
        return Some(Failure::new(
            FailureKind::Exit,
            format!("opencode was killed by signal {sig}. {stderr_tail}"),
        ));
    }
    match exit.code {
        Some(0) | None => {}
        Some(code) => {
            if summary.events() == 0
                && let Some(line) = unknown_option_line(stderr)
            {
                return Some(Failure::with_advice(
                    FailureKind::OutdatedRunner,
                    format!("opencode exited with code {code}: {line}"),
                    "opencode is older than the bridge needs (it rejected a flag the bridge passes). Upgrade it: npm i -g opencode-ai@1.18.33; `opencode-bridge doctor` shows the version and the run flags it has.",
                ));
            }
            if summary.errors().is_empty() {
                let kind = classify_text(&stderr_tail).unwrap_or(FailureKind::Exit);
                let kind = if kind == FailureKind::Exit || summary.events() > 0 {
                    FailureKind::Exit
                } else {
                    kind
                };
                return Some(Failure::new(
                    kind,
                    format!("opencode exited with code {code}. {stderr_tail}"),
                ));
            }
        }
    }
    if summary.events() == 0 {
        return Some(Failure::new(
            FailureKind::Exit,
            format!("opencode printed no events. {stderr_tail}"),
        ));
    }
    if summary.ended_mid_line() {
        return Some(Failure::with_advice(
            FailureKind::Exit,
            "opencode's output ended in the middle of an event line: it exited before everything it printed was read, so the end of the run's events (answer text, tokens) is lost here",
            "The session itself holds the whole answer: read it with opencode_session_output and the task's session id. Seen with very long answers when the run's output had to go through a pipe.",
        ));
    }
    None
}
