//! Results to trust without reading them (issue 34), with the real opencode 1.18.33 and the fake
//! LLM: idempotent starts (`request_id`), verify commands and output schemas.

use crate::common;

use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use common::{Server, World};
use serde_json::json;

/// A bridge on the sandbox's project (the real opencode, no retries).
fn bridge(world: &World, sb: &OpencodeSandbox, oc: &std::path::Path) -> Server {
    let mut env = common::sandbox_env_for_bridge(sb);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push((
        "OPENCODE_BRIDGE_ROOT",
        sb.project_dir().to_string_lossy().into_owned(),
    ));
    env.push(("OPENCODE_BRIDGE_RETRIES", "0".into()));
    let mut server = Server::start(world, &env);
    server.initialize();
    server
}

/// The task id of a start's text (`started task N: …`).
fn task_id(started: &str) -> String {
    started
        .strip_prefix("started task ")
        .and_then(|t| t.split(':').next())
        .unwrap_or_else(|| panic!("not a start: {started}"))
        .to_owned()
}

#[test]
fn live_a_repeated_request_id_returns_the_first_task_before_and_after_a_restart() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let start = json!({"tier": "easy", "prompt": "Say hello to the team", "model": "fk/ok",
                       "agent": "worker", "request_id": "batch-7/hello"});
    let mut first = bridge(&world, &sb, &oc);
    let (started, is_error) = first.call_text(1, "opencode_start", start.clone());
    assert!(!is_error, "{started}");
    let id = task_id(&started);
    // Again at once: the same task (it may still be running), nothing new started.
    let (again, is_error) = first.call_text(2, "opencode_start", start.clone());
    assert!(!is_error, "{again}");
    assert!(
        again.starts_with(&format!(
            "request_id \"batch-7/hello\" already started task {id} (nothing new was started)"
        )),
        "{again}"
    );
    let mut next = 10;
    let status = common::until_ended(&mut first, &id, &mut next);
    assert!(status.contains("succeeded"), "{status}");
    // Another prompt under the same key is refused in one line, naming the task.
    let mut other = start.clone();
    other["prompt"] = json!("Say goodbye to the team");
    let (refused, is_error) = first.call_text(20, "opencode_start", other.clone());
    assert!(is_error, "{refused}");
    assert_eq!(refused.lines().count(), 1, "{refused}");
    assert!(
        refused.contains(&format!("already started task {id} with another prompt")),
        "{refused}"
    );
    let asked = llm.chat_requests("ok").len();
    drop(first);

    // A new bridge on the same state directory: the key still names the task, now finished.
    let mut second = bridge(&world, &sb, &oc);
    let (after, is_error) = second.call_text(1, "opencode_start", start.clone());
    assert!(!is_error, "{after}");
    assert!(
        after.contains(&format!("already started task {id}")),
        "{after}"
    );
    assert!(after.contains("succeeded"), "{after}");
    let (refused, is_error) = second.call_text(2, "opencode_start", other);
    assert!(
        is_error && refused.contains("with another prompt"),
        "{refused}"
    );
    let mut elsewhere = start.clone();
    elsewhere["agent"] = json!("explore");
    let (refused, is_error) = second.call_text(3, "opencode_start", elsewhere);
    assert!(
        is_error && refused.contains("with another agent"),
        "{refused}"
    );
    // The model was never asked again; the list holds one task.
    assert_eq!(llm.chat_requests("ok").len(), asked);
    let (list, _) = second.call_text(4, "opencode_list", json!({}));
    assert_eq!(list.matches("task ").count(), 1, "{list}");
}
