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

/// Starts a task; returns its id.
fn start(server: &mut Server, next: &mut i64, args: serde_json::Value) -> String {
    *next += 1;
    let (started, is_error) = server.call_text(*next, "opencode_start", args);
    assert!(!is_error, "{started}");
    task_id(&started)
}

/// Waits for every task, then returns each one's result text.
fn results(server: &mut Server, next: &mut i64, ids: &[&str]) -> Vec<String> {
    for id in ids {
        common::until_ended(server, id, next);
    }
    ids.iter()
        .map(|id| {
            *next += 1;
            server
                .call_text(*next, "opencode_result", json!({"id": id}))
                .0
        })
        .collect()
}

/// Whether any request the model got carries `text` in a user message.
fn model_saw(llm: &FakeLlm, text: &str) -> bool {
    llm.chat_requests("script")
        .iter()
        .any(|r| r.body.contains(text))
}

#[test]
fn live_verify_passes_fails_feeds_the_failure_back_and_stays_in_the_fence() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let proj = sb.project_dir().canonicalize().unwrap();
    let outside = world.path("outside-verify.txt");
    let mut server = bridge(&world, &sb, &oc);
    let mut next = 0;
    let task = |prompt: String, verify: String, retries: u64| {
        json!({"tier": "easy", "prompt": prompt, "model": "fk/script", "verify": verify,
               "verify_retries": retries})
    };
    let write = |name: &str| {
        format!(
            "CALL write {}",
            json!({"filePath": proj.join(name), "content": "hi\n"})
        )
    };
    // 1. The agent writes the file, the check finds it.
    let passes = start(
        &mut server,
        &mut next,
        task(
            format!("Write the greeting\n{}", write("hello.txt")),
            "grep -q hi hello.txt && echo found".into(),
            1,
        ),
    );
    // 2. A failing check with no retry: the model never hears of it.
    let no_retry = start(
        &mut server,
        &mut next,
        task(
            "Write nothing".into(),
            "echo MARK-NO-RETRY; exit 3".into(),
            0,
        ),
    );
    // 3. A failing check whose output the follow-up carries to the model: it holds the tool
    // call that fixes it (the script model makes each `CALL` line of its user messages).
    // (No backslash in it: `echo` of dash would read `\n`.)
    let fix = json!({"filePath": proj.join("fixed.txt"), "content": "ok"});
    let fixed = start(
        &mut server,
        &mut next,
        task(
            "Write nothing yet".into(),
            format!("test -f fixed.txt || {{ echo 'CALL write {fix}'; exit 1; }}"),
            1,
        ),
    );
    // 4. Still failing after its follow-up.
    let still = start(
        &mut server,
        &mut next,
        task(
            "Write nothing".into(),
            "echo MARK-STILL-BROKEN; exit 2".into(),
            1,
        ),
    );
    // 5. A check that writes outside the root: the run's fence holds it too.
    let fenced = start(
        &mut server,
        &mut next,
        task(
            "Write nothing".into(),
            format!("echo escaped > {}", outside.display()),
            0,
        ),
    );
    let r = results(
        &mut server,
        &mut next,
        &[&passes, &no_retry, &fixed, &still, &fenced],
    );
    assert!(
        r[0].contains("succeeded") && r[0].contains("verify: passed\n"),
        "{}",
        r[0]
    );
    assert!(r[0].contains("verify output (end):\nfound\n"), "{}", r[0]);
    assert!(proj.join("hello.txt").is_file());
    // Outside git the file and the tool call are named from the task's cwd (opencode titles
    // them from `/`).
    assert!(r[0].contains("-> write(hello.txt) [completed]"), "{}", r[0]);
    // With the lines the write's input tells (what it replaced is not in it).
    assert!(
        r[0].contains("\n  hello.txt +1 -unknown (written)"),
        "{}",
        r[0]
    );

    assert!(
        r[1].contains("failure: verify: verify failed (exit 3)"),
        "{}",
        r[1]
    );
    assert!(
        r[1].contains("verify output (end):\nMARK-NO-RETRY"),
        "{}",
        r[1]
    );
    assert!(!model_saw(&llm, "MARK-NO-RETRY"));

    assert!(r[2].contains("succeeded"), "{}", r[2]);
    assert!(r[2].contains("verify: passed after 2 runs"), "{}", r[2]);
    assert!(model_saw(
        &llm,
        "The check for this task failed after your turn"
    ));
    assert!(proj.join("fixed.txt").is_file());
    assert!(
        r[2].contains("\n  fixed.txt +1 -unknown (written)"),
        "{}",
        r[2]
    );

    assert!(
        r[3].contains("verify: failed (exit 2) after 2 runs"),
        "{}",
        r[3]
    );
    assert!(r[3].contains("failure: verify:"), "{}", r[3]);
    assert!(model_saw(&llm, "MARK-STILL-BROKEN"));

    assert!(r[4].contains("failure: verify:"), "{}", r[4]);
    assert!(r[4].contains("verify output (end):"), "{}", r[4]);
    assert!(
        !outside.exists(),
        "the verify command wrote outside the root"
    );

    // opencode_wait carries the outcome too.
    next += 1;
    let (waited, _) = server.call_text(
        next,
        "opencode_wait",
        json!({"ids": [passes, still], "mode": "all", "timeout_s": 5}),
    );
    assert!(waited.contains("succeeded  verify: passed"), "{waited}");
    assert!(
        waited.contains("failed (verify: verify failed (exit 2)"),
        "{waited}"
    );
}

