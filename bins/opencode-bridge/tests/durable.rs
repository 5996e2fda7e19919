//! Durable tasks through the real binary: a bridge killed with SIGKILL leaves an orphan that a
//! restarted bridge lists, shows and cancels; a clean stop leaves it running the same way (and
//! records it cancelled with `OPENCODE_BRIDGE_ON_EXIT=cancel`); waiting,
//! labels and progress notifications. `live_…` tests use the real opencode and our fake LLM:
//! waiting on real runs, a follow-up in an existing session, the files a real run wrote, and
//! a real run outliving a killed bridge; on the serve engine (issue 32) a turn outliving a
//! killed and a cleanly stopped bridge and its answer read by the next one, the cancel mode, a
//! cancel after adoption, a server killed while no bridge runs, and nothing left once idle.

use crate::common;

use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use common::{Server, World, fake_opencode, hung_http_server};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn group_alive(pgid: i32) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok()
}

fn fake_env(world: &World) -> Vec<(&'static str, String)> {
    vec![
        (
            "OPENCODE_BIN",
            fake_opencode(world).to_string_lossy().into_owned(),
        ),
        ("OPENCODE_BRIDGE_KILL_GRACE_MS", "500".into()),
    ]
}

/// A tools/call carrying a progressToken: the response and the progress notifications that
/// came before it.
fn call_with_progress(
    server: &mut Server,
    id: i64,
    tool: &str,
    args: Value,
    token: &str,
) -> (Value, Vec<Value>) {
    server.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": {"progressToken": token}}}));
    let mut notes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = server
            .recv_within(left)
            .unwrap_or_else(|| panic!("no response to {tool}; stderr:\n{}", server.stderr()));
        if msg.get("id") == Some(&json!(id)) {
            return (msg, notes);
        }
        if msg["method"] == "notifications/progress" {
            notes.push(msg["params"].clone());
        }
    }
}

fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {response}"))
        .to_owned()
}

/// Progress values of one token rise strictly.
fn assert_monotonic(notes: &[Value], token: &str) {
    let values: Vec<f64> = notes
        .iter()
        .filter(|n| n["progressToken"] == token)
        .map(|n| n["progress"].as_f64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "not increasing: {values:?}"
    );
}

/// No progress notification arrives once the call has answered.
fn assert_no_more_progress(server: &mut Server, within: Duration) {
    let deadline = Instant::now() + within;
    while let Some(msg) = server.recv_within(deadline.saturating_duration_since(Instant::now())) {
        assert_ne!(
            msg["method"], "notifications/progress",
            "progress after the call ended: {msg}"
        );
    }
}

#[test]
fn a_bridge_killed_with_sigkill_leaves_an_orphan_that_a_restarted_bridge_cancels() {
    let world = World::new();
    let mut first = Server::start(&world, &fake_env(&world));
    first.initialize();
    let (text, is_error) = first.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Summarise the changelog", "label": "night"}),
    );
    assert!(!is_error, "{text}");
    assert!(text.starts_with("started task 1:"), "{text}");
    let run = wait_for("the run's pid", Duration::from_secs(20), || {
        read_pid(&world.path("pids.group"))
    });
    // The registry knows the run's pid and session before we pull the plug.
    let record = world.path("xdg/state/opencode-bridge/tasks/1/task.json");
    wait_for("the run recorded", Duration::from_secs(10), || {
        std::fs::read_to_string(&record).ok().filter(|t| {
            t.contains(&format!("\"pid\": {run}")) && t.contains("ses_fakefakefakefakefake0001")
        })
    });
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert!(group_alive(run), "the run outlives its bridge");

    let mut second = Server::start(&world, &fake_env(&world));
    second.initialize();
    let (list, _) = second.call_text(2, "opencode_list", json!({}));
    assert!(
        list.contains(&format!("orphaned (pid {run}, running for")),
        "{list}"
    );
    assert!(
        list.contains("[night] ROOT/worker: Summarise the changelog"),
        "{list}"
    );
    let (status, _) = second.call_text(3, "opencode_status", json!({"id": "1"}));
    assert!(
        status.contains(&format!("task 1  orphaned (pid {run}")),
        "{status}"
    );
    assert!(
        status.contains("session: ses_fakefakefakefakefake0001"),
        "{status}"
    );
    assert!(status.contains("opencode_cancel id=1 stops it"), "{status}");
    let (result, is_error) = second.call_text(4, "opencode_result", json!({"id": "1"}));
    assert!(!is_error && result.contains("orphaned"), "{result}");
    let (labelled, _) = second.call_text(5, "opencode_list", json!({"label": "night"}));
    assert!(labelled.starts_with("1 delegated task(s)"), "{labelled}");
    let (other, _) = second.call_text(6, "opencode_list", json!({"label": "day"}));
    assert!(other.starts_with("0 delegated task(s)"), "{other}");

    let (cancel, is_error) = second.call_text(7, "opencode_cancel", json!({"id": "1"}));
    assert!(!is_error, "{cancel}");
    assert!(cancel.starts_with("task 1 cancelled"), "{cancel}");
    wait_for("the orphan's group gone", Duration::from_secs(10), || {
        (!group_alive(run)).then_some(())
    });
    let (status, _) = second.call_text(8, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  cancelled"), "{status}");
    // New tasks go on from the registry's ids.
    let (text, _) = second.call_text(
        9,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Summarise the readme"}),
    );
    assert!(text.starts_with("started task 2:"), "{text}");
}

