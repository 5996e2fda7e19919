//! Kill guarantees of the real binary: a delegated run of the fake opencode whose process tree
//! holds a SIGTERM-ignoring grandchild and a `setsid` escapee is stopped by `opencode_cancel`,
//! by its timeout, by SIGTERM to the bridge and by stdin EOF (in the cancel mode,
//! `OPENCODE_BRIDGE_ON_EXIT=cancel`), leaving no survivor and no zombie.
//!
//! Every process of the run carries a marker in its environment (the bridge passes its
//! environment on), so survivors are found by scanning `/proc/*/environ`, besides checking the
//! recorded pids. The timeout case waits the smallest timeout the tool accepts (1 minute).

use crate::common;

use common::{Server, World};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// A process seen in `/proc`: pid, parent, state letter, start time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Proc {
    pid: i32,
    ppid: i32,
    state: char,
    start: u64,
}

fn proc_of(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields after the name: state is field 3, ppid 4, starttime 22.
    Some(Proc {
        pid,
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Live processes whose environment carries the marker, except `skip`.
fn marked(marker: &str, skip: i32) -> Vec<Proc> {
    let needle = format!("FAKE_OPENCODE_KILLTEST={marker}");
    all_pids()
        .into_iter()
        .filter(|&p| p != skip)
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/environ"))
                .map(|env| env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()))
                .unwrap_or(false)
        })
        .filter_map(proc_of)
        .collect()
}

/// Whether the recorded process still exists (same pid and start time), zombie or not.
fn exists(p: &Proc) -> Option<Proc> {
    proc_of(p.pid).filter(|now| now.start == p.start)
}

