//! The store backend over a real opencode 1.18.33 store (`fixtures/opencode-store`, see its
//! README), copied to a temp dir before opening. Plus `live_` tests against a store that the real
//! opencode is writing.

use opencode_client::model::{Children, Part, Role, SessionFilter, SessionState, ToolStatus};
use opencode_client::{ClientError, Liveness, ScanContext, SessionSource, StoreSource};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIN: i64 = 60_000;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/opencode-store")
}

struct Fixture {
    _dir: tempfile::TempDir,
    db: PathBuf,
    store: StoreSource,
    meta: Value,
    /// `time_updated` of the newest session.
    newest_ms: i64,
}

impl Fixture {
    fn id(&self, scenario: &str) -> String {
        self.meta["sessions"][scenario]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no scenario {scenario} in sessions.json"))
            .to_string()
    }

    /// The scenario name of a session id.
    fn name(&self, id: &str) -> String {
        self.meta["sessions"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, v)| v["id"] == id)
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| id.to_string())
    }

    fn names(&self, list: &opencode_client::SessionList) -> Vec<String> {
        let mut v: Vec<String> = list.sessions.iter().map(|s| self.name(&s.id)).collect();
        v.sort();
        v
    }

    fn list(&self, f: SessionFilter, c: &ScanContext) -> opencode_client::SessionList {
        self.store.list(&f, c).expect("list")
    }
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("opencode.db");
    std::fs::copy(fixture_dir().join("opencode.db"), &db).unwrap();
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir().join("sessions.json")).unwrap(),
    )
    .unwrap();
    let store = StoreSource::open(&db).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let newest_ms: i64 = conn
        .query_row("SELECT max(time_updated) FROM session", [], |r| r.get(0))
        .unwrap();
    Fixture {
        _dir: dir,
        db,
        store,
        meta,
        newest_ms,
    }
}