/// By default a clean stop leaves a running task running: its run goes on in its own process
/// group, and the next bridge shows it (an orphan with its pid) and can cancel it.
#[test]
fn a_clean_stop_leaves_the_run_running_for_the_next_bridge() {
    let world = World::new();
    let mut env = fake_env(&world);
    env.push(("OPENCODE_BRIDGE_ON_EXIT", "leave".into()));
    let mut first = Server::start(&world, &env);
    first.initialize();
    let (text, _) = first.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Summarise the changelog"}),
    );
    assert!(text.starts_with("started task 1:"), "{text}");
    let run = wait_for("the run's pid", Duration::from_secs(20), || {
        read_pid(&world.path("pids.group"))
    });
    first.close_stdin();
    let status = first
        .wait_exit(Duration::from_secs(20))
        .expect("the bridge exits");
    assert!(status.success(), "{status:?}\n{}", first.stderr());
    assert!(group_alive(run), "the run was stopped with the bridge");
    drop(first);
    let mut second = Server::start(&world, &fake_env(&world));
    second.initialize();
    let (status, _) = second.call_text(2, "opencode_status", json!({"id": "1"}));
    assert!(
        status.contains(&format!("task 1  orphaned (pid {run}")),
        "{status}"
    );
    let (cancel, is_error) = second.call_text(3, "opencode_cancel", json!({"id": "1"}));
    assert!(
        !is_error && cancel.starts_with("task 1 cancelled"),
        "{cancel}"
    );
    wait_for("the run gone", Duration::from_secs(15), || {
        (!group_alive(run)).then_some(())
    });
}

/// With `OPENCODE_BRIDGE_ON_EXIT=cancel` a clean stop cancels the running task and records it.
#[test]
fn in_the_cancel_mode_a_clean_stop_records_the_outcome_for_the_next_bridge() {
    let world = World::new();
    let mut env = fake_env(&world);
    env.push(("OPENCODE_BRIDGE_ON_EXIT", "cancel".into()));
    let mut first = Server::start(&world, &env);
    first.initialize();
    let (text, _) = first.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Summarise the changelog"}),
    );
    assert!(text.starts_with("started task 1:"), "{text}");
    let run = wait_for("the run's pid", Duration::from_secs(20), || {
        read_pid(&world.path("pids.group"))
    });
    first.close_stdin();
    assert!(first.wait_exit(Duration::from_secs(20)).is_some());
    assert!(!group_alive(run));
    drop(first);
    let mut second = Server::start(&world, &fake_env(&world));
    second.initialize();
    let (status, _) = second.call_text(2, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  cancelled"), "{status}");
    assert!(
        status.contains("stopped because the bridge shut down"),
        "{status}"
    );
    let (wait, _) = second.call_text(3, "opencode_wait", json!({"ids": ["1", "5"]}));
    assert!(wait.starts_with("all 1 task(s) finished"), "{wait}");
    assert!(wait.contains("finished: task 1  cancelled"), "{wait}");
    assert!(wait.contains("unknown: task 5"), "{wait}");
}

#[test]
fn two_running_bridges_share_one_registry() {
    let world = World::new();
    let mut a = Server::start(&world, &fake_env(&world));
    a.initialize();
    let mut b = Server::start(&world, &fake_env(&world));
    b.initialize();
    let mut started = Vec::new();
    for i in 0..4 {
        let server = if i % 2 == 0 { &mut a } else { &mut b };
        let (t, is_error) = server.call_text(
            i + 1,
            "opencode_start",
            json!({"tier": "easy", "prompt": format!("Summarise part {i}")}),
        );
        assert!(!is_error, "{t}");
        started.push(t.lines().next().unwrap().to_owned());
    }
    for (i, line) in started.iter().enumerate() {
        assert!(
            line.starts_with(&format!("started task {}:", i + 1)),
            "ids are handed out once across both bridges: {started:?}"
        );
    }
    let a_pid = a.child.id();
    // b sees a's task 1 running in a, and leaves it alone.
    let status = wait_for("task 1 running", Duration::from_secs(20), || {
        let (s, _) = b.call_text(20, "opencode_status", json!({"id": "1"}));
        s.contains("running").then_some(s)
    });
    assert!(
        status.contains(&format!("running (in bridge pid {a_pid})")),
        "{status}"
    );
    let (refused, is_error) = b.call_text(21, "opencode_cancel", json!({"id": "1"}));
    assert!(is_error, "{refused}");
    assert!(
        refused.contains(&format!(
            "another bridge that is still running (pid {a_pid})"
        )),
        "{refused}"
    );
    let (list, _) = b.call_text(22, "opencode_list", json!({}));
    assert!(list.starts_with("4 delegated task(s)"), "{list}");
    let (t, _) = a.call_text(23, "opencode_cancel", json!({"id": "1"}));
    assert!(t.starts_with("task 1 cancelled"), "{t}");
    let (s, _) = b.call_text(24, "opencode_status", json!({"id": "1"}));
    assert!(s.starts_with("task 1  cancelled"), "{s}");
}

