//! `opencode-bridge hook stop`: the Claude Code Stop hook of the plugin (plugin/hooks/hooks.json).
//!
//! Claude Code runs it when Claude is about to end a turn, with the hook's JSON on stdin
//! (`session_id`, `stop_hook_active`, ...). When tasks delegated in that session still run, or
//! finished with a result nobody read, it prints `{"decision":"block","reason":…}` so Claude is
//! told which before it stops. Silent (exit 0, no output) when there is nothing, when the
//! session is unknown, and when `stop_hook_active` is true: a Stop hook already continued this
//! turn, so it speaks once per turn and can never keep Claude from stopping for good.
//!
//! It only reads the registry's files (run_supervisor::registry::unsettled): no App, no
//! supervisor, nothing created or written.

use std::io::Read;

use bridge_render as render;
use serde_json::{Value, json};

/// Claude Code's hook input is a small JSON object; more than this is not one.
const MAX_INPUT: u64 = 1 << 20;

/// Runs the Stop hook; returns the exit code (0, or 1 with a one-line error on stderr when the
/// input is not Claude Code's JSON: a non-blocking error for Claude Code).
pub fn stop() -> i32 {
    let mut input = String::new();
    if let Err(e) = std::io::stdin().take(MAX_INPUT).read_to_string(&mut input) {
        eprintln!("{}", render::hook::bad_input(&e.to_string()));
        return 1;
    }
    let hook: Value = match serde_json::from_str(&input) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            eprintln!("{}", render::hook::bad_input("not a JSON object"));
            return 1;
        }
        Err(e) => {
            eprintln!("{}", render::hook::bad_input(&e.to_string()));
            return 1;
        }
    };
    if hook.get("stop_hook_active").and_then(Value::as_bool) == Some(true) {
        return 0;
    }
    let session = hook
        .get("session_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| std::env::var(bridge_env::CLAUDE_SESSION.name).ok())
        .filter(|s| !s.trim().is_empty());
    let state_dir = run_supervisor::SupervisorConfig::from_env().state_dir;
    let (Some(session), Some(dir)) = (session, state_dir) else {
        return 0;
    };
    let tasks = run_supervisor::registry::unsettled(&dir, &session);
    if !tasks.is_empty() {
        let reason = render::hook::stop_reason(&tasks);
        println!("{}", json!({"decision": "block", "reason": reason}));
    }
    0
}