fn ctx(now_ms: i64, busy: &[&str], gone: &[&str]) -> ScanContext {
    ScanContext {
        deadline: Instant::now() + Duration::from_secs(60),
        now_ms,
        liveness: Liveness {
            busy: busy.iter().map(|s| s.to_string()).collect(),
            gone: gone.iter().map(|s| s.to_string()).collect(),
        },
    }
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[test]
fn store_state_of_every_fixture_session() {
    let fx = fixture();
    let c = ctx(fx.newest_ms + MIN, &[], &[]);
    let expect = [
        ("ok", SessionState::Succeeded, None),
        ("toolbash", SessionState::Succeeded, None),
        ("toolwrite", SessionState::Succeeded, None),
        (
            "e401",
            SessionState::Failed,
            Some("APIError: Incorrect API key provided: sk-xxx."),
        ),
        (
            "permission_rejected",
            SessionState::Interrupted,
            Some("permission rejected: read"),
        ),
        ("tooltask", SessionState::Succeeded, None),
        ("tooltask_child", SessionState::Succeeded, None),
        ("other_dir", SessionState::Succeeded, None),
        ("aborted", SessionState::Interrupted, None),
        ("aborted_in_retry", SessionState::Interrupted, None),
        (
            "aborted_in_retry_after_tool",
            SessionState::Interrupted,
            None,
        ),
        ("killed", SessionState::Running, None),
    ];
    for (name, state, error) in expect {
        let s = fx.store.get(&fx.id(name), &c).unwrap();
        assert_eq!(
            (s.state, s.error.as_deref()),
            (state, error),
            "scenario {name}"
        );
    }
}

#[test]
fn store_killed_session_depends_on_liveness_and_quiet_time() {
    let fx = fixture();
    let id = fx.id("killed");
    let updated = fx
        .store
        .get(&id, &ctx(fx.newest_ms, &[], &[]))
        .unwrap()
        .updated_ms;
    let state = |c: ScanContext| fx.store.get(&id, &c).unwrap().state;
    assert_eq!(
        state(ctx(updated + 44 * MIN, &[], &[])),
        SessionState::Running
    );
    assert_eq!(
        state(ctx(updated + 46 * MIN, &[], &[])),
        SessionState::Stale
    );
    assert_eq!(
        state(ctx(updated + 46 * MIN, &[&id], &[])),
        SessionState::Running
    );
    assert_eq!(
        state(ctx(updated + MIN, &[], &[&id])),
        SessionState::Interrupted
    );
    // Liveness never turns a finished session back into something else, except `busy`.
    let ok = fx.id("ok");
    assert_eq!(
        fx.store.get(&ok, &ctx(updated, &[], &[&ok])).unwrap().state,
        SessionState::Succeeded
    );
    assert_eq!(
        fx.store.get(&ok, &ctx(updated, &[&ok], &[])).unwrap().state,
        SessionState::Running
    );
}

#[test]
fn store_session_fields() {
    let fx = fixture();
    let c = ctx(fx.newest_ms, &[], &[]);
    let s = fx.store.get(&fx.id("toolwrite"), &c).unwrap();
    assert_eq!(s.title, "Fake title");
    assert_eq!(s.agent.as_deref(), Some("build"));
    assert_eq!(s.model.as_deref(), Some("fk/toolwrite"));
    assert_eq!(s.version.as_deref(), Some("1.18.33"));
    assert_eq!(s.project_id, "global");
    assert_eq!(s.parent_id, None);
    assert_eq!(s.directory, fx.meta["project_dir"].as_str().unwrap());
    assert!(s.tokens.input > 0 && s.tokens.output > 0, "{:?}", s.tokens);
    assert!(s.created_ms <= s.updated_ms);
    let child = fx.store.get(&fx.id("tooltask_child"), &c).unwrap();
    assert_eq!(child.parent_id, Some(fx.id("tooltask")));
    assert_eq!(child.agent.as_deref(), Some("general"));
    assert_eq!(
        fx.store.get(&fx.id("other_dir"), &c).unwrap().title,
        "DOCS/build: reasoning in other dir"
    );
}

#[test]
fn store_list_is_newest_first_with_limit() {
    let fx = fixture();
    let c = ctx(fx.newest_ms + MIN, &[], &[]);
    let all = fx.list(SessionFilter::default(), &c);
    assert_eq!(all.backend, "store");
    assert_eq!(all.partial, None);
    assert_eq!(all.sessions.len(), 12);
    assert_eq!(all.scanned, 12);
    for w in all.sessions.windows(2) {
        assert!(
            (w[0].updated_ms, &w[0].id) >= (w[1].updated_ms, &w[1].id),
            "not newest first"
        );
    }
    let three = fx.list(
        SessionFilter {
            limit: 3,
            ..Default::default()
        },
        &c,
    );
    assert_eq!(three.sessions, all.sessions[..3].to_vec());
}

#[test]
fn store_filter_by_state() {
    let fx = fixture();
    let c = ctx(fx.newest_ms + MIN, &[], &[]);
    let by = |state| {
        fx.names(&fx.list(
            SessionFilter {
                state: Some(state),
                ..Default::default()
            },
            &c,
        ))
    };
    assert_eq!(by(SessionState::Failed), sorted(&["e401"]));
    assert_eq!(
        by(SessionState::Interrupted),
        sorted(&[
            "aborted",
            "aborted_in_retry",
            "aborted_in_retry_after_tool",
            "permission_rejected"
        ])
    );
    assert_eq!(by(SessionState::Running), sorted(&["killed"]));
    assert_eq!(by(SessionState::Stale), Vec::<String>::new());
    assert_eq!(by(SessionState::Succeeded).len(), 6);
    let later = ctx(fx.newest_ms + 120 * MIN, &[], &[]);
    let stale = fx.list(
        SessionFilter {
            state: Some(SessionState::Stale),
            ..Default::default()
        },
        &later,
    );
    assert_eq!(fx.names(&stale), sorted(&["killed"]));
}

#[test]
fn store_filter_by_agent_directory_title_prefix_children() {
    let fx = fixture();
    let c = ctx(fx.newest_ms + MIN, &[], &[]);
    let list = |f: SessionFilter| fx.names(&fx.list(f, &c));
    assert_eq!(
        list(SessionFilter {
            agent: Some("general".into()),
            ..Default::default()
        }),
        sorted(&["tooltask_child"])
    );
    assert_eq!(
        list(SessionFilter {
            agent: Some("BUILD".into()),
            ..Default::default()
        })
        .len(),
        11
    );
    assert_eq!(
        list(SessionFilter {
            directory: Some("other-proj".into()),
            ..Default::default()
        }),
        sorted(&["other_dir"])
    );
    assert_eq!(
        list(SessionFilter {
            title_prefix: Some("DOCS/".into()),
            ..Default::default()
        }),
        sorted(&["other_dir"])
    );
    assert!(
        list(SessionFilter {
            title_prefix: Some("docs/".into()),
            ..Default::default()
        })
        .is_empty()
    );
    assert_eq!(
        list(SessionFilter {
            children: Children::Only,
            ..Default::default()
        }),
        sorted(&["tooltask_child"])
    );
    let roots = list(SessionFilter {
        children: Children::Exclude,
        ..Default::default()
    });
    assert_eq!(roots.len(), 11);
    assert!(!roots.contains(&"tooltask_child".to_string()));
}

#[test]
fn store_filter_by_search_in_title_and_text() {
    let fx = fixture();
    let c = ctx(fx.newest_ms + MIN, &[], &[]);
    let search = |q: &str| {
        fx.names(&fx.list(
            SessionFilter {
                search: Some(q.into()),
                ..Default::default()
            },
            &c,
        ))
    };
    // The user prompt (a text part), any case.
    assert_eq!(search("PLAIN Answer"), sorted(&["ok"]));
    // An assistant answer of the subagent only.
    assert_eq!(search("sub job result"), sorted(&["tooltask_child"]));
    // The title.
    assert_eq!(search("reasoning in OTHER"), sorted(&["other_dir"]));
    // LIKE wildcards are taken literally.
    assert!(search("fixture%bash").is_empty());
    assert!(search("über").is_empty());
    // Tool output is not searched.
    assert!(search("hello-from-bash").is_empty());
}

#[test]
fn store_filter_since_minutes() {
    let fx = fixture();
    let c = ctx(fx.newest_ms + MIN + 1, &[], &[]);
    let all = fx.list(SessionFilter::default(), &c);
    assert!(
        fx.list(
            SessionFilter {
                since_minutes: Some(1),
                ..Default::default()
            },
            &c
        )
        .sessions
        .is_empty(),
        "nothing was updated in the last minute"
    );
    let c = ctx(fx.newest_ms, &[], &[]);
    let recent = fx.list(
        SessionFilter {
            since_minutes: Some(1),
            ..Default::default()
        },
        &c,
    );
    let expected: Vec<_> = all
        .sessions
        .iter()
        .filter(|s| s.updated_ms >= fx.newest_ms - MIN)
        .map(|s| s.id.clone())
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(
        recent
            .sessions
            .iter()
            .map(|s| s.id.clone())
            .collect::<Vec<_>>(),
        expected
    );
}

#[test]
fn store_scan_deadline_answers_partial() {
    let fx = fixture();
    let mut c = ctx(fx.newest_ms, &[], &[]);
    c.deadline = Instant::now();
    let l = fx.list(SessionFilter::default(), &c);
    assert!(l.sessions.is_empty());
    assert_eq!(l.scanned, 0);
    assert_eq!(
        l.partial.as_deref(),
        Some("stopped after 0 of 12 sessions (deadline 0 ms)")
    );
}

#[test]
fn store_transcript_full_and_tail() {
    let fx = fixture();
    let c = ctx(fx.newest_ms, &[], &[]);
    let t = fx.store.transcript(&fx.id("toolbash"), None, &c).unwrap();
    assert_eq!(t.total_messages, 3);
    assert_eq!(t.messages.len(), 3);
    let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, vec![Role::User, Role::Assistant, Role::Assistant]);
    assert!(
        matches!(&t.messages[0].parts[..], [Part::Text { text, synthetic: false, .. }] if text == "fixture run a bash command")
    );
    let step = &t.messages[1];
    assert_eq!(step.finish.as_deref(), Some("tool-calls"));
    assert_eq!(step.model.as_deref(), Some("fk/toolbash"));
    assert!(step.parts.iter().any(|p| matches!(p,
        Part::Tool { tool, status: ToolStatus::Completed, output: Some(o), input, .. }
            if tool == "bash" && o == "hello-from-bash\n" && input.contains("echo hello-from-bash"))));
    assert!(matches!(step.parts.first(), Some(Part::StepStart)));
    assert!(
        matches!(step.parts.last(), Some(Part::StepFinish { reason: Some(r) }) if r == "tool-calls")
    );
    let last = &t.messages[2];
    assert_eq!(last.finish.as_deref(), Some("stop"));
    assert!(last.parts.iter().any(
        |p| matches!(p, Part::Text { text, .. } if text == bridge_testkit::fake_llm::OK_TEXT)
    ));
    assert!(last.completed_ms.is_some() && last.tokens.output == 3);

    let tail = fx
        .store
        .transcript(&fx.id("toolbash"), Some(1), &c)
        .unwrap();
    assert_eq!(tail.total_messages, 3);
    assert_eq!(tail.messages, t.messages[2..].to_vec());
    let tail2 = fx
        .store
        .transcript(&fx.id("toolbash"), Some(2), &c)
        .unwrap();
    assert_eq!(tail2.messages, t.messages[1..].to_vec());
    let many = fx
        .store
        .transcript(&fx.id("toolbash"), Some(50), &c)
        .unwrap();
    assert_eq!(many.messages, t.messages);
}