fn read_pidfile(path: &Path) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids: Vec<i32> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.len() >= 2 {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "{} never listed both descendants",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

enum Stop {
    Cancel,
    Timeout,
    Sigterm,
    StdinEof,
}

fn stop_a_tree(stop: Stop) {
    let world = World::new();
    let marker = format!(
        "{}-{}",
        std::process::id(),
        world.dir.path().file_name().unwrap().to_string_lossy()
    );
    let pidfile = world.path("tree.pids");
    let fake = bridge_testkit::bins::fake_opencode();
    let mut server = Server::start(
        &world,
        &[
            ("OPENCODE_BIN", fake.to_string_lossy().into_owned()),
            ("FAKE_OPENCODE_SCENARIO", "tree".into()),
            (
                "FAKE_OPENCODE_PIDFILE",
                pidfile.to_string_lossy().into_owned(),
            ),
            ("OPENCODE_BRIDGE_KILL_GRACE_MS", "500".into()),
            ("FAKE_OPENCODE_KILLTEST", marker.clone()),
            // A clean stop cancels running tasks only in the cancel mode (by default they
            // are left running for the next bridge: tests/durable.rs).
            ("OPENCODE_BRIDGE_ON_EXIT", "cancel".into()),
        ],
    );
    let bridge = server.child.id() as i32;
    server.initialize();
    let mut args = json!({"tier": "easy", "prompt": "Collect the notes into one file"});
    if matches!(stop, Stop::Timeout) {
        args["timeout_minutes"] = json!(1);
    }
    let (text, is_error) = server.call_text(2, "opencode_start", args);
    assert!(!is_error, "{text}");
    assert!(text.starts_with("started task 1"), "{text}");

    let kids = read_pidfile(&pidfile);
    let tree = marked(&marker, bridge);
    for k in &kids {
        assert!(
            tree.iter().any(|p| p.pid == *k),
            "descendant {k} not found by its marker: {tree:?}"
        );
    }
    // The run itself, the TERM-ignoring grandchild and the setsid escapee at least.
    assert!(tree.len() >= 3, "{tree:?}");
    let escapee = proc_of(kids[1]).unwrap();
    let root = tree
        .iter()
        .find(|p| p.ppid == bridge)
        .copied()
        .unwrap_or_else(|| panic!("no run process under the bridge: {tree:?}"));
    assert_ne!(
        std::fs::read_to_string(format!("/proc/{}/stat", escapee.pid))
            .unwrap()
            .rsplit(") ")
            .next()
            .unwrap()
            .split(' ')
            .nth(2),
        Some(root.pid.to_string().as_str()),
        "the escapee left the run's process group"
    );

    let t0 = Instant::now();
    let bridge_exits = match stop {
        Stop::Cancel => {
            let (text, is_error) = server.call_text(3, "opencode_cancel", json!({"id": "1"}));
            assert!(!is_error, "{text}");
            assert!(text.starts_with("task 1 cancelled"), "{text}");
            false
        }
        Stop::Timeout => {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let (status, _) = server.call_text(3, "opencode_status", json!({"id": "1"}));
                let head = status.lines().next().unwrap_or("").to_string();
                if !head.contains("running") && !head.contains("starting") {
                    assert!(
                        head.contains("timed") || head.contains("timeout"),
                        "{status}"
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "no timeout after 120 s: {status}"
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            false
        }
        Stop::Sigterm => {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(bridge),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
            true
        }
        Stop::StdinEof => {
            server.close_stdin();
            true
        }
    };
    if bridge_exits {
        let status = server
            .wait_exit(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("the bridge did not exit; stderr:\n{}", server.stderr()));
        assert!(status.success(), "{status:?}\n{}", server.stderr());
    }

    // Within a few seconds after the stop, nothing of the tree is left, not even a zombie.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let survivors: Vec<Proc> = tree.iter().filter_map(exists).collect();
        let marked_now = marked(&marker, bridge);
        let zombies_of_bridge: Vec<Proc> = if bridge_exits {
            Vec::new()
        } else {
            all_pids()
                .into_iter()
                .filter_map(proc_of)
                .filter(|p| p.ppid == bridge && p.state == 'Z')
                .collect()
        };
        if survivors.is_empty() && marked_now.is_empty() && zombies_of_bridge.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after {:?}: survivors {survivors:?}, marked {marked_now:?}, zombies {zombies_of_bridge:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    if !bridge_exits {
        // The bridge is still serving.
        let pong = server.request(9, "ping", json!({}));
        assert_eq!(pong["result"], json!({}));
        let (status, _) = server.call_text(10, "opencode_status", json!({"id": "1"}));
        assert!(!status.contains("running"), "{status}");
    }
}

#[test]
fn cancel_leaves_no_survivor_and_no_zombie() {
    stop_a_tree(Stop::Cancel);
}

#[test]
fn in_the_cancel_mode_sigterm_to_the_bridge_leaves_no_survivor_and_no_zombie() {
    stop_a_tree(Stop::Sigterm);
}

#[test]
fn in_the_cancel_mode_stdin_eof_leaves_no_survivor_and_no_zombie() {
    stop_a_tree(Stop::StdinEof);
}

/// Waits out the smallest timeout the tool accepts (1 minute, plus the grace).
#[test]
fn timeout_leaves_no_survivor_and_no_zombie() {
    stop_a_tree(Stop::Timeout);
}

/// A `sleep` in its own process group, with its start time.
fn sleeper() -> (std::process::Child, Proc) {
    use std::os::unix::process::CommandExt;
    let child = std::process::Command::new("sleep")
        .arg("300")
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let p = proc_of(child.id() as i32).unwrap();
    (child, p)
}

/// A task record as an earlier bridge (now gone) left it, naming `run` as its running process.
fn write_orphan_record(state: &Path, id: u64, run_pid: i32, run_start: u64, cwd: &Path) {
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let owner = proc_of(gone.id() as i32).map_or((gone.id() as i32, 1), |p| (p.pid, p.start));
    gone.wait().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let dir = state.join("tasks").join(id.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let t = json!({
        "id": id, "owner": {"pid": owner.0, "start_time": owner.1},
        "label": null, "agent": "worker", "title": "ROOT/worker: long job",
        "cwd": cwd, "model": null, "read_only": false, "continues": null,
        "state": "running", "attempts": 1, "accepted_ms": now - 60_000, "finished_ms": null,
        "session_id": "ses_reusedpidreusedpid01", "run": {"pid": run_pid, "start_time": run_start},
        "failure": null, "exit_code": null,
        "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache_read": 0, "cache_write": 0},
        "cost": 0.0, "tool_calls": 0, "opencode_version": "1.18.33", "updated_ms": now
    });
    std::fs::write(dir.join("task.json"), serde_json::to_vec(&t).unwrap()).unwrap();
}

/// Through the server: an orphaned run recorded with its true start time is stopped by
/// `opencode_cancel`; a record whose pid now belongs to another process (the start time differs)
/// is never signalled, by status or by cancel.
#[test]
fn a_reused_pid_is_never_signalled() {
    let world = World::new();
    let state = world.path("state");
    let (mut orphan, o) = sleeper();
    let (mut other, p) = sleeper();
    write_orphan_record(&state, 41, o.pid, o.start, &world.root());
    write_orphan_record(&state, 42, p.pid, p.start + 1, &world.root());
    let mut server = Server::start(
        &world,
        &[
            (
                "OPENCODE_BRIDGE_STATE_DIR",
                state.to_string_lossy().into_owned(),
            ),
            ("OPENCODE_BRIDGE_KILL_GRACE_MS", "500".into()),
        ],
    );
    server.initialize();

    let (status, _) = server.call_text(2, "opencode_status", json!({"id": "41"}));
    assert!(status.contains("orphan"), "{status}");
    let (text, is_error) = server.call_text(3, "opencode_cancel", json!({"id": "41"}));
    assert!(!is_error, "{text}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while orphan.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the orphaned run survived: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let (status, _) = server.call_text(4, "opencode_status", json!({"id": "42"}));
    assert!(!status.contains("orphan"), "{status}");
    let (text, _) = server.call_text(5, "opencode_cancel", json!({"id": "42"}));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        other.try_wait().unwrap().is_none(),
        "the process that reused the pid was signalled: {text}"
    );
    assert_eq!(exists(&p).map(|q| q.state), Some('S'), "{text}");
    other.kill().unwrap();
    other.wait().unwrap();
}