#[test]
fn finished_tasks_older_than_the_prune_age_leave_the_registry() {
    let world = World::new();
    let mut first = Server::start(&world, &fake_env(&world));
    first.initialize();
    let (t, _) = first.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Summarise the changelog"}),
    );
    assert!(t.starts_with("started task 1:"), "{t}");
    drop(first);
    let mut keep = Server::start(&world, &fake_env(&world));
    keep.initialize();
    let (list, _) = keep.call_text(2, "opencode_list", json!({}));
    assert!(list.starts_with("1 delegated task(s)"), "{list}");
    drop(keep);
    let mut env = fake_env(&world);
    env.push(("OPENCODE_BRIDGE_PRUNE_DAYS", "0".into()));
    let mut prune = Server::start(&world, &env);
    prune.initialize();
    let (list, _) = prune.call_text(3, "opencode_list", json!({}));
    assert!(list.starts_with("0 delegated task(s)"), "{list}");
    // Ids are still never reused.
    let (t, _) = prune.call_text(
        4,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Summarise the readme"}),
    );
    assert!(t.starts_with("started task 2:"), "{t}");
}

#[test]
fn start_and_wait_report_progress_only_while_the_call_runs() {
    let world = World::new();
    let mut server = Server::start(&world, &fake_env(&world));
    server.initialize();
    let (resp, notes) = call_with_progress(
        &mut server,
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Summarise the changelog"}),
        "start-1",
    );
    let text = text_of(&resp);
    assert!(text.starts_with("started task 1:"), "{text}");
    let messages: Vec<&str> = notes
        .iter()
        .map(|n| n["message"].as_str().unwrap_or(""))
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("opencode started (pid")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("session ses_fakefakefakefakefake0001")),
        "{messages:?}"
    );
    assert_monotonic(&notes, "start-1");
    assert_no_more_progress(&mut server, Duration::from_millis(1500));

    let started = Instant::now();
    let (resp, notes) = call_with_progress(
        &mut server,
        2,
        "opencode_wait",
        json!({"ids": ["1"], "mode": "all", "timeout_s": 7}),
        "wait-2",
    );
    let text = text_of(&resp);
    assert!(started.elapsed() >= Duration::from_secs(7));
    assert!(
        text.starts_with("waited 7s: 0 of 1 task(s) finished, 1 still running"),
        "{text}"
    );
    assert!(text.contains("running: task 1  running"), "{text}");
    assert!(!notes.is_empty(), "a progress report during the wait");
    assert!(
        notes[0]["message"]
            .as_str()
            .unwrap()
            .contains("0 of 1 task(s) finished"),
        "{notes:?}"
    );
    assert_monotonic(&notes, "wait-2");
    assert_no_more_progress(&mut server, Duration::from_millis(1500));
    // Without a token: no notification at all, and start returns at once.
    let (text, _) = server.call_text(3, "opencode_wait", json!({"ids": ["1"], "timeout_s": 1}));
    assert!(text.starts_with("waited 1s"), "{text}");
}