#[test]
fn store_transcript_errors_reasoning_and_rejections() {
    let fx = fixture();
    let c = ctx(fx.newest_ms, &[], &[]);
    let e = fx.store.transcript(&fx.id("e401"), None, &c).unwrap();
    let err = e.messages.last().unwrap().error.clone().unwrap();
    assert_eq!(
        (err.name.as_str(), err.status_code),
        ("APIError", Some(401))
    );
    let r = fx.store.transcript(&fx.id("other_dir"), None, &c).unwrap();
    assert!(
        r.messages
            .iter()
            .flat_map(|m| &m.parts)
            .any(|p| matches!(p, Part::Reasoning))
    );
    let p = fx
        .store
        .transcript(&fx.id("permission_rejected"), None, &c)
        .unwrap();
    assert!(p.messages.iter().flat_map(|m| &m.parts).any(|p| matches!(p,
        Part::Tool { tool, status: ToolStatus::Error, output: Some(o), .. }
            if tool == "read" && o.contains("rejected permission"))));
    let a = fx.store.transcript(&fx.id("aborted"), None, &c).unwrap();
    assert_eq!(
        a.messages.last().unwrap().error.as_ref().unwrap().name,
        "MessageAbortedError"
    );
    // Aborted while waiting to retry a 429 after a tool step: the tool step is intact, the
    // last message completed with no finish, no error and no parts.
    let r = fx
        .store
        .transcript(&fx.id("aborted_in_retry_after_tool"), None, &c)
        .unwrap();
    assert_eq!(r.total_messages, 3);
    assert_eq!(r.messages[1].finish.as_deref(), Some("tool-calls"));
    let last = r.messages.last().unwrap();
    assert!(last.completed_ms.is_some());
    assert_eq!((&last.finish, &last.error), (&None, &None));
    assert!(last.parts.is_empty());
    let k = fx.store.transcript(&fx.id("killed"), None, &c).unwrap();
    let dangling = k.messages.last().unwrap();
    assert_eq!(dangling.role, Role::Assistant);
    assert_eq!(
        (dangling.completed_ms, &dangling.finish, &dangling.error),
        (None, &None, &None)
    );
}

