//! The `api` backend on hand-written v2 replies (`fixtures/api-v2/service`), for shapes the
//! real 1.18.33 server did not produce in the live tests: an aborted run, a running tool, a
//! failed tool call, reasoning, `system` messages, cursor paging, and a v2 title route.

use opencode_client::api::{ApiCommand, ApiSource};
use opencode_client::{
    Children, Liveness, Part, Role, ScanContext, SessionFilter, SessionSource, SessionState,
    ToolStatus,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const NOW_MS: i64 = 1_800_000_100_000;

fn ctx() -> ScanContext {
    ScanContext {
        deadline: Instant::now() + Duration::from_secs(30),
        now_ms: NOW_MS,
        liveness: Liveness::default(),
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/api-v2/service")
}

/// The backend, with `OPENCODE_BIN` = a wrapper that points the fake v2 CLI at the fixtures
/// and logs every call.
fn source(tmp: &Path) -> (ApiSource, PathBuf) {
    let bin = bridge_testkit::bins::fake_opencode_v2();
    let log = tmp.join("calls.log");
    let wrapper = tmp.join("opencode");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nFAKE_OPENCODE_V2_FIXTURES='{}' FAKE_OPENCODE_V2_LOG='{}' exec '{}' \"$@\"\n",
            fixtures().display(),
            log.display(),
            bin.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cmd = ApiCommand::new(wrapper, Duration::from_secs(30), 1 << 20);
    (ApiSource::new(cmd), log)
}

#[test]
fn listing_follows_cursors_and_derives_every_state() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, log) = source(tmp.path());
    let list = src.list(&SessionFilter::default(), &ctx()).unwrap();
    let got: Vec<(&str, SessionState)> = list
        .sessions
        .iter()
        .map(|s| (s.id.as_str(), s.state))
        .collect();
    assert_eq!(
        got,
        vec![
            ("ses_b", SessionState::Running),
            ("ses_a", SessionState::Interrupted),
            ("ses_c", SessionState::Succeeded),
            ("ses_d", SessionState::Stale),
        ]
    );
    assert_eq!(list.scanned, 4);
    assert_eq!(list.backend, "api");
    let calls = std::fs::read_to_string(log).unwrap();
    assert!(
        calls.contains("GET /api/session?limit=100&cursor=p2"),
        "{calls}"
    );
    assert!(
        calls.contains("GET /api/session?limit=100&cursor=p3"),
        "{calls}"
    );
    assert!(calls.contains("GET /api/session/active"), "{calls}");
    // The agent of a session without one comes from its last assistant message.
    let c = list.sessions.iter().find(|s| s.id == "ses_c").unwrap();
    assert_eq!(c.agent.as_deref(), Some("fixer"));
    assert_eq!(c.model.as_deref(), Some("prov/m2"));
    assert_eq!(c.tokens.reasoning, 3);
    assert_eq!(c.directory, "/work/proj-a");
}

#[test]
fn filters_apply_to_v2_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, _) = source(tmp.path());
    let ids = |f: SessionFilter| -> Vec<String> {
        src.list(&f, &ctx())
            .unwrap()
            .sessions
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    let all = SessionFilter::default;
    assert_eq!(
        ids(SessionFilter {
            children: Children::Only,
            ..all()
        }),
        vec!["ses_d"]
    );
    assert_eq!(
        ids(SessionFilter {
            agent: Some("FIXER".into()),
            ..all()
        }),
        vec!["ses_c"]
    );
    // Message text (not the title), case-insensitive; reasoning is not searched.
    assert_eq!(
        ids(SessionFilter {
            search: Some("fixed the loader".into()),
            ..all()
        }),
        vec!["ses_c"]
    );
    assert!(
        ids(SessionFilter {
            search: Some("secret thoughts".into()),
            ..all()
        })
        .is_empty()
    );
    assert_eq!(
        ids(SessionFilter {
            directory: Some("proj-b".into()),
            ..all()
        }),
        vec!["ses_b"]
    );
    assert_eq!(
        ids(SessionFilter {
            state: Some(SessionState::Stale),
            ..all()
        }),
        vec!["ses_d"]
    );
    assert_eq!(ids(SessionFilter { limit: 1, ..all() }), vec!["ses_b"]);
    // since_minutes stops paging once sessions get older than the window.
    assert_eq!(
        ids(SessionFilter {
            since_minutes: Some(60),
            ..all()
        }),
        vec!["ses_b", "ses_a", "ses_c"]
    );
}

#[test]
fn v2_messages_become_the_shared_model() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, _) = source(tmp.path());
    let t = src.transcript("ses_c", None, &ctx()).unwrap();
    // The `system` message is not part of the conversation.
    assert_eq!(t.total_messages, 3);
    let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, vec![Role::User, Role::Assistant, Role::Assistant]);
    assert!(
        matches!(&t.messages[0].parts[..], [Part::Text { text, .. }] if text == "Fix the loader bug")
    );
    match &t.messages[1].parts[..] {
        [
            Part::Tool {
                tool,
                status: ToolStatus::Error,
                output: Some(out),
                input,
                ..
            },
        ] => {
            assert_eq!(tool, "read");
            assert_eq!(out, "File not found: /nonexistent");
            assert!(input.contains("/nonexistent"));
        }
        other => panic!("unexpected parts {other:?}"),
    }
    assert_eq!(t.messages[1].finish.as_deref(), Some("tool-calls"));
    assert!(matches!(
        &t.messages[2].parts[..],
        [Part::Reasoning, Part::Text { text, .. }] if text == "Fixed the Loader. DONE"
    ));
    assert_eq!(t.messages[2].completed_ms, Some(1_800_000_068_000));

    let a = src.transcript("ses_a", Some(1), &ctx()).unwrap();
    assert_eq!((a.messages.len(), a.total_messages), (1, 2));
    let err = a.messages[0].error.clone().unwrap();
    assert_eq!(err.name, "MessageAbortedError");
    assert!(err.message.contains("user cancelled"));

    let b = src.transcript("ses_b", None, &ctx()).unwrap();
    assert!(matches!(
        &b.messages[1].parts[..],
        [Part::Tool { status: ToolStatus::Running, tool, .. }] if tool == "bash"
    ));
    assert_eq!(b.session.state, SessionState::Running);
}

#[test]
fn rename_uses_the_v2_route_when_the_service_has_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, log) = source(tmp.path());
    src.rename("ses_a", "BETA/explorer: renamed", &ctx())
        .unwrap();
    let calls = std::fs::read_to_string(log).unwrap();
    assert!(
        calls.contains(r#"PATCH /api/session/ses_a {"title":"BETA/explorer: renamed"}"#),
        "{calls}"
    );
    assert!(
        !calls.contains("PATCH /session/"),
        "fell back to v1: {calls}"
    );
}
