//! Harness of the `tool_args` target: validation of MCP `tools/call` arguments
//! (`parse_call` of `bins/opencode-bridge/src/tools.rs`, compiled into the fuzz crate by path
//! because the binary has no library target).
//!
//! One input is a selector byte (which of the ten tools, or an unknown name) followed by the
//! JSON of the arguments; an object is passed as the argument map, `null` as "no arguments",
//! anything else is skipped (MCP arguments are always an object).
//!
//! Checked besides "no panic": what is accepted respects the schema's bounds.

use serde_json::Value;

use crate::tools::schema::valid_model;
use crate::tools::{Call, REPLY_CAP_CHARS, TOOL_NAMES, parse_call};

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let Some((&selector, json)) = data.split_first() else {
        return;
    };
    let tool = TOOL_NAMES
        .get(usize::from(selector) % (TOOL_NAMES.len() + 1))
        .copied()
        .unwrap_or("opencode_unknown");
    let Ok(v) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let result = match &v {
        Value::Object(map) => parse_call(tool, Some(map)),
        Value::Null => parse_call(tool, None),
        _ => return,
    };
    let Ok(call) = result else {
        return;
    };
    let cap = REPLY_CAP_CHARS as u64;
    match call {
        Call::Start(a) => {
            assert!(!a.prompt.trim().is_empty());
            assert!(a.model.as_deref().is_none_or(valid_model));
            assert!(a.timeout_minutes.is_none_or(|m| (1..=1440).contains(&m)));
        }
        Call::Result { head, tail, .. } => {
            for n in [head, tail].into_iter().flatten() {
                assert!((1..=REPLY_CAP_CHARS).contains(&n));
            }
        }
        Call::Sessions(a) => {
            assert!(a.limit.is_none_or(|l| (1..=500).contains(&l)));
            assert!(a.since_minutes.is_none_or(|m| (1..=525_600).contains(&m)));
        }
        Call::SessionOutput(a) => {
            assert!((1..=1000).contains(&a.messages));
            assert!((200..=cap).contains(&a.max_chars));
        }
        Call::Rename { title, .. } => {
            assert!(!title.trim().is_empty() && title.chars().count() <= 200);
        }
        _ => {}
    }
}