#[test]
fn live_an_output_schema_answer_is_parsed_or_fails_after_one_follow_up() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let mut server = bridge(&world, &sb, &oc);
    let mut next = 0;
    let schema = json!({"type": "object", "properties": {"count": {"type": "integer"}},
                        "required": ["count"]});
    let task = |say: &str| {
        json!({"tier": "easy", "prompt": format!("Count the files\nSAY {say}"), "agent": "explore",
               "model": "fk/script", "output_schema": schema})
    };
    // A schema that cannot compile is refused at the start, in one line.
    next += 1;
    let mut broken = task("{}");
    broken["output_schema"] = json!({"type": "no-such-type"});
    let (refused, is_error) = server.call_text(next, "opencode_start", broken);
    assert!(is_error, "{refused}");
    assert!(
        refused.starts_with("output_schema does not compile"),
        "{refused}"
    );
    assert_eq!(refused.trim_end().lines().count(), 1, "{refused}");

    let valid = start(&mut server, &mut next, task(r#"{"count": 3}"#));
    let invalid = start(&mut server, &mut next, task(r#"{"count": "three"}"#));
    for id in [&valid, &invalid] {
        common::until_ended(&mut server, id, &mut next);
    }
    next += 1;
    let r = server.call(next, "opencode_result", json!({"id": valid}));
    let text = r["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("succeeded") && text.contains("output_schema: valid"),
        "{text}"
    );
    assert_eq!(
        r["result"]["structuredContent"]["output"],
        json!({"count": 3}),
        "{r}"
    );
    // The model was told the schema.
    assert!(model_saw(&llm, "valid against this JSON Schema"));

    next += 1;
    let r = server.call(next, "opencode_result", json!({"id": invalid}));
    let text = r["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("failure: schema: the answer does not satisfy the output_schema: at /count:"),
        "{text}"
    );
    assert!(text.contains("output_schema: invalid"), "{text}");
    assert!(r["result"]["structuredContent"]["output"].is_null(), "{r}");
    // The follow-up quoting the errors reached the model.
    assert!(model_saw(&llm, "does not satisfy the required JSON Schema"));
}

/// An isolated task on the `run` engine (its follow-up an `opencode run --session`): the verify
/// command runs in the task's worktree, its failure reaches the agent there, and the caller's
/// checkout is untouched until the change is applied.
#[test]
fn live_run_an_isolated_task_verifies_in_its_worktree_before_anything_is_applied() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let proj = sb.project_dir().canonicalize().unwrap();
    bridge_testkit::git_repo(&proj, &[("README.md", "# demo\n")]);
    let mut env = common::sandbox_env_for_bridge(&sb);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_ROOT", proj.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_RETRIES", "0".into()));
    env.push(("OPENCODE_BRIDGE_ENGINE", "run".into()));
    let mut server = Server::start_in(&world, &env, &proj);
    server.initialize();
    let mut next = 0;
    // Exit 9 anywhere but a worktree of the bridge's; there, the file the follow-up's `CALL`
    // writes (a path relative to the run's directory) decides.
    let fix = json!({"filePath": "fixed.txt", "content": "ok"});
    let verify = format!(
        "pwd -P | grep -q /worktrees/ || exit 9; test -f fixed.txt || {{ echo 'CALL write {fix}'; exit 1; }}"
    );
    let id = start(
        &mut server,
        &mut next,
        json!({"tier": "easy", "prompt": "Write nothing yet", "model": "fk/script",
               "isolation": "worktree", "verify": verify}),
    );
    let r = results(&mut server, &mut next, &[&id]).remove(0);
    assert!(r.contains("succeeded"), "{r}");
    assert!(r.contains("engine: run"), "{r}");
    assert!(r.contains("verify: passed after 2 runs"), "{r}");
    assert!(r.contains("fixed.txt +1 -0 (added)"), "{r}");
    assert!(r.contains("+++ b/fixed.txt"), "{r}");
    assert!(!proj.join("fixed.txt").exists(), "the checkout was touched");
}

