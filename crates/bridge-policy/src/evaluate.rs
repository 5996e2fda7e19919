//! One delegation request in, a decision out.

use std::fmt;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::env::Environment;
use crate::instructions::run_instructions;
use crate::mode::{Mode, ModeDecision, detect_mode};
use crate::roster::{Access, AgentInfo, Roster, WORKER, config_overlay};
use crate::secrets;
use crate::tier::{ACCEPTED_TIERS, Tier};

/// Env var naming the default agent in blueprint and insensitive modes.
pub const ENV_DEFAULT_AGENT: &str = bridge_env::AGENT.name;

/// Agents sensitive mode always allows.
const SENSITIVE_ALWAYS: [&str; 4] = ["explorer", "librarian", "deep-research", "oracle"];
/// Agents sensitive mode allows only with `mechanical: true`.
const SENSITIVE_MECHANICAL: [&str; 2] = ["fixer", "worker"];
/// The default agent in sensitive mode.
const SENSITIVE_DEFAULT: &str = "explorer";

/// What the caller asked for. The working directory must already be checked against the
/// allowed root (that is the supervisor's job).
///
/// Inputs are typed: text from a tool call is parsed once where it comes in ([`Tier::parse`],
/// [`Mode::parse`], or [`Tier::from_arg`] and [`Mode::from_arg`] for the refusal a model
/// can act on). More fields may be added; build one with [`DelegationRequest::new`].
///
/// ```
/// use bridge_policy::{DelegationRequest, Mode, Tier};
/// use std::path::Path;
/// let req = DelegationRequest::new(Tier::Easy, "Fix the typo in README.md", Path::new("/p"))
///     .with_agent("fixer")
///     .with_mode(Mode::Insensitive);
/// assert_eq!((req.agent, req.mode, req.mechanical), (Some("fixer"), Some(Mode::Insensitive), false));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DelegationRequest<'a> {
    /// How hard the job is; only easy and medium jobs are delegated.
    pub tier: Tier,
    /// The agent asked for (`None` for the default agent).
    pub agent: Option<&'a str>,
    /// Whether the caller declares the job purely mechanical (renames, moves, formatting).
    pub mechanical: bool,
    /// The mode the user asked for (`None` unless the user asked for one).
    pub mode: Option<Mode>,
    /// The task text.
    pub prompt: &'a str,
    /// The working directory of the run.
    pub cwd: &'a Path,
}

impl<'a> DelegationRequest<'a> {
    /// A request with a tier, a prompt and a working directory: default agent, no mode asked
    /// for, not mechanical.
    pub fn new(tier: Tier, prompt: &'a str, cwd: &'a Path) -> Self {
        DelegationRequest {
            tier,
            agent: None,
            mechanical: false,
            mode: None,
            prompt,
            cwd,
        }
    }

    /// This request, asking for `agent`.
    pub fn with_agent(mut self, agent: &'a str) -> Self {
        self.agent = Some(agent);
        self
    }

    /// This request, with the mode the user asked for.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// This request, declared mechanical (or not).
    pub fn with_mechanical(mut self, mechanical: bool) -> Self {
        self.mechanical = mechanical;
        self
    }
}

/// An accepted delegation: everything the supervisor needs to start the run.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Delegation {
    /// The routing mode and where it came from.
    pub mode: ModeDecision,
    /// The tier.
    pub tier: Tier,
    /// The agent that will run.
    pub agent: AgentInfo,
    /// Whether the caller declared the job mechanical.
    pub mechanical: bool,
    /// The run instructions ([`run_instructions`]).
    pub instructions: String,
    /// The prompt to send: the run instructions, a blank line, then the task.
    pub prompt: String,
    /// Config to merge into `OPENCODE_CONFIG_CONTENT` for this run ([`config_overlay`]).
    pub config_overlay: Option<Value>,
}

