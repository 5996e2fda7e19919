//! The `server` and `api` backends against the real opencode 1.18.33: a password-protected
//! `opencode serve` in an isolated sandbox, sessions made by `opencode run` / the server against
//! the fake LLM. The `api` backend runs through the fake v2 CLI, which forwards to the same
//! server (1.18.33 already serves `/api/*`) and holds the password itself.

#[path = "service_support/live.rs"]
mod live;

use bridge_testkit::fake_llm::OK_TEXT;
use bridge_testkit::{FakeLlm, OpencodeSandbox};
use live::{LIVE_PASSWORD, RealServer, processes_of};
use opencode_client::api::{ApiCommand, ApiSource};
use opencode_client::backend::{ClientConfig, choose_backend, rename_with_ephemeral_server};
use opencode_client::http::{BasicAuth, HttpClient};
use opencode_client::server::ServerSource;
use opencode_client::{
    Children, ClientError, Liveness, Part, Role, ScanContext, SessionFilter, SessionSource,
    SessionState, ToolStatus,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const RUN_TIMEOUT: Duration = Duration::from_secs(180);

fn ctx() -> ScanContext {
    ScanContext {
        deadline: Instant::now() + Duration::from_secs(60),
        now_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
        liveness: Liveness::default(),
    }
}

fn all() -> SessionFilter {
    SessionFilter::default()
}

fn ids(list: &opencode_client::SessionList) -> Vec<String> {
    list.sessions.iter().map(|s| s.id.clone()).collect()
}

/// Polls `f` every 250 ms until it returns true or `timeout` passes.
fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    false
}

fn run_session(oc: &Path, sb: &OpencodeSandbox, model: &str, prompt: &str, title: &str) -> String {
    let out = sb
        .run_json(oc, model, prompt, &["--title", title], RUN_TIMEOUT)
        .unwrap();
    out.session_id()
        .unwrap_or_else(|| panic!("no session from `opencode run` ({model}): {}", out.stderr))
}