#[test]
fn store_unknown_id_rename_and_errors() {
    let fx = fixture();
    let c = ctx(fx.newest_ms, &[], &[]);
    assert!(matches!(
        fx.store.get("ses_nope", &c),
        Err(ClientError::NotFound { .. })
    ));
    assert!(matches!(
        fx.store.transcript("ses_nope", Some(3), &c),
        Err(ClientError::NotFound { .. })
    ));
    let err = fx.store.rename(&fx.id("ok"), "x", &c).unwrap_err();
    assert!(matches!(
        err,
        ClientError::Unsupported {
            operation: "rename",
            backend: "store",
            ..
        }
    ));
    assert!(matches!(
        fx.store.list(
            &SessionFilter {
                search: Some(" ".into()),
                ..Default::default()
            },
            &c
        ),
        Err(ClientError::InvalidArgument { .. })
    ));
    assert!(matches!(
        StoreSource::open(fx.db.with_file_name("absent.db")),
        Err(ClientError::StoreMissing { .. })
    ));
    assert_eq!(
        fx.store.schema_migration(),
        Some("20260622202450_simplify_session_input")
    );
}

#[test]
fn store_reading_never_changes_the_file() {
    let fx = fixture();
    let before = std::fs::read(&fx.db).unwrap();
    let c = ctx(fx.newest_ms, &[], &[]);
    fx.list(
        SessionFilter {
            search: Some("anything".into()),
            ..Default::default()
        },
        &c,
    );
    fx.store.transcript(&fx.id("toolbash"), None, &c).unwrap();
    let _ = fx.store.rename(&fx.id("ok"), "renamed", &c);
    assert_eq!(std::fs::read(&fx.db).unwrap(), before);
    let titles: Vec<String> = fx
        .list(SessionFilter::default(), &c)
        .sessions
        .into_iter()
        .map(|s| s.title)
        .collect();
    assert!(!titles.contains(&"renamed".to_string()));
}