#[test]
fn a_slow_session_scan_reports_progress_until_it_answers() {
    let world = World::new();
    // A service that never answers: the listing runs until its call timeout.
    let (port, _hung) = hung_http_server();
    let mut server = Server::start(
        &world,
        &[
            (
                "OPENCODE_BRIDGE_SERVER_URL",
                format!("http://127.0.0.1:{port}"),
            ),
            ("OPENCODE_BRIDGE_API_TIMEOUT_MS", "4500".into()),
        ],
    );
    server.initialize();
    let (resp, notes) =
        call_with_progress(&mut server, 1, "opencode_sessions", json!({}), "scan-1");
    assert!(resp.get("result").is_some(), "{resp}");
    assert!(notes.len() >= 2, "a report every 2 s: {notes:?}");
    assert!(
        notes[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("reading sessions ("),
        "{notes:?}"
    );
    assert_monotonic(&notes, "scan-1");
    assert_no_more_progress(&mut server, Duration::from_millis(2500));
}

// ---- live: the real opencode 1.18.33 and our fake LLM ----

struct Live {
    llm: FakeLlm,
    sb: OpencodeSandbox,
    world: World,
    oc: PathBuf,
}

impl Live {
    fn new(oc: PathBuf) -> Live {
        let llm = FakeLlm::start().unwrap();
        let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
        Live {
            llm,
            sb,
            world: World::new(),
            oc,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = common::sandbox_env_for_bridge(&self.sb);
        env.push(("OPENCODE_BIN", self.oc.to_string_lossy().into_owned()));
        env.push((
            "OPENCODE_BRIDGE_ROOT",
            self.sb.project_dir().to_string_lossy().into_owned(),
        ));
        env.push(("OPENCODE_BRIDGE_MODEL", "fk/ok".into()));
        env.push(("OPENCODE_BRIDGE_KILL_GRACE_MS", "2000".into()));
        env
    }

    fn server(&self) -> Server {
        let mut s = Server::start_in(&self.world, &self.env(), self.sb.project_dir());
        s.initialize();
        s
    }

    /// A bridge on the run engine: its tasks are `opencode run` processes, which outlive a
    /// killed bridge (a served task's turn lives in the warm server instead).
    fn run_server(&self) -> Server {
        let mut env = self.env();
        env.push(("OPENCODE_BRIDGE_ENGINE", "run".into()));
        let mut s = Server::start_in(&self.world, &env, self.sb.project_dir());
        s.initialize();
        s
    }
}

fn session_of(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .filter(|s| s.starts_with("ses_"))
        .unwrap_or_else(|| panic!("no session in {status}"))
        .to_owned()
}

#[test]
fn live_wait_any_then_all_over_real_runs() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    live.llm.set_slow_secs(6);
    let mut server = live.server();
    let (a, _) = server.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hello", "model": "fk/ok"}),
    );
    assert!(a.starts_with("started task 1:"), "{a}");
    let (b, _) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hello slowly", "model": "fk/slow"}),
    );
    assert!(b.starts_with("started task 2:"), "{b}");
    let mut any = String::new();
    for i in 0..6 {
        let (t, _) = server.call_text(
            10 + i,
            "opencode_wait",
            json!({"ids": ["1", "2"], "timeout_s": 55}),
        );
        any = t;
        if !any.starts_with("waited") {
            break;
        }
    }
    assert!(
        any.starts_with("1 of 2 task(s) finished; 1 still running")
            || any.starts_with("all 2 task(s) finished"),
        "{any}"
    );
    assert!(any.contains("finished: task 1  succeeded"), "{any}");
    let mut all = String::new();
    for i in 0..6 {
        let (t, _) = server.call_text(
            20 + i,
            "opencode_wait",
            json!({"ids": ["1", "2"], "mode": "all", "timeout_s": 55}),
        );
        all = t;
        if !all.starts_with("waited") {
            break;
        }
    }
    assert!(all.starts_with("all 2 task(s) finished"), "{all}");
    assert!(all.contains("finished: task 1  succeeded"), "{all}");
    assert!(all.contains("finished: task 2  succeeded"), "{all}");
}

#[test]
fn live_a_follow_up_continues_the_session_and_an_edit_lists_its_files() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    let proj = live.sb.project_dir().to_path_buf();
    // A git tree with one commit: the task's write shows up as a change.
    bridge_testkit::git_repo(&proj, &[("README.md", "# demo\n")]);
    let head = std::fs::read_to_string(proj.join(".git/HEAD")).unwrap();

    let mut server = live.server();
    let mut next = 100;
    let (t, _) = server.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "First question: alpha", "label": "conv"}),
    );
    assert!(t.starts_with("started task 1:"), "{t}");
    let first = common::until_ended(&mut server, "1", &mut next);
    assert!(first.contains("succeeded"), "{first}");
    let session = session_of(&first);
    let (t, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Second question: beta", "session": session}),
    );
    assert!(!is_error, "{t}");
    assert!(
        t.contains(&format!("follow-up in session {session}")),
        "{t}"
    );
    let second = common::until_ended(&mut server, "2", &mut next);
    assert!(second.contains("succeeded"), "{second}");
    assert_eq!(session_of(&second), session, "the session keeps its id");
    // The session now holds both exchanges, and the model saw the first one again.
    let (full, _) = server.call_text(
        3,
        "opencode_session_output",
        json!({"id": session, "mode": "full", "max_chars": 100000}),
    );
    assert!(full.contains("First question: alpha"), "{full}");
    assert!(full.contains("Second question: beta"), "{full}");
    let followed = live
        .llm
        .chat_requests("ok")
        .into_iter()
        .filter(|r| r.has_tools() && r.body.contains("Second question: beta"))
        .collect::<Vec<_>>();
    assert!(
        followed
            .iter()
            .any(|r| r.body.contains("First question: alpha")),
        "the follow-up request carries the earlier exchange"
    );

    // An editing agent writes a file through the real opencode: the result lists it.
    let (t, _) = server.call_text(
        4,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Write the greeting file", "model": "fk/toolwrite"}),
    );
    assert!(t.starts_with("started task 3:"), "{t}");
    let status = common::until_ended(&mut server, "3", &mut next);
    assert!(status.contains("succeeded"), "{status}");
    let (result, _) = server.call_text(5, "opencode_result", json!({"id": "3"}));
    assert!(
        result.contains("changed files (1, from git):\n  hello.txt +1 -0 (added)"),
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("hello.txt")).unwrap(),
        "hi from fake\n"
    );
    assert_eq!(
        std::fs::read_to_string(proj.join(".git/HEAD")).unwrap(),
        head,
        "nothing committed"
    );
    let (list, _) = server.call_text(6, "opencode_list", json!({"label": "conv"}));
    assert!(list.starts_with("1 delegated task(s)"), "{list}");
}

