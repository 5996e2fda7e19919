//! Delegated tasks (`opencode_start`, `opencode_status`, `opencode_result`, `opencode_wait`,
//! `opencode_cancel`, `opencode_list`) and the process table (`opencode_processes`).

use crate::human::{clip, dir_tail, duration_ms, one_line, table, tokens};
use run_supervisor::{
    CancelOutcome, ChangedFiles, OpencodeProcess, Runner, TaskId, TaskOutput, TaskSnapshot,
    TaskState, ToolCall, WaitReport,
};

/// What `opencode_start` reports about an accepted task.
#[derive(Debug, Clone)]
pub struct Started<'a> {
    pub id: TaskId,
    pub agent: &'a str,
    /// The mode with its reason, e.g. `sensitive (from env OPENCODE_MODE)`.
    pub mode: &'a str,
    pub tier: &'a str,
    pub title: &'a str,
    pub cwd: &'a str,
    /// The delegation root (every task's cwd is inside it).
    pub root: &'a str,
    pub model: Option<&'a str>,
    /// A warning about an explicit title that breaks the convention.
    pub title_warning: Option<&'a str>,
    /// The caller's label.
    pub label: Option<&'a str>,
    /// The session a follow-up was sent to.
    pub continues: Option<&'a str>,
    /// Where it runs: `run`, `serve` or `serve:<server>`.
    pub engine: &'a str,
}

/// `opencode_start`.
pub fn started(s: &Started<'_>) -> String {
    let mut out = format!(
        "started task {}: agent {}, tier {}, mode {}\ntitle: {}\ncwd: {} (root {})\n",
        s.id, s.agent, s.tier, s.mode, s.title, s.cwd, s.root
    );
    if let Some(m) = s.model {
        out.push_str(&format!("model: {m}\n"));
    }
    out.push_str(&format!(
        "runner: {}  engine: {}\n",
        Runner::for_model(s.model),
        engine_word(s.engine)
    ));
    if let Some(l) = s.label {
        out.push_str(&format!("label: {l}\n"));
    }
    if let Some(sid) = s.continues {
        out.push_str(&format!(
            "follow-up in session {sid} (it keeps its id and title)\n"
        ));
    }
    if let Some(w) = s.title_warning {
        out.push_str(&format!("warning: {w}\n"));
    }
    out.push_str(&format!(
        "next: opencode_wait ids=[\"{id}\"] returns when it ends (opencode_status id={id} shows progress), then opencode_result id={id}; treat the result as an untrusted draft and verify it.\n",
        id = s.id
    ));
    out
}

/// `opencode_start` with a `request_id` an earlier start used: that task, as it is now.
pub fn repeated_request(request_id: &str, s: &TaskSnapshot) -> String {
    format!(
        "request_id {:?} already started task {} (nothing new was started); it is now:\n{}",
        clip(&one_line(request_id, 200), 128),
        s.id,
        status(s)
    )
}

/// How a task's engine is named to people: `run`, `serve (the bridge's local server)`,
/// `server devbox`.
pub fn engine_word(engine: &str) -> String {
    match engine {
        "serve" => "serve (the bridge's local opencode serve)".to_owned(),
        e => match e.strip_prefix("serve:") {
            Some(name) => format!("server {name}"),
            None => e.to_owned(),
        },
    }
}

fn state_word(s: &TaskSnapshot) -> String {
    match s.state {
        _ if s.orphaned => format!(
            "orphaned (pid {}, running for {})",
            s.pid.map_or_else(|| "?".into(), |p| p.to_string()),
            duration_ms(s.elapsed.as_millis() as u64)
        ),
        TaskState::Running if s.quiet => "running (quiet)".into(),
        other => match s.other_bridge.filter(|_| !other.is_finished()) {
            Some(pid) => format!("{} (in bridge pid {pid})", other.as_str()),
            None => other.as_str().to_string(),
        },
    }
}

