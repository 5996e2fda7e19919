//! Benchmark of the store backend on a large generated store, side by side with opencode itself.
//!
//! ```sh
//! cargo run --release -p opencode-client --example bench_store            # full
//! cargo run --release -p opencode-client --example bench_store -- --quick # fewer repetitions
//! cargo run --release -p opencode-client --example bench_store -- --db ~/.local/share/opencode/opencode.db
//! ```
//!
//! The store is generated once and cached as `$CARGO_TARGET_DIR/bench-store/v1/opencode.db`
//! (default target dir: `<workspace>/target`): 10,000 sessions / 200,000 messages, one of them a
//! session of 5,000 parts. Its schema, migration rows and project row come from the real
//! opencode 1.18.33 store in `fixtures/opencode-store` (so opencode itself reads it as current);
//! only the rows are synthetic, shaped like the ones opencode writes.
//!
//! Prints figures only; there are no timed assertions. When `OPENCODE_BRIDGE_TEST_OPENCODE` is
//! set it also times `opencode session list -n 50 --format json` on a copy of the same store.

use opencode_client::model::{SessionFilter, SessionState};
use opencode_client::{Liveness, ScanContext, SessionSource, StoreSource};
use rusqlite::{Connection, params};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SESSIONS: usize = 10_000;
const MESSAGES: usize = 200_000;
const BIG_PARTS: usize = 5_000;
const CACHE_VERSION: &str = "v1";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let given = args
        .iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let reps = if quick { 5 } else { 30 };

    let (db, big_id) = match given {
        Some(p) => (p, None),
        None => {
            let p = cache_path();
            if !p.is_file() {
                let t = Instant::now();
                generate(&p);
                println!(
                    "generated {} ({} sessions, {} messages) in {:.1} s",
                    p.display(),
                    SESSIONS,
                    MESSAGES,
                    t.elapsed().as_secs_f64()
                );
            } else {
                println!("using cached {}", p.display());
            }
            (p, Some(big_session_id()))
        }
    };

    let t = Instant::now();
    let store = StoreSource::open(&db).expect("open store");
    println!("open + schema check: {:.2} ms", ms(t.elapsed()));
    let ctx = || ScanContext {
        deadline: Instant::now() + Duration::from_secs(35),
        now_ms: now_ms(),
        liveness: Liveness::default(),
    };
    let newest = SessionFilter {
        limit: 50,
        ..Default::default()
    };
    let list_ms = time(reps, || {
        let l = store.list(&newest, &ctx()).unwrap();
        assert_eq!(l.sessions.len(), 50.min(l.scanned));
    });
    report("list 50 newest", &list_ms);

    let running = SessionFilter {
        limit: 50,
        state: Some(SessionState::Running),
        ..Default::default()
    };
    let scan_ms = time(reps.min(5), || {
        store.list(&running, &ctx()).unwrap();
    });
    report("list state=running (scans every session)", &scan_ms);

    let search = SessionFilter {
        limit: 50,
        search: Some("zebra-not-present".into()),
        ..Default::default()
    };
    let search_ms = time(1, || {
        let l = store.list(&search, &ctx()).unwrap();
        println!(
            "  search scanned {} sessions, partial: {:?}",
            l.scanned, l.partial
        );
    });
    report("search absent word (title + every text part)", &search_ms);

    let big = big_id.unwrap_or_else(|| {
        // A real store: the session with the most parts.
        let c =
            Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        c.query_row(
            "SELECT session_id FROM part GROUP BY session_id ORDER BY count(*) DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap()
    });
    {
        let c =
            Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let (msgs, parts): (i64, i64) = c
            .query_row(
                "SELECT (SELECT count(*) FROM message WHERE session_id = ?1), (SELECT count(*) FROM part WHERE session_id = ?1)",
                [&big],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        println!("biggest session {big}: {msgs} messages, {parts} parts");
    }
    let tail_ms = time(reps, || {
        let t = store.transcript(&big, Some(20), &ctx()).unwrap();
        assert!(!t.messages.is_empty());
    });
    report("tail (last 20 messages) of the biggest session", &tail_ms);
    let full_ms = time(reps.min(5), || {
        store.transcript(&big, None, &ctx()).unwrap();
    });
    report("full transcript of the biggest session", &full_ms);

    match bridge_testkit::real_opencode() {
        Some(oc) => {
            let runs = if quick { 1 } else { 3 };
            let oc_ms = opencode_session_list(&oc, &db, runs);
            report("opencode session list -n 50 --format json", &oc_ms);
            println!(
                "ratio opencode / bridge (list 50 newest, medians): {:.0}x",
                median(&oc_ms) / median(&list_ms).max(0.001)
            );
        }
        None => println!(
            "opencode session list: skipped (set OPENCODE_BRIDGE_TEST_OPENCODE to compare)"
        ),
    }
}

fn cache_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target
        .join("bench-store")
        .join(CACHE_VERSION)
        .join("opencode.db")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn time(reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    f(); // warm-up
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            ms(t.elapsed())
        })
        .collect()
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn report(what: &str, v: &[f64]) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "{what}: median {:.2} ms, min {:.2} ms ({} runs)",
        median(v),
        min,
        v.len()
    );
}

