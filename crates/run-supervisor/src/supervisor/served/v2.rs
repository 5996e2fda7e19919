//! One attempt of a task on an opencode 2 server (`crate::runner::serve::v2`): the agent's
//! rules read back for a read-only task, the location's models waited for, the session, the
//! prompt, the turn followed by polling until it ends, is stopped or runs out of time. Its
//! messages are read into `run`'s lines every few polls while it runs (each finished part
//! once: progress, tool calls and the cost cap see it as it goes) and whole at its end.
//! Nothing here is a process of ours: a stop is the session's interrupt.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::super::child::{AttemptCtx, AttemptEnd};
use super::super::output::{finish_stdout, fold_stdout};
use super::super::record::{Save, StopReason};
use super::super::table::persist;
use super::{MAX_LINE, STOP_WAIT, Server, lost};
use crate::classify::ExitInfo;
use crate::runner::serve::Place;
use crate::runner::serve::events::Follow;
use crate::runner::serve::v2;
use bridge_proc::stream::LineSplitter;

/// How long the location's models may take to load on the server.
const MODELS_WAIT: Duration = Duration::from_secs(60);

/// Runs the attempt's turn on a v2 server to its end.
pub(super) async fn run_v2_turn(
    ctx: &AttemptCtx<'_>,
    place: &Place,
    server: Server,
    stop_rx: &mut watch::Receiver<Option<StopReason>>,
) -> AttemptEnd {
    let (shared, id, spec) = (ctx.shared, ctx.id, ctx.spec);
    let cfg = &shared.config;
    let runner = shared.with(id, |r| r.runner).unwrap_or_default();
    let (http, dir, who) = (server.http.clone(), server.dir.clone(), server.who.clone());
    let blocking = |f: Box<dyn FnOnce() -> Result<String, String> + Send>| async move {
        tokio::task::spawn_blocking(f)
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
    };
    let resume = shared
        .with(id, |r| std::mem::take(&mut r.resume))
        .unwrap_or(false);
    let model = spec.model.clone().or_else(|| cfg.default_model.clone());
    if spec.read_only && !resume {
        // v2 takes no rules per session: the agent's own, as the server resolved them from
        // the configuration the bridge gave it, must already end in the policy's default-deny.
        let (h, d, agent) = (http.clone(), dir.clone(), spec.agent.clone());
        let checked = blocking(Box::new(move || {
            let rules = v2::agent_rules(&h, &d, &agent)?
                .ok_or_else(|| format!("the server lists no agent {agent:?}"))?;
            let set =
                bridge_policy::permission::Ruleset::from_opencode(&serde_json::Value::Array(rules))
                    .unwrap_or_default();
            let default_deny = set.rules().iter().any(|r| {
                r.permission == "*"
                    && r.pattern == "*"
                    && r.action == bridge_policy::permission::Action::Deny
            });
            if !default_deny {
                return Err(format!("its rules for {agent:?} deny nothing by default"));
            }
            match bridge_policy::roster::read_only_violation(&set) {
                None => Ok(String::new()),
                Some(rule) => Err(format!(
                    "its rules for {agent:?} leave `{}` `{}` {:?} after the default deny",
                    rule.permission, rule.pattern, rule.action
                )),
            }
        }))
        .await;
        if let Err(e) = checked {
            return AttemptEnd::ServerFailed(format!(
                "{who}: the agent is not read-only there, so the task was not started: {e}"
            ));
        }
    }
    let follow_up = spec.session.clone().filter(|s| !s.trim().is_empty());
    let is_follow_up = follow_up.is_some();
    let sid = match follow_up {
        Some(s) => s.trim().to_owned(),
        None => {
            let (h, d, agent, m) = (http.clone(), dir.clone(), spec.agent.clone(), model.clone());
            let created = blocking(Box::new(move || {
                // A prompt sent before the location's models loaded is never answered.
                v2::wait_for_models(&h, &d, m.as_deref(), Instant::now() + MODELS_WAIT)?;
                v2::create(&h, &d, &agent, m.as_deref())
            }))
            .await;
            match created {
                Ok(s) => s,
                Err(e) => return AttemptEnd::ServerFailed(format!("{who}: {e}")),
            }
        }
    };
    // Recorded at once (a bridge restarted from here on finds it), and shown once the
    // registry holds it: v2's turn gives no event line that would name it before its end.
    shared.with(id, |r| {
        r.rec.session_id = Some(sid.clone());
        r.summary.learn_session_id(&sid);
        persist(shared, r, Save::Record);
    });
    let since = if resume {
        shared.with(id, |r| r.rec.accepted_ms).unwrap_or(0)
    } else {
        crate::registry::now_ms()
    }
    .saturating_sub(2_000);
    if !resume {
        let (h, d, s, text, m, agent) = (
            http.clone(),
            dir.clone(),
            sid.clone(),
            spec.prompt.clone(),
            model.clone(),
            spec.agent.clone(),
        );
        let sent = blocking(Box::new(move || {
            v2::wait_for_models(&h, &d, m.as_deref(), Instant::now() + MODELS_WAIT)?;
            if is_follow_up {
                v2::switch(&h, &s, &agent, m.as_deref())?;
            }
            v2::prompt(&h, &s, &text).map(|_| String::new())
        }))
        .await;
        if let Err(e) = sent {
            return AttemptEnd::ServerFailed(format!("{who}: {e}"));
        }
    }
    let prompted = Instant::now();
    let mut started = resume;
    let approve = spec.auto_approve && !spec.read_only;
    let mut answered = std::collections::HashSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let busy = || {
        let (h, s) = (http.clone(), sid.clone());
        tokio::task::spawn_blocking(move || v2::busy(&h, &s))
    };
    let done = || {
        let (h, s) = (http.clone(), sid.clone());
        tokio::task::spawn_blocking(move || {
            v2::messages(&h, &s).map(|m| v2::turn_done_in(&m, since))
        })
    };
    // The turn's output as `run` lines, folded as it comes: v2 gives no event line for it, so
    // its messages are read every few polls while it runs (each finished part once), and
    // whole at its end.
    let mut follow = Follow::new(&sid, false);
    let text = shared.with(id, |r| r.summary.text_buffer());
    let mut lines = LineSplitter::new(MAX_LINE);
    let mut fold = |follow: &mut Follow, messages: &[serde_json::Value], live: bool| {
        let replayed = follow.replay(&v2::as_v1_messages(messages, since, live), since);
        if let Some(text) = &text {
            for line in replayed {
                let mut bytes = line.into_bytes();
                bytes.push(b'\n');
                fold_stdout(shared, id, (runner, text), &mut lines, &bytes);
            }
        }
    };
    let mut polls: u32 = 0;
    let end: Option<AttemptEnd> = loop {
        tokio::select! {
            _ = stop_rx.changed() => {
                let reason = (*stop_rx.borrow()).unwrap_or(StopReason::Cancel);
                break Some(AttemptEnd::Stopped(reason));
            }
            _ = tokio::time::sleep_until(ctx.deadline) => break Some(AttemptEnd::TimedOut),
            _ = tick.tick() => {
                if !server.alive() {
                    break Some(lost(&server, "the server exited").await);
                }
                // Permission asks are answered as `run` answers them: approved once for an
                // editing agent with auto-approve, rejected otherwise.
                let (h, sess) = (http.clone(), sid.clone());
                let pending = tokio::task::spawn_blocking(move || v2::asks(&h, &sess)).await;
                for (request, action, resources) in pending.ok().and_then(Result::ok).unwrap_or_default() {
                    if !answered.insert(request.clone()) {
                        continue;
                    }
                    if !approve {
                        shared.with(id, |r| {
                            let line = format!(
                                "! permission requested: {action} ({}); auto-rejecting\n",
                                resources.join(", ")
                            );
                            r.stderr.push(line.as_bytes());
                        });
                    }
                    let (h, sess) = (http.clone(), sid.clone());
                    let answer = if approve { "once" } else { "reject" };
                    let _ = tokio::task::spawn_blocking(move || v2::reply(&h, &sess, &request, answer)).await;
                }
                polls += 1;
                if polls.is_multiple_of(4) {
                    let (h, s) = (http.clone(), sid.clone());
                    if let Ok(Ok(messages)) =
                        tokio::task::spawn_blocking(move || v2::messages(&h, &s)).await
                    {
                        fold(&mut follow, &messages, true);
                    }
                }
                match busy().await {
                    Ok(Ok(true)) => started = true,
                    // Idle: the turn ended once it was seen running, or it ran and ended
                    // between two polls (its reply is in the session).
                    Ok(Ok(false)) => {
                        if (started || prompted.elapsed() > Duration::from_secs(1))
                            && matches!(done().await, Ok(Ok(true)))
                        {
                            break None;
                        }
                    }
                    Ok(Err(e)) => break Some(lost(&server, &e).await),
                    Err(e) => break Some(AttemptEnd::ServerFailed(e.to_string())),
                }
            }
        }
    };
    let keep_running = matches!(end, Some(AttemptEnd::Stopped(StopReason::Shutdown)))
        && (matches!(place, Place::Remote(_)) || cfg.on_exit == crate::spec::OnExit::Leave);
    if keep_running {
        if let Some(lease) = &server.lease {
            lease.leave_running();
        }
        tokio::task::spawn_blocking(move || drop(server));
        return end.unwrap_or(AttemptEnd::Stopped(StopReason::Shutdown));
    }
    if end.is_some() {
        // Stopped, or out of time: the turn is interrupted and waited for (bounded).
        let until = Instant::now() + STOP_WAIT;
        loop {
            let (h, s) = (http.clone(), sid.clone());
            let _ = tokio::task::spawn_blocking(move || v2::interrupt(&h, &s)).await;
            tokio::time::sleep(Duration::from_millis(250)).await;
            if matches!(busy().await, Ok(Ok(false))) || Instant::now() >= until {
                break;
            }
        }
    }
    // The turn as the server kept it: every assistant message since the prompt.
    let (h, s) = (http.clone(), sid.clone());
    let read = tokio::task::spawn_blocking(move || v2::messages(&h, &s)).await;
    match read {
        Ok(Ok(messages)) => fold(&mut follow, &messages, false),
        Ok(Err(e)) if end.is_none() => {
            return AttemptEnd::ServerFailed(format!("{who}: {e}"));
        }
        _ => {}
    }
    finish_stdout(shared, id, &mut lines);
    tokio::task::spawn_blocking(move || drop(server));
    end.unwrap_or(AttemptEnd::Exited(ExitInfo {
        code: Some(if follow.errors() > 0 { 1 } else { 0 }),
        signal: None,
    }))
}