/// `opencode_status`: state, timing, attempts, session, for a failure its kind and advice, and
/// the next step.
pub fn status(s: &TaskSnapshot) -> String {
    let mut out = status_header(s);
    match s.state {
        TaskState::Succeeded => out.push_str(&format!(
            "next: opencode_result id={} (verify it before relying on it)\n",
            s.id
        )),
        _ if s.orphaned => out.push_str(&format!(
            "the bridge that started it is gone but its opencode run goes on; opencode_cancel id={} stops it, or opencode_wait ids=[\"{}\"] waits for it\n",
            s.id, s.id
        )),
        TaskState::Starting | TaskState::Running | TaskState::Retrying => {
            match s.other_bridge {
                Some(pid) => out.push_str(&format!(
                    "still working in another bridge (pid {pid}); only that bridge can cancel it; opencode_wait ids=[\"{}\"] waits for it\n",
                    s.id
                )),
                None => out.push_str(&format!(
                    "still working: opencode_wait ids=[\"{id}\"] waits for it, opencode_cancel id={id} stops it\n",
                    id = s.id
                )),
            }
        }
        _ => {}
    }
    out
}

/// The part of a status that `opencode_result` repeats (no next step: the result is it).
fn status_header(s: &TaskSnapshot) -> String {
    let mut out = format!(
        "task {}  {}  {}  elapsed {}  attempt {}\n",
        s.id,
        state_word(s),
        s.agent,
        duration_ms(s.elapsed.as_millis() as u64),
        s.attempts.max(1)
    );
    out.push_str(&format!("title: {}\n", s.title));
    if let Some(l) = &s.label {
        out.push_str(&format!("label: {l}\n"));
    }
    out.push_str(&format!("cwd: {}\n", s.cwd.display()));
    if let Some(sid) = &s.continues {
        out.push_str(&format!("follow-up in session {sid}\n"));
    }
    out.push_str(&format!(
        "session: {}\n",
        s.session_id.as_deref().unwrap_or("(not known yet)")
    ));
    if let Some(m) = &s.model {
        out.push_str(&format!("model: {m}\n"));
    }
    out.push_str(&format!(
        "runner: {}  engine: {}\n",
        Runner::for_model(s.model.as_deref()),
        engine_word(&s.engine)
    ));
    // Which opencode line ran it, when it is not opencode 1 (whose version is not news).
    if let Some(v) = s
        .opencode_version
        .as_deref()
        .filter(|v| v.ends_with("v2 contract"))
    {
        out.push_str(&format!("opencode: {}\n", one_line(v, 200)));
    }
    if let Some(fence) = &s.sandbox {
        out.push_str(&format!("sandbox: {}\n", one_line(fence, 400)));
    }
    out.push_str(&format!(
        "tokens: {}  tool calls: {}",
        tokens(s.tokens.input, s.tokens.output),
        s.tool_calls
    ));
    if s.cost > 0.0 {
        out.push_str(&format!("  cost: ${:.4}", s.cost));
    }
    out.push('\n');
    if let Some(pid) = s.pid.filter(|_| !s.state.is_finished()) {
        out.push_str(&format!("pid {pid}"));
        if let Some(age) = s.last_event_age {
            out.push_str(&format!(
                ", last event {} ago",
                duration_ms(age.as_millis() as u64)
            ));
        }
        out.push('\n');
    }
    if let Some(wait) = s.retry_in {
        out.push_str(&format!(
            "next attempt in {}\n",
            duration_ms(wait.as_millis() as u64)
        ));
    }
    if let Some(w) = &s.provider_wait {
        out.push_str(&provider_wait_line(w, std::time::SystemTime::now()));
        out.push('\n');
    }
    if let Some(w) = &s.provider_stall {
        out.push_str(&provider_stall_line(w, std::time::SystemTime::now()));
        out.push('\n');
    }
    if let Some(f) = &s.failure {
        out.push_str(&format!(
            "failure: {}: {}\nadvice: {}\n",
            f.kind.as_str(),
            one_line(&f.message, 600),
            f.advice
        ));
    }
    if let Some(code) = s.exit_code.filter(|_| s.state.is_finished()) {
        out.push_str(&format!("exit code: {code}\n"));
    }
    out.push_str(&checks_line(s));
    out
}

/// `verify: passed` / `verify: failed (exit 1)` and `output_schema: valid` / `invalid`, one
/// line each, for a task that has them.
fn checks_line(s: &TaskSnapshot) -> String {
    let mut out = String::new();
    if let Some(v) = &s.verify {
        out.push_str(&format!("verify: {}\n", v.line()));
    }
    if let Some(valid) = s.schema_valid {
        out.push_str(if valid {
            "output_schema: valid (structuredContent.output holds the parsed answer)\n"
        } else {
            "output_schema: invalid\n"
        });
    }
    out
}

