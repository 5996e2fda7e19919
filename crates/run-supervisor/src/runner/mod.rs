//! Runners: the programs a task can be run by (`opencode run`, `claude -p`), behind one
//! interface. The supervisor asks a task's [`Backend`] for everything that differs between
//! them — the binary, the launch, how its output lines are read and folded, how a finished
//! attempt is judged, whose quota it uses, how it shows in the process table — and holds no
//! `match` on the runner of its own.
//!
//! Adding a runner: a file with a type implementing [`Backend`] (and its [`Stream`]), a variant
//! of [`Runner`], and one line in [`backend`].

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::classify::{ExitInfo, Failure};
use crate::command::{Launch, LaunchContext};
use crate::runner::opencode::events::{ReadLine, RunSummary};
use crate::spec::{SupervisorConfig, TaskSpec};
use opencode_client::proctable::OpencodeProcess;

pub(crate) mod claude;
pub(crate) mod opencode;
pub(crate) mod serve;

use claude::code::is_claude_alias;

/// Which program runs a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Runner {
    /// `opencode run --format json`.
    #[default]
    Opencode,
    /// `claude -p --output-format stream-json`.
    Claude,
}

impl Runner {
    /// The runner for a model string (`None`: no model at all → opencode's default model).
    ///
    /// ```
    /// use run_supervisor::Runner;
    /// assert_eq!(Runner::for_model(Some("openai/gpt-5")), Runner::Opencode);
    /// assert_eq!(Runner::for_model(Some("anthropic/claude-sonnet-4-5")), Runner::Opencode);
    /// assert_eq!(Runner::for_model(Some("sonnet")), Runner::Claude);
    /// assert_eq!(Runner::for_model(Some("claude-haiku-4-5")), Runner::Claude);
    /// assert_eq!(Runner::for_model(Some("claude/opus")), Runner::Claude);
    /// assert_eq!(Runner::for_model(None), Runner::Opencode);
    /// ```
    pub fn for_model(model: Option<&str>) -> Runner {
        let Some(m) = model.map(str::trim).filter(|m| !m.is_empty()) else {
            return Runner::Opencode;
        };
        let lower = m.to_ascii_lowercase();
        if lower.starts_with("claude/") {
            return Runner::Claude;
        }
        if lower.contains('/') {
            return Runner::Opencode;
        }
        let base = m.split('#').next().unwrap_or("");
        if base.starts_with("claude-") || base.starts_with("Claude-") || is_claude_alias(base) {
            Runner::Claude
        } else {
            Runner::Opencode
        }
    }

    /// `opencode` or `claude`.
    pub fn as_str(self) -> &'static str {
        match self {
            Runner::Opencode => "opencode",
            Runner::Claude => "claude",
        }
    }
}

impl std::fmt::Display for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The backend of a runner.
pub(crate) fn backend(runner: Runner) -> &'static dyn Backend {
    match runner {
        Runner::Opencode => &opencode::Opencode,
        Runner::Claude => &claude::Claude,
    }
}

/// A stdout line read but not yet folded: what [`Backend::prepare`] makes of it without any
/// lock held (parsing is the costly part of reading a flood of events).
/// Its strings borrow from the line's bytes ([`Prepared::into_owned`] detaches them).
#[derive(Debug)]
pub(crate) enum Prepared<'a> {
    /// Longer than the line limit: counted as malformed, never parsed.
    TooLong,
    /// Parsed into an event (a runner whose lines can be read on their own).
    Parsed(ReadLine<'a>),
    /// The line's text (decoded lossily as UTF-8), for a runner whose parser keeps state
    /// between lines.
    Raw(Cow<'a, str>),
}

impl Prepared<'_> {
    /// The same line with every string owned.
    pub(crate) fn into_owned(self) -> Prepared<'static> {
        match self {
            Prepared::TooLong => Prepared::TooLong,
            Prepared::Parsed(line) => Prepared::Parsed(line.into_owned()),
            Prepared::Raw(text) => Prepared::Raw(Cow::Owned(text.into_owned())),
        }
    }
}

/// What does not change about a runner.
#[derive(Debug)]
pub(crate) struct Traits {
    /// What the kernel fence knows the program as ([`bridge_fence::RunKind`]).
    pub fence: bridge_fence::RunKind,
    /// Its tasks can run as sessions on an opencode server (the serve engine).
    pub serves: bool,
    /// The binary's capabilities are probed (once per supervisor) before the first launch;
    /// false when its flags are fixed.
    pub probes_capabilities: bool,
    /// The task's session id can be learnt from opencode's store before its events name it.
    pub learns_session_from_store: bool,
    /// The task's snapshot shows the opencode version.
    pub reports_opencode_version: bool,
}

/// What the process table shows of one of our running tasks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnRun<'a> {
    pub task: u64,
    pub pid: i32,
    pub agent: &'a str,
    pub title: &'a str,
    pub model: Option<&'a str>,
    pub session: Option<&'a str>,
}

/// Everything about running a task that depends on the program that runs it.
pub(crate) trait Backend: Sync {
    /// The binary, from the configuration or the PATH; the error says what to set.
    fn binary(&self, cfg: &SupervisorConfig) -> Result<PathBuf, String>;

    /// The command line, environment and stdin of one attempt, in `ctx.cwd`.
    fn launch(&self, spec: &TaskSpec, ctx: &LaunchContext<'_>) -> Result<Launch, String>;

    /// A fresh parser for one attempt's output.
    fn stream(&self) -> Box<dyn Stream>;

    /// Reads one stdout line (no lock held).
    fn prepare<'a>(&self, line: &'a [u8]) -> Prepared<'a>;

    /// The fixed facts about the runner.
    fn traits(&self) -> &'static Traits;

    /// The account whose quota a task with `model` uses (a refusal for quota blocks later
    /// starts on the same account).
    fn account_key(&self, model: Option<&str>) -> String;

    /// The process-table entry of a running task of ours when [`opencode_client::proctable::scan`] does
    /// not list it. `program` is the configured opencode binary, `table` what the scan found.
    fn own_process(
        &self,
        run: OwnRun<'_>,
        program: Option<&Path>,
        table: &[OpencodeProcess],
    ) -> Option<OpencodeProcess>;
}

/// The parser of one attempt's output, with whatever state the runner's format needs.
pub(crate) trait Stream: Send + std::fmt::Debug {
    /// Folds one prepared line into `summary`. True when it was an event.
    fn push(&mut self, summary: &mut RunSummary, line: Prepared<'_>) -> bool;

    /// The failure of the finished attempt, if it failed.
    fn classify(&self, summary: &RunSummary, stderr: &str, exit: ExitInfo) -> Option<Failure>;

    /// When the quota window that refused the attempt resets, if the refusal said.
    fn quota_reset(&self, summary: &RunSummary) -> Option<bridge_ledger::quota::Reset>;
}

/// Folds a prepared line the way every runner does for lines it cannot read.
fn push_common<'a>(summary: &mut RunSummary, line: Prepared<'a>) -> Option<Prepared<'a>> {
    match line {
        Prepared::TooLong => {
            summary.note_malformed();
            None
        }
        other => Some(other),
    }
}
