//! Values from outside cannot stop the bridge (docs/ARCHITECTURE.md, "No arithmetic on outside
//! values can panic"): numeric variables past any range, and a provider answering 429 with
//! `retry-after: 18446744073709551615`, `1e308`, `-1` or `NaN`, through the real opencode on
//! both engines. After each, the bridge answers the next call.

use crate::common;

use bridge_testkit::fake_llm::EXTREME_RETRY_AFTER;
use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use common::{Server, World};
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn numeric_variables_past_their_range_are_named_in_one_line_and_the_bridge_answers() {
    let world = World::new();
    let fake = bridge_testkit::bins::fake_opencode();
    let mut server = Server::start(
        &world,
        &[
            ("OPENCODE_BIN", fake.to_string_lossy().into_owned()),
            ("OPENCODE_BRIDGE_TIMEOUT_MIN", "18446744073709551615".into()),
            ("OPENCODE_BRIDGE_RETRY_DELAY_S", "1e308".into()),
            (
                "OPENCODE_BRIDGE_KILL_GRACE_MS",
                "99999999999999999999999".into(),
            ),
        ],
    );
    server.initialize();
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "List the files in src", "cwd": "demo"}),
    );
    assert!(is_error, "{text}");
    assert!(!text.trim_end().contains('\n'), "{text}");
    assert!(
        text.contains("OPENCODE_BRIDGE_TIMEOUT_MIN=18446744073709551615 is out of range: give a whole number from 1 to 10080 (minutes)"),
        "{text}"
    );
    let (list, is_error) = server.call_text(3, "opencode_list", json!({}));
    assert!(!is_error, "{list}");
    let stderr = server.stderr();
    for name in [
        "OPENCODE_BRIDGE_TIMEOUT_MIN=18446744073709551615",
        "OPENCODE_BRIDGE_RETRY_DELAY_S=1e308 is not a whole number",
        "OPENCODE_BRIDGE_KILL_GRACE_MS=99999999999999999999999 is out of range",
    ] {
        assert!(stderr.contains(name), "{name} not on stderr: {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Every extreme `retry-after` on both engines, all at once (each task has a minute). On the
/// serve engine opencode's retry status names the wait: the largest one (opencode holds it to
/// about 24.8 days) ends the task at once with kind `rate_limit` and the reset held to 7 days.
/// `opencode run` prints nothing while it waits: there opencode's log in the run's world says
/// the provider refused, so the task's status says it waits on the provider's rate limit, and
/// the time limit ends it with kind `rate_limit` (not `timeout`). What opencode makes of
/// `1e308`, `-1` and `NaN` is its own business (a back-off, or an error after its retries); the
/// bridge must end each task and keep answering.
#[test]
fn live_extreme_retry_after_values_never_stop_the_bridge_on_either_engine() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().canonicalize().unwrap();
    let world = World::new();
    // Each bridge: its engine, the server, and its tasks (model, task id).
    type Tasks = Vec<(String, String)>;
    let mut servers: Vec<(&str, Server, Tasks)> = Vec::new();
    for engine in ["serve", "run"] {
        let mut env = common::sandbox_env_for_bridge(&sb);
        env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
        env.push(("OPENCODE_BRIDGE_ROOT", proj.to_string_lossy().into_owned()));
        env.push(("OPENCODE_BRIDGE_ENGINE", engine.into()));
        env.push(("OPENCODE_BRIDGE_RETRIES", "0".into()));
        env.push(("OPENCODE_BRIDGE_KILL_GRACE_MS", "1000".into()));
        let mut server = Server::start_in(&world, &env, &proj);
        server.initialize();
        let mut ids = Vec::new();
        for (i, (model, value)) in EXTREME_RETRY_AFTER.iter().enumerate() {
            let (text, is_error) = server.call_text(
                10 + i as i64,
                "opencode_start",
                json!({"tier": "easy", "prompt": format!("Say hi ({engine}, retry-after {value})"),
                       "model": format!("fk/{model}"), "timeout_minutes": 1}),
            );
            assert!(!is_error, "{engine} {model}: {text}");
            let id = text
                .strip_prefix("started task ")
                .and_then(|t| t.split(':').next())
                .unwrap_or_else(|| panic!("not started: {text}"))
                .to_owned();
            ids.push((model.to_string(), id));
        }
        servers.push((engine, server, ids));
    }
    let mut next = 100;
    let deadline = Instant::now() + Duration::from_secs(300);
    // While the run engine's e429huge task waits, its status says on what.
    {
        let (_, server, ids) = servers.iter_mut().find(|(e, _, _)| *e == "run").unwrap();
        let (_, id) = ids.iter().find(|(m, _)| m == "e429huge").unwrap();
        let mut last = String::new();
        let seen = loop {
            next += 1;
            let (status, _) = server.call_text(next, "opencode_status", json!({"id": id}));
            if status.contains("waiting on the provider's rate limit: Rate limit reached") {
                break true;
            }
            let first = status.lines().next().unwrap_or("");
            let ended = ["succeeded", "failed", "cancelled", "timed_out"]
                .iter()
                .any(|w| first.contains(w));
            last = status.clone();
            if ended || Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        assert!(
            seen,
            "the run engine's status never named the provider's limit: {last}"
        );
    }
    for (engine, server, ids) in &mut servers {
        for (model, id) in ids.iter() {
            // Every poll is a call the bridge answers while opencode waits.
            let status = common::until_ended(server, id, &mut next);
            assert!(Instant::now() < deadline, "{engine} {model}: {status}");
            let first = status.lines().next().unwrap_or("");
            assert!(
                first.contains("failed") || first.contains("timed_out"),
                "{engine} {model}: {status}"
            );
            let kind = status
                .lines()
                .find_map(|l| l.strip_prefix("failure: "))
                .and_then(|l| l.split(':').next())
                .unwrap_or("");
            assert!(
                ["rate_limit", "timeout"].contains(&kind),
                "{engine} {model}: {status}"
            );
            if *engine == "serve" && model == "e429huge" {
                assert_eq!(kind, "rate_limit", "{status}");
                assert!(status.contains("at the latest"), "{status}");
                assert!(status.contains("Rate limit reached"), "{status}");
            }
            if *engine == "run" && model == "e429huge" {
                assert_eq!(kind, "rate_limit", "{status}");
                assert!(status.contains("past the task's time left"), "{status}");
                assert!(status.contains("Rate limit reached"), "{status}");
            }
            next += 1;
            let (result, is_error) = server.call_text(next, "opencode_result", json!({"id": id}));
            assert!(!is_error, "{engine} {model}: {result}");
        }
        next += 1;
        let (list, is_error) = server.call_text(next, "opencode_list", json!({}));
        assert!(!is_error, "{list}");
        assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
    }
}
