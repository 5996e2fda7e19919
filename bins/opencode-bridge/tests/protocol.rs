//! Raw JSON-RPC against the built binary, independent of rmcp: the handshakes Claude Code uses,
//! the tool list, valid and invalid calls, cancellation, and exit on stdin EOF.

use crate::common;

use common::{Server, World, hung_http_server, redact};
use serde_json::{Value, json};
use std::time::Duration;

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

#[test]
fn discover_reports_identity_versions_and_instructions() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    let r = server.request(1, "server/discover", json!({"_meta": modern_meta()}));
    let result = &r["result"];
    let versions: Vec<&str> = result["supportedVersions"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(versions.contains(&"2026-07-28"), "{versions:?}");
    assert!(versions.contains(&"2025-11-25"), "{versions:?}");
    let info = &result["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(info["name"], "opencode-bridge");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    assert!(result["capabilities"]["tools"].is_object(), "{r}");
    let instructions = result["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("Active routing mode: blueprint"),
        "{instructions}"
    );

    // The stateless era: a request carrying its own metadata works without initialize.
    let r = server.request(2, "tools/list", json!({"_meta": modern_meta()}));
    assert_eq!(
        r["result"]["tools"].as_array().map(Vec::len),
        Some(13),
        "{r}"
    );
}

#[test]
fn initialize_then_ping() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    let result = server.initialize();
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(result["serverInfo"]["name"], "opencode-bridge");
    assert_eq!(result["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(result["capabilities"]["tools"].is_object());
    let instructions = result["instructions"].as_str().unwrap();
    insta::assert_snapshot!("instructions", redact(instructions, &world));
    let pong = server.request(7, "ping", json!({}));
    assert_eq!(pong["result"], json!({}), "{pong}");
}

#[test]
fn tools_list_matches_snapshot() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    server.initialize();
    let r = server.request(1, "tools/list", json!({}));
    let tools = r["result"]["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "opencode_start",
            "opencode_status",
            "opencode_result",
            "opencode_apply",
            "opencode_wait",
            "opencode_cancel",
            "opencode_list",
            "opencode_policy",
            "opencode_sessions",
            "opencode_session_output",
            "opencode_session_rename",
            "opencode_processes",
            "opencode_usage"
        ]
    );
    for t in tools.as_array().unwrap() {
        let read_only = t["annotations"]["readOnlyHint"].as_bool().unwrap();
        let name = t["name"].as_str().unwrap();
        let expect_ro = !matches!(
            name,
            "opencode_start" | "opencode_apply" | "opencode_cancel" | "opencode_session_rename"
        );
        assert_eq!(read_only, expect_ro, "{name}");
        if name == "opencode_cancel" || name == "opencode_apply" {
            assert_eq!(t["annotations"]["destructiveHint"], true);
        }
        assert_eq!(t["inputSchema"]["additionalProperties"], false, "{name}");
    }
    insta::assert_json_snapshot!("tools_list", tools);
}

#[test]
fn valid_call_returns_text() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    server.initialize();
    let (text, is_error) = server.call_text(3, "opencode_policy", json!({}));
    assert!(!is_error, "{text}");
    assert!(text.starts_with("mode: blueprint (from default"), "{text}");
    assert!(text.contains("allowed agents:"), "{text}");
}

#[test]
fn invalid_arguments_are_a_one_line_is_error() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    server.initialize();
    let cases = [
        ("opencode_sessions", json!({"limit": 0})),
        ("opencode_sessions", json!({"state": "done"})),
        ("opencode_start", json!({"prompt": "x"})),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "model": "gpt4"}),
        ),
        (
            "opencode_session_output",
            json!({"id": "ses_1", "mode": "all"}),
        ),
        ("opencode_list", json!({"verbose": true})),
        ("opencode_result", json!({"id": 3})),
    ];
    let mut texts = Vec::new();
    for (i, (tool, args)) in cases.iter().enumerate() {
        let (text, is_error) = server.call_text(10 + i as i64, tool, args.clone());
        assert!(is_error, "{tool} {args}: {text}");
        assert_eq!(text.lines().count(), 1, "{text}");
        texts.push(format!("{tool} {args}\n  => {text}"));
    }
    insta::assert_snapshot!("validation_errors", texts.join("\n"));
}

#[test]
fn unknown_tool_is_a_json_rpc_error() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    server.initialize();
    let r = server.call(4, "opencode_nope", json!({}));
    assert!(r.get("result").is_none(), "{r}");
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `opencode_nope`"),
        "{r}"
    );
}