#[test]
fn store_unknown_schema_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("opencode.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "CREATE TABLE session (id text PRIMARY KEY, title text, version text);
         INSERT INTO session VALUES ('ses_1', 't', '9.9.9');
         CREATE TABLE message (id text, session_id text, time_created int, time_updated int, data text);",
    )
    .unwrap();
    drop(conn);
    match StoreSource::open(&db) {
        Err(ClientError::UnknownSchema { missing, version }) => {
            assert_eq!(version, "9.9.9");
            assert!(
                missing.contains("table session lacks column(s) parent_id, directory"),
                "{missing}"
            );
            assert!(missing.contains("table part is missing"), "{missing}");
        }
        other => panic!("expected UnknownSchema, got {other:?}"),
    }
    std::fs::write(
        dir.path().join("junk.db"),
        b"this is not a database at all, just text",
    )
    .unwrap();
    assert!(matches!(
        StoreSource::open(dir.path().join("junk.db")),
        Err(ClientError::StoreCorrupt { .. })
    ));
}

#[test]
fn store_tolerates_malformed_rows() {
    let fx = fixture();
    let ok = fx.id("ok");
    {
        // Damage a copy (the store itself is only ever read).
        let w = rusqlite::Connection::open(&fx.db).unwrap();
        w.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) \
             VALUES ('msg_zzzz_bad', ?1, 9999999999999, 9999999999999, '{not json')",
            [&ok],
        )
        .unwrap();
        w.execute(
            "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) \
             VALUES ('prt_zzzz_bad', 'msg_zzzz_bad', ?1, 1, 1, 'also {not json')",
            [&ok],
        )
        .unwrap();
    }
    let store = StoreSource::open(&fx.db).unwrap();
    let c = ctx(fx.newest_ms + MIN, &[], &[]);
    let all = store.list(&SessionFilter::default(), &c).unwrap();
    assert_eq!(all.sessions.len(), 12);
    let found = store
        .list(
            &SessionFilter {
                search: Some("plain answer".into()),
                ..Default::default()
            },
            &c,
        )
        .unwrap();
    assert_eq!(found.sessions.len(), 1);
    let t = store.transcript(&ok, Some(1), &c).unwrap();
    assert_eq!(t.total_messages, 3);
    assert!(
        matches!(&t.messages[0].parts[..], [Part::Other { part_type, .. }] if part_type == "unknown")
    );
}

