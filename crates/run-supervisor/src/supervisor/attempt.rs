//! Stages 3 and 4 of a task's pass, the engine and the attempts: the retry policy around a
//! task's attempts (each one [`child`](super::child)'s or, on a server,
//! [`served`](super::served)'s), and the checks after a turn.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::child::{AttemptCtx, AttemptEnd, run_attempt};
use super::record::{Save, StopReason};
use super::table::{Shared, persist};
use crate::classify::{Failure, FailureKind};
use crate::command::{self, Capabilities};
use crate::runner::backend;
use crate::spec::TaskSpec;
use crate::task::{TaskId, TaskState};

/// Restarts after opencode failed to open its store before doing anything.
const STARTUP_RETRIES: u32 = 3;

/// True when stderr shows opencode failing to open or migrate its SQLite store (seen when
/// several runs start at once on a fresh data directory).
fn store_setup_error(stderr: &str) -> bool {
    const SIGNS: &[&str] = &[
        "database is locked",
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
        "CREATE TABLE",
        "already exists",
        "migration",
    ];
    SIGNS.iter().any(|s| stderr.contains(s))
}

pub(super) async fn run_task_inner(
    shared: &Arc<Shared>,
    id: TaskId,
    mut spec: TaskSpec,
    cwd: PathBuf,
    bin: PathBuf,
    mut stop_rx: watch::Receiver<Option<StopReason>>,
) -> (TaskState, Option<Failure>) {
    let cfg = shared.config.clone();
    let timeout = spec.timeout.unwrap_or(cfg.default_timeout);
    let deadline = bridge_proc::deadline::after_tokio(timeout);
    let runner = shared.with(id, |r| r.runner).unwrap_or_default();
    let remote = shared
        .with(id, |r| r.rec.engine.clone())
        .flatten()
        .is_some_and(|e| e.starts_with("serve:"));
    let caps = if !backend(runner).traits().probes_capabilities || remote {
        Ok(Capabilities::default())
    } else {
        let env = cfg.env.clone();
        let (b, sandbox) = (bin.clone(), cfg.sandbox);
        shared
            .caps
            .get_or_init(|| async move { command::detect(&b, &env, sandbox).await })
            .await
            .clone()
    };
    let caps = match caps {
        Ok(c) => c,
        Err(e) => {
            return (TaskState::Failed, Some(Failure::new(FailureKind::Spawn, e)));
        }
    };
    let mut attempt: u32 = 0;
    let mut startup_retries = 0u32;
    // The caller's checks of the work (verify command, output schema): the schema was
    // compiled at the start already, and the prompt says what the answer must be.
    let mut checks = Checks::default();
    if let Some(schema) = &spec.output_schema {
        match crate::verify::compile_schema(schema) {
            Ok(v) => checks.validator = Some(v),
            Err(e) => {
                return (
                    TaskState::Failed,
                    Some(Failure::new(FailureKind::Schema, e)),
                );
            }
        }
        spec.prompt
            .push_str(&crate::verify::schema_instruction(schema));
    }
    // A task adopted from a bridge that is gone has its turn running on its server already: a
    // stop (other than the bridge's own shutdown, which leaves it running) that comes before
    // its attempt began still goes through the attempt, which sees the stop at once and aborts
    // the turn, so the session is not left busy behind a task recorded stopped.
    let adopted_turn = shared.with(id, |r| r.resume).unwrap_or(false);
    loop {
        if let Some(reason) = *stop_rx.borrow()
            && !(attempt == 0 && adopted_turn && reason != StopReason::Shutdown)
        {
            return stopped(shared, id, reason);
        }
        attempt += 1;
        let ctx = AttemptCtx {
            shared,
            id,
            spec: &spec,
            cwd: &cwd,
            bin: &bin,
            caps: &caps,
            deadline,
        };
        let place = shared
            .with(id, |r| r.rec.engine.clone())
            .flatten()
            .and_then(|e| crate::runner::serve::Place::of_engine_name(&e));
        // A local server that could not start a moment ago is not tried again for each task.
        let down = matches!(place, Some(crate::runner::serve::Place::Local))
            .then(|| shared.serve_pool.down_recently())
            .flatten();
        // opencode 2 has no `run`: its tasks run only on a server of it.
        let v2 = caps.contract == opencode_client::Contract::V2;
        if v2 && (place.is_none() || down.is_some()) {
            let why = down.clone().unwrap_or_else(|| {
                format!(
                    "{}=run asks for a process per task",
                    bridge_env::ENGINE.name
                )
            });
            return (
                TaskState::Failed,
                Some(Failure::with_advice(
                    FailureKind::Spawn,
                    format!(
                        "{} speaks opencode 2, which has no `run` command, and {why}",
                        bin.display()
                    ),
                    &format!(
                        "Unset {} (the serve engine runs opencode 2's tasks), or point OPENCODE_BIN at opencode 1.",
                        bridge_env::ENGINE.name
                    ),
                )),
            );
        }
        let end = match (&place, &down) {
            (_, Some(why)) => AttemptEnd::NoLocalServer(why.clone()),
            (Some(place), None) => {
                super::served::run_served_attempt(&ctx, attempt, place, &mut stop_rx).await
            }
            (None, None) => run_attempt(&ctx, attempt, &mut stop_rx).await,
        };
        match end {
            AttemptEnd::NoLocalServer(why) if v2 => {
                return (
                    TaskState::Failed,
                    Some(Failure::with_advice(
                        FailureKind::Server,
                        format!("{why}; opencode 2 has no `run` to fall back to"),
                        "Run opencode_doctor, which starts the binary as the bridge does.",
                    )),
                );
            }
            AttemptEnd::NoLocalServer(why) => {
                // What a machine without a working server falls back to: a process.
                shared.with(id, |r| {
                    r.rec.engine = None;
                    r.next_attempt_note =
                        Some(format!("{why}; this task runs as `opencode run` instead\n"));
                });
                tracing::warn!("task {id}: {why}; running it as `opencode run`");
                attempt -= 1;
                continue;
            }
            AttemptEnd::ServerFailed(msg) => {
                let advice = match &place {
                    Some(crate::runner::serve::Place::Remote(name)) => format!(
                        "Check that server {name} is up and reachable and that its password variable is right (opencode_doctor checks every server), or start the task without `server`."
                    ),
                    _ => format!(
                        "The bridge starts a new local server for the next task; start again, or set {}=run to use a process per task.",
                        bridge_env::ENGINE.name
                    ),
                };
                return (
                    TaskState::Failed,
                    Some(Failure::with_advice(FailureKind::Server, msg, &advice)),
                );
            }
            AttemptEnd::Stopped(StopReason::Shutdown)
                if matches!(place, Some(crate::runner::serve::Place::Remote(_)))
                    || cfg.on_exit == crate::spec::OnExit::Leave =>
            {
                // The run or the session goes on; the next bridge adopts it.
                shared.with(id, |r| r.detached = true);
                return (TaskState::Running, None);
            }
            AttemptEnd::Stopped(reason) => {
                return stopped(shared, id, reason);
            }
            AttemptEnd::TimedOut => {
                let f = Failure::new(
                    FailureKind::Timeout,
                    format!(
                        "stopped after {} (the task's time limit)",
                        fmt_duration(timeout)
                    ),
                );
                return (TaskState::TimedOut, Some(f));
            }
            AttemptEnd::OverBudget(spent) => {
                let max = spec.max_cost_usd.unwrap_or(0.0);
                let f = Failure::new(
                    FailureKind::Budget,
                    format!(
                        "stopped after it had cost ${spent:.4}, past its max_cost_usd of ${max:.4}"
                    ),
                );
                return (TaskState::Failed, Some(f));
            }
            AttemptEnd::ProviderLimit(wait, past_left) => {
                let f =
                    crate::classify::provider_limit(&wait, past_left, std::time::SystemTime::now());
                shared.with(id, |r| {
                    r.provider_reset = Some(wait.next);
                    r.provider_wait = None;
                });
                return (TaskState::Failed, Some(f));
            }
            AttemptEnd::ProviderStall(stall, past_left) => {
                let f = crate::classify::provider_stall(
                    &stall,
                    past_left,
                    std::time::SystemTime::now(),
                );
                shared.with(id, |r| r.provider_stall = None);
                return (TaskState::Failed, Some(f));
            }
            AttemptEnd::SpawnFailed(msg) => {
                return (
                    TaskState::Failed,
                    Some(Failure::new(FailureKind::Spawn, msg)),
                );
            }
            AttemptEnd::OverflowLoop(n) => {
                let last = shared
                    .with(id, |r| r.summary.errors().last().map(|e| e.message.clone()))
                    .flatten()
                    .unwrap_or_default();
                let f = Failure::new(
                    FailureKind::ContextLength,
                    format!(
                        "stopped after {n} context overflows in a row: opencode kept compacting and retrying. Last: {last}"
                    ),
                );
                return (TaskState::Failed, Some(f));
            }
            AttemptEnd::Exited(exit) => {
                let (failure, produced, store_race) = shared
                    .with(id, |r| {
                        r.exit = Some(exit);
                        let stderr = r.stderr.to_string_lossy();
                        let race = r.summary.events() == 0
                            && exit.code != Some(0)
                            && store_setup_error(&stderr);
                        (
                            r.classify_attempt(&stderr, exit),
                            r.summary.produced_output(),
                            race,
                        )
                    })
                    .unwrap_or((None, false, false));
                // Past its max_cost_usd when it ended: the step that passed the cap was its
                // last, so no tick saw it in time. It still fails with kind budget; its answer
                // is kept.
                if let Some(max) = spec.max_cost_usd {
                    let spent = shared
                        .with(id, |r| r.task_usage().budget_cost())
                        .unwrap_or(0.0);
                    if spent > max {
                        let f = Failure::new(
                            FailureKind::Budget,
                            format!(
                                "cost ${spent:.4}, past its max_cost_usd of ${max:.4}: the step that passed it was its last, so it ran to its end; its answer is kept"
                            ),
                        );
                        return (TaskState::Failed, Some(f));
                    }
                }
                let Some(f) = failure else {
                    let ctx = AttemptCtx {
                        shared,
                        id,
                        spec: &spec,
                        cwd: &cwd,
                        bin: &bin,
                        caps: &caps,
                        deadline,
                    };
                    match after_turn(&ctx, &mut checks, timeout, &mut stop_rx).await {
                        AfterTurn::Done => return (TaskState::Succeeded, None),
                        AfterTurn::End(state, failure) => return (state, failure),
                        AfterTurn::FollowUp(session, prompt) => {
                            // The agent gets the check's failure in its own session; what
                            // it did so far stays the task's.
                            shared.with(id, |r| {
                                let calls = r.all_tool_calls();
                                r.earlier_calls = calls;
                            });
                            spec.session = Some(session);
                            spec.prompt = prompt;
                            continue;
                        }
                    }
                };
                // Several runs starting at once on a fresh store can trip over each other's
                // database setup before any session exists. Nothing ran, so starting again is
                // safe for every agent.
                if store_race && startup_retries < STARTUP_RETRIES {
                    startup_retries += 1;
                    let pause = Duration::from_millis(
                        400 * u64::from(startup_retries) + id.wrapping_mul(97) % 400,
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stop_rx.changed() => {
                            let reason = (*stop_rx.borrow()).unwrap_or(StopReason::Cancel);
                            return stopped(shared, id, reason);
                        }
                    }
                    attempt -= 1;
                    continue;
                }
                let retryable =
                    f.kind.is_transient() && spec.read_only && !produced && attempt <= cfg.retries;
                if !retryable {
                    return (TaskState::Failed, Some(f));
                }
                let delay = cfg
                    .retry_delay
                    .saturating_mul(3u32.saturating_pow(attempt - 1));
                let at = bridge_proc::deadline::after_tokio(delay);
                if at >= deadline {
                    return (TaskState::Failed, Some(f));
                }
                shared.with(id, |r| {
                    r.state = TaskState::Retrying;
                    r.retry_at = Some(bridge_proc::deadline::after(delay));
                    r.failure = Some(f);
                    persist(shared, r, Save::WithOutput);
                });
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = stop_rx.changed() => {
                        let reason = (*stop_rx.borrow()).unwrap_or(StopReason::Cancel);
                        return stopped(shared, id, reason);
                    }
                }
            }
        }
    }
}

