//! A stand-in for `opencode` (1.x CLI) used by the supervisor's process-tree tests.
//!
//! `--version` prints `FAKE_OPENCODE_VERSION` (default `1.18.33`); `run --help` prints a help
//! text shaped like 1.18.33's, listing `--standalone` too when `FAKE_OPENCODE_STANDALONE=1`.
//! `run ...` reads the prompt from stdin and behaves as `FAKE_OPENCODE_SCENARIO` says (or, when
//! unset, as the first prompt line reading `scenario: NAME` says, wherever it is: the bridge
//! puts its instructions before the caller's prompt; default `ok`):
//!
//! | scenario | behaviour |
//! |---|---|
//! | `ok` | one step whose text is a report: `stdin_bytes=… file=… file_bytes=… pwd=… cwd=… agent=… title=… model=… variant=… auto=… standalone=… dropped_env=… config=…`, exit 0 |
//! | `exit:N` | a line on stderr, exit N, no events |
//! | `replay` | prints the lines of the file `FAKE_OPENCODE_EVENTS`, then exits with `FAKE_OPENCODE_EXIT` (default 0) |
//! | `flood` | text events of 64 KiB until `FAKE_OPENCODE_FLOOD_MB` (default 50) MB were written, then a final text `FLOOD END` and exit 0 |
//! | `cut` | a `step_start`, then the first half of a `text` event line with no newline, and exit 0 (as opencode does when it exits before its pipe took everything) |
//! | `hang` | one `step_start`, then silence forever |
//! | `silent` | no output at all, forever |
//! | `tree` | starts a grandchild that ignores SIGTERM and a `setsid` escapee (their pids go to `FAKE_OPENCODE_PIDFILE`), prints one `step_start`, then hangs |
//! | `ignore-term` | ignores SIGTERM itself, prints one `step_start`, then hangs |
//! | `overflow-loop` | a `ContextOverflowError` event every 50 ms, forever |
//! | `flaky:N` | the first N runs (counted in the file `FAKE_OPENCODE_COUNTER`) print a 429 `APIError` and exit 1; later runs behave like `ok` |
//! | `fallback` | prints 1.x's "is a subagent ... Falling back" line on stderr, then like `ok` |
//! | `writes:P1,P2,...` | appends a line to each path `Pn` (relative to `PWD`, parent directories made), as a run that writes without any tool call the audit could see, then like `ok` |
//! | `recorded:AGENT:MODEL` | like `ok` in a session of its own that it also records in opencode's store (the path opencode would use: `OPENCODE_DB`, else `$XDG_DATA_HOME/opencode/opencode.db`, else under `~/.local/share`), with one assistant message of agent `AGENT` and model `MODEL` (`provider/model`); `-` for either records what the run was asked for |
//!
//! Without `run`, `FAKE_OPENCODE_SCENARIO=tui` stands in for the TUI: it sleeps until killed
//! (`opencode -s ses_…` holds that session).
//! With `FAKE_OPENCODE_RECORD=<path>` the report of `ok` is also written to that file.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SESSION: &str = "ses_fake0000000000000000000001";

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn emit(out: &mut impl Write, v: serde_json::Value) {
    let mut line = v.to_string();
    line.push('\n');
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

fn step_start(msg: &str) -> serde_json::Value {
    serde_json::json!({"type":"step_start","timestamp":now_ms(),"sessionID":SESSION,
        "part":{"id":"prt_s","messageID":msg,"sessionID":SESSION,"type":"step-start"}})
}

fn text(msg: &str, t: &str) -> serde_json::Value {
    serde_json::json!({"type":"text","timestamp":now_ms(),"sessionID":SESSION,
        "part":{"id":"prt_t","messageID":msg,"sessionID":SESSION,"type":"text","text":t,
        "time":{"start":now_ms(),"end":now_ms()}}})
}

fn step_finish(msg: &str) -> serde_json::Value {
    serde_json::json!({"type":"step_finish","timestamp":now_ms(),"sessionID":SESSION,
        "part":{"id":"prt_f","reason":"stop","messageID":msg,"sessionID":SESSION,"type":"step-finish",
        "tokens":{"total":13,"input":8,"output":3,"reasoning":0,"cache":{"write":0,"read":2}},"cost":0.001}})
}

fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn help(standalone: bool) -> String {
    let mut h = String::from(
        "opencode run [message..]\n\nrun opencode with a message\n\nOptions:\n  -m, --model        model to use in the format of provider/model   [string]\n      --agent        agent to use   [string]\n      --format       format: default (formatted) or json (raw JSON events)   [string]\n  -f, --file         file(s) to attach to message   [array]\n      --title        title for the session   [string]\n      --dir          directory to run in   [string]\n      --variant      model variant   [string]\n      --auto         auto-approve permissions that are not explicitly denied   [boolean]\n",
    );
    if standalone {
        h.push_str("      --standalone   run without the background service   [boolean]\n");
    }
    h
}

struct Args {
    file: Option<String>,
    agent: Option<String>,
    title: Option<String>,
    model: Option<String>,
    variant: Option<String>,
    auto: bool,
    standalone: bool,
}

fn parse(args: &[String]) -> Args {
    let mut a = Args {
        file: None,
        agent: None,
        title: None,
        model: None,
        variant: None,
        auto: false,
        standalone: false,
    };
    let mut i = 0;
    while i < args.len() {
        // `--name=value` (how the bridge passes every value) or `--name value`.
        let (name, mut value) = match args[i].split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (args[i].as_str(), None),
        };
        let mut next = || {
            value.take().or_else(|| {
                i += 1;
                args.get(i).cloned()
            })
        };
        match name {
            "-f" | "--file" => a.file = next(),
            "--agent" => a.agent = next(),
            "--title" => a.title = next(),
            "-m" | "--model" => a.model = next(),
            "--variant" => a.variant = next(),
            "--format" => {
                next();
            }
            "--auto" => a.auto = true,
            "--standalone" => a.standalone = true,
            _ => {}
        }
        i += 1;
    }
    a
}

