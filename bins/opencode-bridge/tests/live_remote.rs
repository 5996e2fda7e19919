//! Remote servers with the real opencode 1.18.33: two more `opencode serve` instances on
//! loopback (their own XDG dirs and passwords) stand for other machines. Placement by `server`
//! and the root mapping, a wrong password, an unknown server, isolation refused, doctor's check
//! of each server, a bridge restart while a task runs on a server (followed again, not lost),
//! and a server killed mid-task.

use crate::common;

use bridge_testkit::{FakeLlm, OpencodeSandbox, SandboxServe, require_opencode};
use common::{Server, World};
use serde_json::json;
use std::time::{Duration, Instant};

fn task_id(started: &str) -> String {
    started
        .strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("not a start: {started}"))
        .to_owned()
}

/// Polls the task's status until it runs with its session known.
fn running_with_session(bridge: &mut Server, id: &str, n: &mut i64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        *n += 1;
        let (s, _) = bridge.call_text(*n, "opencode_status", json!({"id": id}));
        if s.contains("session: ses_") && s.contains("running") {
            return;
        }
        assert!(Instant::now() < deadline, "{s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn live_tasks_run_on_named_servers_survive_a_bridge_restart_and_fail_cleanly_when_a_server_dies() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(8);
    let local = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let host1 = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let host2 = OpencodeSandbox::new(&llm.base_url()).unwrap();
    for h in [&host1, &host2] {
        std::fs::create_dir_all(h.root().join("work/app")).unwrap();
    }
    let mut one = SandboxServe::start(&host1, &oc, "pw-one").unwrap();
    let two = SandboxServe::start(&host2, &oc, "pw-two").unwrap();

    let world = World::new();
    let app = world.root().join("app");
    std::fs::create_dir_all(&app).unwrap();
    let config = world.path("bridge.toml");
    std::fs::write(
        &config,
        format!(
            "[[server]]\nname = \"one\"\nurl = \"{}\"\npassword_env = \"ONE_PW\"\nroot = \"{}\"\n\n[[server]]\nname = \"two\"\nurl = \"{}\"\npassword_env = \"TWO_PW\"\nroot = \"{}\"\n",
            one.url,
            host1.root().join("work").display(),
            two.url,
            host2.root().join("work").display()
        ),
    )
    .unwrap();
    let mut env = common::sandbox_env_for_bridge(&local);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push((
        "OPENCODE_BRIDGE_CONFIG",
        config.to_string_lossy().into_owned(),
    ));
    env.push(("OPENCODE_BRIDGE_MODEL", "fk/toolwrite".into()));
    env.push(("ONE_PW", "pw-one".into()));
    env.push(("TWO_PW", "not-the-password".into()));

    // doctor checks each server.
    let out = common::run_cli(&world, &env, &["doctor"]);
    let doctor = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        doctor
            .lines()
            .find(|l| l.contains("server") && l.contains(&format!(" {name} http")))
            .unwrap_or_else(|| panic!("no line for {name}: {doctor}"))
            .to_owned()
    };
    assert!(line("one").starts_with("ok"), "{doctor}");
    assert!(line("one").contains("opencode 1.18.33"), "{doctor}");
    assert!(line("two").starts_with("FAIL"), "{doctor}");

    let mut bridge = Server::start(&world, &env);
    bridge.initialize();
    let mut next = 10;
    let mut start = |bridge: &mut Server, args: serde_json::Value| {
        next += 1;
        // The servers' own agents run there (`worker` is the bridge's, not theirs).
        let mut a = json!({"tier": "easy", "prompt": "Write the greeting file", "cwd": app, "agent": "build"});
        a.as_object_mut()
            .unwrap()
            .extend(args.as_object().unwrap().clone());
        bridge.call_text(next, "opencode_start", a)
    };
    let mut n = 100;

    // Placement and the root mapping: the file lands on host 1's tree, nowhere else.
    let (t, err) = start(&mut bridge, json!({"server": "one"}));
    assert!(!err, "{t}");
    assert!(t.contains("engine: server one"), "{t}");
    let id = task_id(&t);
    let status = common::until_ended(&mut bridge, &id, &mut n);
    assert!(status.contains("succeeded"), "{status}");
    assert!(status.contains("engine: server one"), "{status}");
    assert_eq!(
        std::fs::read_to_string(host1.root().join("work/app/hello.txt")).unwrap(),
        "hi from fake\n"
    );
    assert!(!app.join("hello.txt").exists());
    assert!(!host2.root().join("work/app/hello.txt").exists());

    // That server's sessions are read, shown and renamed through it.
    let sid = status
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .unwrap()
        .trim()
        .to_owned();
    n += 1;
    let (list, err) = bridge.call_text(n, "opencode_sessions", json!({"server": "one"}));
    assert!(!err && list.contains(&sid), "{list}");
    n += 1;
    let (out, err) = bridge.call_text(
        n,
        "opencode_session_output",
        json!({"id": sid, "server": "one", "mode": "last"}),
    );
    assert!(
        !err && out.contains(bridge_testkit::fake_llm::OK_TEXT),
        "{out}"
    );
    // As a resource too, and the task's status links it there.
    let uri = format!("opencode://server/one/session/{sid}");
    n += 1;
    let read = bridge.request(n, "resources/read", json!({"uri": uri}));
    let text = read["result"]["contents"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains(bridge_testkit::fake_llm::OK_TEXT), "{read}");
    n += 1;
    let linked = bridge.call(n, "opencode_status", json!({"id": id}));
    assert!(linked.to_string().contains(&uri), "{linked}");
    n += 1;
    let (renamed, err) = bridge.call_text(
        n,
        "opencode_session_rename",
        json!({"id": sid, "server": "one", "title": "APP/build: greeting on host one"}),
    );
    assert!(!err, "{renamed}");
    n += 1;
    let (list, _) = bridge.call_text(n, "opencode_sessions", json!({"server": "one"}));
    assert!(list.contains("APP/build: greeting on host one"), "{list}");
    n += 1;
    let (here, _) = bridge.call_text(n, "opencode_sessions", json!({}));
    assert!(
        !here.contains(&sid),
        "this machine's sessions are its own: {here}"
    );

    // Mistakes in the call: one line each, nothing started. A wrong password is one of them
    // (the server is asked for its agents before anything starts), within seconds.
    let began = Instant::now();
    for (args, says) in [
        (json!({"server": "two"}), "TWO_PW"),
        (json!({"server": "nope"}), "no server is named \"nope\""),
        (
            json!({"server": "one", "isolation": "worktree"}),
            "isolation",
        ),
    ] {
        let (t, err) = start(&mut bridge, args);
        assert!(err, "{t}");
        assert!(t.contains(says), "{t}");
        assert_eq!(t.trim().lines().count(), 1, "{t}");
    }
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );

    // A bridge restart while a task runs on a server: the next bridge follows it to its end.
    let (t, _) = start(
        &mut bridge,
        json!({"server": "one", "model": "fk/slow", "prompt": "Take a while."}),
    );
    let slow = task_id(&t);
    running_with_session(&mut bridge, &slow, &mut n);
    bridge.close_stdin();
    assert!(bridge.wait_exit(Duration::from_secs(30)).is_some());
    let mut bridge = Server::start(&world, &env);
    bridge.initialize();
    let status = common::until_ended(&mut bridge, &slow, &mut n);
    assert!(status.contains("succeeded"), "{status}");
    n += 1;
    let (result, _) = bridge.call_text(n, "opencode_result", json!({"id": slow}));
    assert!(result.contains("DONE"), "{result}");

    // The server dies mid-task: the task fails with kind server, naming it, within seconds.
    llm.set_slow_secs(120);
    let (t, _) = start(
        &mut bridge,
        json!({"server": "one", "model": "fk/slow", "prompt": "Take long."}),
    );
    let doomed = task_id(&t);
    running_with_session(&mut bridge, &doomed, &mut n);
    let killed = Instant::now();
    one.kill();
    let status = common::until_ended(&mut bridge, &doomed, &mut n);
    assert!(status.contains("failed"), "{status}");
    assert!(status.contains("server one"), "{status}");
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "noticed after {:?}",
        killed.elapsed()
    );
}