#[test]
fn live_a_real_run_outlives_a_killed_bridge_and_is_cancelled_after_restart() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    live.llm.set_slow_secs(300);
    let mut first = live.run_server();
    for id in 1..=2 {
        let (t, _) = first.call_text(
            id,
            "opencode_start",
            json!({"tier": "easy", "prompt": format!("Tell long story {id}"), "model": "fk/slow"}),
        );
        assert!(t.starts_with(&format!("started task {id}:")), "{t}");
    }
    // Running, with their sessions known: the model is streaming.
    let mut n = 10;
    let mut running = |id: &str| {
        wait_for("the run streaming", Duration::from_secs(120), || {
            n += 1;
            let (s, _) = first.call_text(n, "opencode_status", json!({"id": id}));
            (s.contains("session: ses_") && s.contains("\npid ")).then_some(s)
        })
    };
    let pid_of = |status: &str| -> i32 {
        status
            .lines()
            .find_map(|l| l.strip_prefix("pid "))
            .and_then(|l| l.split(',').next())
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {status}"))
    };
    let status = running("1");
    let (pid, session) = (pid_of(&status), session_of(&status));
    let status2 = running("2");
    let (pid2, session2) = (pid_of(&status2), session_of(&status2));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(group_alive(pid), "the real run outlives its bridge");
    // The second run dies too (as in a crash): its task is lost, not orphaned.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid2),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for("the second run gone", Duration::from_secs(10), || {
        (!group_alive(pid2)).then_some(())
    });

    let mut second = live.run_server();
    let (list, _) = second.call_text(2, "opencode_list", json!({}));
    assert!(list.contains(&format!("orphaned (pid {pid}")), "{list}");
    assert!(list.contains(&session), "{list}");
    let (procs, _) = second.call_text(5, "opencode_processes", json!({}));
    assert!(
        procs.contains(&format!("pid {pid}")) && procs.contains("[task 1]"),
        "the orphan's run is marked with its task: {procs}"
    );
    let (cancel, is_error) = second.call_text(3, "opencode_cancel", json!({"id": "1"}));
    assert!(
        !is_error && cancel.starts_with("task 1 cancelled"),
        "{cancel}"
    );
    wait_for("the run gone", Duration::from_secs(15), || {
        (!group_alive(pid)).then_some(())
    });
    let (status, _) = second.call_text(4, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  cancelled"), "{status}");
    assert!(status.contains(&session), "{status}");
    let (lost, _) = second.call_text(6, "opencode_status", json!({"id": "2"}));
    assert!(lost.starts_with("task 2  failed"), "{lost}");
    assert!(lost.contains("failure: exit: lost:"), "{lost}");
    assert!(
        lost.contains(&format!("its session {session2} is ")),
        "what the session says now: {lost}"
    );
}

/// The row of `session` in an `opencode_sessions` listing: its state column.
fn listed_state(listing: &str, session: &str) -> Option<String> {
    listing
        .lines()
        .find(|l| l.starts_with(session))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(str::to_owned)
}

/// Issue 16 item 4: the session id is learnt from the store before the run's first event
/// (opencode 1.18.33 prints it only with that event), and the session of a task the bridge
/// cancelled reads `interrupted` at once, not `running` until the stale rule.
#[test]
fn live_a_cancelled_run_s_session_is_interrupted_at_once_and_known_early() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    live.llm.set_slow_secs(300);
    let mut server = live.server();
    let model = std::env::var("LIVE_EARLY_MODEL").unwrap_or_else(|_| "fk/hang".into());
    let (t, _) = server.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Tell a very long story", "model": model}),
    );
    assert!(t.starts_with("started task 1:"), "{t}");
    let mut n = 10;
    // The session is in opencode's store (the model has not answered yet).
    let session = wait_for("the session in the store", Duration::from_secs(60), || {
        n += 1;
        let (s, _) = server.call_text(n, "opencode_sessions", json!({}));
        s.lines()
            .find(|l| l.starts_with("ses_"))
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_owned)
    });
    let (status, _) = server.call_text(2, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  running"), "{status}");
    assert_eq!(session_of(&status), session, "{status}");
    let (cancel, is_error) = server.call_text(3, "opencode_cancel", json!({"id": "1"}));
    assert!(
        !is_error && cancel.starts_with("task 1 cancelled"),
        "{cancel}"
    );
    let (list, _) = server.call_text(4, "opencode_sessions", json!({}));
    assert_eq!(
        listed_state(&list, &session).as_deref(),
        Some("interrupted"),
        "{list}"
    );
    let (status, _) = server.call_text(5, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  cancelled"), "{status}");
    assert_eq!(session_of(&status), session, "{status}");
}

/// Whether the process `pid` with start time `start` (from `/proc/<pid>/stat`, field 22) is
/// still running (not a zombie).
fn running(pid: i32, start: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let after = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields.first() != Some(&"Z") && fields.get(19).and_then(|s| s.parse().ok()) == Some(start)
}

/// The warm servers noted in the world's state directory: (pid, start time) of each.
fn noted(live: &Live) -> Vec<(i32, u64)> {
    let dir = live.world.path("xdg/state/opencode-bridge/serve");
    let mut found: Vec<(i32, u64)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| {
            let n: Value = serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?;
            Some((n["pid"].as_i64()? as i32, n["start_time"].as_u64()?))
        })
        .collect();
    found.sort();
    found
}