/// Lines of a passing verify command's output a result shows (a failing one's whole kept end).
const VERIFY_PASSED_LINES: usize = 5;

/// `opencode_result`: the status header, then the agent's text (already cut by the
/// supervisor), tool calls, and stderr when the task failed.
pub fn result(o: &TaskOutput) -> String {
    let mut out = status_header(&o.snapshot);
    if !o.tool_calls.is_empty() {
        out.push_str(&format!("tool calls ({}):\n", o.tool_calls.len()));
        let skip = o.tool_calls.len().saturating_sub(30);
        if skip > 0 {
            out.push_str(&format!("  ... {skip} earlier calls\n"));
        }
        for c in o.tool_calls.iter().skip(skip) {
            let mut line = format!("  -> {}", c.tool);
            if let Some(t) = &c.title {
                // A file named from the task's cwd, like the changed files.
                let t = run_supervisor::changes::relative_to(t, &o.snapshot.cwd);
                line.push_str(&format!("({})", clip(&one_line(&t, 200), 120)));
            }
            line.push_str(&format!(" [{}]", c.status));
            if let Some(e) = &c.error {
                line.push_str(&format!(" => {}", one_line(e, 160)));
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    if let Some(line) = fence_refusals(&o.tool_calls) {
        out.push_str(&line);
    }
    if let Some(c) = &o.changed_files {
        out.push_str(&changed_files(c));
    }
    if let Some(a) = &o.audit {
        out.push_str(&format!("{}\n", one_line(a, 2000)));
    }
    // A failed verify's output is what to read first (its kept end); a passing one's last
    // lines say what passed.
    if let (Some(v), Some(tail)) = (&o.snapshot.verify, &o.verify_output) {
        let tail = tail.trim_end();
        let shown = if v.passed {
            let lines: Vec<&str> = tail.lines().collect();
            lines[lines.len().saturating_sub(VERIFY_PASSED_LINES)..].join("\n")
        } else {
            tail.to_owned()
        };
        out.push_str("verify output (end):\n");
        out.push_str(if shown.is_empty() { "(none)" } else { &shown });
        out.push('\n');
    }
    out.push_str(&"-".repeat(40));
    out.push('\n');
    let text = o.text.text.trim();
    if text.is_empty() {
        out.push_str(match o.snapshot.state {
            s if s.is_finished() => "(the agent wrote no text)\n",
            _ => "(no text yet)\n",
        });
    } else {
        if o.text.truncated {
            out.push_str(&format!(
                "[output cut: {} characters in total; pass head or tail to choose a part]\n",
                o.text.total_chars
            ));
        }
        out.push_str(text);
        out.push('\n');
    }
    let failed = matches!(o.snapshot.state, TaskState::Failed | TaskState::TimedOut);
    if failed && !o.stderr_tail.trim().is_empty() {
        out.push_str("stderr (end):\n");
        out.push_str(o.stderr_tail.trim_end());
        out.push('\n');
    }
    if o.stdout_bytes_dropped > 0 {
        out.push_str(&format!(
            "note: {} bytes of the agent's text were cut from the middle (output cap)\n",
            o.stdout_bytes_dropped
        ));
    }
    out
}

/// What the kernel refused a run, from its tool calls: `fence: the kernel refused 2 tool calls
/// (write ×2)`, or `None` when none was refused. A refusal is a call in error whose error is the
/// file system's permission error (`PermissionDenied`, `EACCES`, `Permission denied`,
/// `Operation not permitted`), which is what a write or read outside the fence gets.
pub fn fence_refusals(calls: &[ToolCall]) -> Option<String> {
    const MARKS: [&str; 4] = [
        "PermissionDenied",
        "EACCES",
        "Permission denied",
        "Operation not permitted",
    ];
    let mut by_tool: Vec<(&str, usize)> = Vec::new();
    for c in calls {
        let refused = c
            .error
            .as_deref()
            .is_some_and(|e| MARKS.iter().any(|m| e.contains(m)));
        if !refused {
            continue;
        }
        match by_tool.iter_mut().find(|(t, _)| *t == c.tool) {
            Some((_, n)) => *n += 1,
            None => by_tool.push((&c.tool, 1)),
        }
    }
    let total: usize = by_tool.iter().map(|(_, n)| n).sum();
    (total > 0).then(|| {
        let tools: Vec<String> = by_tool
            .iter()
            .map(|(t, n)| format!("{t} \u{d7}{n}"))
            .collect();
        format!(
            "fence: the kernel refused {total} tool call{} ({}): the agent tried to read or write outside what its run may touch\n",
            if total == 1 { "" } else { "s" },
            tools.join(", ")
        )
    })
}

/// The files a task changed: `changed files (N):` then `  path +a -d (status)` lines.
pub fn changed_files(c: &ChangedFiles) -> String {
    let how = match c.source {
        run_supervisor::ChangeSource::Git => "from git",
        run_supervisor::ChangeSource::ToolCalls => {
            "from the agent's write/edit calls, lines as their inputs tell"
        }
    };
    if c.files.is_empty() {
        return format!("changed files: none ({how})\n");
    }
    let mut out = format!("changed files ({}, {how}):\n", c.files.len());
    const SHOWN: usize = 100;
    for f in c.files.iter().take(SHOWN) {
        let n = |v: Option<u64>| v.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
        let stat = match (f.added, f.removed) {
            (Some(a), Some(d)) => format!(" +{a} -{d}"),
            _ if c.source == run_supervisor::ChangeSource::Git => " (binary)".into(),
            (None, None) => " (lines unknown)".into(),
            (a, d) => format!(" +{} -{}", n(a), n(d)),
        };
        out.push_str(&format!("  {}{stat} ({})\n", f.path, f.status));
    }
    if c.files.len() > SHOWN {
        out.push_str(&format!("  ... {} more\n", c.files.len() - SHOWN));
    }
    out
}

/// `opencode_wait`: which tasks finished (with their outcome) and which still run.
pub fn waited(r: &WaitReport, all: bool, timeout_s: u64) -> String {
    let asked = r.finished.len() + r.running.len();
    let mut out = if r.satisfied {
        if all || r.running.is_empty() {
            format!("all {asked} task(s) finished\n")
        } else {
            format!(
                "{} of {asked} task(s) finished; {} still running\n",
                r.finished.len(),
                r.running.len()
            )
        }
    } else {
        format!(
            "waited {timeout_s}s: {} of {asked} task(s) finished, {} still running; call opencode_wait again to keep waiting\n",
            r.finished.len(),
            r.running.len()
        )
    };
    for s in &r.finished {
        let mut line = format!("finished: task {}  {}", s.id, s.state.as_str());
        if let Some(f) = &s.failure {
            line.push_str(&format!(
                " ({}: {})",
                f.kind.as_str(),
                clip(&one_line(&f.message, 200), 160)
            ));
        }
        if let Some(v) = &s.verify {
            line.push_str(&format!("  verify: {}", v.line()));
        }
        if let Some(valid) = s.schema_valid {
            line.push_str(if valid {
                "  output_schema: valid"
            } else {
                "  output_schema: invalid"
            });
        }
        line.push_str(&format!(
            "  {}  {}",
            duration_ms(s.elapsed.as_millis() as u64),
            s.title
        ));
        out.push_str(&line);
        out.push('\n');
    }
    for s in &r.running {
        out.push_str(&format!(
            "running: task {}  {}  {}  {}\n",
            s.id,
            state_word(s),
            duration_ms(s.elapsed.as_millis() as u64),
            s.title
        ));
    }
    for id in &r.unknown {
        out.push_str(&format!(
            "unknown: task {id} (opencode_list shows the known tasks)\n"
        ));
    }
    if !r.finished.is_empty() {
        let ids: Vec<String> = r.finished.iter().map(|s| format!("id={}", s.id)).collect();
        out.push_str(&format!(
            "next: opencode_result {} (one call each); verify what it did\n",
            ids.join(", ")
        ));
    }
    out
}

/// `opencode_cancel`.
pub fn cancelled(id: TaskId, outcome: CancelOutcome) -> Result<String, String> {
    match outcome {
        CancelOutcome::Cancelled => Ok(format!(
            "task {id} cancelled: its process group was stopped (SIGTERM, then SIGKILL after the grace period)\n"
        )),
        CancelOutcome::AlreadyFinished(state) => Ok(format!(
            "task {id} had already ended ({state}); nothing was signalled\n"
        )),
        CancelOutcome::NotFound => Err(unknown_task(id)),
        CancelOutcome::OtherBridge { pid } => Err(format!(
            "task {id} is run by another bridge that is still running (pid {pid}); cancel it from that bridge, or stop that bridge"
        )),
    }
}

/// Who holds a session that a follow-up (`opencode_start` with `session`) would prompt too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionHolder {
    /// An unfinished task of this bridge.
    OwnTask {
        /// The task.
        id: TaskId,
    },
    /// An unfinished task of another live bridge sharing the state directory.
    OtherBridge {
        /// The task.
        id: TaskId,
        /// That bridge's pid.
        pid: i32,
    },
    /// A task whose bridge is gone while its run goes on.
    Orphan {
        /// The task.
        id: TaskId,
        /// The run's pid, when known.
        pid: Option<i32>,
    },
    /// An opencode process of no bridge task that has the session (`-s`): a TUI or a run.
    Process {
        /// `tui` or `run`.
        kind: String,
        /// Its pid.
        pid: i32,
    },
    /// opencode's record says the session is working (its last message has no outcome yet),
    /// and no process can be named.
    Working,
}

/// The refusal of a follow-up into a busy session: who holds it and what to do.
pub fn follow_up_refused(session: &str, holder: &SessionHolder) -> String {
    let (who, what) = match holder {
        SessionHolder::OwnTask { id } => (
            format!("task {id} of this bridge"),
            format!("wait for it (opencode_wait ids=[\"{id}\"]) or cancel it (opencode_cancel id={id})"),
        ),
        SessionHolder::OtherBridge { id, pid } => (
            format!("task {id} of another bridge (pid {pid})"),
            format!("wait for it (opencode_wait ids=[\"{id}\"]) or cancel it from that bridge"),
        ),
        SessionHolder::Orphan { id, pid } => (
            match pid {
                Some(pid) => format!("task {id}, whose bridge is gone (its run, pid {pid}, goes on)"),
                None => format!("task {id}, whose bridge is gone"),
            },
            format!("wait for it (opencode_wait ids=[\"{id}\"]) or cancel it (opencode_cancel id={id})"),
        ),
        SessionHolder::Process { kind, pid } if kind == "tui" => (
            format!("an opencode TUI (pid {pid})"),
            "continue there, or close the session in that TUI first".to_owned(),
        ),
        SessionHolder::Process { kind, pid } => (
            format!("an opencode {kind} the bridge did not start (pid {pid})"),
            "wait until it ends (opencode_processes shows it)".to_owned(),
        ),
        SessionHolder::Working => (
            "an opencode process the bridge cannot name (its last message has no outcome yet)".to_owned(),
            "wait until it ends (opencode_sessions state=running lists it); a session left by a killed run reads `stale?` after 45 minutes of quiet and is free then".to_owned(),
        ),
    };
    format!(
        "refused: session {session} is busy, held by {who}; two prompters in one session make it run away. To send the follow-up, {what}; or start a new task without `session`."
    )
}

/// Why a read-only run was refused after opencode was asked for its resolved permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOnlyRefusal {
    /// A rule opencode resolves after the run's `"*": "deny"` still lets something through,
    /// even with its own key denied in the run's config.
    Undone {
        /// The rule's permission glob (`b*sh`, `mytool`, `*`).
        permission: String,
        /// Its pattern.
        pattern: String,
        /// `allow` or `ask`.
        action: String,
        /// The config file that sets it, when the bridge can tell.
        source: Option<String>,
    },
    /// A project or plugin tool has the name of a read tool the run allows.
    ShadowedTool {
        /// `read`, `glob` or `grep`.
        tool: String,
    },
    /// opencode does not list the agent under the run's config.
    Missing,
    /// opencode could not be asked although it answers for this directory.
    NotAsked {
        /// Why, one line.
        why: String,
    },
}

/// The refusal of a read-only run whose permissions opencode does not resolve as asked.
pub fn read_only_refused(agent: &str, why: &ReadOnlyRefusal) -> String {
    match why {
        ReadOnlyRefusal::Undone {
            permission,
            pattern,
            action,
            source,
        } => {
            let from = source
                .as_deref()
                .map(|s| format!(" (set in {s})"))
                .unwrap_or_default();
            format!(
                "refused: read-only agent `{agent}` would not be read-only here: opencode resolves permission `{permission}` (pattern `{pattern}`) to `{action}` after the run's `\"*\": \"deny\"`{from}, even with that key denied in the run's config. Remove it from the agent's `agent`/`mode` config, or choose another agent."
            )
        }
        ReadOnlyRefusal::ShadowedTool { tool } => format!(
            "refused: read-only agent `{agent}`: a project or plugin tool is named `{tool}`, like the built-in read tool read-only runs allow, so it would be allowed too. Rename that tool (in .opencode/tool/ or its plugin), or choose another agent."
        ),
        ReadOnlyRefusal::Missing => format!(
            "refused: opencode does not list agent `{agent}` under the read-only run's config; check `opencode agent list` in that directory, or choose another agent."
        ),
        ReadOnlyRefusal::NotAsked { why } => format!(
            "refused: read-only agent `{agent}`: opencode could not be asked for the run's permissions ({why}), and a read-only run starts only once they are checked. Retry; `opencode serve` in that directory shows what fails."
        ),
    }
}

/// The warning on a read-only run whose permissions could not be checked with opencode because
/// the roster is not asked of opencode at all.
pub fn read_only_unchecked(why: &str) -> String {
    format!(
        "warning: read-only permissions not checked with opencode ({why}): the run is default-deny by its config alone\n"
    )
}

/// The error for an id no task has.
pub fn unknown_task(id: TaskId) -> String {
    format!(
        "no task {id} is known to this bridge or its task registry; opencode_list shows the delegated tasks (for any opencode session use opencode_sessions)"
    )
}

/// `opencode_list`: newest first.
pub fn task_list(tasks: &[TaskSnapshot], running: usize, limit: usize) -> String {
    let mut out = format!(
        "{} delegated task(s); {running} unfinished (limit {limit})\n",
        tasks.len()
    );
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .rev()
        .map(|s| {
            vec![
                format!("task {}", s.id),
                state_word(s),
                s.agent.clone(),
                s.engine.clone(),
                duration_ms(s.elapsed.as_millis() as u64),
                tokens(s.tokens.input, s.tokens.output),
                s.session_id.clone().unwrap_or_else(|| "-".into()),
                match &s.label {
                    Some(l) => format!("[{l}] {}", s.title),
                    None => s.title.clone(),
                },
            ]
        })
        .collect();
    for line in table(&rows, &[4, 5]) {
        out.push_str(&line);
        out.push('\n');
    }
    if tasks.is_empty() {
        out.push_str("(none yet; opencode_sessions lists every opencode session)\n");
    }
    out
}

/// A warm server of the state directory, as `opencode_processes` and `doctor` show it: whose it
/// is, and the tasks on it or how long it has been idle.
pub fn warm_server(w: &run_supervisor::WarmServer) -> String {
    let whose = if w.held {
        "warm server held by this bridge"
    } else {
        "warm server not held by this bridge"
    };
    match w.tasks.as_slice() {
        [] => format!("{whose}, idle {}", duration_ms(w.idle.as_millis() as u64)),
        tasks => {
            let ids: Vec<String> = tasks.iter().map(u64::to_string).collect();
            format!(
                "{whose}: task{} {}",
                if tasks.len() == 1 { "" } else { "s" },
                ids.join(", ")
            )
        }
    }
}

/// `opencode_processes`.
pub fn processes(procs: &[OpencodeProcess]) -> String {
    let mut out = format!("{} opencode process(es)\n", procs.len());
    let header: Vec<String> = ["PID", "KIND", "ELAPSED", "AGENT", "CWD", "SESSION", "TITLE"]
        .map(String::from)
        .to_vec();
    let rows: Vec<Vec<String>> = std::iter::once(header)
        .filter(|_| !procs.is_empty())
        .chain(procs.iter().map(|p| {
            let mut what = p.title.clone().unwrap_or_default();
            if let Some(t) = p.task_id {
                what = format!("[task {t}] {what}");
            }
            if let Some(w) = &p.bridge_server {
                what = format!("[{}] {what}", warm_server(w));
            }
            vec![
                format!("pid {}", p.pid),
                p.kind.as_str().to_string(),
                duration_ms(p.elapsed.as_millis() as u64),
                p.agent.clone().unwrap_or_else(|| "-".into()),
                p.cwd
                    .as_ref()
                    .map(|c| dir_tail(&c.to_string_lossy()))
                    .unwrap_or_else(|| "?".into()),
                p.session_id.clone().unwrap_or_else(|| "-".into()),
                what,
            ]
        }))
        .collect();
    for line in table(&rows, &[2]) {
        out.push_str(&line);
        out.push('\n');
    }
    if procs.is_empty() {
        out.push_str("(no opencode process is running)\n");
    }
    out
}

/// One short live line for a task (MCP tasks' `statusMessage`, shown to the user as progress):
/// state, elapsed, tool calls, tokens, and the age of the last event or the retry wait.
pub fn status_line(s: &TaskSnapshot) -> String {
    let mut parts = vec![format!(
        "task {} {} {}",
        s.id,
        s.state,
        crate::human::duration_ms(s.elapsed.as_millis() as u64)
    )];
    parts.push(format!("agent {}", s.agent));
    if s.tool_calls > 0 {
        parts.push(format!("{} tool calls", s.tool_calls));
    }
    if s.tokens.input + s.tokens.output > 0 {
        parts.push(format!(
            "tokens {}",
            crate::human::tokens(s.tokens.input, s.tokens.output)
        ));
    }
    if let Some(w) = &s.provider_wait {
        parts.push(format!(
            "waiting on the provider's limit until {}",
            run_supervisor::utc::format(w.next.at)
        ));
    } else if let Some(w) = &s.provider_stall {
        parts.push(format!(
            "waiting on the provider's limit since {}",
            run_supervisor::utc::format(w.since)
        ));
    } else if let Some(wait) = s.retry_in {
        parts.push(format!(
            "retry {} in {}",
            s.attempts + 1,
            crate::human::duration_ms(wait.as_millis() as u64)
        ));
    } else if let Some(age) = s.last_event_age.filter(|_| !s.state.is_finished()) {
        parts.push(format!(
            "last event {} ago",
            crate::human::duration_ms(age.as_millis() as u64)
        ));
    }
    if let Some(v) = &s.verify {
        parts.push(format!("verify {}", v.line()));
    }
    if let Some(f) = &s.failure {
        parts.push(f.kind.to_string());
    }
    parts.join(" · ")
}

/// The refusal of a start while a numeric variable is outside its range (`error` is
/// `bridge_env::EnvVar::read`'s one line).
pub fn env_refusal(error: &str) -> String {
    format!(
        "refused: {error}. No task starts until it is fixed (the bridge's environment is set where it is started, e.g. the MCP server's `env` in Claude Code's config); `opencode_doctor` lists every such variable"
    )
}

/// What the server says on stderr when it starts with a numeric variable outside its range.
pub fn env_error_at_start(error: &str) -> String {
    format!("opencode-bridge: {error}; every opencode_start is refused until it is fixed")
}

/// A provider's limit in words: `quota` or `rate limit`, and its message on one line.
fn limit_words(quota: bool, message: &str) -> (&'static str, String) {
    let what = if quota { "quota" } else { "rate limit" };
    let message = if message.is_empty() {
        "no message".to_owned()
    } else {
        one_line(message, 300)
    };
    (what, message)
}

/// A running `opencode run` held by a provider's refusals: the limit, how long and how often
/// (`now` for how long). `opencode run` does not say when it tries again.
pub fn provider_stall_line(
    w: &run_supervisor::quota::ProviderStall,
    now: std::time::SystemTime,
) -> String {
    let (what, message) = limit_words(w.is_quota(), &w.message);
    format!(
        "waiting on the provider's {what}: {message}; refused {} time{} since {} ({} ago); opencode retries, and `opencode run` does not say when",
        w.refusals,
        if w.refusals == 1 { "" } else { "s" },
        run_supervisor::utc::format(w.since),
        duration_ms(w.held_for(now).as_millis() as u64)
    )
}

/// A running task whose opencode waits on a provider's limit: the limit, and when opencode
/// sends the request again (`now` for the time left).
pub fn provider_wait_line(
    w: &run_supervisor::quota::ProviderWait,
    now: std::time::SystemTime,
) -> String {
    let (what, message) = limit_words(w.is_quota(), &w.message);
    let held = if w.next.clamped {
        " (the provider asked for longer; the bridge counts at most 7 days)"
    } else {
        ""
    };
    format!(
        "waiting on the provider's {what}: {message}; opencode retries (retry {}) at {}, in {}{held}",
        w.attempt,
        run_supervisor::utc::format(w.next.at),
        duration_ms(w.wait_from(now).as_millis() as u64)
    )
}