// ---------------------------------------------------------------------------------------------
// live: the real opencode writes while we read (WAL).

#[test]
fn live_store_shows_a_run_running_then_succeeded() {
    let oc = bridge_testkit::require_opencode!();
    let llm = bridge_testkit::FakeLlm::start().unwrap();
    llm.set_slow_secs(4);
    let sb = bridge_testkit::OpencodeSandbox::new(&llm.base_url()).unwrap();
    let mut child = sb
        .command(&oc, ["run", "--format", "json", "-m", "fk/slow"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"live store watch")
            .unwrap();
    }
    // Wait for the streaming request, then open the store opencode is writing.
    assert!(llm.wait_for(Duration::from_secs(90), |r| {
        r.iter().any(|r| r.model() == Some("slow") && r.has_tools())
    }));
    let store = StoreSource::open(sb.db_path()).expect("open the live store");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let running = store
        .list(&SessionFilter::default(), &ctx(now(), &[], &[]))
        .unwrap();
    assert_eq!(running.sessions.len(), 1);
    let id = running.sessions[0].id.clone();
    assert_eq!(running.sessions[0].state, SessionState::Running);
    let status = child.wait().unwrap();
    assert!(status.success());
    let done = store.get(&id, &ctx(now(), &[], &[])).unwrap();
    assert_eq!(done.state, SessionState::Succeeded);
    let t = store
        .transcript(&id, Some(1), &ctx(now(), &[], &[]))
        .unwrap();
    assert!(
        t.messages[0]
            .parts
            .iter()
            .any(|p| matches!(p, Part::Text { text, .. } if text.contains("DONE")))
    );
}

#[test]
fn store_usage_names_the_agent_model_and_tool_calls_of_each_assistant_message() {
    let fx = fixture();
    let c = ctx(fx.newest_ms + MIN, &[], &[]);
    let id = fx.id("toolwrite");
    let u = opencode_client::usage::session_usage(&fx.store, &id, 0, &c).unwrap();
    // A tool step and the final answer: two assistant messages of `build` on fk/toolwrite.
    assert_eq!(u.turns.len(), 2, "{u:?}");
    for t in &u.turns {
        assert_eq!(t.agent.as_deref(), Some("build"));
        assert_eq!(t.model.as_deref(), Some("fk/toolwrite"));
    }
    assert_eq!(u.tool_calls.len(), 1);
    assert_eq!(u.tool_calls[0].tool, "write");
    assert_eq!(u.tool_calls[0].status, ToolStatus::Completed);
    assert!(u.tool_calls[0].input.contains("hello.txt"));
    // Only messages created since the moment count (a follow-up's earlier turns do not).
    let second = u.turns[1].created_ms;
    let later = opencode_client::usage::session_usage(&fx.store, &id, second, &c).unwrap();
    assert_eq!(later.turns.len(), 1);
    assert!(later.tool_calls.is_empty());
    // An unknown session is an error, not an empty usage.
    assert!(matches!(
        opencode_client::usage::session_usage(&fx.store, "ses_nope", 0, &c),
        Err(ClientError::NotFound { .. })
    ));
}
