//! The `claude -p --output-format stream-json` runner (Claude Code).

use std::path::{Path, PathBuf};

use super::{Backend, OwnRun, Prepared, Stream, Traits, push_common};
use crate::classify::{ExitInfo, Failure};
pub mod code;

use crate::command::{Launch, LaunchContext};
use crate::runner::opencode::events::RunSummary;
use crate::spec::{SupervisorConfig, TaskSpec};
use code::{self as cc, ClaudeStream};
use opencode_client::proctable::OpencodeProcess;

#[derive(Debug)]
pub(crate) struct Claude;

impl Backend for Claude {
    /// Every Claude Code run draws on the one Claude account.
    fn account_key(&self, _model: Option<&str>) -> String {
        "claude".to_owned()
    }

    fn binary(&self, cfg: &SupervisorConfig) -> Result<PathBuf, String> {
        cc::resolve_claude(cfg.claude_bin.as_deref())
    }

    fn launch(&self, spec: &TaskSpec, ctx: &LaunchContext<'_>) -> Result<Launch, String> {
        let model = spec.model.as_deref().or(ctx.default_model);
        Ok(cc::build_launch(
            spec,
            ctx.cwd,
            ctx.program,
            model,
            ctx.base_env,
        ))
    }

    fn stream(&self) -> Box<dyn Stream> {
        Box::new(ClaudeStream::default())
    }

    fn prepare<'a>(&self, line: &'a [u8]) -> Prepared<'a> {
        Prepared::Raw(String::from_utf8_lossy(line))
    }

    fn traits(&self) -> &'static Traits {
        // Claude Code's flags are fixed (nothing to detect), it has no store of sessions we
        // read, and it uses no opencode.
        &Traits {
            fence: bridge_fence::RunKind::Claude,
            serves: false,
            probes_capabilities: false,
            learns_session_from_store: false,
            reports_opencode_version: false,
        }
    }

    fn own_process(
        &self,
        run: OwnRun<'_>,
        _program: Option<&Path>,
        _table: &[OpencodeProcess],
    ) -> Option<OpencodeProcess> {
        cc::process_entry(
            run.pid,
            run.task,
            run.agent,
            run.title,
            run.model,
            run.session,
        )
    }
}

impl Stream for ClaudeStream {
    fn push(&mut self, summary: &mut RunSummary, line: Prepared<'_>) -> bool {
        match push_common(summary, line) {
            Some(Prepared::Raw(text)) => self.push_line(summary, &text),
            // Not made by this runner's `prepare`.
            Some(Prepared::Parsed(_)) | Some(Prepared::TooLong) | None => false,
        }
    }

    fn classify(&self, summary: &RunSummary, stderr: &str, exit: ExitInfo) -> Option<Failure> {
        cc::classify(summary, self, stderr, exit).map(|c| c.failure)
    }

    fn quota_reset(&self, _summary: &RunSummary) -> Option<bridge_ledger::quota::Reset> {
        self.reset(self.result.as_ref().map(|r| r.text.as_str()))
    }
}