#[test]
fn cancelled_call_gets_no_response_and_the_server_keeps_serving() {
    let world = World::new();
    // A service that accepts and never answers: the listing blocks until cancelled.
    let (port, _hung) = hung_http_server();
    let mut server = Server::start(
        &world,
        &[(
            "OPENCODE_BRIDGE_SERVER_URL",
            format!("http://127.0.0.1:{port}"),
        )],
    );
    server.initialize();
    server.send(&json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call",
        "params": {"name": "opencode_sessions", "arguments": {}}}));
    std::thread::sleep(Duration::from_millis(500));
    server.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 50, "reason": "user pressed escape"}}),
    );
    let pong = server.request(51, "ping", json!({}));
    assert_eq!(pong["result"], json!({}));
    // Nothing ever answers request 50.
    if let Some(msg) = server.recv_within(Duration::from_secs(2)) {
        assert_ne!(
            msg.get("id"),
            Some(&json!(50)),
            "cancelled call answered: {msg}"
        );
    }
    let stderr = server.stderr();
    assert!(stderr.contains("call cancelled by the client"), "{stderr}");
    // The abandoned read does not hold the process after stdin closes.
    server.close_stdin();
    let started = std::time::Instant::now();
    server
        .wait_exit(Duration::from_secs(10))
        .expect("exits although a read is still blocked on the hung service");
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[test]
fn exits_on_stdin_eof() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    server.initialize();
    server.close_stdin();
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("server should exit after stdin closes");
    assert!(status.success(), "{status:?}\n{}", server.stderr());
}

/// Node's `spawn` (so Claude Code) hands a child socket pairs, not pipes: the server serves
/// over them, reads and writes them from its answering thread (fds 0 and 1 then point at
/// /dev/null, so no child it starts inherits the client's streams), gives that thread a short
/// scheduler slice, and stops when the client shuts its end.
#[test]
fn serves_over_socket_pairs_with_the_client_streams_kept_from_children() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let world = World::new();
    let (mut to_server, server_in) = UnixStream::pair().unwrap();
    let (from_server, server_out) = UnixStream::pair().unwrap();
    let mut child = std::process::Command::new(common::binary())
        .env_clear()
        .envs(world.env())
        .current_dir(world.root())
        .stdin(OwnedFd::from(server_in))
        .stdout(OwnedFd::from(server_out))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(from_server);
    // Writes `msgs`, one line each, and reads the next line.
    let mut ask = |msgs: &[Value]| -> Value {
        for msg in msgs {
            writeln!(to_server, "{msg}").unwrap();
        }
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    let init = ask(&[
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "socket-client", "version": "1"}}}),
    ]);
    assert_eq!(
        init["result"]["serverInfo"]["name"], "opencode-bridge",
        "{init}"
    );
    let tools = ask(&[
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ]);
    assert!(
        tools["result"]["tools"].as_array().unwrap().len() > 10,
        "{tools}"
    );
    let pid = child.id();
    for fd in [0, 1] {
        let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
        assert_eq!(target, std::path::Path::new("/dev/null"), "fd {fd}");
    }
    // The kernel shows a thread's slice as `se.slice` (Linux 6.6+); the answering thread is
    // the main one.
    let ours = std::fs::read_to_string("/proc/thread-self/sched").unwrap();
    if ours.contains("se.slice") {
        let theirs = std::fs::read_to_string(format!("/proc/{pid}/sched")).unwrap();
        let slice = theirs.lines().find(|l| l.starts_with("se.slice")).unwrap();
        assert!(
            slice.ends_with(": 100000") || slice.trim_end().ends_with(" 100000"),
            "{slice}"
        );
    }
    to_server.shutdown(std::net::Shutdown::Write).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit after the client shut its end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn stdout_carries_only_json_rpc() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    server.initialize();
    server.call_text(2, "opencode_policy", json!({}));
    server.close_stdin();
    server.wait_exit(Duration::from_secs(10));
    // recv_within panics on any non-JSON line; drain what is left.
    while server.recv_within(Duration::from_millis(200)).is_some() {}
    assert!(server.stderr().contains("INFO") || server.stderr().contains("DEBUG"));
}

#[test]
fn batches_and_unknown_methods_get_one_short_error_and_answers_survive_eof() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    server.initialize();
    // MCP 2025-11-25 removed JSON-RPC batching: one -32600 with id null, nothing run.
    server.send(&json!([{"jsonrpc": "2.0", "id": 60, "method": "ping"}]));
    let r = server
        .recv_within(Duration::from_secs(10))
        .expect("an answer");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert_eq!(r.get("id"), Some(&Value::Null), "{r}");
    let long = "x/".repeat(5_000);
    let r = server.request(61, &long, json!({}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("Method not found: `x/x/"), "{message}");
    assert!(message.chars().count() < 100, "{message}");
    // A request sent just before stdin closes is still answered before the exit.
    server.send(&json!({"jsonrpc": "2.0", "id": 62, "method": "tools/call",
        "params": {"name": "opencode_policy", "arguments": {}}}));
    server.close_stdin();
    let r = server.response(&json!(62));
    assert!(r["result"]["content"][0]["text"].is_string(), "{r}");
    let status = server.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{status:?}");
}

/// `_meta` of a modern-era request from a client that declares the tasks extension, the way
/// Claude Code sends it on every tools/call.
fn tasks_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    })
}