fn report(args: &Args, stdin: &str) -> String {
    let file_bytes = args
        .file
        .as_ref()
        .and_then(|f| std::fs::metadata(f).ok())
        .map(|m| m.len().to_string())
        .unwrap_or_else(|| "-".into());
    let dropped: Vec<&str> = [
        "OPENCODE_SERVER_PASSWORD",
        "OPENCODE_SERVER_USERNAME",
        "OPENCODE_PID",
        "OPENCODE_RUN_ID",
    ]
    .into_iter()
    .filter(|k| std::env::var_os(k).is_some())
    .collect();
    let config = std::env::var("OPENCODE_CONFIG_CONTENT").unwrap_or_default();
    let cwd = std::env::current_dir()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!(
        "stdin_bytes={} file={} file_bytes={} pwd={} cwd={} agent={} title={} model={} variant={} auto={} standalone={} dropped_env={} config={}",
        stdin.len(),
        args.file.as_deref().unwrap_or("-"),
        file_bytes,
        std::env::var("PWD").unwrap_or_default(),
        cwd,
        args.agent.as_deref().unwrap_or("-"),
        args.title.as_deref().unwrap_or("-"),
        args.model.as_deref().unwrap_or("-"),
        args.variant.as_deref().unwrap_or("-"),
        args.auto,
        args.standalone,
        if dropped.is_empty() {
            "-".to_owned()
        } else {
            dropped.join(",")
        },
        config,
    )
}

fn ok_run(out: &mut impl Write, args: &Args, stdin: &str) {
    let r = report(args, stdin);
    if let Ok(path) = std::env::var("FAKE_OPENCODE_RECORD") {
        let _ = std::fs::write(path, &r);
    }
    emit(out, step_start("msg_1"));
    emit(out, text("msg_1", &r));
    emit(out, step_finish("msg_1"));
}

/// An event moved into session `sid`.
fn in_session(mut v: serde_json::Value, sid: &str) -> serde_json::Value {
    v["sessionID"] = sid.into();
    if v.get("part").is_some() {
        v["part"]["sessionID"] = sid.into();
    }
    v
}

