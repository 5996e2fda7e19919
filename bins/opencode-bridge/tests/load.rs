//! Load on the real binary: 64 delegated tasks of the fake opencode at once (parallel limit 64)
//! while a second client thread asks `opencode_status` every millisecond over the same stdio
//! connection. Every request gets exactly one response, and every task succeeds.
//!
//! At most [`POLLS_IN_FLIGHT`] polls are unanswered at once: JSON-RPC allows pipelining, but a
//! client that sends faster than a server on a loaded machine answers (a debug build sharing
//! two cores with the live tests) buries every other request under a backlog that grows
//! without end, and then only measures that backlog.

use crate::common;

use common::{World, binary};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TASKS: i64 = 64;
const POLLS_IN_FLIGHT: i64 = 200;

struct Conn {
    stdin: Mutex<Option<ChildStdin>>,
    /// Responses by id: how many arrived and the last one.
    seen: Mutex<HashMap<i64, (usize, Value)>>,
    sent: AtomicI64,
    /// Status polls answered (ids from 1,000,000 up).
    polls_answered: AtomicI64,
    stray: Mutex<Vec<String>>,
    /// The bridge's stderr, shown when a response does not come.
    stderr: std::path::PathBuf,
}

impl Conn {
    fn send(&self, id: i64, method: &str, params: Value) {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut guard = self.stdin.lock().unwrap();
        let stdin = guard.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        self.sent.fetch_add(1, Ordering::SeqCst);
    }

    fn call(&self, id: i64, tool: &str, args: Value) {
        self.send(id, "tools/call", json!({"name": tool, "arguments": args}));
    }

    fn wait_for(&self, id: i64, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some((_, v)) = self.seen.lock().unwrap().get(&id) {
                return v.clone();
            }
            if Instant::now() >= deadline {
                let log = std::fs::read_to_string(&self.stderr).unwrap_or_default();
                let tail: String = log.lines().rev().take(40).collect::<Vec<_>>().join("\n");
                panic!(
                    "no response to {id} within {within:?} ({} sent, {} status polls answered); the bridge's stderr, last lines first:\n{tail}",
                    self.sent.load(Ordering::SeqCst),
                    self.polls_answered.load(Ordering::SeqCst)
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn text(&self, id: i64, within: Duration) -> String {
        let r = self.wait_for(id, within);
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: {r}"))
            .to_string()
    }
}

#[test]
fn sixty_four_tasks_while_status_is_polled_every_millisecond() {
    let world = World::new();
    let fake = bridge_testkit::bins::fake_opencode();
    let mut child = Command::new(binary())
        .env_clear()
        .envs(world.env())
        .env("RUST_LOG", "warn")
        .env("OPENCODE_BIN", &fake)
        .env("FAKE_OPENCODE_SCENARIO", "ok")
        // The fake stands for `opencode run` processes; it cannot serve.
        .env("OPENCODE_BRIDGE_ENGINE", "run")
        .env("OPENCODE_BRIDGE_MAX_PARALLEL", TASKS.to_string())
        .current_dir(world.root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(world.path("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let conn = Arc::new(Conn {
        stdin: Mutex::new(child.stdin.take()),
        seen: Mutex::new(HashMap::new()),
        sent: AtomicI64::new(0),
        polls_answered: AtomicI64::new(0),
        stray: Mutex::new(Vec::new()),
        stderr: world.path("stderr.log"),
    });
    let stdout = child.stdout.take().unwrap();
    let reader = {
        let conn = conn.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("non-JSON on stdout ({e}): {line}"));
                match v.get("id").and_then(Value::as_i64) {
                    Some(id) => {
                        if id >= 1_000_000 {
                            conn.polls_answered.fetch_add(1, Ordering::SeqCst);
                        }
                        let mut seen = conn.seen.lock().unwrap();
                        let e = seen.entry(id).or_insert((0, Value::Null));
                        e.0 += 1;
                        e.1 = v;
                    }
                    None => conn.stray.lock().unwrap().push(line),
                }
            }
        })
    };

