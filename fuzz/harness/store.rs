//! Harness of the `store_rows` target: the decoders of the SQLite store's `message.data` and
//! `part.data` columns, and the state rules fed with what they decode.
//!
//! One input is a message row's `data`, then zero or more part rows' `data`, separated by NUL
//! bytes (each decoded lossily as UTF-8, since the columns are TEXT). The first segment is also
//! decoded as a part and, when it is JSON, through the value-level decoders.
//!
//! Checked besides "no panic": a given message id and the parts are kept; the state rules give
//! a failed state only with an error text.
//!
//! This file is compiled both by the fuzz crate and by
//! `crates/opencode-client/tests/fuzz_corpus.rs` (plain `cargo test` replays the corpus).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use opencode_client::decode::{
    decode_error, decode_message, decode_message_str, decode_part, decode_part_str, decode_tokens,
    error_text, model_of_json,
};
use opencode_client::source::{Liveness, ScanContext};
use opencode_client::state::{derive_state, is_permission_rejection, needs_parts};
use opencode_client::{Message, Part, SessionState};
use serde_json::Value;

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let mut segments = data.split(|b| *b == 0);
    let message_row = segments.next().unwrap_or_default();
    let message_text = String::from_utf8_lossy(message_row);
    let parts: Vec<Part> = segments
        .map(|p| decode_part_str(&String::from_utf8_lossy(p)))
        .collect();
    let n_parts = parts.len();
    for p in &parts {
        visit_part(p);
    }

    let with_id = decode_message_str("msg_fuzz", &message_text, parts);
    assert_eq!(with_id.id, "msg_fuzz", "the row's id was not kept");
    assert_eq!(with_id.parts.len(), n_parts, "parts were lost");
    let without_id = decode_message_str("", &message_text, Vec::new());
    check_state(&with_id);
    check_state(&without_id);
    visit_part(&decode_part_str(&message_text));

    if let Ok(v) = serde_json::from_slice::<Value>(message_row) {
        if let Some(e) = decode_error(&v) {
            let _ = error_text(&e);
        }
        let _ = decode_tokens(&v);
        let _ = model_of_json(&v);
        visit_part(&decode_part(&v));
        let m = decode_message("msg_fuzz", &v, Vec::new());
        assert_eq!(m.id, "msg_fuzz");
        check_state(&m);
    }
}

fn visit_part(p: &Part) {
    if let Part::Tool {
        output: Some(out), ..
    } = p
    {
        let _ = is_permission_rejection(out);
    }
}

/// Runs the state rules on `m` as the newest assistant message, with the session busy, gone,
/// or neither, and a few activity times (including extremes).
pub fn check_state(m: &Message) {
    let _ = needs_parts(m);
    let ids = ["ses_fuzz"];
    let set = |on: bool| -> HashSet<String> {
        if on {
            ids.iter().map(|s| s.to_string()).collect()
        } else {
            HashSet::new()
        }
    };
    let now = Instant::now() + Duration::from_secs(60);
    for (busy, gone) in [(false, false), (true, false), (false, true)] {
        let ctx = ScanContext {
            deadline: now,
            now_ms: 1_800_000_000_000,
            liveness: Liveness {
                busy: set(busy),
                gone: set(gone),
            },
        };
        for activity in [m.created_ms, i64::MIN, i64::MAX, 0] {
            for last_is_user in [false, true] {
                let (state, why) = derive_state(Some(m), last_is_user, activity, "ses_fuzz", &ctx);
                if state == SessionState::Failed {
                    assert!(why.is_some(), "failed without an error text");
                }
            }
        }
    }
}