/// Where opencode 1.18 keeps its store (without the release-channel variants).
fn store_path() -> Option<std::path::PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/share")))?
        .join("opencode");
    match std::env::var_os("OPENCODE_DB").filter(|v| !v.is_empty()) {
        Some(db) if Path::new(&db).is_absolute() => Some(db.into()),
        Some(db) => Some(data.join(db)),
        None => Some(data.join("opencode.db")),
    }
}

/// Records a session with a user message and one finished assistant message of `agent` on
/// `model` in opencode's store (creating the tables it needs), as opencode would; returns its id.
fn record_session(args: &Args, agent: &str, model: &str, answer: &str) -> Result<String, String> {
    let path = store_path().ok_or("no HOME or XDG_DATA_HOME")?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let db = rusqlite::Connection::open(&path).map_err(|e| e.to_string())?;
    db.busy_timeout(Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS session (id text PRIMARY KEY, project_id text NOT NULL, parent_id text, \
           slug text NOT NULL, directory text NOT NULL, title text NOT NULL, version text NOT NULL, \
           agent text, model text, time_created int NOT NULL, time_updated int NOT NULL); \
         CREATE TABLE IF NOT EXISTS message (id text PRIMARY KEY, session_id text NOT NULL, \
           time_created int NOT NULL, time_updated int NOT NULL, data text NOT NULL); \
         CREATE TABLE IF NOT EXISTS part (id text PRIMARY KEY, message_id text NOT NULL, \
           session_id text NOT NULL, time_created int NOT NULL, time_updated int NOT NULL, data text NOT NULL);",
    )
    .map_err(|e| e.to_string())?;
    let now = now_ms() as i64;
    let tag = format!("{now:013}{:05}", std::process::id() % 100_000);
    let sid = format!("ses_fakerec{tag}");
    let (provider, model_id) = model.split_once('/').unwrap_or(("fk", model));
    let dir = std::env::var("PWD").unwrap_or_default();
    let user = serde_json::json!({"role":"user","time":{"created":now},"agent":agent,
        "model":{"providerID":provider,"modelID":model_id}});
    let assistant = serde_json::json!({"parentID":format!("msg_{tag}a"),"role":"assistant",
        "mode":agent,"agent":agent,"path":{"cwd":dir,"root":"/"},"cost":0,
        "tokens":{"input":8,"output":3,"reasoning":0,"cache":{"read":0,"write":0}},
        "modelID":model_id,"providerID":provider,"time":{"created":now + 1,"completed":now + 2},
        "finish":"stop"});
    let text =
        serde_json::json!({"type":"text","text":answer,"time":{"start":now + 1,"end":now + 2}});
    let tx = db.unchecked_transaction().map_err(|e| e.to_string())?;
    tx.execute(
        "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version, agent, model, time_created, time_updated) \
         VALUES (?1, 'global', NULL, 'fake', ?2, ?3, '1.18.33', ?4, ?5, ?6, ?7)",
        rusqlite::params![
            sid,
            dir,
            args.title.as_deref().unwrap_or("fake session"),
            agent,
            serde_json::json!({"id":model_id,"providerID":provider}).to_string(),
            now,
            now + 2
        ],
    )
    .map_err(|e| e.to_string())?;
    for (id, created, data) in [
        (format!("msg_{tag}a"), now, user.to_string()),
        (format!("msg_{tag}b"), now + 1, assistant.to_string()),
    ] {
        tx.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?3, ?4)",
            rusqlite::params![id, sid, created, data],
        )
        .map_err(|e| e.to_string())?;
    }
    tx.execute(
        "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
        rusqlite::params![format!("prt_{tag}"), format!("msg_{tag}b"), sid, now + 2, text.to_string()],
    )
    .map_err(|e| e.to_string())?;
    tx.commit().map_err(|e| e.to_string())?;
    Ok(sid)
}

