//! The `opencode run --format json` runner.

pub mod classify;
pub mod events;
pub(crate) mod log;

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{Backend, OwnRun, Prepared, Stream, Traits, push_common};
use crate::classify::{ExitInfo, Failure, FailureKind};
use crate::command::{self, Launch, LaunchContext};
use crate::runner::opencode::events::{ReadLine, RunSummary};
use crate::spec::{SupervisorConfig, TaskSpec};
use bridge_ledger::quota;
use classify::classify;
use opencode_client::proctable::{self, OpencodeProcess};

#[derive(Debug)]
pub(crate) struct Opencode;

impl Backend for Opencode {
    fn binary(&self, cfg: &SupervisorConfig) -> Result<PathBuf, String> {
        command::resolve_binary(cfg.opencode_bin.as_deref())
    }

    fn launch(&self, spec: &TaskSpec, ctx: &LaunchContext<'_>) -> Result<Launch, String> {
        command::build_launch(spec, ctx.cwd, ctx)
    }

    fn stream(&self) -> Box<dyn Stream> {
        Box::new(Events)
    }

    fn prepare<'a>(&self, line: &'a [u8]) -> Prepared<'a> {
        Prepared::Parsed(ReadLine::read(line))
    }

    fn traits(&self) -> &'static Traits {
        &Traits {
            fence: bridge_fence::RunKind::Opencode,
            serves: true,
            probes_capabilities: true,
            learns_session_from_store: true,
            reports_opencode_version: true,
        }
    }

    /// The provider of the model (the part before `/`), `opencode` when it names none.
    fn account_key(&self, model: Option<&str>) -> String {
        model
            .and_then(|m| m.split_once('/'))
            .map(|(p, _)| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "opencode".to_owned())
    }

    fn own_process(
        &self,
        run: OwnRun<'_>,
        program: Option<&Path>,
        table: &[OpencodeProcess],
    ) -> Option<OpencodeProcess> {
        // Own runs whose binary is not named opencode (OPENCODE_BIN=/x/oc-1.18) are missed
        // by the scan.
        if table.iter().any(|p| p.pid == run.pid) {
            return None;
        }
        proctable::own_run_entry(run.pid, program?)
    }
}

/// opencode's event lines need no state between lines.
#[derive(Debug)]
struct Events;

impl Stream for Events {
    fn push(&mut self, summary: &mut RunSummary, line: Prepared<'_>) -> bool {
        match push_common(summary, line) {
            Some(Prepared::Parsed(line)) => summary.push_read(line),
            Some(Prepared::Raw(text)) => summary.push_line(&text),
            _ => false,
        }
    }

    fn classify(&self, summary: &RunSummary, stderr: &str, exit: ExitInfo) -> Option<Failure> {
        let mut f = classify(summary, stderr, exit)?;
        // A provider's limit says when it resets: the message says it too (held to the
        // horizon, and then saying so). A reset seconds away is a retry hint, not news.
        if matches!(f.kind, FailureKind::Quota | FailureKind::RateLimit)
            && let Some(reset) = self.quota_reset(summary)
            && reset.at > quota::later(SystemTime::now(), quota::MIN_WINDOW)
        {
            f.message = crate::classify::one_line(
                &format!("{}; the limit {}", f.message, reset.describe()),
                800,
            );
        }
        Some(f)
    }

    fn quota_reset(&self, summary: &RunSummary) -> Option<quota::Reset> {
        summary
            .errors()
            .last()
            .and_then(|e| e.raw.get("data").and_then(|d| d.get("responseHeaders")))
            .and_then(|h| quota::reset_from_headers(h, SystemTime::now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_names_its_reset_held_to_the_horizon() {
        let line = |headers: &str| {
            format!(
                r#"{{"type":"error","timestamp":1,"sessionID":"ses_1","error":{{"name":"APIError","data":{{"message":"Rate limit reached","statusCode":429,"isRetryable":true,"responseHeaders":{headers}}}}}}}"#
            )
        };
        let judge = |headers: &str| {
            let mut summary = RunSummary::new(1 << 20);
            let mut events = Events;
            assert!(events.push(&mut summary, Prepared::Raw(line(headers).into())));
            let exit = ExitInfo {
                code: Some(1),
                signal: None,
            };
            (
                events.classify(&summary, "", exit).expect("a failure"),
                events.quota_reset(&summary),
            )
        };
        let (f, reset) = judge(r#"{"retry-after":"18446744073709551615"}"#);
        assert_eq!(f.kind, FailureKind::RateLimit);
        assert!(reset.is_some_and(|r| r.clamped));
        assert!(
            f.message.contains("resets at") && f.message.contains("at the latest"),
            "{}",
            f.message
        );
        let (f, reset) = judge(r#"{"retry-after":"600"}"#);
        assert!(reset.is_some_and(|r| !r.clamped));
        assert!(f.message.contains("the limit resets at"), "{}", f.message);
        assert!(!f.message.contains("at the latest"), "{}", f.message);
        // A retry hint, a negative or NaN value: the message is the provider's alone.
        for h in [
            r#"{"retry-after-ms":"50"}"#,
            r#"{"retry-after":"-1"}"#,
            r#"{"retry-after":"NaN"}"#,
        ] {
            let (f, _) = judge(h);
            assert_eq!(f.kind, FailureKind::RateLimit);
            assert!(!f.message.contains("resets at"), "{h}: {}", f.message);
        }
    }

    #[test]
    fn the_account_is_the_models_provider() {
        assert_eq!(Opencode.account_key(Some("openai/gpt-5")), "openai");
        assert_eq!(Opencode.account_key(None), "opencode");
        assert_eq!(Opencode.account_key(Some("/x")), "opencode");
    }
}
