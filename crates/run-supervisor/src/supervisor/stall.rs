//! An `opencode run` held by a provider's refusals. It prints no event while it waits to try
//! again; its log in the run's world says that the provider refused, and why, at each try
//! (`runner::opencode::log`). What this module reads there is shown in the task's status
//! (`provider_stall`), and a wait past the task's time left or past
//! [`bridge_ledger::quota::LONGEST_WAIT`] ends the attempt with kind `rate_limit` or `quota`
//! instead of a task that runs and does nothing. The log is the run's own writing: it only
//! describes the run, never widens what the bridge does.

use std::sync::Arc;
use std::time::SystemTime;

use super::table::Shared;
use crate::classify::{FailureKind, classify_text, one_line};
use crate::command::Launch;
use crate::runner::Runner;
use crate::runner::opencode::log::{LogLine, LogTail, log_file, parse};
use crate::spec::TaskSpec;
use crate::task::TaskId;
use bridge_ledger::quota::{LONGEST_WAIT, ProviderStall};

/// Reads the log of one attempt of an `opencode run`.
pub(super) struct StallWatch {
    tail: Option<LogTail>,
    /// The run's session: the follow-up's, the one its events named, or the one the log says
    /// was created with the task's title.
    session: Option<String>,
    title: String,
}

impl StallWatch {
    /// A watch for an attempt of `runner` launched as `launch` (its world's data directory is
    /// in its environment), from the log's current end; `None` for a runner other than
    /// `opencode run`.
    pub(super) fn for_attempt(runner: Runner, spec: &TaskSpec, launch: &Launch) -> Option<Self> {
        if runner != Runner::Opencode {
            return None;
        }
        let data = launch
            .env_set
            .iter()
            .rev()
            .find(|(k, _)| k == "XDG_DATA_HOME")?;
        Some(StallWatch {
            tail: Some(LogTail::from_end(log_file(std::path::Path::new(&data.1)))),
            session: spec.session.clone().filter(|s| !s.trim().is_empty()),
            title: spec.title.clone(),
        })
    }

    /// Reads what the log gained (on the blocking pool) and notes the provider's refusals of
    /// this run in its record; an event the run printed after the first refusal ends the wait.
    pub(super) async fn poll(&mut self, shared: &Arc<Shared>, id: TaskId) {
        let Some(mut tail) = self.tail.take() else {
            return;
        };
        let Ok((tail, lines)) = tokio::task::spawn_blocking(move || {
            let lines = tail.read_new();
            (tail, lines)
        })
        .await
        else {
            return;
        };
        self.tail = Some(tail);
        if self.session.is_none() {
            self.session = shared
                .with(id, |r| r.summary.session_id().clone())
                .flatten();
        }
        for line in &lines {
            match parse(line) {
                Some(LogLine::Created { session, title })
                    if self.session.is_none() && !self.title.is_empty() && title == self.title =>
                {
                    self.session = Some(session);
                }
                Some(LogLine::StreamError { session, error })
                    if self.session.as_deref() == Some(session.as_str()) =>
                {
                    self.refused(shared, id, &error);
                }
                _ => {}
            }
        }
        shared.with(id, |r| {
            if matches!(&r.provider_stall, Some((_, at)) if r.summary.events() > *at) {
                r.provider_stall = None;
            }
        });
    }

    /// One refusal of the provider, when it is a rate limit or quota.
    fn refused(&self, shared: &Shared, id: TaskId, error: &str) {
        if !matches!(
            classify_text(error),
            Some(FailureKind::RateLimit | FailureKind::Quota)
        ) {
            return;
        }
        let message = one_line(
            error.strip_prefix("AI_APICallError: ").unwrap_or(error),
            300,
        );
        shared.with(id, |r| match &mut r.provider_stall {
            Some((stall, _)) => {
                stall.refusals = stall.refusals.saturating_add(1);
                stall.message = message;
            }
            None => {
                let events = r.summary.events();
                r.provider_stall = Some((
                    ProviderStall {
                        since: SystemTime::now(),
                        refusals: 1,
                        message,
                    },
                    events,
                ));
            }
        });
    }
}

/// The provider's hold that ends an attempt: at the task's time limit (`past_left`) while a
/// wait is on, or once a wait has lasted past [`LONGEST_WAIT`]. `None` otherwise. The attempt
/// (`child.rs`) makes it its end; this module knows nothing of attempts' ends.
pub(super) fn held_end(
    shared: &Shared,
    id: TaskId,
    past_left: bool,
) -> Option<bridge_ledger::quota::ProviderStall> {
    // An event printed since the first refusal (not yet seen by a poll) means it got through.
    let stall = shared
        .with(id, |r| match &r.provider_stall {
            Some((s, at)) if r.summary.events() <= *at => Some(s.clone()),
            _ => None,
        })
        .flatten()?;
    if past_left || stall.held_for(SystemTime::now()) > LONGEST_WAIT {
        Some(stall)
    } else {
        None
    }
}