fn spawn_tree() {
    // Each descendant writes its own pid once it is in its final state (TERM ignored, new
    // session), and the fake waits for that line before going on, so a test that reads the
    // pidfile never sees a child that has not yet trapped or left the group: on a loaded
    // machine a fixed sleep was not enough.
    let pidfile = std::env::var("FAKE_OPENCODE_PIDFILE").ok();
    let note = |sh: &str| match &pidfile {
        Some(p) => format!("{sh}; echo $$ >> '{p}'"),
        None => sh.to_string(),
    };
    // Ignored signals stay ignored across exec, so `sleep` ignores SIGTERM too.
    let grandchild = Command::new("sh")
        .args([
            "-c",
            &format!("{}; exec sleep 100000", note("trap '' TERM")),
        ])
        .stdin(Stdio::null())
        .spawn();
    wait_for_pid_lines(pidfile.as_deref(), usize::from(grandchild.is_ok()));
    let escapee = Command::new("setsid")
        .args(["sh", "-c", &format!("{}; exec sleep 100001", note(":"))])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn();
    wait_for_pid_lines(
        pidfile.as_deref(),
        usize::from(grandchild.is_ok()) + usize::from(escapee.is_ok()),
    );
}

/// Waits (up to 10 s) until `path` holds `want` lines.
fn wait_for_pid_lines(path: Option<&str>, want: usize) {
    let Some(path) = path else { return };
    for _ in 0..1000 {
        let have = std::fs::read_to_string(path)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if have >= want {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--version" || a == "-v")
        && args.first().map(String::as_str) != Some("run")
    {
        println!(
            "{}",
            std::env::var("FAKE_OPENCODE_VERSION").unwrap_or_else(|_| "1.18.33".into())
        );
        return;
    }
    if args.first().map(String::as_str) != Some("run")
        && std::env::var("FAKE_OPENCODE_SCENARIO").as_deref() == Ok("tui")
    {
        hang();
    }
    if args.first().map(String::as_str) != Some("run") {
        eprintln!("fake-opencode: only `run`, `--version` and `run --help` are supported");
        std::process::exit(2);
    }
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!(
            "{}",
            help(std::env::var("FAKE_OPENCODE_STANDALONE").as_deref() == Ok("1"))
        );
        return;
    }
    let parsed = parse(&args[1..]);
    let mut stdin = String::new();
    let _ = std::io::stdin().read_to_string(&mut stdin);
    let scenario = std::env::var("FAKE_OPENCODE_SCENARIO")
        .ok()
        .unwrap_or_else(|| {
            stdin
                .lines()
                .find_map(|l| l.strip_prefix("scenario: "))
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|| "ok".into())
        });
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match scenario.as_str() {
        "ok" => ok_run(&mut out, &parsed, &stdin),
        "fallback" => {
            eprintln!(
                "! agent \"{}\" is a subagent, not a primary agent. Falling back to default agent",
                parsed.agent.as_deref().unwrap_or("?")
            );
            ok_run(&mut out, &parsed, &stdin);
        }
        s if s.starts_with("writes:") => {
            let dir = std::path::PathBuf::from(std::env::var("PWD").unwrap_or_default());
            for p in s[7..].split(',').filter(|p| !p.is_empty()) {
                let path = dir.join(p);
                if let Some(parent) = path.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .and_then(|mut f| f.write_all(b"# written by fake-opencode\n"));
                if let Err(e) = written {
                    eprintln!("fake-opencode: cannot write {}: {e}", path.display());
                    std::process::exit(1);
                }
            }
            ok_run(&mut out, &parsed, &stdin);
        }
        s if s.starts_with("recorded:") => {
            let (agent, model) = s[9..].split_once(':').unwrap_or(("-", "-"));
            let pick = |given: &str, asked: Option<&str>, default: &str| match given {
                "-" => asked.unwrap_or(default).to_owned(),
                other => other.to_owned(),
            };
            let agent = pick(agent, parsed.agent.as_deref(), "build");
            let model = pick(model, parsed.model.as_deref(), "fk/ok");
            let model = model.split('#').next().unwrap_or_default().to_owned();
            let report = report(&parsed, &stdin);
            match record_session(&parsed, &agent, &model, &report) {
                Ok(sid) => {
                    for v in [
                        step_start("msg_1"),
                        text("msg_1", &report),
                        step_finish("msg_1"),
                    ] {
                        emit(&mut out, in_session(v, &sid));
                    }
                }
                Err(e) => {
                    eprintln!("fake-opencode: cannot record the session: {e}");
                    std::process::exit(1);
                }
            }
        }
        s if s.starts_with("exit:") => {
            let code: i32 = s[5..].parse().unwrap_or(1);
            eprintln!("fake-opencode: failing on purpose with code {code}");
            std::process::exit(code);
        }
        "replay" => {
            let path = std::env::var("FAKE_OPENCODE_EVENTS").unwrap_or_default();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for line in text.lines() {
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
            let code = std::env::var("FAKE_OPENCODE_EXIT")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            std::process::exit(code);
        }
        "flood" => {
            let mb: usize = std::env::var("FAKE_OPENCODE_FLOOD_MB")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(50);
            let chunk = "x".repeat(64 * 1024);
            let mut written = 0usize;
            emit(&mut out, step_start("msg_1"));
            while written < mb * 1024 * 1024 {
                emit(&mut out, text("msg_1", &chunk));
                written += chunk.len();
            }
            emit(&mut out, text("msg_2", "FLOOD END"));
            emit(&mut out, step_finish("msg_2"));
        }
        "cut" => {
            emit(&mut out, step_start("msg_1"));
            let line = text("msg_1", "An answer whose end never arrives").to_string();
            let _ = out.write_all(&line.as_bytes()[..line.len() / 2]);
            let _ = out.flush();
        }
        "hang" => {
            emit(&mut out, step_start("msg_1"));
            hang();
        }
        "silent" => hang(),
        "tree" => {
            spawn_tree();
            emit(&mut out, step_start("msg_1"));
            hang();
        }
        "ignore-term" => {
            if std::env::var_os("FAKE_OPENCODE_TERM_IGNORED").is_none() {
                // Re-exec through a shell that ignores SIGTERM; the pid stays the same.
                use std::os::unix::process::CommandExt;
                let me = std::env::current_exe().expect("own path");
                let err = Command::new("sh")
                    .arg("-c")
                    .arg("trap '' TERM; exec \"$0\" \"$@\"")
                    .arg(me)
                    .args(&args)
                    .env("FAKE_OPENCODE_TERM_IGNORED", "1")
                    .env("FAKE_OPENCODE_SCENARIO", "ignore-term")
                    .exec();
                eprintln!("fake-opencode: exec failed: {err}");
                std::process::exit(3);
            }
            emit(&mut out, step_start("msg_1"));
            hang();
        }
        "overflow-loop" => loop {
            emit(
                &mut out,
                serde_json::json!({"type":"error","timestamp":now_ms(),"sessionID":SESSION,
                    "error":{"name":"ContextOverflowError","data":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 200000 tokens."}}}),
            );
            std::thread::sleep(Duration::from_millis(50));
        },
        s if s.starts_with("flaky:") => {
            let fails: u32 = s[6..].parse().unwrap_or(1);
            let counter = std::env::var("FAKE_OPENCODE_COUNTER").unwrap_or_default();
            let n: u32 = std::fs::read_to_string(&counter)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            if !counter.is_empty() {
                let _ = std::fs::write(Path::new(&counter), (n + 1).to_string());
            }
            if n < fails {
                emit(
                    &mut out,
                    serde_json::json!({"type":"error","timestamp":now_ms(),"sessionID":SESSION,
                        "error":{"name":"APIError","data":{"message":"Rate limit reached for requests","statusCode":429,"isRetryable":true,
                        "responseBody":"{\"error\":{\"message\":\"Rate limit reached for requests\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}"}}}),
                );
                std::process::exit(1);
            }
            ok_run(&mut out, &parsed, &stdin);
        }
        other => {
            eprintln!("fake-opencode: unknown scenario {other}");
            std::process::exit(2);
        }
    }
}
