//! Harness of the `service_json` target: the decoders of `opencode serve` (v1) and
//! `opencode api` (v2) replies, which receive already-parsed JSON.
//!
//! One input is the body of a reply: it is parsed with `serde_json::from_slice`, then the value
//! itself, each element of a top-level array, and each element of a `data` array (the v2 list
//! envelope) or a `data` object go through `session_from_v1`, `session_from_v2`,
//! `message_from_v1`, `message_from_v2` and `is_conversation_message`; each decoded message
//! then goes through the state rules.
//!
//! Checked besides "no panic": a decoded session has the id of its JSON; a v1 message keeps
//! every part of its `parts` array.
//!
//! This file is compiled both by the fuzz crate and by
//! `crates/opencode-client/tests/fuzz_corpus.rs`, which also includes `store.rs` (for
//! `check_state`) as the sibling module `store`.

use opencode_client::api::{is_conversation_message, message_from_v2, session_from_v2};
use opencode_client::server::{message_from_v1, session_from_v1};
use serde_json::Value;

use super::store::check_state;

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut items = vec![&v];
    if let Some(a) = v.as_array() {
        items.extend(a);
    }
    match v.get("data") {
        Some(Value::Array(a)) => items.extend(a),
        Some(d @ Value::Object(_)) => items.push(d),
        _ => {}
    }
    for item in items {
        one(item);
    }
}

fn one(item: &Value) {
    let id = item.get("id").and_then(Value::as_str);
    for session in [session_from_v1(item), session_from_v2(item)]
        .into_iter()
        .flatten()
    {
        assert_eq!(Some(session.id.as_str()), id, "session id changed");
    }
    let v1 = message_from_v1(item);
    if let Some(parts) = item.get("parts").and_then(Value::as_array) {
        assert_eq!(v1.parts.len(), parts.len(), "v1 parts were lost");
    }
    check_state(&v1);
    let _ = is_conversation_message(item);
    let v2 = message_from_v2(item);
    check_state(&v2);
}