/// Why a delegation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalKind {
    /// Tier missing, unknown, hard or unsure.
    Tier,
    /// A mode source holds an unrecognised value.
    Mode,
    /// The agent is not allowed in this mode or not known to opencode.
    Agent,
    /// The prompt looks like it contains a secret.
    Secret,
    /// The prompt is empty.
    Prompt,
    /// opencode refuses to load its configuration here, so every run would fail.
    Config,
}

/// A refusal: its kind and a message saying what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Refusal {
    /// The kind of refusal.
    pub kind: RefusalKind,
    /// What was wrong and what to do instead (one paragraph, never containing a secret).
    pub message: String,
    /// For a secret: which kind and line.
    pub secret: Option<secrets::SecretFinding>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

impl Refusal {
    fn new(kind: RefusalKind, message: String) -> Self {
        Refusal {
            kind,
            message,
            secret: None,
        }
    }
}

/// The agent used when the request names none.
///
/// Sensitive mode: always `explorer`. Otherwise `$OPENCODE_BRIDGE_AGENT` when set and not
/// blank, else `worker`.
///
/// ```
/// use bridge_policy::{agents::default_agent, FakeEnv, Mode};
/// let env = FakeEnv::new().with_var("OPENCODE_BRIDGE_AGENT", "fixer");
/// assert_eq!(default_agent(&env, Mode::Blueprint), "fixer");
/// assert_eq!(default_agent(&env, Mode::Sensitive), "explorer");
/// assert_eq!(default_agent(&FakeEnv::new(), Mode::Insensitive), "worker");
/// ```
pub fn default_agent(env: &dyn Environment, mode: Mode) -> String {
    if mode == Mode::Sensitive {
        return SENSITIVE_DEFAULT.to_owned();
    }
    env.var(ENV_DEFAULT_AGENT)
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| WORKER.to_owned())
}

/// One entry of the allow-list of a mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllowedAgent {
    /// The agent name.
    pub name: String,
    /// Whether it is allowed only for mechanical jobs (`mechanical: true`).
    pub mechanical_only: bool,
    /// Whether opencode knows it here (it is in the roster).
    pub installed: bool,
}

/// The agents a mode allows. Blueprint and insensitive: every roster agent that is not hidden. Sensitive: explorer,
/// librarian, deep-research, oracle, and fixer/worker for mechanical jobs, whether installed or
/// not (`installed` says which).
///
/// ```
/// use bridge_policy::{agents::allowed_agents, Mode, Roster};
/// let roster = Roster::default();
/// let names: Vec<_> = allowed_agents(Mode::Sensitive, &roster).into_iter().map(|a| a.name).collect();
/// assert_eq!(names, ["explorer", "librarian", "deep-research", "oracle", "fixer", "worker"]);
/// ```
pub fn allowed_agents(mode: Mode, roster: &Roster) -> Vec<AllowedAgent> {
    match mode {
        Mode::Sensitive => SENSITIVE_ALWAYS
            .iter()
            .map(|n| (n, false))
            .chain(SENSITIVE_MECHANICAL.iter().map(|n| (n, true)))
            .map(|(name, mechanical_only)| AllowedAgent {
                name: (*name).to_owned(),
                mechanical_only,
                installed: roster.get(name).is_some_and(|a| !a.hidden),
            })
            .collect(),
        Mode::Blueprint | Mode::Insensitive => roster
            .offered()
            .map(|a| AllowedAgent {
                name: a.name.clone(),
                mechanical_only: false,
                installed: true,
            })
            .collect(),
    }
}