/// The caller's checks of a task's work, across its turns.
#[derive(Default)]
struct Checks {
    /// The compiled output schema.
    validator: Option<jsonschema::Validator>,
    verify_runs: u32,
    verify_follow_ups: u32,
    schema_follow_ups: u32,
}

/// What comes after an agent's turn that ended well.
enum AfterTurn {
    /// Every check passed (or there is none): the task succeeded.
    Done,
    /// A check failed: this follow-up goes to the session (its id first).
    FollowUp(String, String),
    /// The task ends so.
    End(TaskState, Option<Failure>),
}

/// Runs the caller's checks after a turn: the verify command (in the run's fence and world,
/// within the task's time limit), then the output schema against the final answer. A failed
/// check gets a follow-up in the session while it has some left; then the task fails (kind
/// `verify` or `schema`).
async fn after_turn(
    ctx: &AttemptCtx<'_>,
    checks: &mut Checks,
    timeout: Duration,
    stop_rx: &mut watch::Receiver<Option<StopReason>>,
) -> AfterTurn {
    use super::verify::{VerifyEnd, run_verify};
    let (shared, id, spec) = (ctx.shared, ctx.id, ctx.spec);
    let session = shared
        .with(id, |r| {
            r.summary
                .session_id()
                .clone()
                .or_else(|| r.rec.session_id.clone())
        })
        .flatten();
    if let Some(command) = spec.verify.as_deref() {
        checks.verify_runs += 1;
        shared.with(id, |r| r.state = TaskState::Running);
        match run_verify(ctx, command, checks.verify_runs, stop_rx).await {
            VerifyEnd::Done(outcome, tail) => {
                let passed = outcome.passed;
                let line = outcome.line();
                shared.with(id, |r| {
                    r.verify = Some(outcome.clone());
                    r.verify_output = Some(tail.clone());
                    persist(shared, r, Save::WithOutput);
                });
                if !passed {
                    if checks.verify_follow_ups < spec.verify_retries
                        && let Some(sid) = session
                    {
                        checks.verify_follow_ups += 1;
                        let prompt = crate::verify::verify_follow_up(command, &outcome, &tail);
                        return AfterTurn::FollowUp(sid, prompt);
                    }
                    let last = tail
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("(no output)");
                    let shown: String = command.chars().take(200).collect();
                    let last: String = last.chars().take(300).collect();
                    let f = Failure::with_advice(
                        FailureKind::Verify,
                        format!("verify {line}: `{shown}`; its output ends: {last}"),
                        FailureKind::Verify.advice(),
                    );
                    return AfterTurn::End(TaskState::Failed, Some(f));
                }
            }
            VerifyEnd::TimedOut => {
                let f = Failure::new(
                    FailureKind::Timeout,
                    format!(
                        "stopped after {} (the task's time limit) while its verify command ran",
                        fmt_duration(timeout)
                    ),
                );
                return AfterTurn::End(TaskState::TimedOut, Some(f));
            }
            VerifyEnd::Stopped(reason) => {
                let (state, f) = stopped(shared, id, reason);
                return AfterTurn::End(state, f);
            }
            VerifyEnd::SpawnFailed(e) => {
                let f = Failure::new(
                    FailureKind::Verify,
                    format!("the verify command could not start: {e}"),
                );
                return AfterTurn::End(TaskState::Failed, Some(f));
            }
        }
    }
    if let Some(validator) = &checks.validator {
        let answer = shared
            .with(id, |r| r.summary.final_text().to_owned())
            .unwrap_or_default();
        match crate::verify::check_answer(validator, &answer) {
            Ok(value) => {
                shared.with(id, |r| {
                    r.schema_valid = Some(true);
                    r.structured = Some(value);
                });
            }
            Err(errors) => {
                shared.with(id, |r| r.schema_valid = Some(false));
                if checks.schema_follow_ups < 1
                    && let Some(sid) = session
                {
                    checks.schema_follow_ups += 1;
                    return AfterTurn::FollowUp(sid, crate::verify::schema_follow_up(&errors));
                }
                let f = Failure::new(
                    FailureKind::Schema,
                    format!(
                        "the answer does not satisfy the output_schema: {}",
                        errors.join("; ")
                    ),
                );
                return AfterTurn::End(TaskState::Failed, Some(f));
            }
        }
    }
    AfterTurn::Done
}

fn stopped(shared: &Shared, id: TaskId, reason: StopReason) -> (TaskState, Option<Failure>) {
    let f = match reason {
        StopReason::Budget => {
            let why = shared
                .with(id, |r| r.budget_stop.clone())
                .flatten()
                .unwrap_or_else(|| "stopped because a budget window is spent".into());
            return (
                TaskState::Failed,
                Some(Failure::with_advice(
                    FailureKind::Budget,
                    why,
                    "What it did so far is kept. Wait until the window resets, raise the budget, or continue in Claude Code.",
                )),
            );
        }
        StopReason::Cancel => None,
        StopReason::Shutdown => Some(Failure::with_advice(
            FailureKind::Exit,
            "stopped because the bridge shut down",
            "Start the task again once the bridge is running.",
        )),
    };
    (TaskState::Cancelled, f)
}

fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else if s >= 60 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}
