//! Snapshots of every text the tools return, from fixed values (times are relative to a fixed
//! "now", so nothing needs redacting here; the binary's tests redact ids, times and paths).

use bridge_policy::FakeEnv;
use bridge_policy::view::PolicyView;
use bridge_render::tasks::{self, Started};
use bridge_render::{OutputMode, instructions, policy, renamed, session_list, transcript};
use opencode_client::{
    Message, MessageError, Part, Role, Session, SessionList, SessionState, SessionTranscript,
    Tokens, ToolStatus,
};
use run_supervisor::{
    CancelOutcome, ChangeSource, ChangedFiles, Cut, Failure, FailureKind, FileChange,
    OpencodeProcess, ProcessKind, TaskOutput, TaskSnapshot, TaskState, TokenUsage, ToolCall,
    WaitReport, WarmServer,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const NOW: i64 = 1_795_988_000_000;

fn session(id: &str, state: SessionState, agent: &str, mins_ago: i64, title: &str) -> Session {
    Session {
        id: id.into(),
        title: title.into(),
        directory: "/home/u/Github/project-a".into(),
        project_id: "p1".into(),
        parent_id: None,
        agent: Some(agent.into()),
        model: Some("fk/ok".into()),
        tokens: Tokens {
            input: 650_123,
            output: 29_010,
            ..Tokens::default()
        },
        cost: 0.0,
        created_ms: NOW - mins_ago * 60_000 - 120_000,
        updated_ms: NOW - mins_ago * 60_000,
        state,
        error: None,
        version: Some("1.18.33".into()),
    }
}

#[test]
fn sessions_listing() {
    let mut failed = session(
        "ses_e31688286ffeA2b3C4d5E6f7G8",
        SessionState::Failed,
        "worker",
        90,
        "BETA/worker: rename api_key to apiKey",
    );
    failed.error = Some("APIError: Rate limit reached for requests".into());
    let mut child = session(
        "ses_e3188e02affeZ9y8X7w6V5u4T3",
        SessionState::Running,
        "explorer",
        0,
        "map the loader",
    );
    child.parent_id = Some("ses_parent".into());
    child.tokens = Tokens::default();
    let list = SessionList {
        sessions: vec![
            session(
                "ses_e3188e02fffe1a2b3c4d5e6f7g",
                SessionState::Running,
                "deep-research",
                0,
                "ALPHA/deep-research: collect API reference notes",
            ),
            child,
            failed,
            session(
                "ses_e2000000affe1a2b3c4d5e6f7g",
                SessionState::Stale,
                "fixer",
                3000,
                "New session - 2026-11-27",
            ),
        ],
        scanned: 100,
        partial: None,
        backend: "store",
    };
    insta::assert_snapshot!(session_list(&list, "", NOW));
    let partial = SessionList {
        sessions: vec![],
        scanned: 4000,
        partial: Some("the 35000 ms scan deadline hit after 4000 sessions".into()),
        backend: "server",
    };
    insta::assert_snapshot!(
        "sessions_partial_empty",
        session_list(&partial, "state=running, agent=worker", NOW)
    );
}

fn text(t: &str, at: i64) -> Part {
    Part::Text {
        text: t.into(),
        synthetic: false,
        time_ms: Some(at),
    }
}

fn message(role: Role, at: i64, parts: Vec<Part>) -> Message {
    Message {
        id: format!("msg_{at}"),
        role,
        agent: Some("worker".into()),
        model: Some("fk/ok".into()),
        created_ms: at,
        completed_ms: Some(at + 1000),
        finish: Some("stop".into()),
        error: None,
        tokens: Tokens::default(),
        cost: 0.0,
        parts,
    }
}

fn sample_transcript() -> SessionTranscript {
    let t0 = NOW - 120_000;
    let long_rules = format!(
        "Rules for this delegated task:\n{}\nTask: rename api_key to apiKey in the loader",
        "- stay inside the working directory\n".repeat(20)
    );
    let mut failed = message(
        Role::Assistant,
        t0 + 40_000,
        vec![text("Trying once more.", t0 + 40_000)],
    );
    failed.error = Some(MessageError {
        name: "APIError".into(),
        message: "Rate limit reached for requests".into(),
        status_code: Some(429),
    });
    SessionTranscript {
        session: session("ses_e31688286ffeA2b3C4d5E6f7G8", SessionState::Succeeded, "worker", 1, "BETA/worker: rename api_key to apiKey in the loader"),
        messages: vec![
            message(Role::User, t0, vec![text(&long_rules, t0)]),
            message(
                Role::Assistant,
                t0 + 5_000,
                vec![
                    Part::StepStart,
                    Part::Reasoning,
                    text("Renaming in three files.", t0 + 5_000),
                    Part::Tool {
                        tool: "edit".into(),
                        status: ToolStatus::Completed,
                        input: r#"{"filePath":"src/loader.js","oldString":"api_key","newString":"apiKey"}"#.into(),
                        output: Some("Edit applied successfully.".into()),
                        time_ms: Some(t0 + 6_000),
                    },
                    Part::Tool {
                        tool: "read".into(),
                        status: ToolStatus::Error,
                        input: r#"{"filePath":"/etc/passwd"}"#.into(),
                        output: Some("The user rejected permission to use this specific tool call.".into()),
                        time_ms: Some(t0 + 7_000),
                    },
                    Part::Patch { files: vec!["src/loader.js".into(), "src/config.js".into()] },
                    Part::StepFinish { reason: Some("tool-calls".into()) },
                ],
            ),
            failed,
            message(Role::Assistant, t0 + 60_000, vec![text("DONE: renamed in 3 files.", t0 + 60_000)]),
        ],
        total_messages: 9,
    }
}

#[test]
fn session_output_modes() {
    let t = sample_transcript();
    insta::assert_snapshot!("output_tail", transcript(&t, OutputMode::Tail, 20_000, NOW));
    insta::assert_snapshot!("output_last", transcript(&t, OutputMode::Last, 20_000, NOW));
    let cut = transcript(&t, OutputMode::Full, 600, NOW);
    assert!(cut.chars().count() <= 700, "{}", cut.chars().count());
    insta::assert_snapshot!("output_full_cut", cut);
}

#[test]
fn rename_with_and_without_warning() {
    let s = session(
        "ses_e31688286ffeA2b3C4d5E6f7G8",
        SessionState::Succeeded,
        "worker",
        2,
        "hello",
    );
    insta::assert_snapshot!(
        "rename_warning",
        renamed(
            &s,
            Some("the title breaks the LANE/agent: task convention: missing \": \""),
            NOW
        )
    );
}

#[test]
fn policy_and_instructions() {
    let env = FakeEnv::new()
        .with_home("/home/u")
        .with_dir("/home/u/proj/.git")
        .with_file("/home/u/proj/.claude/sensitive", "")
        .with_file(
            "/home/u/proj/.claude/opencode-bridge-secrets.allow",
            "# fixtures\nAKIAZ7Q4M2KD8XW3PL6T\nre:sk_test_[A-Za-z0-9]+\nre:[\n",
        );
    let view = PolicyView::build(&env, Path::new("/home/u/proj"), None).unwrap();
    insta::assert_snapshot!("policy_sensitive", policy(&view));
    insta::assert_snapshot!("instructions_sensitive", instructions(&view));
    let env = FakeEnv::new().with_home("/home/u");
    let view = PolicyView::build(&env, Path::new("/home/u/x"), None).unwrap();
    insta::assert_snapshot!("instructions_blueprint", instructions(&view));
}

fn snapshot(id: u64, state: TaskState) -> TaskSnapshot {
    TaskSnapshot {
        id,
        state,
        agent: "librarian".into(),
        title: "DOCS/librarian: collect API notes".into(),
        cwd: PathBuf::from("/home/u/proj"),
        model: Some("fk/ok".into()),
        read_only: true,
        attempts: 1,
        elapsed: Duration::from_secs(185),
        started_at: SystemTime::UNIX_EPOCH,
        session_id: Some("ses_e31688286ffeA2b3C4d5E6f7G8".into()),
        pid: Some(4242),
        last_event_age: Some(Duration::from_secs(12)),
        quiet: false,
        failure: None,
        retry_in: None,
        provider_wait: None,
        provider_stall: None,
        tokens: TokenUsage {
            input: 12_000,
            output: 800,
            ..TokenUsage::default()
        },
        cost: 0.0,
        usage: None,
        attempt_usage: Vec::new(),
        tool_calls: 2,
        exit_code: None,
        opencode_version: Some("1.18.33".into()),
        label: None,
        sandbox: Some("confined (Landlock ABI 7)".into()),
        engine: "run".into(),
        continues: None,
        orphaned: false,
        other_bridge: None,
        lost: false,
        verify: None,
        schema_valid: None,
    }
}

#[test]
fn task_texts() {
    insta::assert_snapshot!(
        "started",
        tasks::started(&Started {
            id: 3,
            agent: "librarian",
            mode: "sensitive (from env OPENCODE_MODE)",
            tier: "easy",
            title: "docs: notes",
            cwd: "/home/u/proj",
            root: "/home/u",
            model: Some("fk/ok"),
            title_warning: Some("the title breaks the LANE/agent: task convention: missing \": \""),
            label: None,
            continues: None,
            engine: "run",
        })
    );
    insta::assert_snapshot!(
        "status_running",
        tasks::status(&snapshot(3, TaskState::Running))
    );
    let mut retrying = snapshot(4, TaskState::Retrying);
    retrying.failure = Some(Failure::new(
        FailureKind::RateLimit,
        "Rate limit reached for requests",
    ));
    retrying.retry_in = Some(Duration::from_secs(20));
    retrying.attempts = 2;
    insta::assert_snapshot!("status_retrying", tasks::status(&retrying));
    // A task on opencode 2 says which line ran it.
    let mut v2 = snapshot(6, TaskState::Succeeded);
    v2.engine = "serve".into();
    v2.opencode_version = Some("OpenCode 2.0 preview (lildax vlocal), v2 contract".into());
    insta::assert_snapshot!("status_opencode2", tasks::status(&v2));
    let mut failed = snapshot(5, TaskState::Failed);
    failed.failure = Some(Failure::new(
        FailureKind::ContextLength,
        "This model's maximum context length is 128000 tokens.",
    ));
    failed.exit_code = Some(1);
    let output = TaskOutput {
        snapshot: failed,
        text: Cut {
            text: "[… 12000 characters cut …]\nthe end of the notes".into(),
            total_chars: 12_020,
            truncated: true,
        },
        final_text: "the end of the notes".into(),
        tool_calls: vec![
            ToolCall {
                tool: "webfetch".into(),
                status: "completed".into(),
                title: Some("https://example.org/api".into()),
                error: None,
                ..Default::default()
            },
            ToolCall {
                tool: "read".into(),
                status: "error".into(),
                title: Some("/etc/hosts".into()),
                error: Some("The user rejected permission to use this specific tool call.".into()),
                ..Default::default()
            },
        ],
        stderr_tail: "! permission requested: external_directory (/etc/*); auto-rejecting".into(),
        malformed_lines: 0,
        unknown_events: 0,
        stdout_bytes_dropped: 0,
        verify_output: None,
        output: None,
        changed_files: None,
        audit: Some("not audited: session ses_1 cannot be read: the store is locked".into()),
    };
    insta::assert_snapshot!("result_failed", tasks::result(&output));
    insta::assert_snapshot!(
        "cancel_done",
        tasks::cancelled(5, CancelOutcome::AlreadyFinished(TaskState::Failed)).unwrap()
    );
    insta::assert_snapshot!(
        "cancel_unknown",
        tasks::cancelled(9, CancelOutcome::NotFound).unwrap_err()
    );
    let mut remote = snapshot(2, TaskState::Running);
    remote.engine = "serve:devbox".into();
    let list = vec![snapshot(1, TaskState::Succeeded), remote];
    insta::assert_snapshot!("task_list", tasks::task_list(&list, 1, 6));
}

/// Texts of durable tasks: orphans, other bridges' tasks, labels, follow-ups, changed files,
/// waiting.
#[test]
fn durable_task_texts() {
    let mut orphan = snapshot(12, TaskState::Running);
    orphan.orphaned = true;
    orphan.label = Some("night-batch".into());
    orphan.last_event_age = None;
    insta::assert_snapshot!("status_orphaned", tasks::status(&orphan));
    let mut elsewhere = snapshot(13, TaskState::Running);
    elsewhere.other_bridge = Some(777);
    elsewhere.continues = Some("ses_e31688286ffeA2b3C4d5E6f7G8".into());
    insta::assert_snapshot!(
        "list_durable",
        tasks::task_list(&[orphan.clone(), elsewhere.clone()], 2, 6)
    );
    insta::assert_snapshot!(
        "cancel_other_bridge",
        tasks::cancelled(13, CancelOutcome::OtherBridge { pid: 777 }).unwrap_err()
    );
    let mut done = snapshot(14, TaskState::Succeeded);
    done.agent = "fixer".into();
    done.read_only = false;
    done.pid = None;
    done.last_event_age = None;
    done.verify = Some(run_supervisor::verify::VerifyOutcome {
        passed: true,
        exit: Some(0),
        signal: None,
        runs: 1,
    });
    let output = TaskOutput {
        snapshot: done.clone(),
        text: Cut {
            text: "Added the parser and its tests.".into(),
            total_chars: 31,
            truncated: false,
        },
        final_text: "Added the parser and its tests.".into(),
        tool_calls: vec![],
        stderr_tail: String::new(),
        malformed_lines: 0,
        unknown_events: 0,
        stdout_bytes_dropped: 0,
        verify_output: Some("test result: ok. 12 passed".into()),
        output: None,
        changed_files: Some(ChangedFiles {
            source: ChangeSource::Git,
            files: vec![
                FileChange {
                    path: "src/parse.rs".into(),
                    added: Some(120),
                    removed: Some(4),
                    status: "modified".into(),
                },
                FileChange {
                    path: "assets/logo.png".into(),
                    added: None,
                    removed: None,
                    status: "added".into(),
                },
            ],
        }),
        audit: Some("audited: agent fixer, model fk/ok in 3 assistant messages".into()),
    };
    insta::assert_snapshot!("result_changed_files", tasks::result(&output));
    // An MCP task's status message carries the verify outcome.
    insta::assert_snapshot!("status_line_verified", tasks::status_line(&done));
    // A verify that still failed after its follow-up: the line, the failure, and its output.
    let mut unverified = output.clone();
    unverified.snapshot.state = TaskState::Failed;
    unverified.snapshot.verify = Some(run_supervisor::verify::VerifyOutcome {
        passed: false,
        exit: Some(101),
        signal: None,
        runs: 2,
    });
    unverified.snapshot.failure = Some(Failure::with_advice(
        FailureKind::Verify,
        "verify failed (exit 101) after 2 runs: `cargo test -q`; its output ends: error: test failed",
        FailureKind::Verify.advice(),
    ));
    unverified.verify_output = Some("test parse::empty ... FAILED\nerror: test failed".into());
    insta::assert_snapshot!("result_verify_failed", tasks::result(&unverified));
    // A run the kernel fence refused twice (the write tool outside the project) and once on a
    // read; an ordinary tool error is not counted.
    let call = |tool: &str, error: Option<&str>| run_supervisor::ToolCall {
        tool: tool.into(),
        status: if error.is_some() {
            "error"
        } else {
            "completed"
        }
        .into(),
        title: None,
        error: error.map(Into::into),
        ..Default::default()
    };
    let mut fenced = output.clone();
    fenced.changed_files = None;
    fenced.tool_calls = vec![
        call(
            "write",
            Some("PermissionDenied: FileSystem.writeFile (/home/u/other/x)"),
        ),
        call(
            "write",
            Some("PermissionDenied: FileSystem.writeFile (/tmp/x)"),
        ),
        call(
            "read",
            Some("PermissionDenied: FileSystem.open (/home/u/.ssh/id_ed25519)"),
        ),
        call("edit", Some("oldString not found in content")),
        call("bash", None),
    ];
    insta::assert_snapshot!("result_fence_refusals", tasks::result(&fenced));
    assert_eq!(tasks::fence_refusals(&fenced.tool_calls[3..]), None);
    use bridge_render::tasks::{SessionHolder, follow_up_refused};
    let holders = [
        SessionHolder::OwnTask { id: 3 },
        SessionHolder::OtherBridge { id: 4, pid: 777 },
        SessionHolder::Orphan {
            id: 5,
            pid: Some(888),
        },
        SessionHolder::Process {
            kind: "tui".into(),
            pid: 999,
        },
        SessionHolder::Process {
            kind: "run".into(),
            pid: 1000,
        },
        SessionHolder::Working,
    ];
    let refusals: Vec<String> = holders
        .iter()
        .map(|h| follow_up_refused("ses_busy", h))
        .collect();
    insta::assert_snapshot!("follow_up_refused", refusals.join("\n"));
    use bridge_render::tasks::{ReadOnlyRefusal, read_only_refused, read_only_unchecked};
    let read_only = [
        ReadOnlyRefusal::Undone {
            permission: "b*sh".into(),
            pattern: "echo *".into(),
            action: "allow".into(),
            source: Some("/home/u/proj/opencode.json".into()),
        },
        ReadOnlyRefusal::Undone {
            permission: "scribble".into(),
            pattern: "*".into(),
            action: "ask".into(),
            source: None,
        },
        ReadOnlyRefusal::ShadowedTool {
            tool: "read".into(),
        },
        ReadOnlyRefusal::Missing,
        ReadOnlyRefusal::NotAsked {
            why: "opencode could not be asked: `opencode serve` ended before it listened".into(),
        },
    ];
    let mut texts: Vec<String> = read_only
        .iter()
        .map(|r| read_only_refused("oracle", r))
        .collect();
    texts.push(read_only_unchecked("OPENCODE_BRIDGE_ROSTER=files"));
    insta::assert_snapshot!("read_only_refused", texts.join("\n"));
    let mut failed = snapshot(15, TaskState::Failed);
    failed.failure = Some(Failure::new(FailureKind::Quota, "insufficient_quota"));
    let report = WaitReport {
        finished: vec![done, failed],
        running: vec![orphan],
        unknown: vec![99],
        satisfied: true,
    };
    insta::assert_snapshot!("wait_any", tasks::waited(&report, false, 50));
    let timed_out = WaitReport {
        satisfied: false,
        ..report
    };
    insta::assert_snapshot!("wait_all_timed_out", tasks::waited(&timed_out, true, 50));
    insta::assert_snapshot!(
        "started_follow_up",
        tasks::started(&Started {
            id: 16,
            agent: "fixer",
            mode: "blueprint (default)",
            tier: "medium",
            title: "PROJ/fixer: add the parser",
            cwd: "/home/u/proj",
            root: "/home/u",
            model: None,
            title_warning: None,
            label: Some("parser"),
            continues: Some("ses_e31688286ffeA2b3C4d5E6f7G8"),
            engine: "serve:devbox",
        })
    );
    insta::assert_snapshot!("task_list_empty", tasks::task_list(&[], 0, 6));
}

#[test]
fn process_table() {
    let p = |pid, kind, agent: Option<&str>, title: Option<&str>, task| OpencodeProcess {
        pid,
        ppid: 1,
        kind,
        elapsed: Duration::from_secs(pid as u64),
        agent: agent.map(Into::into),
        title: title.map(Into::into),
        model: None,
        cwd: Some(PathBuf::from("/home/u/Github/project-a")),
        session_id: None,
        task_id: task,
        bridge_server: None,
        cmdline: vec![],
    };
    let procs = vec![
        p(
            4242,
            ProcessKind::Run,
            Some("worker"),
            Some("BETA/worker: rename api_key"),
            Some(2),
        ),
        p(77, ProcessKind::Tui, None, None, None),
        p(9000, ProcessKind::Serve, None, None, None),
        OpencodeProcess {
            bridge_server: Some(WarmServer {
                tasks: vec![3, 5],
                idle: Duration::ZERO,
                held: true,
            }),
            ..p(9100, ProcessKind::Serve, None, None, None)
        },
        OpencodeProcess {
            bridge_server: Some(WarmServer {
                tasks: vec![],
                idle: Duration::from_secs(150),
                held: true,
            }),
            ..p(9200, ProcessKind::Serve, None, None, None)
        },
        OpencodeProcess {
            bridge_server: Some(WarmServer {
                tasks: vec![7],
                idle: Duration::ZERO,
                held: false,
            }),
            ..p(9300, ProcessKind::Serve, None, None, None)
        },
        OpencodeProcess {
            bridge_server: Some(WarmServer {
                tasks: vec![],
                idle: Duration::from_secs(40),
                held: false,
            }),
            ..p(9400, ProcessKind::Serve, None, None, None)
        },
    ];
    insta::assert_snapshot!("processes", tasks::processes(&procs));
    insta::assert_snapshot!("processes_none", tasks::processes(&[]));
}

#[test]
fn root_check_texts() {
    use bridge_render::root_check;
    let root = Path::new("/home/u/projects");
    let texts = [
        root_check::policy_outside_root(Path::new("/home/u/Downloads/evil"), root),
        root_check::path_too_long("cwd", 5_000_001),
        root_check::rename_outside_root("ses_e3188e02fffe1a2b3c4d5e6f7g", "/tmp/evil", root),
        root_check::rename_outside_root("ses_e3188e02fffe1a2b3c4d5e6f7g", "", root),
        root_check::secret_replaced("lane"),
        root_check::title_empty(),
    ];
    insta::assert_snapshot!("root_check", texts.join("\n"));
}

#[test]
fn stop_hook_reason_names_running_and_unread_tasks() {
    use run_supervisor::registry::Unsettled;
    let t = |id, state, running| Unsettled {
        id,
        agent: "worker".into(),
        title: format!("DOCS/worker: part {id}"),
        state,
        running,
    };
    insta::assert_snapshot!(bridge_render::hook::stop_reason(&[
        t(3, TaskState::Running, true),
        t(4, TaskState::Succeeded, false),
        t(5, TaskState::Failed, false),
        t(6, TaskState::TimedOut, false),
    ]));
    insta::assert_snapshot!(bridge_render::hook::bad_input(
        "expected value at line 1 column 1"
    ));
}

#[test]
fn usage_texts() {
    use bridge_render::usage;
    use run_supervisor::usage::budget::{Standing, Verdict, Window};
    use run_supervisor::usage::ledger::{self, Row};
    use run_supervisor::usage::{CostBasis, Usage};
    let sonnet = "anthropic/claude-sonnet-4-5";
    let u = |cost: f64, basis: CostBasis, eq: Option<f64>| Usage {
        tokens: TokenUsage {
            input: 12_000,
            output: 800,
            reasoning: 200,
            cache_read: 3_000,
            cache_write: 0,
        },
        cost,
        basis,
        claude_equivalent: eq,
    };
    let lines = [
        usage::usage_line(
            Some(&u(0.0123, CostBasis::Reported, Some(0.06))),
            Some("fk/cheap"),
            sonnet,
        ),
        usage::usage_line(
            Some(&u(0.004, CostBasis::Estimated, Some(0.06))),
            Some("fk/cheap"),
            sonnet,
        ),
        usage::usage_line(
            Some(&u(0.0, CostBasis::Free, Some(0.06))),
            Some("opencode/free"),
            sonnet,
        ),
        usage::usage_line(Some(&u(0.0, CostBasis::Unknown, Some(0.06))), None, sonnet),
        usage::usage_line(
            Some(&u(0.5, CostBasis::Reported, None)),
            Some("x/y"),
            "nobody/none",
        ),
        usage::usage_line(None, None, sonnet),
    ];
    insta::assert_snapshot!("usage_lines", lines.concat());
    let day = Standing {
        window: Window::Day,
        project: None,
        spent: 4.2,
        reserved: 0.3,
        budget: 5.0,
        resets_ms: 1_795_996_800_000,
    };
    let month = Standing {
        window: Window::Month,
        project: Some(PathBuf::from("/home/u/projects/a")),
        spent: 12.0,
        reserved: 0.0,
        budget: 50.0,
        resets_ms: 1_798_761_600_000,
    };
    let budgets = [
        usage::budget_warning(&Verdict::Warn(vec![day.clone()])),
        usage::budget_lines(&[day, month], 4.2),
        usage::budget_lines(&[], 0.37),
    ];
    insta::assert_snapshot!("usage_budgets", budgets.concat());
    let known = run_supervisor::usage::Pricing::default();
    let unknown =
        run_supervisor::usage::Pricing::new(known.prices().clone(), "anthropic/claude-nothing-9");
    insta::assert_snapshot!(
        "usage_prices",
        usage::prices_line(&known) + &usage::prices_line(&unknown)
    );
    let row = |task: u64, at_ms: u64, agent: &str, cost: f64, eq: f64| Row {
        v: 1,
        at_ms,
        task,
        attempt: 1,
        agent: agent.into(),
        model: Some("fk/cheap".into()),
        runner: "opencode".into(),
        engine: None,
        lane: "API".into(),
        project: "/p".into(),
        usage: Usage {
            claude_equivalent: Some(eq),
            ..u(cost, CostBasis::Reported, Some(eq))
        },
    };
    let day_ms = 86_400_000;
    let l = ledger::Ledger {
        rows: vec![
            row(1, 20_000 * day_ms, "explore", 0.02, 0.30),
            row(2, 20_000 * day_ms + 5, "worker", 0.10, 0.90),
            row(3, 20_001 * day_ms, "worker", 0.05, 0.40),
        ],
        unreadable: 0,
    };
    let sonnet_price = run_supervisor::usage::Price {
        input: 3.0,
        output: 15.0,
        cache_read: Some(0.3),
        cache_write: Some(3.75),
    };
    let s = ledger::summarize(&l, None, Some(sonnet_price));
    insta::assert_snapshot!("usage_report", usage::usage_report(&s, "all time", sonnet));
    // A compare model without a price: unknown, never $0 or a negative saving.
    let s = ledger::summarize(&l, None, None);
    insta::assert_snapshot!(
        "usage_report_unpriced",
        usage::usage_report(&s, "all time", "anthropic/claude-nothing-9")
    );
    insta::assert_snapshot!(
        "usage_report_empty",
        usage::usage_report(
            &ledger::summarize(&ledger::Ledger::default(), Some(0), Some(sonnet_price)),
            "since 1970-01-01",
            sonnet
        )
    );
}

#[test]
fn numeric_variable_out_of_range() {
    let e = "OPENCODE_BRIDGE_TIMEOUT_MIN=18446744073709551615 is out of range: give a whole number from 1 to 10080 (minutes)";
    insta::assert_snapshot!(
        "env_out_of_range",
        format!(
            "{}\n{}",
            tasks::env_refusal(e),
            tasks::env_error_at_start(e)
        )
    );
}

#[test]
fn provider_wait_and_its_end() {
    use run_supervisor::quota::{ProviderWait, Reset};
    use std::time::UNIX_EPOCH;
    let now = UNIX_EPOCH + Duration::from_secs(1_893_456_000);
    let wait = |secs: u64, message: &str| ProviderWait {
        attempt: 1,
        message: message.into(),
        next: Reset::after(now, Duration::from_secs(secs)),
    };
    let huge = ProviderWait {
        next: Reset::at_epoch_secs(u64::MAX, now),
        ..wait(0, "Rate limit reached for requests")
    };
    let quota = wait(
        3_600,
        "You exceeded your current quota, please check your plan and billing details.",
    );
    let ended = run_supervisor::classify::provider_limit(&huge, false, now);
    insta::assert_snapshot!(
        "provider_wait",
        [
            tasks::provider_wait_line(&wait(90, "Rate limit reached for requests"), now),
            tasks::provider_wait_line(&huge, now),
            tasks::provider_wait_line(&quota, now),
            format!(
                "{}: {}\nadvice: {}",
                ended.kind, ended.message, ended.advice
            ),
        ]
        .join("\n")
    );
}

/// An `opencode run` held by a provider's refusals (read from its log): the status line, and
/// the failures at the time limit and past the bridge's longest wait.
#[test]
fn provider_stall_and_its_end() {
    use run_supervisor::quota::ProviderStall;
    use std::time::UNIX_EPOCH;
    let now = UNIX_EPOCH + Duration::from_secs(1_893_456_000);
    let stall = |held: u64, refusals: u32, message: &str| ProviderStall {
        since: now - Duration::from_secs(held),
        refusals,
        message: message.into(),
    };
    let rate = stall(75, 2, "Rate limit reached for requests");
    let quota = stall(
        400,
        1,
        "You exceeded your current quota, please check your plan and billing details.",
    );
    let at_time_limit = run_supervisor::classify::provider_stall(&rate, true, now);
    let too_long = run_supervisor::classify::provider_stall(&quota, false, now);
    insta::assert_snapshot!(
        "provider_stall",
        [
            tasks::provider_stall_line(&rate, now),
            tasks::provider_stall_line(&quota, now),
            format!(
                "{}: {}\nadvice: {}",
                at_time_limit.kind, at_time_limit.message, at_time_limit.advice
            ),
            format!(
                "{}: {}\nadvice: {}",
                too_long.kind, too_long.message, too_long.advice
            ),
        ]
        .join("\n")
    );
}

#[test]
fn apply_refused_for_protected_paths() {
    let e = run_supervisor::worktree::ApplyError::Protected(vec![
        ".mcp.json".into(),
        ".vscode/tasks.json".into(),
    ]);
    insta::assert_snapshot!(bridge_render::isolation::conflict(12, &e));
}