/// Decides a delegation request.
///
/// Checks, in order: the tier (only easy and medium pass), the mode (an unrecognised value in
/// an env var refuses), the prompt (not empty, no secret), the agent (allowed in the mode, known to
/// opencode). On success the prompt is prefixed with the run instructions.
///
/// # Errors
/// A [`Refusal`] whose message says what to do instead.
///
/// ```
/// use bridge_policy::{evaluate, DelegationRequest, FakeEnv, RefusalKind, Roster, Tier};
/// use std::path::Path;
/// let env = FakeEnv::new().with_var("OPENCODE_MODE", "sensitive");
/// let cwd = Path::new("/p");
/// let roster = Roster::load(&env, cwd);
/// let mut req = DelegationRequest::new(Tier::Medium, "Rename foo to bar in src/", cwd);
/// req.agent = Some("worker");
/// let refusal = evaluate(&req, &env, &roster).unwrap_err();
/// assert_eq!(refusal.kind, RefusalKind::Agent);
/// assert!(refusal.message.contains("mechanical: true"));
/// req.mechanical = true;
/// assert_eq!(evaluate(&req, &env, &roster).unwrap().agent.name, "worker");
/// ```
pub fn evaluate(
    request: &DelegationRequest<'_>,
    env: &dyn Environment,
    roster: &Roster,
) -> Result<Delegation, Refusal> {
    let tier = check_tier(request.tier)?;
    let decision = detect_mode(env, request.cwd, request.mode)
        .map_err(|e| Refusal::new(RefusalKind::Mode, format!("Not delegated: {e}.")))?;
    let mode = decision.mode;

    if request.prompt.trim().is_empty() {
        return Err(Refusal::new(
            RefusalKind::Prompt,
            "Not delegated: the prompt is empty; describe the task (files, expected result, how to check it).".to_owned(),
        ));
    }
    let allow = secrets::Allowlist::load(env, request.cwd);
    if let Some(finding) = secrets::scan_allowing(request.prompt, &allow) {
        return Err(Refusal {
            kind: RefusalKind::Secret,
            message: format!(
                "Not delegated: {finding}. Remove it and refer to it by name instead (for example an environment variable the agent's tools can read), then retry. If it is not a secret, add the exact value (or re:PATTERN) as one line of .claude/{} in the project.",
                secrets::ALLOWLIST_FILE
            ),
            secret: Some(finding),
        });
    }

    if let Some(error) = roster.load_error() {
        return Err(Refusal::new(
            RefusalKind::Config,
            format!(
                "Not delegated: opencode refuses to load its configuration here, so every run would fail: {error}. Fix that (`opencode agent list` in the directory shows the same error), then retry."
            ),
        ));
    }

    let (name, from_env) = match request.agent.map(str::trim).filter(|a| !a.is_empty()) {
        Some(a) => (a.to_owned(), false),
        None => {
            let env_set = mode != Mode::Sensitive
                && env
                    .var(ENV_DEFAULT_AGENT)
                    .is_some_and(|v| !v.trim().is_empty());
            (default_agent(env, mode), env_set)
        }
    };
    check_agent_allowed(&name, mode, request.mechanical, &decision)?;
    let Some(agent) = roster.get(&name) else {
        let origin = if from_env {
            format!(" (the default from {ENV_DEFAULT_AGENT})")
        } else if request.agent.is_none() {
            " (the default agent)".to_owned()
        } else {
            String::new()
        };
        let usable: Vec<String> = match mode {
            Mode::Sensitive => allowed_agents(mode, roster)
                .into_iter()
                .filter(|a| a.installed)
                .map(|a| {
                    if a.mechanical_only {
                        format!("{} (mechanical only)", a.name)
                    } else {
                        a.name
                    }
                })
                .collect(),
            _ => roster.offered().map(|a| a.name.clone()).collect(),
        };
        return Err(Refusal::new(
            RefusalKind::Agent,
            format!(
                "Not delegated: agent {name:?}{origin} is not known to opencode here, so opencode would silently run its default agent instead. Usable now: {}. Pick one of them, or install the agent (for the opencode-config roster: ~/.config/opencode/agents/).",
                if usable.is_empty() {
                    "none".to_owned()
                } else {
                    usable.join(", ")
                }
            ),
        ));
    };
    if agent.hidden {
        return Err(Refusal::new(
            RefusalKind::Agent,
            format!(
                "Not delegated: agent {name:?} is hidden in opencode (an internal agent, or `hidden: true` in its config), so it is not offered for delegation. Usable now: {}.",
                roster
                    .offered()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if mode == Mode::Sensitive && !request.mechanical && agent.access == Access::Editing {
        return Err(Refusal::new(
            RefusalKind::Agent,
            format!(
                "Not delegated: the mode is sensitive (from {}), where only read-only agents run, and {name} can change files here ({}). Deny its edit and bash permissions in its definition, use another read-only agent, or do the work yourself.",
                decision.decided_by, agent.access_note
            ),
        ));
    }
    let instructions = run_instructions(agent, mode, request.mechanical);
    let prompt = format!("{instructions}\n{}", request.prompt);
    Ok(Delegation {
        mode: decision,
        tier,
        agent: agent.clone(),
        mechanical: request.mechanical,
        instructions,
        prompt,
        config_overlay: config_overlay(agent),
    })
}

/// The pointer every tier refusal ends with: the lists themselves are long (and a project may
/// replace them), so they live in `opencode_policy`, not in each refusal.
fn tier_help() -> &'static str {
    "opencode_policy has the full rules."
}

impl Tier {
    /// The tier of a tool call's `tier` argument given as text, or the refusal for a missing
    /// (or blank) or unknown one. Hard and unsure parse: [`evaluate`] refuses them.
    ///
    /// # Errors
    /// A [`Refusal`] of kind [`RefusalKind::Tier`] whose message says what to do instead.
    ///
    /// ```
    /// use bridge_policy::{RefusalKind, Tier};
    /// assert_eq!(Tier::from_arg(Some(" Medium")), Ok(Tier::Medium));
    /// let refusal = Tier::from_arg(Some("trivial")).unwrap_err();
    /// assert_eq!(refusal.kind, RefusalKind::Tier);
    /// assert!(refusal.message.starts_with("Not delegated: tier \"trivial\" is not one of easy, medium, hard or unsure."));
    /// assert!(Tier::from_arg(None).unwrap_err().message.contains("tier is required"));
    /// ```
    pub fn from_arg(tier: Option<&str>) -> Result<Tier, Refusal> {
        let Some(raw) = tier.filter(|t| !t.trim().is_empty()) else {
            return Err(Refusal::new(
                RefusalKind::Tier,
                format!(
                    "Not delegated: tier is required (easy or medium are delegated; hard and unsure stay with you). {}",
                    tier_help()
                ),
            ));
        };
        Tier::parse(raw).ok_or_else(|| {
            Refusal::new(
                RefusalKind::Tier,
                format!(
                    "Not delegated: tier {:?} is not one of {ACCEPTED_TIERS}. {}",
                    raw.chars().take(40).collect::<String>(),
                    tier_help()
                ),
            )
        })
    }
}

fn check_tier(tier: Tier) -> Result<Tier, Refusal> {
    if tier.is_delegable() {
        return Ok(tier);
    }
    Err(Refusal::new(
        RefusalKind::Tier,
        format!(
            "Not delegated: {tier} work stays with you; do it yourself, or split off the easy/medium parts and delegate only those. {}",
            tier_help()
        ),
    ))
}

fn check_agent_allowed(
    name: &str,
    mode: Mode,
    mechanical: bool,
    decision: &ModeDecision,
) -> Result<(), Refusal> {
    if mode != Mode::Sensitive {
        return Ok(());
    }
    if SENSITIVE_ALWAYS.contains(&name) {
        return Ok(());
    }
    let why = format!("the mode is sensitive (from {})", decision.decided_by);
    if SENSITIVE_MECHANICAL.contains(&name) {
        if mechanical {
            return Ok(());
        }
        return Err(Refusal::new(
            RefusalKind::Agent,
            format!(
                "Not delegated: {why}, where {name} may only do mechanical edits. If the job is purely mechanical (renames, moves, formatting, applying a given pattern), retry with mechanical: true; otherwise use explorer, librarian, deep-research or oracle, or do it yourself."
            ),
        ));
    }
    Err(Refusal::new(
        RefusalKind::Agent,
        format!(
            "Not delegated: {why}, which allows only explorer, librarian, deep-research, oracle, and fixer/worker with mechanical: true; {name:?} is not allowed. Use one of those, or do the work yourself."
        ),
    ))
}
