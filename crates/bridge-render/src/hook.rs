//! What `opencode-bridge hook stop` (the plugin's Claude Code Stop hook) tells Claude when it is
//! about to end its turn with delegated tasks unsettled, and its one-line input errors.

use run_supervisor::TaskState;
use run_supervisor::registry::Unsettled;

/// The reason given with the hook's `"decision": "block"`: which tasks of this session still
/// run or finished with a result never read, and what to do about each. Claude sees it as the
/// reason it may not stop yet (once per turn: the hook is silent when Claude Code says a Stop
/// hook already continued this turn).
pub fn stop_reason(tasks: &[Unsettled]) -> String {
    let mut out = String::from(
        "Before you stop: tasks you delegated to opencode in this session are not settled.\n",
    );
    for t in tasks {
        let what = if t.running {
            format!(
                "still runs: wait for it with opencode_wait ids=[\"{}\"] (when it runs as a background task, its result comes back by itself after your turn), or stop it with opencode_cancel id={} if it is no longer needed",
                t.id, t.id
            )
        } else {
            let ended = match t.state {
                TaskState::Succeeded => "finished",
                TaskState::TimedOut => "timed out",
                _ => "failed",
            };
            format!(
                "{ended} and its result was never read: read it with opencode_result id={} and check it before relying on it",
                t.id
            )
        };
        out.push_str(&format!(
            "- task {} ({}, \"{}\") {what}.\n",
            t.id, t.agent, t.title
        ));
    }
    out.push_str("If you have already dealt with them, say so in one line and stop.");
    out
}

/// The hook's input was not Claude Code's JSON.
pub fn bad_input(why: &str) -> String {
    format!(
        "opencode-bridge hook stop: the input on stdin is not a Claude Code hook's JSON ({why}); run it as a Stop hook (the plugin's hooks/hooks.json does)"
    )
}