#[test]
fn a_start_from_a_tasks_client_is_a_task_whose_result_comes_from_tasks_get() {
    let world = World::new();
    let mut server = Server::with_fake_opencode(&world);
    let r = server.request(1, "server/discover", json!({"_meta": tasks_meta()}));
    assert!(
        r["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{r}"
    );

    let r = server.request(
        2,
        "tools/call",
        json!({"_meta": tasks_meta(), "name": "opencode_start",
               "arguments": {"tier": "easy", "prompt": "Say hello", "cwd": "demo"}}),
    );
    let created = &r["result"];
    assert_eq!(created["resultType"], "task", "{r}");
    assert_eq!(created["taskId"], "1", "{r}");
    assert_eq!(created["status"], "working", "{r}");
    assert_eq!(created["pollIntervalMs"], 1000, "{r}");
    assert!(created["ttlMs"].as_u64().unwrap() > 2 * 3600 * 1000, "{r}");
    let note = created["_meta"]["com.anthropic/agent-task"]["modelImmediateResponse"]
        .as_str()
        .unwrap();
    assert!(note.contains("no need to call opencode_status"), "{note}");

    let mut done = Value::Null;
    for i in 0..100 {
        let g = server.request(
            10 + i,
            "tasks/get",
            json!({"_meta": tasks_meta(), "taskId": "1"}),
        );
        let status = g["result"]["status"]
            .as_str()
            .unwrap_or_else(|| panic!("{g}"))
            .to_owned();
        if status != "working" {
            done = g;
            break;
        }
        assert!(
            g["result"]["statusMessage"]
                .as_str()
                .unwrap()
                .starts_with("task 1 "),
            "{g}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let result = &done["result"];
    assert_eq!(result["status"], "completed", "{done}");
    assert_eq!(result["result"]["isError"], false, "{done}");
    let text = result["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("task 1  succeeded"), "{text}");
    assert!(
        text.contains("agent=worker title=DEMO/worker: Say hello"),
        "{text}"
    );
    let link = &result["result"]["content"][1];
    assert_eq!(link["type"], "resource_link", "{done}");
    assert_eq!(
        link["uri"], "opencode://session/ses_fake0000000000000000000001",
        "{done}"
    );

    // A refusal is a plain tool error, not a task.
    let r = server.request(
        200,
        "tools/call",
        json!({"_meta": tasks_meta(), "name": "opencode_start",
               "arguments": {"tier": "hard", "prompt": "design it"}}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"].get("taskId").is_none(), "{r}");

    // A client that did not declare the extension gets today's answer.
    let r = server.request(
        201,
        "tools/call",
        json!({"_meta": modern_meta(), "name": "opencode_start",
               "arguments": {"tier": "easy", "prompt": "Say hello again", "cwd": "demo"}}),
    );
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(text.starts_with("started task 2:"), "{text}");
    let r = server.request(
        202,
        "tasks/get",
        json!({"_meta": tasks_meta(), "taskId": "99"}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[test]
fn tasks_cancel_stops_the_run_and_the_task_reads_cancelled() {
    let world = World::new();
    let mut server = Server::start(
        &world,
        &[
            (
                "OPENCODE_BIN",
                common::fake_opencode(&world).to_string_lossy().into_owned(),
            ),
            ("OPENCODE_BRIDGE_KILL_GRACE_MS", "500".into()),
        ],
    );
    let r = server.request(
        1,
        "tools/call",
        json!({"_meta": tasks_meta(), "name": "opencode_start",
               "arguments": {"tier": "easy", "prompt": "Run for long", "cwd": "demo"}}),
    );
    assert_eq!(r["result"]["resultType"], "task", "{r}");
    let pids = world.path("pids.group");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !pids.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pgid: i32 = std::fs::read_to_string(&pids)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let r = server.request(
        2,
        "tasks/cancel",
        json!({"_meta": tasks_meta(), "taskId": "1"}),
    );
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let mut status = String::new();
    for i in 0..100 {
        let g = server.request(
            10 + i,
            "tasks/get",
            json!({"_meta": tasks_meta(), "taskId": "1"}),
        );
        status = g["result"]["status"].as_str().unwrap_or("").to_owned();
        if status == "cancelled" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status, "cancelled");
    assert!(
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_err(),
        "the run's process group {pgid} survived tasks/cancel"
    );
}

#[test]
fn non_object_arguments_and_unknown_cursors_are_named_and_client_mistakes_log_nothing() {
    let world = World::new();
    // The default log filter, as a user runs it (the test world asks for debug logs).
    let mut server = Server::start(&world, &[("RUST_LOG", String::new())]);
    server.initialize();
    let r = server.request(
        1,
        "tools/call",
        json!({"name": "opencode_list", "arguments": "x"}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`arguments` must be an object"),
        "{message}"
    );
    assert!(!message.contains("needs `name`"), "{message}");

    let r = server.request(2, "tools/list", json!({"cursor": "bogus"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown cursor"),
        "{r}"
    );
    let r = server.request(3, "tools/call", json!({"name": "nope", "arguments": {}}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    server.close_stdin();
    server.wait_exit(Duration::from_secs(10));
    let stderr = server.stderr();
    assert!(!stderr.contains("WARN rmcp"), "{stderr}");
}

#[test]
fn prompts_are_listed_and_carry_the_policy_and_what_runs() {
    let world = World::new();
    let mut server = Server::start(&world, &[]);
    let init = server.initialize();
    assert!(init["capabilities"]["prompts"].is_object(), "{init}");
    let r = server.request(1, "prompts/list", json!({}));
    let names: Vec<&str> = r["result"]["prompts"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["delegate", "running"], "{r}");

    let r = server.request(
        2,
        "prompts/get",
        json!({"name": "delegate", "arguments": {"job": "Add a unit test for parse_date in src/date.rs"}}),
    );
    let text = r["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(text.contains("Add a unit test for parse_date"), "{text}");
    assert!(text.contains("opencode_start"), "{text}");
    // The live policy is in it: mode and roster.
    assert!(text.contains("mode: blueprint"), "{text}");
    assert!(text.contains("roster ("), "{text}");

    let r = server.request(
        3,
        "prompts/get",
        json!({"name": "delegate", "arguments": {}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("`job`"),
        "{r}"
    );

    let r = server.request(4, "prompts/get", json!({"name": "running"}));
    let text = r["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(text.contains("Delegated tasks (opencode_list)"), "{text}");
    assert!(text.contains("0 delegated task(s)"), "{text}");
}

/// Every structuredContent the server returns, for each tool that declares an outputSchema,
/// validates against that schema, with real data: tasks run by the fake opencode (succeeded,
/// failed, running, cancelled, unknown ids), sessions from the real store fixture, the process
/// table and the policy. Errors stay text-only.
#[test]
fn structured_results_validate_against_their_output_schemas() {
    let world = World::new();
    let (db, map) = common::fixture_store(&world);
    let fake = bridge_testkit::bins::fake_opencode();
    let mut server = Server::start(
        &world,
        &[
            ("OPENCODE_BIN", fake.to_string_lossy().into_owned()),
            ("OPENCODE_DB", db.to_string_lossy().into_owned()),
            ("OPENCODE_BRIDGE_KILL_GRACE_MS", "300".into()),
        ],
    );
    server.initialize();
    let tools = server.request(1, "tools/list", json!({}))["result"]["tools"].clone();
    let mut validators = std::collections::HashMap::new();
    for t in tools.as_array().unwrap() {
        let name = t["name"].as_str().unwrap().to_owned();
        match t.get("outputSchema") {
            Some(schema) => {
                assert_eq!(schema["type"], "object", "{name}: {schema}");
                let v = jsonschema::validator_for(schema)
                    .unwrap_or_else(|e| panic!("{name}: not a valid JSON Schema: {e}"));
                validators.insert(name, v);
            }
            None => assert!(
                matches!(
                    name.as_str(),
                    "opencode_start"
                        | "opencode_apply"
                        | "opencode_cancel"
                        | "opencode_session_output"
                        | "opencode_session_rename"
                ),
                "{name} has no outputSchema"
            ),
        }
    }
    assert_eq!(validators.len(), 8, "{:?}", validators.keys());

    let mut checked: std::collections::BTreeMap<String, usize> = Default::default();
    let mut id = 100;
    let mut call = |server: &mut Server, tool: &str, args: Value| -> Value {
        id += 1;
        let r = server.call(id, tool, args.clone());
        let result = r["result"].clone();
        assert_eq!(result["isError"], false, "{tool} {args}: {r}");
        assert_eq!(result["content"][0]["type"], "text", "{r}");
        let data = result
            .get("structuredContent")
            .unwrap_or_else(|| panic!("{tool} {args}: no structuredContent: {r}"))
            .clone();
        let errors: Vec<String> = validators[tool]
            .iter_errors(&data)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{tool} {args}: {errors:?}\n{data:#}");
        *checked.entry(tool.to_owned()).or_default() += 1;
        result
    };

    // A task that succeeds, one that fails, one that runs until cancelled.
    for (n, prompt) in [
        (2, "Say hello"),
        (3, "scenario: exit:3\nfail please"),
        (4, "scenario: hang\nrun for long"),
    ] {
        let (text, is_error) = server.call_text(
            n,
            "opencode_start",
            json!({"tier": "easy", "prompt": prompt, "cwd": "demo"}),
        );
        assert!(!is_error, "{text}");
    }
    let waited = call(
        &mut server,
        "opencode_wait",
        json!({"ids": ["1", "2"], "mode": "all", "timeout_s": 30}),
    );
    let w = &waited["structuredContent"];
    assert_eq!(w["satisfied"], true, "{w}");
    assert_eq!(w["mode"], "all", "{w}");
    let ok = call(&mut server, "opencode_status", json!({"id": "1"}));
    let s = &ok["structuredContent"];
    assert_eq!(s["id"], 1, "{s}");
    assert_eq!(s["state"], "succeeded", "{s}");
    assert_eq!(s["agent"], "worker", "{s}");
    assert_eq!(s["session_id"], "ses_fake0000000000000000000001", "{s}");
    assert_eq!(s["tokens"]["input"], 8, "{s}");
    assert!(s["failure"].is_null(), "{s}");
    // The text is unchanged, the session is linked after it.
    let text = ok["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("task 1  succeeded"), "{text}");
    assert_eq!(ok["content"][1]["type"], "resource_link", "{ok}");
    assert_eq!(
        ok["content"][1]["uri"], "opencode://session/ses_fake0000000000000000000001",
        "{ok}"
    );
    let failed = call(&mut server, "opencode_status", json!({"id": "2"}));
    let f = &failed["structuredContent"];
    assert_eq!(f["state"], "failed", "{f}");
    assert_eq!(f["exit_code"], 3, "{f}");
    assert!(f["failure"]["kind"].is_string(), "{f}");
    let running = call(&mut server, "opencode_status", json!({"id": "3"}));
    assert!(
        matches!(
            running["structuredContent"]["state"].as_str(),
            Some("starting" | "running")
        ),
        "{running}"
    );
    let procs = call(&mut server, "opencode_processes", json!({}));
    assert!(
        procs["structuredContent"]["processes"].is_array(),
        "{procs}"
    );
    let listed = call(&mut server, "opencode_list", json!({}));
    let l = &listed["structuredContent"];
    assert_eq!(l["tasks"].as_array().map(Vec::len), Some(3), "{l}");
    assert_eq!(l["running"], 1, "{l}");
    let r = call(&mut server, "opencode_result", json!({"id": "1"}));
    assert_eq!(r["structuredContent"]["task"]["state"], "succeeded", "{r}");
    assert!(
        r["structuredContent"]["output_chars"].as_u64().unwrap() > 0,
        "{r}"
    );
    assert_eq!(r["content"][1]["type"], "resource_link", "{r}");
    call(
        &mut server,
        "opencode_result",
        json!({"id": "2", "tail": 10}),
    );
    let (text, _) = server.call_text(50, "opencode_cancel", json!({"id": "3"}));
    assert!(text.contains("cancel"), "{text}");
    call(&mut server, "opencode_result", json!({"id": "3"}));
    // The two finished tasks are in the usage ledger (the fake run reports 8 input tokens).
    let usage = call(&mut server, "opencode_usage", json!({"since_days": 1}));
    let u = &usage["structuredContent"];
    assert!(u["totals"]["tasks"].as_u64().unwrap() >= 2, "{u}");
    assert!(u["totals"]["input_tokens"].as_u64().unwrap() >= 8, "{u}");
    assert_eq!(u["by_day"].as_array().map(Vec::len), Some(1), "{u}");
    let unknown = call(
        &mut server,
        "opencode_wait",
        json!({"ids": ["3", "99"], "timeout_s": 1}),
    );
    assert_eq!(
        unknown["structuredContent"]["unknown"],
        json!([99]),
        "{unknown}"
    );
    call(
        &mut server,
        "opencode_list",
        json!({"label": "nothing has it"}),
    );

    // Sessions from the real store, policy in two modes and for a missing directory.
    let sessions = call(&mut server, "opencode_sessions", json!({"limit": 50}));
    let listed: Vec<&str> = sessions["structuredContent"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    let e401 = map["sessions"]["e401"]["id"].as_str().unwrap();
    assert!(listed.contains(&e401), "{listed:?}");
    let failed = call(&mut server, "opencode_sessions", json!({"state": "failed"}));
    assert_eq!(
        failed["structuredContent"]["sessions"][0]["state"], "failed",
        "{failed}"
    );
    call(
        &mut server,
        "opencode_sessions",
        json!({"children": "only"}),
    );
    let p = call(&mut server, "opencode_policy", json!({}));
    assert_eq!(p["structuredContent"]["mode"], "blueprint", "{p}");
    let p = call(&mut server, "opencode_policy", json!({"mode": "sensitive"}));
    assert_eq!(p["structuredContent"]["mode"], "sensitive", "{p}");
    let p = call(
        &mut server,
        "opencode_policy",
        json!({"cwd": "no/such/dir"}),
    );
    assert!(p["structuredContent"]["warning"].is_string(), "{p}");

    // A failed call keeps today's shape: one text, isError, no structuredContent.
    let e = server.call(90, "opencode_status", json!({"id": "42"}));
    assert_eq!(e["result"]["isError"], true, "{e}");
    assert!(e["result"].get("structuredContent").is_none(), "{e}");
    assert_eq!(e["result"]["content"].as_array().map(Vec::len), Some(1));

    let tools_checked: Vec<&String> = checked.keys().collect();
    assert_eq!(tools_checked.len(), 8, "{checked:?}");
}

/// opencode sessions as resources: the template, the newest sessions listed (no subagent
/// sessions, title as name), a read that is the session's transcript, one-line -32602 errors
/// for a bad or unknown id, and the capability in both protocol eras.
#[test]
fn sessions_are_resources_listed_read_and_refused_with_one_line_errors() {
    let world = World::new();
    let (db, map) = common::fixture_store(&world);
    let mut server = Server::start(
        &world,
        &[("OPENCODE_DB", db.to_string_lossy().into_owned())],
    );
    let init = server.initialize();
    assert!(init["capabilities"]["resources"].is_object(), "{init}");

    let t = server.request(1, "resources/templates/list", json!({}));
    let templates = t["result"]["resourceTemplates"]
        .as_array()
        .unwrap_or_else(|| panic!("{t}"));
    assert_eq!(templates.len(), 2, "{t}");
    assert_eq!(
        templates[0]["uriTemplate"], "opencode://session/{id}",
        "{t}"
    );
    assert_eq!(
        templates[1]["uriTemplate"], "opencode://server/{server}/session/{id}",
        "{t}"
    );
    assert_eq!(templates[0]["mimeType"], "text/plain", "{t}");

    let l = server.request(2, "resources/list", json!({}));
    let resources = l["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{l}"));
    let sessions = server.call(
        3,
        "opencode_sessions",
        json!({"limit": 50, "children": "exclude"}),
    );
    let roots: Vec<Value> = sessions["result"]["structuredContent"]["sessions"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!roots.is_empty());
    assert_eq!(resources.len(), roots.len().min(50), "{l}");
    for (r, s) in resources.iter().zip(&roots) {
        let id = s["id"].as_str().unwrap();
        assert_eq!(r["uri"], format!("opencode://session/{id}"), "{r}");
        let title = s["title"].as_str().unwrap();
        assert_eq!(r["name"], if title.is_empty() { id } else { title }, "{r}");
        assert_eq!(r["mimeType"], "text/plain", "{r}");
        assert!(r["description"].as_str().unwrap().contains(id), "{r}");
    }

    let toolbash = map["sessions"]["toolbash"]["id"].as_str().unwrap();
    let uri = format!("opencode://session/{toolbash}");
    let r = server.request(4, "resources/read", json!({"uri": uri}));
    let contents = r["result"]["contents"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(contents.len(), 1, "{r}");
    assert_eq!(contents[0]["uri"], uri, "{r}");
    assert_eq!(contents[0]["mimeType"], "text/plain", "{r}");
    let text = contents[0]["text"].as_str().unwrap();
    // The transcript is what opencode_session_output mode=full shows.
    let (full, _) = server.call_text(
        5,
        "opencode_session_output",
        json!({"id": toolbash, "mode": "full", "max_chars": 100000}),
    );
    assert_eq!(redact(text, &world), redact(&full, &world));
    assert!(text.contains("-> bash("), "{text}");

    let bad = [
        (
            format!("opencode://session/{toolbash}x"),
            "resource not found: no opencode session has the id",
        ),
        (
            "opencode://session/ses_nosuchsession000000000".to_owned(),
            "resource not found",
        ),
        (
            "opencode://session/../../etc".to_owned(),
            "bad resource uri",
        ),
        (
            "file:///etc/passwd".to_owned(),
            "only has opencode session resources",
        ),
        ("opencode://session/".to_owned(), "not a session id"),
    ];
    for (i, (uri, says)) in bad.iter().enumerate() {
        let r = server.request(10 + i as i64, "resources/read", json!({"uri": uri}));
        assert_eq!(r["error"]["code"], -32602, "{uri}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{uri}: {message}");
        assert!(!message.contains('\n'), "{message}");
        assert!(message.contains("resources/list"), "{message}");
        assert_eq!(r["error"]["data"]["uri"], *uri, "{r}");
    }
    let r = server.request(20, "resources/list", json!({"cursor": "abc"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // The modern era lists them too (rmcp adds the caching hints).
    let r = server.request(21, "server/discover", json!({"_meta": modern_meta()}));
    assert!(r["result"]["capabilities"]["resources"].is_object(), "{r}");
    let l = server.request(22, "resources/list", json!({"_meta": modern_meta()}));
    assert_eq!(
        l["result"]["resources"].as_array().map(Vec::len),
        Some(resources.len()),
        "{l}"
    );
}

/// Before opencode ever ran (no store), the list is empty and a read is "not found", not a
/// failure.
#[test]
fn no_store_yet_means_no_session_resources() {
    let world = World::new();
    let mut server = Server::start(
        &world,
        &[(
            "OPENCODE_DB",
            world
                .path("none/opencode.db")
                .to_string_lossy()
                .into_owned(),
        )],
    );
    server.initialize();
    let l = server.request(1, "resources/list", json!({}));
    assert_eq!(l["result"]["resources"], json!([]), "{l}");
    let r = server.request(
        2,
        "resources/read",
        json!({"uri": "opencode://session/ses_dd67b5ba3fferNBrHDNM7PmDEB"}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

/// A start links the task's session after its text once the session id is known when it
/// answers (a sync run, or a call with a progress token, which waits for the id); a start
/// that answers before the id is known has the text only.
#[test]
fn a_start_links_its_session_once_known() {
    let world = World::new();
    let mut server = Server::with_fake_opencode(&world);
    server.initialize();
    let link = "opencode://session/ses_fake0000000000000000000001";
    let r = server.call(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hello", "cwd": "demo", "wait_s": 30}),
    );
    let content = r["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(
        content[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("task 1 finished"),
        "{r}"
    );
    assert_eq!(content[1]["type"], "resource_link", "{r}");
    assert_eq!(content[1]["uri"], link, "{r}");
    assert!(r["result"].get("structuredContent").is_none(), "{r}");

    let r = server.request(
        2,
        "tools/call",
        json!({"_meta": {"progressToken": "p1"}, "name": "opencode_start",
               "arguments": {"tier": "easy", "prompt": "Say hello again", "cwd": "demo"}}),
    );
    let content = r["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(
        content[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("started task 2:"),
        "{r}"
    );
    assert_eq!(content[1]["uri"], link, "{r}");
}

/// The Python interpreter of the venv `scripts/test.sh` installs the Python MCP SDK into
/// (`$OPENCODE_BRIDGE_TEST_CACHE/pymcp`), or `None` outside CI when it is missing.
fn python_mcp_sdk() -> Option<std::path::PathBuf> {
    let cache = std::env::var_os(bridge_testkit::sandbox::CACHE_ENV).filter(|v| !v.is_empty());
    let python = cache.map(|c| std::path::PathBuf::from(c).join("pymcp/bin/python"));
    match python {
        Some(p) if p.is_file() => Some(p),
        other => {
            let why = match other {
                Some(p) => format!("{} does not exist", p.display()),
                None => format!("{} is not set", bridge_testkit::sandbox::CACHE_ENV),
            };
            assert!(
                !bridge_testkit::sandbox::in_ci(),
                "{why}: the independent-client check needs the Python MCP SDK under CI; run scripts/test.sh, which installs it"
            );
            eprintln!("skipped: {why} (scripts/test.sh installs the Python MCP SDK there)");
            None
        }
    }
}

/// An independent client: the official Python MCP SDK (`mcp`, pinned in scripts/test.sh)
/// drives the built binary over stdio in both protocol eras, with the fake opencode and the
/// real store fixture: it lists and reads resources (an unknown id is -32602), lists and gets
/// the prompts, calls the tools and validates every structuredContent against its tool's
/// outputSchema with the `jsonschema` package (`tests/python/independent_client.py`).
#[test]
fn the_python_mcp_sdk_reads_resources_gets_prompts_and_validates_structured_results() {
    let Some(python) = python_mcp_sdk() else {
        return;
    };
    let world = World::new();
    let (db, map) = common::fixture_store(&world);
    let mut env: serde_json::Map<String, Value> = world
        .env()
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    env.insert(
        "OPENCODE_BIN".into(),
        bridge_testkit::bins::fake_opencode()
            .to_string_lossy()
            .into_owned()
            .into(),
    );
    env.insert(
        "OPENCODE_DB".into(),
        db.to_string_lossy().into_owned().into(),
    );
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/independent_client.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .env("BRIDGE_BIN", common::binary())
        .env("BRIDGE_ENV", Value::Object(env).to_string())
        .env("BRIDGE_CWD", world.root())
        .env(
            "FIXTURE_SESSION",
            map["sessions"]["toolbash"]["id"].as_str().unwrap(),
        )
        .output()
        .expect("run the Python MCP SDK client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python MCP SDK client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for line in [
        "legacy: connected, protocol 2025-11-25",
        "auto: connected, protocol 2026-07-28",
        "auto: prompts ['delegate', 'running'] listed and got",
        "OK",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "{line:?} missing:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("auto: structuredContent validated"),
        "{stdout}"
    );
}

/// Claude Code (clientInfo `claude-code`) hands the model the JSON of `structuredContent`
/// instead of the text, so by default it gets neither output schemas nor structured results,
/// in both eras; `OPENCODE_BRIDGE_STRUCTURED=on` gives them to it, `off` to no client.
#[test]
fn claude_code_gets_the_text_and_no_structured_results_unless_asked() {
    let claude_meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2.1.328"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let schemas = |r: &Value| -> usize {
        r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .filter(|t| t.get("outputSchema").is_some())
            .count()
    };
    let init_as = |server: &mut Server, name: &str| {
        let r = server.request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": name, "version": "1"}}),
        );
        assert!(r["result"].is_object(), "{r}");
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    };
    for (setting, claude_gets, others_get) in [
        (None, false, true),
        (Some("on"), true, true),
        (Some("off"), false, false),
    ] {
        let world = World::new();
        let env: Vec<(&str, String)> = setting
            .map(|s| vec![("OPENCODE_BRIDGE_STRUCTURED", s.to_owned())])
            .unwrap_or_default();
        // Legacy era: the client named itself in initialize.
        let mut server = Server::start(&world, &env);
        init_as(&mut server, "claude-code");
        let r = server.request(1, "tools/list", json!({}));
        assert_eq!(schemas(&r) == 8, claude_gets, "{setting:?}");
        assert_eq!(schemas(&r) == 0, !claude_gets, "{setting:?}");
        let p = server.call(2, "opencode_policy", json!({}));
        assert_eq!(
            p["result"].get("structuredContent").is_some(),
            claude_gets,
            "{setting:?} {p}"
        );
        let text = p["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("mode: blueprint (from"), "{text}");
        drop(server);

        let mut server = Server::start(&world, &env);
        init_as(&mut server, "some-other-client");
        let r = server.request(1, "tools/list", json!({}));
        assert_eq!(schemas(&r) == 8, others_get, "{setting:?}");
        let p = server.call(2, "opencode_policy", json!({}));
        assert_eq!(
            p["result"].get("structuredContent").is_some(),
            others_get,
            "{setting:?}"
        );
        drop(server);

        // Modern era: each request names its client.
        let mut server = Server::start(&world, &env);
        let r = server.request(1, "tools/list", json!({"_meta": claude_meta.clone()}));
        assert_eq!(schemas(&r) == 8, claude_gets, "{setting:?} {r}");
        let p = server.request(
            2,
            "tools/call",
            json!({"_meta": claude_meta.clone(), "name": "opencode_policy", "arguments": {}}),
        );
        assert_eq!(
            p["result"].get("structuredContent").is_some(),
            claude_gets,
            "{setting:?} {p}"
        );
        let r = server.request(3, "tools/list", json!({"_meta": modern_meta()}));
        assert_eq!(schemas(&r) == 8, others_get, "{setting:?}");
    }
}

/// Claude Code lists resources as it connects and drops a server's tools from the first model
/// request when its lists are late: a slow session listing (here an `opencode --help` probe,
/// made when the store does not exist yet, held until the test lets it go) must not hold up
/// `resources/list` or anything else. No wall time is measured: the lists must answer while the
/// probe is still held (the bench measures how fast they answer).
#[test]
fn a_slow_session_listing_does_not_hold_up_resources_list() {
    let world = World::new();
    let slow = world.path("bin/opencode");
    std::fs::create_dir_all(slow.parent().unwrap()).unwrap();
    std::fs::write(
        &slow,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  --help) : > '{started}'; while [ ! -e '{release}' ]; do sleep 0.05; done; echo 'opencode run'; exit 0 ;;\n  --version) echo 1.18.33; exit 0 ;;\nesac\nexit 0\n",
            release = world.path("release-probe").display(),
            started = world.path("probe-started").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut server = Server::start(
        &world,
        &[
            ("OPENCODE_BIN", slow.to_string_lossy().into_owned()),
            (
                "OPENCODE_DB",
                world
                    .path("none/opencode.db")
                    .to_string_lossy()
                    .into_owned(),
            ),
        ],
    );
    server.initialize();
    let l = server.request(1, "resources/list", json!({}));
    let t = server.request(2, "tools/list", json!({}));
    assert_eq!(l["result"]["resources"], json!([]), "{l}");
    assert_eq!(
        t["result"]["tools"].as_array().map(Vec::len),
        Some(13),
        "{t}"
    );
    // While the slow listing is still held, another list answers too.
    let l = server.request(3, "resources/list", json!({}));
    assert_eq!(l["result"]["resources"], json!([]), "{l}");
    assert!(
        !world.path("release-probe").exists(),
        "the probe was let go before the lists answered"
    );
    // The slow listing did start (the lists answered while it was held, not before it).
    let mut waited = 0;
    while !world.path("probe-started").exists() && waited < 200 {
        std::thread::sleep(Duration::from_millis(50));
        waited += 1;
    }
    assert!(world.path("probe-started").exists(), "the probe never ran");
    std::fs::write(world.path("release-probe"), "").unwrap();
}

/// `opencode_start` with `wait_s`: a task that finishes in time answers with its result, and
/// ends as `opencode_result` would (the usage line), with the budgets' warning counting its
/// spend (the fake's one step costs $0.001 of a $0.00124 day).
#[test]
fn a_sync_start_keeps_the_usage_line_and_the_budget_warning() {
    let world = World::new();
    let fake = bridge_testkit::bins::fake_opencode();
    let mut server = Server::start(
        &world,
        &[
            ("OPENCODE_BIN", fake.to_string_lossy().into_owned()),
            ("OPENCODE_BRIDGE_ENGINE", "run".to_owned()),
            ("OPENCODE_BRIDGE_BUDGET_DAY_USD", "0.00124".to_owned()),
        ],
    );
    server.initialize();
    let r = server.call(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hello", "cwd": "demo", "wait_s": 30, "max_cost_usd": 0.0012}),
    );
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(text.starts_with("task 1 finished"), "{text}");
    assert!(text.contains("\nusage: "), "{text}");
    assert!(text.contains("cost $0.0010"), "{text}");
    assert!(
        text.contains("warning: 81 % of the day budget of $0.0012"),
        "{text}"
    );
}