#[test]
fn live_server_backend_against_a_password_protected_opencode_serve() {
    let oc = bridge_testkit::require_opencode!();
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(40);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let ok_id = run_session(
        &oc,
        &sb,
        "ok",
        "say the magic word xyzzy",
        "ALPHA/build: say hi",
    );
    let bad_id = run_session(&oc, &sb, "e401", "this one fails", "BETA/build: fail");

    let srv = RealServer::start(&oc, &sb);
    let raw = srv.client();
    let dir = sb.project_dir().display().to_string();
    let q = format!(
        "?directory={}",
        opencode_client::http::encode_component(&dir)
    );
    let child = raw
        .post_json(
            &format!("/session{q}"),
            &json!({"parentID": ok_id, "title": "ALPHA/general: child"}),
        )
        .unwrap();
    let child_id = child.body["id"].as_str().unwrap().to_string();
    // A session of another directory (another instance of the same server).
    let other_dir = sb.root().join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let other_q = format!(
        "?directory={}",
        opencode_client::http::encode_component(&other_dir.display().to_string())
    );
    let other = raw
        .post_json(
            &format!("/session{other_q}"),
            &json!({"title": "DELTA/build: elsewhere"}),
        )
        .unwrap();
    let other_id = other.body["id"].as_str().unwrap().to_string();
    let slow = raw
        .post_json(
            &format!("/session{q}"),
            &json!({"title": "GAMMA/build: slow"}),
        )
        .unwrap();
    let slow_id = slow.body["id"].as_str().unwrap().to_string();
    raw.post_json(
        &format!("/session/{slow_id}/prompt_async{q}"),
        &json!({"model": {"providerID": "fk", "modelID": "slow"}, "parts": [{"type": "text", "text": "take your time"}]}),
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || !llm
            .chat_requests("slow")
            .is_empty()),
        "the slow run never reached the fake LLM"
    );

    let src = ServerSource::new(raw.clone()).with_page_sizes(1, 1);

    // Everything, across pages of one session each, newest first.
    let list = src.list(&all(), &ctx()).unwrap();
    assert_eq!(list.backend, "server");
    assert_eq!(list.partial, None);
    for id in [&ok_id, &bad_id, &child_id, &slow_id, &other_id] {
        assert!(
            ids(&list).contains(id),
            "{id} missing from {:?}",
            ids(&list)
        );
    }
    assert!(list.scanned >= 5);
    let times: Vec<i64> = list.sessions.iter().map(|s| s.updated_ms).collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "not newest first: {times:?}"
    );
    let by_id = |id: &str| list.sessions.iter().find(|s| s.id == id).unwrap().clone();
    let ok = by_id(&ok_id);
    assert_eq!(ok.state, SessionState::Succeeded);
    assert_eq!(ok.title, "ALPHA/build: say hi");
    assert_eq!(ok.agent.as_deref(), Some("build"));
    assert_eq!(ok.model.as_deref(), Some("fk/ok"));
    assert_eq!(ok.directory, dir);
    let bad = by_id(&bad_id);
    assert_eq!(bad.state, SessionState::Failed);
    assert!(
        bad.error.as_deref().unwrap_or("").contains("APIError"),
        "{bad:?}"
    );
    // Busy per /session/status of its directory.
    assert_eq!(by_id(&slow_id).state, SessionState::Running);
    assert_eq!(by_id(&child_id).parent_id.as_deref(), Some(ok_id.as_str()));

    // Filters.
    let f = |f: SessionFilter| ids(&src.list(&f, &ctx()).unwrap());
    assert_eq!(
        f(SessionFilter {
            state: Some(SessionState::Failed),
            ..all()
        }),
        vec![bad_id.clone()]
    );
    // Running roots: the busy one, and the one with no messages yet (no outcome, recent).
    let mut running = f(SessionFilter {
        state: Some(SessionState::Running),
        children: Children::Exclude,
        ..all()
    });
    running.sort();
    let mut want = vec![slow_id.clone(), other_id.clone()];
    want.sort();
    assert_eq!(running, want);
    // Message text, not the title; case-insensitive.
    assert_eq!(
        f(SessionFilter {
            search: Some("XYZZY".into()),
            ..all()
        }),
        vec![ok_id.clone()]
    );
    let mut alpha = f(SessionFilter {
        title_prefix: Some("ALPHA/".into()),
        ..all()
    });
    alpha.sort();
    let mut want = vec![ok_id.clone(), child_id.clone()];
    want.sort();
    assert_eq!(alpha, want);
    assert_eq!(
        f(SessionFilter {
            children: Children::Only,
            ..all()
        }),
        vec![child_id.clone()]
    );
    assert!(
        !f(SessionFilter {
            children: Children::Exclude,
            ..all()
        })
        .contains(&child_id)
    );
    assert_eq!(f(SessionFilter { limit: 2, ..all() }).len(), 2);
    assert!(
        f(SessionFilter {
            directory: Some("/nowhere/else".into()),
            ..all()
        })
        .is_empty()
    );
    assert_eq!(
        f(SessionFilter {
            directory: Some("/other".into()),
            ..all()
        }),
        vec![other_id.clone()]
    );
    assert!(
        f(SessionFilter {
            since_minutes: Some(10),
            ..all()
        })
        .contains(&ok_id)
    );
    // A deadline that has passed: PARTIAL, and it says how far it got.
    let mut late = ctx();
    late.deadline = Instant::now();
    let partial = src.list(&all(), &late).unwrap();
    assert!(
        partial
            .partial
            .as_deref()
            .unwrap_or("")
            .contains("scan deadline"),
        "{partial:?}"
    );

    // Messages, paged one at a time.
    let t = src.transcript(&ok_id, None, &ctx()).unwrap();
    assert_eq!(t.total_messages, 2);
    assert_eq!(t.messages[0].role, Role::User);
    assert!(matches!(&t.messages[0].parts[0], Part::Text { text, .. } if text.contains("xyzzy")));
    assert_eq!(t.messages[1].role, Role::Assistant);
    assert!(
        t.messages[1]
            .parts
            .iter()
            .any(|p| matches!(p, Part::Text { text, .. } if text == OK_TEXT))
    );
    let tail = src.transcript(&ok_id, Some(1), &ctx()).unwrap();
    assert_eq!(tail.total_messages, 2);
    assert_eq!(tail.messages.len(), 1);
    assert_eq!(tail.messages[0].role, Role::Assistant);

    // Rename.
    let renamed = src.rename(&ok_id, "ALPHA/build: renamed", &ctx()).unwrap();
    assert_eq!(renamed.title, "ALPHA/build: renamed");
    assert_eq!(
        src.get(&ok_id, &ctx()).unwrap().title,
        "ALPHA/build: renamed"
    );

    // Unknown id, wrong password.
    let e = src.get("ses_doesnotexist0000000000", &ctx()).unwrap_err();
    assert!(matches!(e, ClientError::NotFound { .. }), "{e:?}");
    let wrong = HttpClient::new(
        &srv.url,
        Some(BasicAuth::new("opencode", "not-the-password")),
        Duration::from_secs(30),
        1 << 20,
    )
    .unwrap();
    let e = ServerSource::new(wrong).list(&all(), &ctx()).unwrap_err();
    assert!(matches!(e, ClientError::Unauthorized { .. }), "{e:?}");
    assert!(!e.to_string().contains(LIVE_PASSWORD));
}