/// The processes of this test's world (the bridge passes its environment on to the servers it
/// starts and their watchers): pid and command line, the test itself left out.
fn ours(live: &Live) -> Vec<(i32, String)> {
    let marker = live.world.path("xdg/state").to_string_lossy().into_owned();
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| String::from_utf8_lossy(&env).contains(&marker))
        })
        .filter(|&pid| {
            // Zombies are not running anything.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        })
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            (pid, String::from_utf8_lossy(&cmd).replace('\0', " "))
        })
        .collect()
}

/// The test's own cleanup, should it fail half-way: the servers noted in its world are stopped
/// (a server left running is the behaviour under test, so nothing else would stop it).
struct StopLeftServers<'a>(&'a Live);

impl Drop for StopLeftServers<'_> {
    fn drop(&mut self) {
        for (pid, start) in noted(self.0) {
            if running(pid, start) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

impl Live {
    /// A bridge on the serve engine whose clean stop leaves its tasks running (the default),
    /// with `extra` variables.
    fn leaving(&self, extra: &[(&'static str, &str)]) -> Server {
        let mut env = self.env();
        env.push(("OPENCODE_BRIDGE_ON_EXIT", "leave".into()));
        env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        let mut s = Server::start_in(&self.world, &env, self.sb.project_dir());
        s.initialize();
        s
    }
}

/// Starts a slow served task on `bridge` and waits until its model streams (its session known).
fn start_slow(llm: &FakeLlm, bridge: &mut Server, n: &mut i64) -> String {
    *n += 1;
    let (t, _) = bridge.call_text(
        *n,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Tell a long story", "model": "fk/slow"}),
    );
    assert!(t.contains("engine: serve"), "{t}");
    let status = wait_for("the turn streaming", Duration::from_secs(120), || {
        *n += 1;
        let (s, _) = bridge.call_text(*n, "opencode_status", json!({"id": "1"}));
        (s.starts_with("task 1  running") && s.contains("session: ses_")).then_some(s)
    });
    // The session is known before its prompt is sent: wait until the model was asked, so the
    // turn runs on the server whatever happens to the bridge next.
    wait_for("the model asked", Duration::from_secs(60), || {
        llm.requests()
            .iter()
            .any(|r| {
                r.path.ends_with("/chat/completions")
                    && r.model().is_some_and(|m| m.starts_with("slow"))
            })
            .then_some(())
    });
    status
}

/// Issue 32: a slow served turn survives a `kill -9` of its bridge, then an EOF stop of the
/// bridge that adopted it; the next bridge shows it running, then its answer.
#[test]
fn live_serve_a_slow_turn_survives_kill_9_then_an_eof_stop_and_the_next_bridge_reports_it() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    let _cleanup = StopLeftServers(&live);
    // Long enough for two bridge lifetimes while the turn runs.
    live.llm.set_slow_secs(60);
    let mut n = 0;
    let mut first = live.leaving(&[]);
    let status = start_slow(&live.llm, &mut first, &mut n);
    let session = session_of(&status);
    let servers = noted(&live);
    assert_eq!(servers.len(), 1, "{servers:?}");
    let (pid, start) = servers[0];
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);
    assert!(
        running(pid, start),
        "the server outlives a SIGKILLed bridge"
    );

    // The next bridge adopts the task and the server: running, on that server.
    let mut second = live.leaving(&[]);
    let (status, _) = second.call_text(1, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  running"), "{status}");
    assert_eq!(session_of(&status), session, "{status}");
    let deadline = Instant::now() + Duration::from_secs(30);
    for k in 2.. {
        let (p, _) = second.call_text(k, "opencode_processes", json!({}));
        let held = p.lines().any(|l| {
            l.starts_with(&format!("pid {pid} "))
                && l.contains("[warm server held by this bridge: task 1]")
        });
        if held {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the adopted server is not shown held: {p}\n{}",
            second.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // It stops cleanly (stdin EOF), the turn still going: the task and the server stay.
    second.close_stdin();
    let exit = second
        .wait_exit(Duration::from_secs(30))
        .expect("the bridge exits");
    assert!(exit.success(), "{exit:?}\n{}", second.stderr());
    let said = second.stderr();
    drop(second);
    let serve_dir = live.world.path("xdg/state/opencode-bridge/serve");
    let log = std::fs::read_to_string(serve_dir.join(format!("{pid}.d/log"))).unwrap_or_default();
    let task = std::fs::read_to_string(
        live.world
            .path("xdg/state/opencode-bridge/tasks/1/task.json"),
    )
    .unwrap_or_default();
    assert!(
        running(pid, start),
        "the server outlives a clean stop with a turn on it:\n{said}\nlog: {log}\ntask: {task}\nfiles: {:?}",
        std::fs::read_dir(&serve_dir).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
    );

    let mut third = live.leaving(&[]);
    let (status, _) = third.call_text(1, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  running"), "{status}");
    let mut n = 10;
    let status = common::until_ended(&mut third, "1", &mut n);
    assert!(status.starts_with("task 1  succeeded"), "{status}");
    let (result, _) = third.call_text(99, "opencode_result", json!({"id": "1"}));
    assert!(result.contains("DONE"), "{result}");
    assert_eq!(session_of(&status), session, "{status}");
}

/// Issue 32: with `OPENCODE_BRIDGE_ON_EXIT=cancel` an EOF stop cancels the turn, and no server,
/// watcher or opencode process of the world is left.
#[test]
fn live_serve_in_the_cancel_mode_an_eof_stop_cancels_the_turn_and_leaves_no_process() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    let _cleanup = StopLeftServers(&live);
    live.llm.set_slow_secs(300);
    let mut n = 0;
    let mut env = live.env();
    env.push(("OPENCODE_BRIDGE_ON_EXIT", "cancel".into()));
    let mut first = Server::start_in(&live.world, &env, live.sb.project_dir());
    first.initialize();
    start_slow(&live.llm, &mut first, &mut n);
    let (pid, start) = noted(&live)[0];
    first.close_stdin();
    let exit = first
        .wait_exit(Duration::from_secs(60))
        .expect("the bridge exits");
    assert!(exit.success(), "{exit:?}\n{}", first.stderr());
    drop(first);
    assert!(
        !running(pid, start),
        "the server outlived a cancel-mode stop"
    );
    let left = wait_for("no process of ours", Duration::from_secs(10), || {
        let left = ours(&live);
        left.is_empty().then_some(left)
    });
    assert!(left.is_empty());
    assert!(noted(&live).is_empty());
    let mut second = live.server();
    let (status, _) = second.call_text(1, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  cancelled"), "{status}");
    assert!(
        status.contains("stopped because the bridge shut down"),
        "{status}"
    );
}

/// Issue 32: a turn adopted after its bridge was killed is cancelled by the adopting bridge: the
/// turn ends (the session is free for a follow-up), the task is recorded cancelled. The cancel
/// comes right after the bridge starts, so it can find the task not adopted yet, or adopted with
/// its attempt not begun: either way the turn on the server is aborted (before the fix, the task
/// was recorded cancelled, or said already ended, while its turn ran on and the follow-up queued
/// behind it).
#[test]
fn live_serve_a_cancel_after_adoption_ends_the_turn() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    let _cleanup = StopLeftServers(&live);
    live.llm.set_slow_secs(300);
    let mut n = 0;
    let mut first = live.leaving(&[]);
    let status = start_slow(&live.llm, &mut first, &mut n);
    let session = session_of(&status);
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);
    let mut second = live.leaving(&[]);
    let (status, _) = second.call_text(1, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  running"), "{status}");
    let (cancel, is_error) = second.call_text(2, "opencode_cancel", json!({"id": "1"}));
    assert!(
        !is_error && cancel.starts_with("task 1 cancelled"),
        "{cancel}"
    );
    let (status, _) = second.call_text(3, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  cancelled"), "{status}");
    // The session is free: a follow-up in it runs and answers.
    let (t, is_error) = second.call_text(
        4,
        "opencode_start",
        json!({"tier": "easy", "prompt": "And now briefly", "session": session, "model": "fk/ok"}),
    );
    assert!(!is_error, "{t}");
    let mut n = 10;
    let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        common::until_ended(&mut second, "2", &mut n)
    }));
    let status = ended.unwrap_or_else(|_| panic!("the bridge said:\n{}", second.stderr()));
    assert!(status.starts_with("task 2  succeeded"), "{status}");
}

/// Issue 32: a warm server killed while no bridge runs: the next bridge shows its task `lost`,
/// naming the server, with advice.
#[test]
fn live_serve_a_server_killed_while_no_bridge_runs_shows_its_task_lost() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    let _cleanup = StopLeftServers(&live);
    live.llm.set_slow_secs(300);
    let mut n = 0;
    let mut first = live.leaving(&[]);
    let status = start_slow(&live.llm, &mut first, &mut n);
    let session = session_of(&status);
    let (pid, start) = noted(&live)[0];
    first.close_stdin();
    assert!(first.wait_exit(Duration::from_secs(30)).is_some());
    drop(first);
    assert!(running(pid, start));
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for("the server gone", Duration::from_secs(10), || {
        (!running(pid, start)).then_some(())
    });
    let mut second = live.leaving(&[]);
    let (status, _) = second.call_text(1, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  failed"), "{status}");
    assert!(
        status.contains(&format!(
            "lost: the local opencode serve it ran on (pid {pid})"
        )),
        "{status}"
    );
    assert!(status.contains("opencode_session_output"), "{status}");
    assert_eq!(session_of(&status), session, "{status}");
    let bridge = second.child.id() as i32;
    let left = wait_for(
        "nothing of ours but the bridge",
        Duration::from_secs(10),
        || {
            let left: Vec<_> = ours(&live)
                .into_iter()
                .filter(|(p, _)| *p != bridge)
                .collect();
            left.is_empty().then_some(left)
        },
    );
    assert!(left.is_empty());
}

/// Issue 32: once idle, nothing of ours is left. A turn's server outlives its SIGKILLed bridge
/// while the turn runs; a bridge started meanwhile shares it and leaves it running; with no bridge at all, the
/// server's watcher stops it once it has had no turn for the idle time (here 6 s), and
/// no server, watcher or opencode process of the world remains.
#[test]
fn live_serve_once_idle_no_server_or_process_of_ours_is_left_behind() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    let _cleanup = StopLeftServers(&live);
    live.llm.set_slow_secs(15);
    let mut n = 0;
    // 6 s with no turn.
    let idle = [("OPENCODE_BRIDGE_SERVE_IDLE_MS", "6000")];
    let mut first = live.leaving(&idle);
    start_slow(&live.llm, &mut first, &mut n);
    let (pid, start) = noted(&live)[0];
    let watchers: Vec<_> = ours(&live)
        .into_iter()
        .filter(|(_, cmd)| cmd.contains("serve-watch"))
        .collect();
    assert_eq!(watchers.len(), 1, "one watcher per server: {watchers:?}");
    // Another bridge on the same state directory, while the first is alive, shares the
    // server (a task of the same kind runs on it), and leaves it running when it stops.
    let mut other = live.leaving(&idle);
    let (t, _) = other.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hello", "wait_s": 55}),
    );
    assert!(t.contains("engine: serve"), "{t}");
    assert!(t.contains("succeeded"), "{t}");
    assert_eq!(noted(&live), vec![(pid, start)], "one server, shared");
    let (procs, _) = other.call_text(2, "opencode_processes", json!({}));
    assert!(
        procs.lines().any(|l| l.starts_with(&format!("pid {pid} "))
            && l.contains("[warm server held by this bridge")),
        "{procs}"
    );
    other.close_stdin();
    assert!(other.wait_exit(Duration::from_secs(20)).is_some());
    drop(other);
    assert!(running(pid, start), "a live bridge's server was stopped");
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);
    assert!(
        running(pid, start),
        "the server outlives its bridge while the turn runs"
    );
    // No bridge runs now: the turn ends, and 6 s later the watcher stops the server.
    // (The server itself is waited for too: the watcher may be gone a moment before it.)
    let left = wait_for("nothing of ours left", Duration::from_secs(120), || {
        let left = ours(&live);
        (left.is_empty() && !running(pid, start)).then_some(left)
    });
    assert!(left.is_empty());
    assert!(noted(&live).is_empty(), "its note goes with it");
    let files: Vec<PathBuf> = std::fs::read_dir(live.world.path("xdg/state/opencode-bridge/serve"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(files.is_empty(), "{files:?}");
}

/// Issue 34: a served turn adopted after its bridge was killed still gets the caller's checks
/// when it ends: the adopting bridge runs the verify command (which fails here, no retry), and
/// the task fails with kind `verify` and the command's output.
#[test]
fn live_serve_an_adopted_turn_runs_its_verify_command_when_it_ends() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    let _cleanup = StopLeftServers(&live);
    live.llm.set_slow_secs(20);
    let mut first = live.leaving(&[]);
    let (t, _) = first.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Tell a long story", "model": "fk/slow",
               "verify": "echo MARK-ADOPTED-VERIFY; exit 3", "verify_retries": 0}),
    );
    assert!(t.contains("engine: serve"), "{t}");
    let mut n = 1;
    wait_for("the model asked", Duration::from_secs(120), || {
        live.llm
            .requests()
            .iter()
            .any(|r| {
                r.path.ends_with("/chat/completions")
                    && r.model().is_some_and(|m| m.starts_with("slow"))
            })
            .then_some(())
    });
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);
    let mut second = live.leaving(&[]);
    n += 1;
    let (status, _) = second.call_text(n, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  running"), "{status}");
    let status = common::until_ended(&mut second, "1", &mut n);
    assert!(status.starts_with("task 1  failed"), "{status}");
    assert!(status.contains("failure: verify"), "{status}");
    n += 1;
    let (result, _) = second.call_text(n, "opencode_result", json!({"id": "1"}));
    assert!(result.contains("verify: failed (exit 3)"), "{result}");
    assert!(result.contains("MARK-ADOPTED-VERIFY"), "{result}");
}