fn opencode_session_list(oc: &Path, db: &Path, runs: usize) -> Vec<f64> {
    let sb = bridge_testkit::OpencodeSandbox::new("http://127.0.0.1:9/v1").unwrap();
    let copy = sb.root().join("bench.db");
    std::fs::copy(db, &copy).unwrap();
    let mut out = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let o = sb
            .command(oc, ["session", "list", "-n", "50", "--format", "json"])
            .env("OPENCODE_DB", &copy)
            .output()
            .unwrap();
        let elapsed = ms(t.elapsed());
        let listed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let n = listed.as_array().map(|a| a.len()).unwrap_or(0);
        if !o.status.success() || n == 0 {
            println!(
                "  opencode session list: rc {:?}, {} sessions; stderr: {}",
                o.status.code(),
                n,
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        } else {
            println!("  opencode session list returned {n} sessions");
        }
        out.push(elapsed);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Generation

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn alnum(&mut self, len: usize) -> String {
        const A: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        (0..len)
            .map(|_| A[self.below(A.len() as u64) as usize] as char)
            .collect()
    }
}

fn big_session_id() -> String {
    "ses_0000bench0big0session0000".to_string()
}

const WORDS: &[&str] = &[
    "collect",
    "notes",
    "refactor",
    "parser",
    "tests",
    "download",
    "convert",
    "tables",
    "plot",
    "readme",
    "glue",
    "script",
    "lookup",
    "citations",
    "clean",
    "dataset",
    "boilerplate",
    "api",
    "reference",
    "summary",
    "fix",
    "lint",
    "warnings",
    "module",
    "config",
    "docs",
    "quotes",
];
const AGENTS: &[&str] = &[
    "build",
    "build",
    "build",
    "explorer",
    "librarian",
    "fixer",
    "general",
];
const LANES: &[&str] = &["DOCS", "DATA", "WEB", "CORE", "INFRA"];

fn sentence(rng: &mut Rng, words: usize) -> String {
    (0..words)
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

struct Gen<'c> {
    rng: Rng,
    seq: u64,
    msg: rusqlite::Statement<'c>,
    part: rusqlite::Statement<'c>,
}

impl Gen<'_> {
    fn id(&mut self, prefix: &str) -> String {
        self.seq += 1;
        format!("{prefix}_{:016x}{}", self.seq, self.rng.alnum(10))
    }

    fn message(&mut self, sid: &str, t: i64, updated: i64, data: &serde_json::Value) -> String {
        let id = self.id("msg");
        self.msg
            .execute(params![id, sid, t, updated, data.to_string()])
            .unwrap();
        id
    }

    fn part(&mut self, mid: &str, sid: &str, t: i64, data: serde_json::Value) {
        let id = self.id("prt");
        self.part
            .execute(params![id, mid, sid, t, t, data.to_string()])
            .unwrap();
    }

    /// One assistant step with its parts; returns the time it completed.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        sid: &str,
        parent: &str,
        agent: &str,
        dir: &str,
        t: i64,
        finish: &str,
        outcome: Outcome,
    ) -> i64 {
        let done = t + 2_000 + self.rng.below(20_000) as i64;
        let tokens = json!({"total": 1500, "input": 1200, "output": 300, "reasoning": 0, "cache": {"write": 0, "read": 800}});
        let mut data = json!({"parentID": parent, "role": "assistant", "mode": agent, "agent": agent,
            "path": {"cwd": dir, "root": "/"}, "cost": 0.0012, "tokens": tokens,
            "modelID": "gpt-5-mini", "providerID": "openai", "time": {"created": t}});
        match outcome {
            Outcome::Done => {
                data["time"]["completed"] = json!(done);
                data["finish"] = json!(finish);
            }
            Outcome::Error => {
                data["time"]["completed"] = json!(done);
                data["error"] = json!({"name": "APIError", "data": {"message": "Rate limit reached for requests", "statusCode": 429, "isRetryable": true}});
            }
            Outcome::Aborted => {
                data["time"]["completed"] = json!(done);
                data["error"] =
                    json!({"name": "MessageAbortedError", "data": {"message": "Aborted"}});
            }
            Outcome::Dangling => {}
        }
        let mid = self.message(sid, t, done, &data);
        self.part(&mid, sid, t + 10, json!({"type": "step-start"}));
        if finish == "tool-calls" {
            let cmd = sentence(&mut self.rng, 4);
            let out: String = sentence(&mut self.rng, 60);
            let call = format!("call_{}", self.rng.alnum(8));
            self.part(
                &mid,
                sid,
                t + 20,
                json!({"type": "tool", "tool": "bash", "callID": call,
                    "state": {"status": "completed", "input": {"command": format!("echo {cmd}"), "description": "Run it"},
                    "output": out, "metadata": {"exit": 0, "truncated": false}, "title": cmd,
                    "time": {"start": t + 20, "end": t + 900}}}),
            );
        } else {
            if self.rng.below(4) == 0 {
                let thought = sentence(&mut self.rng, 30);
                self.part(
                    &mid,
                    sid,
                    t + 15,
                    json!({"type": "reasoning", "text": thought, "time": {"start": t + 15, "end": t + 400}}),
                );
            }
            let text = sentence(&mut self.rng, 50);
            self.part(
                &mid,
                sid,
                t + 30,
                json!({"type": "text", "text": text, "time": {"start": t + 30, "end": done - 5}}),
            );
        }
        if !matches!(outcome, Outcome::Dangling) {
            self.part(
                &mid,
                sid,
                done,
                json!({"type": "step-finish", "reason": finish, "tokens": tokens, "cost": 0.0012}),
            );
        }
        done
    }
}

