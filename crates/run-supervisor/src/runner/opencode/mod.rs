//! The `opencode run --format json` runner.

pub mod classify;
pub mod events;

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{Backend, OwnRun, Prepared, Stream, Traits, push_common};
use crate::classify::{ExitInfo, Failure};
use crate::command::{self, Launch, LaunchContext};
use crate::events::{ReadLine, RunSummary};
use crate::proctable::{self, OpencodeProcess};
use crate::quota;
use crate::spec::{SupervisorConfig, TaskSpec};
use classify::classify;

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
        classify(summary, stderr, exit)
    }

    fn quota_reset(&self, summary: &RunSummary) -> Option<SystemTime> {
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
    fn the_account_is_the_models_provider() {
        assert_eq!(Opencode.account_key(Some("openai/gpt-5")), "openai");
        assert_eq!(Opencode.account_key(None), "opencode");
        assert_eq!(Opencode.account_key(Some("/x")), "opencode");
    }
}