/// A wrapper script standing in for the v2 `opencode`: the fake v2 CLI, forwarding to the
/// server with the password in *its* environment, logging every call.
fn v2_cli(dir: &Path, server_url: &str, log: &Path) -> PathBuf {
    let bin = bridge_testkit::bins::fake_opencode_v2();
    let path = dir.join("opencode-v2");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nFAKE_OPENCODE_V2_URL='{server_url}' FAKE_OPENCODE_V2_PASSWORD='{LIVE_PASSWORD}' FAKE_OPENCODE_V2_LOG='{}' exec '{}' \"$@\"\n",
            log.display(),
            bin.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Creates a v2 session with `model` and sends a prompt through the v2 routes.
fn v2_session(raw: &HttpClient, dir: &str, model: &str, text: &str) -> String {
    let r = raw
        .post_json(
            "/api/session",
            &json!({"location": {"directory": dir}, "model": {"id": model, "providerID": "fk"}}),
        )
        .unwrap();
    let id = r.body["data"]["id"].as_str().unwrap().to_string();
    raw.post_json(
        &format!("/api/session/{id}/prompt"),
        &json!({"prompt": {"text": text}}),
    )
    .unwrap();
    id
}

fn v2_has_outcome(raw: &HttpClient, id: &str) -> bool {
    raw.get_json(&format!("/api/session/{id}/message"))
        .ok()
        .and_then(|r| r.body["data"].as_array().cloned())
        .is_some_and(|items| {
            items.first().is_some_and(|m| {
                m["type"] == "assistant"
                    && m["time"]["completed"].is_number()
                    && m["finish"] != "tool-calls"
            })
        })
}

#[test]
fn live_api_backend_through_a_fake_v2_cli_against_opencode_serve() {
    let oc = bridge_testkit::require_opencode!();
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(40);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let srv = RealServer::start(&oc, &sb);
    let raw = srv.client();
    let dir = sb.project_dir().display().to_string();

    // On a fresh 1.18.33 server the first v2 prompt is admitted but not run until the next
    // prompt arrives; a warm-up session absorbs that.
    let warm = v2_session(&raw, &dir, "ok", "warm up");
    std::thread::sleep(Duration::from_secs(2));
    let ok_id = v2_session(&raw, &dir, "ok", "find the word plugh");
    assert!(wait_until(Duration::from_secs(60), || v2_has_outcome(
        &raw, &ok_id
    )));
    let tool_id = v2_session(&raw, &dir, "toolbash", "run a command");
    assert!(wait_until(Duration::from_secs(60), || v2_has_outcome(
        &raw, &tool_id
    )));
    let bad_id = v2_session(&raw, &dir, "e401", "this one fails");
    assert!(wait_until(Duration::from_secs(60), || v2_has_outcome(
        &raw, &bad_id
    )));
    let slow_id = v2_session(&raw, &dir, "slow", "take your time");
    assert!(wait_until(Duration::from_secs(60), || !llm
        .chat_requests("slow")
        .is_empty()));
    // A session written by the v1 loop: no v2 messages on 1.18.33, read through the v1 route.
    let q = format!(
        "?directory={}",
        opencode_client::http::encode_component(&dir)
    );
    let v1 = raw
        .post_json(
            &format!("/session{q}"),
            &json!({"title": "V1/build: old style"}),
        )
        .unwrap();
    let v1_id = v1.body["id"].as_str().unwrap().to_string();
    raw.post_json(
        &format!("/session/{v1_id}/message{q}"),
        &json!({"noReply": true, "parts": [{"type": "text", "text": "v1 only text"}]}),
    )
    .unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("calls.log");
    let cli = v2_cli(tmp.path(), &srv.url, &log);
    let src = ApiSource::new(ApiCommand::new(&cli, Duration::from_secs(30), 32 << 20))
        .with_page_sizes(2, 2);

    let list = src.list(&all(), &ctx()).unwrap();
    assert_eq!(list.backend, "api");
    assert_eq!(list.partial, None);
    for id in [&warm, &ok_id, &tool_id, &bad_id, &slow_id, &v1_id] {
        assert!(
            ids(&list).contains(id),
            "{id} missing from {:?}",
            ids(&list)
        );
    }
    let by_id = |id: &str| list.sessions.iter().find(|s| s.id == id).unwrap().clone();
    let ok = by_id(&ok_id);
    assert_eq!(ok.state, SessionState::Succeeded);
    assert_eq!(ok.model.as_deref(), Some("fk/ok"));
    assert_eq!(ok.directory, dir);
    assert_eq!(by_id(&tool_id).state, SessionState::Succeeded);
    let bad = by_id(&bad_id);
    assert_eq!(bad.state, SessionState::Failed);
    assert!(
        bad.error.as_deref().unwrap_or("").contains("401"),
        "{bad:?}"
    );
    // Busy per /api/session/active.
    assert_eq!(by_id(&slow_id).state, SessionState::Running);
    // No reply yet and recent.
    assert_eq!(by_id(&v1_id).state, SessionState::Running);

    let f = |f: SessionFilter| ids(&src.list(&f, &ctx()).unwrap());
    assert_eq!(
        f(SessionFilter {
            search: Some("PLUGH".into()),
            ..all()
        }),
        vec![ok_id.clone()]
    );
    assert_eq!(
        f(SessionFilter {
            state: Some(SessionState::Failed),
            ..all()
        }),
        vec![bad_id.clone()]
    );
    assert_eq!(
        f(SessionFilter {
            title_prefix: Some("V1/".into()),
            ..all()
        }),
        vec![v1_id.clone()]
    );

    // v2 message shapes: a tool call with its output, the final text; system messages dropped.
    let t = src.transcript(&tool_id, None, &ctx()).unwrap();
    assert_eq!(t.total_messages, 3, "{:#?}", t.messages);
    assert_eq!(t.messages[0].role, Role::User);
    let tool = t.messages[1]
        .parts
        .iter()
        .find_map(|p| match p {
            Part::Tool {
                tool,
                status,
                output,
                input,
                ..
            } => Some((tool.clone(), *status, output.clone(), input.clone())),
            _ => None,
        })
        .expect("a tool part");
    assert_eq!(tool.0, "bash");
    assert_eq!(tool.1, ToolStatus::Completed);
    assert!(tool.2.unwrap_or_default().contains("hello-from-bash"));
    assert!(tool.3.contains("echo hello-from-bash"));
    assert!(
        t.messages[2]
            .parts
            .iter()
            .any(|p| matches!(p, Part::Text { text, .. } if text == OK_TEXT))
    );
    let tail = src.transcript(&tool_id, Some(1), &ctx()).unwrap();
    assert_eq!((tail.messages.len(), tail.total_messages), (1, 3));

    let old = src.transcript(&v1_id, None, &ctx()).unwrap();
    assert_eq!(old.total_messages, 1);
    assert!(matches!(&old.messages[0].parts[0], Part::Text { text, .. } if text == "v1 only text"));

    // Rename: 1.18.33 has no v2 title route, so the v1 PATCH is used after the v2 attempt.
    let renamed = src
        .rename(&ok_id, "DOCS/build: renamed via api", &ctx())
        .unwrap();
    assert_eq!(renamed.title, "DOCS/build: renamed via api");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls.contains(&format!("PATCH /api/session/{ok_id} ")),
        "{calls}"
    );
    assert!(
        calls.contains(&format!("PATCH /session/{ok_id}?directory=")),
        "{calls}"
    );

    let e = src.get("ses_doesnotexist0000000000", &ctx()).unwrap_err();
    assert!(matches!(e, ClientError::NotFound { .. }), "{e:?}");
}