/// The control of the fenced verify above: with the fence off (`OPENCODE_BRIDGE_SANDBOX=off`)
/// the same command writes outside the root, so that test's refusal is the fence's doing.
#[test]
fn live_with_the_fence_off_a_verify_command_writes_outside_the_root() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let outside = world.path("outside-verify.txt");
    let mut env = common::sandbox_env_for_bridge(&sb);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push((
        "OPENCODE_BRIDGE_ROOT",
        sb.project_dir().to_string_lossy().into_owned(),
    ));
    env.push(("OPENCODE_BRIDGE_SANDBOX", "off".into()));
    let mut server = Server::start(&world, &env);
    server.initialize();
    let mut next = 0;
    let id = start(
        &mut server,
        &mut next,
        json!({"tier": "easy", "prompt": "Write nothing", "model": "fk/script",
               "verify": format!("echo escaped > {}", outside.display()), "verify_retries": 0}),
    );
    let r = results(&mut server, &mut next, &[&id]).remove(0);
    assert!(
        r.contains("succeeded") && r.contains("verify: passed"),
        "{r}"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "escaped\n");
}

/// The CLI's `start` mirrors the tool: it waits for the task and prints its result, with the
/// verify outcome and the schema's verdict; a repeated `--request-id` returns that task.
#[test]
fn live_cli_start_verifies_checks_the_schema_and_honours_the_request_id() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let mut env = common::sandbox_env_for_bridge(&sb);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push((
        "OPENCODE_BRIDGE_ROOT",
        sb.project_dir().to_string_lossy().into_owned(),
    ));
    env.push(("OPENCODE_BRIDGE_ENGINE", "run".into()));
    let schema = r#"{"type": "object", "required": ["count"]}"#;
    let args = [
        "start",
        "--tier",
        "easy",
        "--model",
        "fk/script",
        "--verify",
        "test -d .",
        "--output-schema",
        schema,
        "--request-id",
        "cli-1",
        "Count the files\nSAY {\"count\": 2}",
    ];
    let out = common::run_cli(&world, &env, &args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.starts_with("started task 1:"), "{stderr}");
    assert!(
        stdout.contains("succeeded") && stdout.contains("verify: passed"),
        "{stdout}"
    );
    assert!(stdout.contains("output_schema: valid"), "{stdout}");
    // The same start again: the same task, nothing run.
    let asked = llm.chat_requests("script").len();
    let out = common::run_cli(&world, &env, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("request_id \"cli-1\" already started task 1"),
        "{stderr}"
    );
    assert_eq!(llm.chat_requests("script").len(), asked);
    // A schema that is not JSON is refused in one line, exit 1.
    let out = common::run_cli(
        &world,
        &env,
        &["start", "--tier", "easy", "--output-schema", "{nope", "x"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("opencode-bridge: --output-schema is not JSON"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}

/// Outside git the changed files come from the agent's tool calls, with the lines their inputs
/// tell: a `write` adds its content's lines (what it replaced is unknown), an `edit` removes its
/// old text's and adds its new text's. The real opencode runs the calls the script model makes.
#[test]
fn live_outside_git_the_changed_files_carry_the_tool_calls_line_counts() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let proj = sb.project_dir().canonicalize().unwrap();
    assert!(!proj.join(".git").exists());
    std::fs::write(proj.join("old.txt"), "one\ntwo\n").unwrap();
    let mut server = bridge(&world, &sb, &oc);
    let mut next = 0;
    let call = |tool: &str, input: serde_json::Value| format!("CALL {tool} {input}");
    let prompt = [
        "Write the files".to_owned(),
        call(
            "write",
            json!({"filePath": proj.join("new.txt"), "content": "a\nb\nc\n"}),
        ),
        call("read", json!({"filePath": proj.join("old.txt")})),
        call(
            "edit",
            json!({"filePath": proj.join("old.txt"), "oldString": "two", "newString": "2\nthree"}),
        ),
        "SAY written".to_owned(),
    ]
    .join("\n");
    let id = start(
        &mut server,
        &mut next,
        json!({"tier": "easy", "prompt": prompt, "model": "fk/script"}),
    );
    let result = results(&mut server, &mut next, &[&id]).remove(0);
    assert_eq!(
        std::fs::read_to_string(proj.join("old.txt")).unwrap(),
        "one\n2\nthree\n",
        "{result}"
    );
    assert!(
        result.contains(
            "changed files (2, from the agent's write/edit calls, lines as their inputs tell):"
        ),
        "{result}"
    );
    assert!(
        result.contains("  new.txt +3 -unknown (written)"),
        "{result}"
    );
    assert!(result.contains("  old.txt +2 -1 (written)"), "{result}");
}
