//! The fake LLM's scenarios as the real opencode 1.18.33 sees them.

use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use serde_json::Value;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(180);

fn events_of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"].as_str() == Some(kind))
        .collect()
}

#[test]
fn live_fake_scenarios_write_retry_and_rejection() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();

    // toolwrite: the file lands in the project dir (PWD), then the run answers.
    let out = sb
        .run_json(&oc, "toolwrite", "write the file", &[], TIMEOUT)
        .unwrap();
    assert_eq!(out.status.and_then(|s| s.code()), Some(0), "{}", out.stderr);
    let written = std::fs::read_to_string(sb.project_dir().join("hello.txt")).unwrap();
    assert_eq!(written, "hi from fake\n");
    let tools = events_of(&out.events, "tool_use");
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["part"]["tool"], "write");
    assert_eq!(tools[0]["part"]["state"]["status"], "completed");

    // e429: retried at once thanks to retry-after-ms (1 + 5 attempts), then reported.
    let out = sb
        .run_json(&oc, "e429", "rate limited", &[], TIMEOUT)
        .unwrap();
    assert_eq!(out.status.and_then(|s| s.code()), Some(1));
    let errors = events_of(&out.events, "error");
    assert_eq!(errors.len(), 1, "{}", out.stdout);
    assert_eq!(errors[0]["error"]["name"], "APIError");
    assert_eq!(errors[0]["error"]["data"]["statusCode"], 429);
    assert_eq!(errors[0]["error"]["data"]["isRetryable"], true);
    let attempts = llm
        .chat_requests("e429")
        .iter()
        .filter(|r| r.has_tools())
        .count();
    assert_eq!(attempts, 6);

    // toolread-denied: the permission is auto-rejected; the run ends with rc 0.
    let out = sb
        .run_json(&oc, "toolread-denied", "read outside", &[], TIMEOUT)
        .unwrap();
    assert_eq!(out.status.and_then(|s| s.code()), Some(0));
    let tools = events_of(&out.events, "tool_use");
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["part"]["state"]["status"], "error");
    assert!(
        tools[0]["part"]["state"]["error"]
            .as_str()
            .unwrap()
            .contains("rejected permission")
    );
    assert!(out.stderr.contains("auto-rejecting"), "{}", out.stderr);
}