    conn.send(
        0,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "load", "version": "0"}}),
    );
    conn.wait_for(0, Duration::from_secs(30));
    {
        let mut guard = conn.stdin.lock().unwrap();
        let stdin = guard.as_mut().unwrap();
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        stdin.flush().unwrap();
    }

    // The poller: opencode_status every millisecond, ids from 1,000,000 up. Poll n is due
    // n ms after the start and sent without waiting for earlier answers (JSON-RPC allows
    // pipelining); a poll that is late (the thread was not scheduled) goes out at once, so
    // the schedule holds 1,000 calls a second however slow a single call is, as long as no
    // more than POLLS_IN_FLIGHT are unanswered.
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (conn, stop) = (conn.clone(), stop.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut n: i64 = 0;
            while !stop.load(Ordering::SeqCst) {
                let due = start + Duration::from_millis(n as u64);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                while n - conn.polls_answered.load(Ordering::SeqCst) >= POLLS_IN_FLIGHT
                    && !stop.load(Ordering::SeqCst)
                {
                    std::thread::sleep(Duration::from_micros(200));
                }
                let id = 1_000_000 + n;
                let task = 1 + (id % TASKS);
                conn.call(id, "opencode_status", json!({"id": task.to_string()}));
                n += 1;
            }
            (n, start.elapsed())
        })
    };

    // 64 starts, pipelined.
    for i in 1..=TASKS {
        conn.call(
            i,
            "opencode_start",
            json!({"tier": "easy", "prompt": format!("Summarise notes file {i}")}),
        );
    }
    for i in 1..=TASKS {
        let text = conn.text(i, Duration::from_secs(60));
        assert!(text.starts_with("started task "), "start {i}: {text}");
    }
    // Until every task has ended.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut id = 500_000;
    let list = loop {
        id += 1;
        conn.call(id, "opencode_list", json!({}));
        let list = conn.text(id, Duration::from_secs(30));
        if list.contains("; 0 unfinished") {
            break list;
        }
        assert!(Instant::now() < deadline, "tasks still running: {list}");
        std::thread::sleep(Duration::from_millis(200));
    };
    stop.store(true, Ordering::SeqCst);
    let (polls, polled_for) = poller.join().unwrap();

    // Every request sent gets exactly one response.
    let sent = conn.sent.load(Ordering::SeqCst) as usize;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = conn.seen.lock().unwrap().len();
        if got == sent {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{sent} requests sent, {got} answered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let seen = conn.seen.lock().unwrap();
    let twice: Vec<i64> = seen
        .iter()
        .filter(|(_, (n, _))| *n != 1)
        .map(|(id, _)| *id)
        .collect();
    assert!(twice.is_empty(), "answered more than once: {twice:?}");
    let status_errors: Vec<&Value> = seen
        .iter()
        .filter(|(id, _)| **id >= 1_000_000)
        .map(|(_, (_, v))| v)
        .filter(|v| v.get("result").is_none())
        .collect();
    assert!(
        status_errors.is_empty(),
        "status calls failed at the protocol level: {:?}",
        &status_errors[..status_errors.len().min(3)]
    );
    let succeeded = list.lines().filter(|l| l.contains("  succeeded  ")).count();
    assert_eq!(succeeded, TASKS as usize, "{list}");
    assert!(conn.stray.lock().unwrap().is_empty());
    println!(
        "{sent} requests ({polls} status polls in {:.2} s, {:.0} a second; {TASKS} starts) answered exactly once; {succeeded} tasks succeeded",
        polled_for.as_secs_f64(),
        polls as f64 / polled_for.as_secs_f64().max(0.001)
    );
    drop(seen);

    // Close stdin: the bridge exits.
    conn.stdin.lock().unwrap().take();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the bridge did not exit on stdin EOF");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap();
}