#[derive(Clone, Copy)]
enum Outcome {
    Done,
    Error,
    Aborted,
    Dangling,
}

fn generate(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension("db.partial");
    let _ = std::fs::remove_file(&tmp);
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/opencode-store/opencode.db");
    std::fs::copy(&fixture, &tmp).unwrap();
    let mut conn = Connection::open(&tmp).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA foreign_keys = OFF;",
    )
    .unwrap();
    // Keep schema, `migration`, `project`; drop the fixture's rows everywhere else.
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('migration', 'data_migration', 'project') AND name NOT LIKE 'sqlite_%'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for t in &tables {
        conn.execute(&format!("DELETE FROM \"{t}\""), []).unwrap();
    }
    let tx = conn.transaction().unwrap();
    {
        let mut ses = tx
            .prepare(
                "INSERT INTO session (id, project_id, parent_id, slug, directory, path, title, version,
                   summary_additions, summary_deletions, summary_files, cost, tokens_input, tokens_output,
                   tokens_reasoning, tokens_cache_read, tokens_cache_write, permission, agent, model,
                   time_created, time_updated)
                 VALUES (?1, 'global', ?2, ?3, ?4, ?5, ?6, '1.18.33', 0, 0, 0, ?7, ?8, ?9, 0, ?10, 0, ?11, ?12, ?13, ?14, ?15)",
            )
            .unwrap();
        let mut g = Gen {
            rng: Rng(0x9E37_79B9_7F4A_7C15),
            seq: 0,
            msg: tx
                .prepare("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?4, ?5)")
                .unwrap(),
            part: tx
                .prepare("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                .unwrap(),
        };
        let permission = r#"[{"permission":"question","pattern":"*","action":"deny"},{"permission":"plan_enter","pattern":"*","action":"deny"},{"permission":"plan_exit","pattern":"*","action":"deny"}]"#;
        let now = now_ms();
        let span = 60i64 * 24 * 3600 * 1000; // sixty days of history
        // About 2.7 parts per message (user: 1; step: start, text or tool, finish, some reasoning).
        let big_messages = BIG_PARTS * 10 / 27;
        let per_session = (MESSAGES - big_messages) / (SESSIONS - 1);
        let mut extra = (MESSAGES - big_messages) % (SESSIONS - 1);
        let mut previous_root: Option<String> = None;
        for i in 0..SESSIONS {
            let big = i == SESSIONS / 2;
            let sid = if big {
                big_session_id()
            } else {
                // opencode's session ids sort newest first; mimic that.
                format!("ses_{:016x}{}", u64::MAX / 2 - i as u64, g.rng.alnum(10))
            };
            let start = now - span + (i as i64) * (span / SESSIONS as i64);
            let agent = AGENTS[g.rng.below(AGENTS.len() as u64) as usize];
            let dir = format!("/home/user/Github/project-{}", g.rng.below(20));
            let is_child = agent == "general" && previous_root.is_some();
            let parent = if is_child {
                previous_root.clone()
            } else {
                None
            };
            let title = format!(
                "{}/{}: {}",
                LANES[g.rng.below(LANES.len() as u64) as usize],
                agent,
                sentence(&mut g.rng, 4)
            );
            let n_messages = if big {
                big_messages
            } else {
                per_session
                    + usize::from(
                        extra > 0 && {
                            extra -= 1;
                            true
                        },
                    )
            };
            // Outcome of the last step: mostly done, some failures, aborts and dangling runs.
            let roll = g.rng.below(100);
            let last_outcome = match roll {
                0..=4 => Outcome::Error,
                5..=6 => Outcome::Aborted,
                7 => Outcome::Dangling,
                _ => Outcome::Done,
            };
            let mut t = start;
            let mut remaining = n_messages;
            let mut user = String::new();
            while remaining > 0 {
                if user.is_empty() || g.rng.below(6) == 0 {
                    let prompt = format!("{} {}", title, sentence(&mut g.rng, 25));
                    let data = json!({"role": "user", "time": {"created": t}, "agent": agent,
                        "model": {"providerID": "openai", "modelID": "gpt-5-mini"}, "summary": {"diffs": []}});
                    user = g.message(&sid, t, t, &data);
                    g.part(&user, &sid, t, json!({"type": "text", "text": prompt}));
                    remaining -= 1;
                    t += 500;
                    continue;
                }
                let last = remaining == 1;
                let finish = if last || g.rng.below(3) == 0 {
                    "stop"
                } else {
                    "tool-calls"
                };
                let outcome = if last { last_outcome } else { Outcome::Done };
                let user_id = user.clone();
                t = g.step(&sid, &user_id, agent, &dir, t, finish, outcome) + 300;
                remaining -= 1;
            }
            ses.execute(params![
                sid,
                parent,
                format!("slug-{i}"),
                dir,
                dir.trim_start_matches('/'),
                title,
                0.0012 * n_messages as f64,
                1200 * n_messages as i64,
                300 * n_messages as i64,
                800 * n_messages as i64,
                permission,
                agent,
                r#"{"id":"gpt-5-mini","providerID":"openai","variant":"default"}"#,
                start,
                t,
            ])
            .unwrap();
            if !is_child {
                previous_root = Some(sid);
            }
        }
    }
    tx.commit().unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
    drop(conn);
    std::fs::rename(&tmp, path).unwrap();
}