#[test]
fn live_store_rename_goes_through_a_temporary_server_that_is_stopped_afterwards() {
    let oc = bridge_testkit::require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let id = run_session(&oc, &sb, "ok", "hello", "misc title");

    // `OPENCODE_BIN` for the rename: the real opencode, started in the sandbox's environment.
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = tmp.path().join("opencode");
    let mut script = String::from("#!/bin/sh\nexec env -i");
    for key in ["PATH", "TMPDIR", "LANG"] {
        if let Ok(v) = std::env::var(key) {
            script.push_str(&format!(" {key}='{v}'"));
        }
    }
    for (k, v) in sb.env() {
        script.push_str(&format!(" {k}='{v}'"));
    }
    script.push_str(" OPENCODE_SERVER_PASSWORD=\"$OPENCODE_SERVER_PASSWORD\"");
    script.push_str(&format!(" '{}' \"$@\"\n", oc.display()));
    std::fs::write(&wrapper, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();

    // The store backend, chosen as the bridge would choose it, renames through a temporary
    // server started from OPENCODE_BIN.
    let data = sb.data_home().display().to_string();
    let bin = wrapper.display().to_string();
    let cfg = ClientConfig::from_lookup(|k| match k {
        "XDG_DATA_HOME" => Some(data.clone()),
        "OPENCODE_BIN" => Some(bin.clone()),
        "OPENCODE_BRIDGE_API_TIMEOUT_MS" => Some("60000".into()),
        // The wrapper starts the real opencode with an environment of its own (`env -i`), so a
        // fence drawn from the bridge's environment would not describe its world.
        "OPENCODE_BRIDGE_SANDBOX" => Some("off".into()),
        _ => None,
    })
    .unwrap();
    let (store, why) = choose_backend(&cfg).unwrap();
    assert_eq!(store.name(), "store", "{why}");
    let renamed = store
        .rename(&id, "ALPHA/build: via temporary server", &ctx())
        .unwrap();
    assert_eq!(renamed.title, "ALPHA/build: via temporary server");
    assert!(
        wait_until(Duration::from_secs(10), || processes_of(&sb).is_empty()),
        "the temporary server is still running: {:?}",
        processes_of(&sb)
    );
    // An unknown id is refused by the store before any server starts.
    let e = store
        .rename("ses_doesnotexist0000000000", "X/y: z", &ctx())
        .unwrap_err();
    assert!(matches!(e, ClientError::NotFound { .. }), "{e:?}");

    // The same, called directly.
    let dir = sb.project_dir().display().to_string();
    rename_with_ephemeral_server(&cfg, &dir, &id, "ALPHA/build: second rename", None).unwrap();

    let db = rusqlite::Connection::open_with_flags(
        sb.db_path(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let title: String = db
        .query_row("SELECT title FROM session WHERE id = ?1", [&id], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(title, "ALPHA/build: second rename");
    assert!(
        wait_until(Duration::from_secs(10), || processes_of(&sb).is_empty()),
        "the temporary server is still running: {:?}",
        processes_of(&sb)
    );
    let e = rename_with_ephemeral_server(&cfg, &dir, "ses_doesnotexist0000000000", "X/y: z", None)
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::NotFound { .. } | ClientError::ServiceError { status: 404, .. }
        ),
        "{e:?}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || processes_of(&sb).is_empty()),
        "the temporary server is still running after a failed rename"
    );
}
