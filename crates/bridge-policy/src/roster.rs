//! The agents opencode will know when a delegated run starts, read from the same places opencode
//! reads them, and what each one may do.
//!
//! Layers, later ones overriding earlier ones field by field (a deep merge, like opencode's):
//!
//! 1. opencode's built-in agents that can be delegated to: `build`, `plan`, `general`, `explore`;
//! 2. the bridge's built-in `worker` ([`worker_agent_config`]);
//! 3. the `agent` key of the global `config.json`, `opencode.json`, `opencode.jsonc`
//!    (in `$XDG_CONFIG_HOME/opencode`, else `~/.config/opencode`);
//! 4. the `agent` key of the file named by `OPENCODE_CONFIG`;
//! 5. the `agent` key of `opencode.json`/`opencode.jsonc` in every directory from the worktree
//!    root (nearest `.git`, else `/`) down to the working directory;
//! 6. agent directories, in this order: the global config directory, every `.opencode` directory
//!    from the worktree root down to the working directory (with its own `opencode.json(c)`),
//!    `~/.opencode`, and `$OPENCODE_CONFIG_DIR`. In each: `agent/**/*.md` and `agents/**/*.md`
//!    (the nested path is the name, `team/docs.md` → `team/docs`; default mode `all`) and
//!    `mode/*.md`, `modes/*.md` (default mode `primary`);
//! 7. the `agent` key of `OPENCODE_CONFIG_CONTENT`;
//! 8. the `mode` key of every config source above (merged across them in that order), merged
//!    into `agent` last with `mode: "primary"`, as opencode does.
//!
//! An agent with `disable: true` is dropped. A file that cannot be parsed is recorded as a
//! warning; a markdown agent whose frontmatter is broken is still listed (opencode lists it too),
//! as mode `all` with editing access.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::env::Environment;
use crate::permission::{Action, Reach, Rule, Ruleset};
use crate::yaml::{parse_jsonc, parse_yaml, split_frontmatter};

/// Whether an agent can change files in a bridge run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Its edit tools are denied (an `ask` counts as denied: these runs do not approve asks)
    /// and its shell is not free. The bridge runs it read-only: without `--auto`, with every
    /// permission denied but the read tools' in the run's config ([`config_overlay`],
    /// [`read_only_permissions`]), so a shell allowlist (which can always write, e.g. `timeout *`
    /// or `echo*` with a redirection), custom, plugin and MCP tools are switched off; the bridge
    /// checks opencode's resolved ruleset for the run before starting it.
    ReadOnly,
    /// Anything else: the agent can change files (with its edit tools or a free shell). It runs
    /// with `--auto`, so its `ask` rules are approved.
    Editing,
}

impl Access {
    /// `"read-only"` or `"editing"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::ReadOnly => "read-only",
            Access::Editing => "editing",
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the shell (`bash` tool) may do by the agent's own permissions, under the flags the
/// bridge runs it with (see [`Access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shell {
    /// Denied (or `ask`, which a run without `--auto` rejects).
    Denied,
    /// Only commands matching listed patterns; everything else is denied or asks.
    Restricted,
    /// Any command.
    Full,
}

/// An agent's opencode mode. opencode 1.x replaces a `subagent` passed to `run --agent` by its
/// default agent (it says so on stderr); [`config_overlay`] gives the config that avoids that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentMode {
    /// Can be run directly.
    Primary,
    /// Only reachable through another agent's task tool.
    Subagent,
    /// Both (opencode's default for configured agents).
    #[default]
    All,
}

impl AgentMode {
    /// `"primary"`, `"subagent"` or `"all"`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentMode::Primary => "primary",
            AgentMode::Subagent => "subagent",
            AgentMode::All => "all",
        }
    }

    fn parse(text: &str) -> Option<AgentMode> {
        match text {
            "primary" => Some(AgentMode::Primary),
            "subagent" => Some(AgentMode::Subagent),
            "all" => Some(AgentMode::All),
            _ => None,
        }
    }
}

/// Where an agent's final definition came from (the last layer that touched it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentSource {
    /// One of opencode's own agents.
    OpencodeBuiltIn,
    /// The bridge's `worker`, injected by the supervisor.
    Bridge,
    /// A markdown or JSON file.
    File(PathBuf),
    /// The `OPENCODE_CONFIG_CONTENT` variable.
    ConfigContent,
    /// opencode lists it but no file the bridge reads defines it: a plugin added it.
    Plugin,
}

impl fmt::Display for AgentSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentSource::OpencodeBuiltIn => f.write_str("opencode built-in"),
            AgentSource::Bridge => f.write_str("bridge built-in"),
            AgentSource::File(p) => write!(f, "{}", p.display()),
            AgentSource::ConfigContent => f.write_str("env OPENCODE_CONFIG_CONTENT"),
            AgentSource::Plugin => {
                f.write_str("a plugin (opencode lists it; no agent file defines it)")
            }
        }
    }
}

/// One agent opencode will know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentInfo {
    /// The name passed to `opencode run --agent` (nested names keep their `/`).
    pub name: String,
    /// Its description, if it has one.
    pub description: Option<String>,
    /// Whether it can change files.
    pub access: Access,
    /// Whether its edit-class tools (edit, write, patch, multiedit, apply_patch) are allowed.
    pub edit_tools: bool,
    /// What its shell may do.
    pub shell: Shell,
    /// Its opencode mode.
    pub opencode_mode: AgentMode,
    /// Hidden in opencode (`hidden: true`, or one of its internal agents): listed, never offered.
    pub hidden: bool,
    /// One line on why [`access`](Self::access) is what it is, e.g. `edit denied; shell
    /// allowlist (git diff*) switched off in bridge runs`.
    pub access_note: String,
    /// Where its definition came from.
    pub source: AgentSource,
}

impl AgentInfo {
    /// Builds the info of an agent from its (merged) opencode config entry.
    ///
    /// ```
    /// use bridge_policy::roster::{Access, AgentInfo, AgentMode, AgentSource, Shell};
    /// let cfg = serde_json::json!({"mode": "subagent", "permission": {"edit": "deny", "bash": {"rg *": "allow", "*": "deny"}}});
    /// let a = AgentInfo::from_config("explorer", &cfg, AgentSource::ConfigContent);
    /// assert_eq!((a.access, a.shell, a.opencode_mode), (Access::ReadOnly, Shell::Restricted, AgentMode::Subagent));
    /// ```
    pub fn from_config(name: &str, config: &Value, source: AgentSource) -> AgentInfo {
        let opencode_mode = config
            .get("mode")
            .and_then(Value::as_str)
            .and_then(AgentMode::parse)
            .unwrap_or(AgentMode::All);
        let description = config.get("description").and_then(Value::as_str);
        let hidden = config.get("hidden") == Some(&Value::Bool(true));
        AgentInfo::from_ruleset(
            name,
            description,
            opencode_mode,
            hidden,
            &Ruleset::from_config(config),
            source,
        )
    }

    /// Builds the info of an agent from its resolved permission ruleset, as opencode reports it
    /// (`GET /agent`); see [`crate::permission`] for how rules are read.
    pub fn from_ruleset(
        name: &str,
        description: Option<&str>,
        opencode_mode: AgentMode,
        hidden: bool,
        rules: &Ruleset,
        source: AgentSource,
    ) -> AgentInfo {
        // First as a read-only run sees it (asks rejected); an agent that can write even so is
        // editing, and runs with --auto, so it is then described with asks approved.
        let edit = rules.reach("edit", false);
        let bash = rules.reach("bash", false);
        let read_only = edit == Reach::None && bash != Reach::All;
        let (edit, bash) = if read_only {
            (edit, bash)
        } else {
            (rules.reach("edit", true), rules.reach("bash", true))
        };
        let shell = match bash {
            Reach::None => Shell::Denied,
            Reach::Some => Shell::Restricted,
            Reach::All => Shell::Full,
        };
        let access_note = if read_only {
            match shell {
                Shell::Restricted => format!(
                    "edit denied; shell allowlist ({}) switched off in bridge runs: a shell can write files",
                    rules.allowed_patterns("bash", 4).join(", ")
                ),
                _ => "edit and shell denied".to_owned(),
            }
        } else {
            let mut why = Vec::new();
            if edit != Reach::None {
                why.push(if rules.reach("edit", false) == Reach::None {
                    "edit asks are approved (--auto)"
                } else {
                    "edit tools allowed"
                });
            }
            if shell == Shell::Full {
                why.push("shell free");
            } else if shell == Shell::Restricted {
                why.push("shell allowlist");
            }
            why.join("; ")
        };
        AgentInfo {
            name: name.to_owned(),
            description: description
                .map(|d| d.trim().to_owned())
                .filter(|d| !d.is_empty()),
            access: if read_only {
                Access::ReadOnly
            } else {
                Access::Editing
            },
            edit_tools: edit != Reach::None,
            shell,
            opencode_mode,
            hidden,
            access_note,
            source,
        }
    }

    /// Whether `opencode run --agent NAME` runs this agent as is (not a subagent).
    pub fn runs_directly(&self) -> bool {
        self.opencode_mode != AgentMode::Subagent
    }
}

/// The name of the bridge's built-in agent.
pub const WORKER: &str = "worker";

/// The opencode config entry (`agent.worker`) that defines the bridge's built-in `worker` agent:
/// a primary agent with opencode's default permissions and a short prompt. The supervisor injects
/// it through `OPENCODE_CONFIG_CONTENT` (see [`config_overlay`]).
///
/// ```
/// let w = bridge_policy::roster::worker_agent_config();
/// assert_eq!(w["mode"], "primary");
/// ```
pub fn worker_agent_config() -> Value {
    json!({
        "description": "General worker of opencode-bridge: carries out one well-specified coding, data or documentation task in the working directory and reports what it changed.",
        "mode": "primary",
        "prompt": "You are worker, an agent that carries out one delegated task in the current working directory. Follow the task's instructions exactly, keep changes to what it asks for, prefer small verifiable steps, and finish with a short report: what you changed (file paths), the commands you ran and their results, and anything left undone or uncertain. Never commit, push, or delete work you did not create.",
    })
}

/// The config to put into `OPENCODE_CONFIG_CONTENT` for a run of `agent`, if any: the `worker`
/// definition when the bridge supplies it; `mode: "all"` for a subagent, which opencode 1.x
/// would otherwise replace by its default agent; and for a read-only agent
/// ([`Access::ReadOnly`]) the default-deny permissions of [`read_only_permissions`], set both
/// under `agent.<name>` and under `mode.<name>`: opencode merges the config's `mode.<name>`
/// entries into `agent.<name>` after every config source, `OPENCODE_CONFIG_CONTENT` included, so
/// a project's `mode` allowlist would otherwise come back. `None` when the agent runs as it is.
///
/// Key order can still undo it (opencode keeps a key where the first source that set it put it,
/// and its last matching rule wins): the bridge asks opencode for the run's resolved ruleset
/// ([`read_only_violation`]) and denies what came back ([`harden_read_only`]).
///
/// ```
/// use bridge_policy::roster::{config_overlay, AgentInfo, AgentSource};
/// let sub = AgentInfo::from_config("fixer", &serde_json::json!({"mode": "subagent"}), AgentSource::ConfigContent);
/// assert_eq!(config_overlay(&sub).unwrap(), serde_json::json!({"agent": {"fixer": {"mode": "all"}}}));
/// let ro = AgentInfo::from_config("oracle", &serde_json::json!({"permission": {"edit": "deny", "bash": {"git diff*": "allow", "*": "deny"}}}), AgentSource::ConfigContent);
/// let o = config_overlay(&ro).unwrap();
/// assert_eq!(o["agent"]["oracle"]["permission"]["*"], "deny");
/// assert_eq!(o["agent"]["oracle"]["permission"]["bash"], "deny");
/// assert_eq!(o["mode"]["oracle"]["permission"], o["agent"]["oracle"]["permission"]);
/// ```
pub fn config_overlay(agent: &AgentInfo) -> Option<Value> {
    let mut entry = match agent.source {
        AgentSource::Bridge => worker_agent_config(),
        _ => Value::Object(Map::new()),
    };
    if agent.opencode_mode == AgentMode::Subagent {
        entry["mode"] = Value::from("all");
    }
    let read_only = agent.access == Access::ReadOnly;
    if read_only {
        entry["permission"] = read_only_permissions();
    }
    if entry.as_object().is_some_and(Map::is_empty) {
        return None;
    }
    let mut agents = Map::new();
    agents.insert(agent.name.clone(), entry);
    let mut overlay = json!({ "agent": agents });
    if read_only {
        overlay["mode"] = json!({ agent.name.clone(): {"permission": read_only_permissions()} });
    }
    Some(overlay)
}

/// The tools a read-only run may use: opencode 1.18.33's built-in tools that only read the
/// project (`read`, `glob`, `grep`; 1.18.33 has no `list` tool, so a tool of that name could only
/// be a project's or a plugin's). Everything else is denied, whatever its name: edit, write,
/// apply_patch, bash, task, webfetch, websearch, todowrite, skill, question, lsp, and every
/// custom, plugin and MCP tool.
pub const READ_TOOLS: [&str; 3] = ["read", "glob", "grep"];

/// The permissions of a read-only run, default-deny: `"*": "deny"` first, then the read tools
/// ([`READ_TOOLS`]) allowed by name (`read` keeps opencode's own `.env` guard, with its `ask`
/// made `deny`), and `edit`, `bash` and `task` denied by name too (a string replaces a pattern
/// map when opencode merges configs, so an allowlist goes with it). The map is sorted, so `*`
/// comes first and the read tools after it, as opencode reads them (last matching rule wins).
///
/// ```
/// let p = bridge_policy::roster::read_only_permissions();
/// let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
/// assert_eq!(keys[0], "*");
/// assert_eq!(p["edit"], "deny");
/// ```
pub fn read_only_permissions() -> Value {
    json!({
        "*": "deny",
        "edit": "deny",
        "bash": "deny",
        "task": "deny",
        "glob": "allow",
        "grep": "allow",
        "read": {"*": "allow", "*.env": "deny", "*.env.*": "deny", "*.env.example": "allow"},
    })
}

/// Whether a resolved rule may stand in a read-only run after the last rule that denies every
/// permission: a deny, a rule of a read tool ([`READ_TOOLS`], by exact name), or an
/// `external_directory` rule (opencode appends an allow for its own tool-output directory to
/// every agent; it widens where the read tools may read, and grants no tool by itself).
fn read_only_rule_ok(rule: &Rule) -> bool {
    rule.action == Action::Deny
        || READ_TOOLS.contains(&rule.permission.as_str())
        || rule.permission == "external_directory"
}

/// What keeps a resolved ruleset (opencode's `GET /agent` for the run's agent under the run's
/// config) from being read-only as asked, or `None` when it is: some rule after the last
/// `* * deny` that neither denies nor belongs to a read tool, or no such deny at all.
///
/// ```
/// use bridge_policy::permission::Ruleset;
/// use bridge_policy::roster::read_only_violation;
/// let ok = Ruleset::from_opencode(&serde_json::json!([
///     {"permission": "bash", "pattern": "*", "action": "allow"},
///     {"permission": "*", "pattern": "*", "action": "deny"},
///     {"permission": "read", "pattern": "*", "action": "allow"},
/// ])).unwrap();
/// assert_eq!(read_only_violation(&ok), None);
/// let undone = Ruleset::from_opencode(&serde_json::json!([
///     {"permission": "*", "pattern": "*", "action": "deny"},
///     {"permission": "b*sh", "pattern": "*", "action": "allow"},
/// ])).unwrap();
/// assert_eq!(read_only_violation(&undone).unwrap().permission, "b*sh");
/// ```
pub fn read_only_violation(rules: &Ruleset) -> Option<Rule> {
    let all = |s: &str| !s.is_empty() && s.chars().all(|c| c == '*');
    let rules = rules.rules();
    let Some(last_deny) = rules
        .iter()
        .rposition(|r| all(&r.permission) && all(&r.pattern) && r.action == Action::Deny)
    else {
        return Some(Rule {
            permission: "*".into(),
            pattern: "*".into(),
            action: rules
                .iter()
                .rev()
                .find(|r| all(&r.permission) && all(&r.pattern))
                .map_or(Action::Ask, |r| r.action),
        });
    };
    rules[last_deny + 1..]
        .iter()
        .find(|r| !read_only_rule_ok(r))
        .cloned()
}

/// `overlay` (a read-only run's [`config_overlay`]) with every rule of `resolved` that a
/// read-only run may not have ([`read_only_violation`]'s test) denied by its own key and
/// pattern, under both `agent.<agent>` and `mode.<agent>`. opencode keeps a key at the place
/// the first config source gave it and takes its value from the last, so a project's
/// `"*": "ask", "b*sh": "allow"` puts `b*sh` after the overlay's `*`; denying `b*sh` itself in
/// the overlay gives that place a deny. Read tools and `external_directory` are left as they
/// are. Ask opencode again after this: what it resolves is the proof, not this function.
///
/// ```
/// use bridge_policy::permission::Ruleset;
/// use bridge_policy::roster::{harden_read_only, read_only_permissions};
/// let overlay = serde_json::json!({"agent": {"oracle": {"permission": read_only_permissions()}}});
/// let resolved = Ruleset::from_opencode(&serde_json::json!([
///     {"permission": "*", "pattern": "*", "action": "deny"},
///     {"permission": "b*sh", "pattern": "*", "action": "allow"},
///     {"permission": "bash", "pattern": "echo *", "action": "allow"},
/// ])).unwrap();
/// let h = harden_read_only(&overlay, "oracle", &resolved);
/// assert_eq!(h["agent"]["oracle"]["permission"]["b*sh"], "deny");
/// assert_eq!(h["mode"]["oracle"]["permission"]["bash"]["echo *"], "deny");
/// assert_eq!(h["mode"]["oracle"]["permission"]["bash"]["*"], "deny");
/// ```
pub fn harden_read_only(overlay: &Value, agent: &str, resolved: &Ruleset) -> Value {
    let mut permission = overlay
        .pointer(&format!("/agent/{}/permission", pointer_escape(agent)))
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(read_only_permissions);
    for rule in resolved.rules() {
        if READ_TOOLS.contains(&rule.permission.as_str()) || rule.permission == "external_directory"
        {
            continue;
        }
        let map = permission
            .as_object_mut()
            .expect("the permission overlay is an object");
        let entry = map
            .entry(rule.permission.clone())
            .or_insert_with(|| Value::from("deny"));
        // A plain action where it does (some keys, `question`, `webfetch`, `doom_loop`…, take
        // nothing else), a pattern map otherwise.
        if rule.pattern == "*" && entry.is_string() {
            *entry = Value::from("deny");
            continue;
        }
        if let Value::String(action) = entry {
            *entry = json!({ "*": action.clone() });
        }
        if let Some(patterns) = entry.as_object_mut() {
            patterns.insert(rule.pattern.clone(), Value::from("deny"));
        }
    }
    let mut out = overlay.clone();
    merge_config(
        &mut out,
        &json!({
            "agent": { agent: {"permission": permission.clone()} },
            "mode": { agent: {"permission": permission} },
        }),
    );
    out
}

/// `text` as one JSON-pointer token.
fn pointer_escape(text: &str) -> String {
    text.replace('~', "~0").replace('/', "~1")
}

/// Merges `overlay` into `base` the way opencode merges config sources: objects key by key,
/// everything else replaced.
///
/// ```
/// use serde_json::json;
/// let mut base = json!({"agent": {"a": {"mode": "subagent", "model": "x/y"}}});
/// bridge_policy::roster::merge_config(&mut base, &json!({"agent": {"a": {"mode": "all"}}}));
/// assert_eq!(base, json!({"agent": {"a": {"mode": "all", "model": "x/y"}}}));
/// ```
pub fn merge_config(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing) => merge_config(existing, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// The complete `OPENCODE_CONFIG_CONTENT` for one opencode process: the bridge's `worker`
/// definition underneath, the caller's own content (`existing`, the variable's value in the
/// bridge's environment) merged over it so it is never clobbered, then the run's `overlay` (a
/// [`Delegation`](crate::Delegation)'s `config_overlay`, [`config_overlay`]) on top, so what the
/// policy decided for the run (read-only permissions, a subagent's mode) always holds. Merged
/// the way opencode merges config sources ([`merge_config`]). With no overlay it is the config
/// opencode is asked for its agents under, so the roster lists what the runs get.
///
/// The error says what is wrong with `existing` and what to do.
///
/// ```
/// use serde_json::json;
/// let overlay = json!({"agent": {"oracle": {"permission": {"edit": "deny"}}}});
/// let text = bridge_policy::roster::config_content(
///     Some(r#"{"model": "a/b", "agent": {"oracle": {"permission": {"edit": "allow"}}}}"#),
///     Some(&overlay),
/// )
/// .unwrap();
/// let c: serde_json::Value = serde_json::from_str(&text).unwrap();
/// assert_eq!(c["model"], "a/b");
/// assert_eq!(c["agent"]["oracle"]["permission"]["edit"], "deny");
/// assert_eq!(c["agent"]["worker"]["mode"], "primary");
/// ```
pub fn config_content(existing: Option<&str>, overlay: Option<&Value>) -> Result<String, String> {
    let mut cfg = json!({ "agent": { WORKER: worker_agent_config() } });
    if let Some(text) = existing.filter(|t| !t.trim().is_empty()) {
        let user: Value = serde_json::from_str(text).map_err(|e| {
            format!("OPENCODE_CONFIG_CONTENT is not valid JSON ({e}): fix it or unset it")
        })?;
        if !user.is_object() {
            return Err("OPENCODE_CONFIG_CONTENT is not a JSON object: fix it or unset it".into());
        }
        merge_config(&mut cfg, &user);
    }
    if let Some(o) = overlay.filter(|o| o.is_object()) {
        merge_config(&mut cfg, o);
    }
    Ok(cfg.to_string())
}

/// Where a roster's agents were learnt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RosterOrigin {
    /// opencode itself listed them (with its plugins), `via` how it was asked.
    Opencode {
        /// How opencode was asked, e.g. `GET /agent on a temporary opencode serve`.
        via: String,
    },
    /// The bridge read the agent files itself, because opencode could not be asked (`why`).
    Files {
        /// Why opencode was not asked, or `None` when nobody tried (embedders, tests).
        why: Option<String>,
    },
}

/// The agents opencode will know for a working directory.
#[derive(Debug, Clone, Serialize)]
pub struct Roster {
    agents: BTreeMap<String, AgentInfo>,
    warnings: Vec<String>,
    origin: RosterOrigin,
    load_error: Option<String>,
    plugins: Vec<String>,
}

impl Default for Roster {
    fn default() -> Roster {
        Roster {
            agents: BTreeMap::new(),
            warnings: Vec::new(),
            origin: RosterOrigin::Files { why: None },
            load_error: None,
            plugins: Vec::new(),
        }
    }
}

impl Roster {
    /// Reads every agent source for `cwd` (see the module docs). Never fails: unreadable or
    /// unparsable files become [`Roster::warnings`].
    ///
    /// ```
    /// use bridge_policy::{roster::Access, FakeEnv, Roster};
    /// use std::path::Path;
    /// let env = FakeEnv::new().with_home("/h").with_file(
    ///     "/h/.config/opencode/agents/explorer.md",
    ///     "---\ndescription: Finds code\nmode: subagent\npermission:\n  edit: deny\n  bash: deny\n---\nYou explore.\n",
    /// );
    /// let roster = Roster::load(&env, Path::new("/h/p"));
    /// assert_eq!(roster.get("explorer").unwrap().access, Access::ReadOnly);
    /// assert!(roster.get("worker").is_some());
    /// ```
    pub fn load(env: &dyn Environment, cwd: &Path) -> Roster {
        let mut loader = Loader::default();
        loader.builtins();
        let global = global_config_dir(env);
        if let Some(dir) = &global {
            for file in ["config.json", "opencode.json", "opencode.jsonc"] {
                loader.config_file(env, &dir.join(file));
            }
        }
        if let Some(path) = env
            .var(bridge_env::OPENCODE_CONFIG.name)
            .filter(|p| !p.trim().is_empty())
        {
            let path = PathBuf::from(path.trim());
            if !env.exists(&path) {
                loader.warnings.push(format!(
                    "OPENCODE_CONFIG names {}, which does not exist",
                    path.display()
                ));
            }
            loader.config_file(env, &path);
        }
        let worktree = cwd
            .ancestors()
            .find(|d| env.exists(&d.join(".git")))
            .unwrap_or_else(|| cwd.ancestors().last().unwrap_or(cwd));
        let mut chain: Vec<&Path> = cwd
            .ancestors()
            .take_while(|d| d.starts_with(worktree))
            .collect();
        chain.reverse();
        for dir in &chain {
            for file in ["opencode.json", "opencode.jsonc"] {
                loader.config_file(env, &dir.join(file));
            }
        }
        let mut dirs: Vec<(PathBuf, bool)> = Vec::new();
        if let Some(dir) = global {
            dirs.push((dir, false));
        }
        for dir in &chain {
            let dot = dir.join(".opencode");
            if env.is_dir(&dot) {
                dirs.push((dot, true));
            }
        }
        if let Some(home) = env.home_dir() {
            let dot = home.join(".opencode");
            if env.is_dir(&dot) && !dirs.iter().any(|(d, _)| *d == dot) {
                dirs.push((dot, true));
            }
        }
        if let Some(dir) = env
            .var(bridge_env::OPENCODE_CONFIG_DIR.name)
            .filter(|p| !p.trim().is_empty())
        {
            dirs.push((PathBuf::from(dir.trim()), true));
        }
        for (dir, with_config) in dirs {
            if with_config {
                for file in ["opencode.json", "opencode.jsonc"] {
                    loader.config_file(env, &dir.join(file));
                }
            }
            for sub in ["agent", "agents"] {
                loader.markdown_dir(env, &dir.join(sub), &dir.join(sub), true, AgentMode::All);
            }
            for sub in ["mode", "modes"] {
                loader.markdown_dir(
                    env,
                    &dir.join(sub),
                    &dir.join(sub),
                    false,
                    AgentMode::Primary,
                );
            }
        }
        if let Some(content) = env
            .var(bridge_env::OPENCODE_CONFIG_CONTENT.name)
            .filter(|c| !c.trim().is_empty())
        {
            match parse_jsonc(&content) {
                Ok(value) => loader.config_value(&value, AgentSource::ConfigContent),
                Err(e) => loader.warnings.push(format!(
                    "OPENCODE_CONFIG_CONTENT is not valid JSON ({e}); ignored"
                )),
            }
        }
        loader.finish()
    }

    /// A roster made of the given agents (for tests and embedders).
    ///
    /// ```
    /// use bridge_policy::{roster::{AgentInfo, AgentSource}, Roster};
    /// let a = AgentInfo::from_config("explorer", &serde_json::json!({"mode": "subagent"}), AgentSource::ConfigContent);
    /// let roster = Roster::from_agents([a]);
    /// assert_eq!(roster.names(), ["explorer"]);
    /// assert!(!roster.get("explorer").unwrap().runs_directly());
    /// ```
    pub fn from_agents(agents: impl IntoIterator<Item = AgentInfo>) -> Roster {
        Roster {
            agents: agents.into_iter().map(|a| (a.name.clone(), a)).collect(),
            ..Roster::default()
        }
    }

    /// The roster as opencode reports it: `agents` is the array `GET /agent` returns
    /// (`[{name, description?, mode, native, hidden?, permission: [rules]}]`), `plugins` the
    /// configured plugins. `files` is the bridge's own reading of the agent files (for where
    /// each agent is defined, and its warnings). Every agent opencode lists is in the roster and
    /// no other; one that no file defines is [`AgentSource::Plugin`].
    ///
    /// ```
    /// use bridge_policy::{roster::{Access, AgentSource}, Roster};
    /// let listed = serde_json::json!([
    ///   {"name": "build", "mode": "primary", "native": true, "permission": [{"permission": "*", "pattern": "*", "action": "allow"}]},
    ///   {"name": "title", "mode": "primary", "native": true, "hidden": true, "permission": []},
    ///   {"name": "oracle", "mode": "subagent", "native": false, "permission": [
    ///     {"permission": "*", "pattern": "*", "action": "allow"},
    ///     {"permission": "edit", "pattern": "*", "action": "deny"},
    ///     {"permission": "bash", "pattern": "*", "action": "ask"}]}
    /// ]);
    /// let r = Roster::from_opencode(&listed, &Roster::default(), vec!["my-plugin".into()], "a test");
    /// assert_eq!(r.get("oracle").unwrap().access, Access::ReadOnly);
    /// assert_eq!(r.get("oracle").unwrap().source, AgentSource::Plugin);
    /// assert!(r.get("title").unwrap().hidden);
    /// assert_eq!(r.offered().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["build", "oracle"]);
    /// ```
    pub fn from_opencode(
        agents: &Value,
        files: &Roster,
        plugins: Vec<String>,
        via: &str,
    ) -> Roster {
        let mut out = BTreeMap::new();
        let mut warnings = files.warnings.clone();
        for entry in agents.as_array().map(Vec::as_slice).unwrap_or(&[]) {
            let Some(name) = entry.get("name").and_then(Value::as_str) else {
                continue;
            };
            let Some(rules) = entry.get("permission").and_then(Ruleset::from_opencode) else {
                warnings.push(format!(
                    "opencode listed agent {name:?} without a permission list; it is ignored"
                ));
                continue;
            };
            let mode = entry
                .get("mode")
                .and_then(Value::as_str)
                .and_then(AgentMode::parse)
                .unwrap_or(AgentMode::All);
            let native = entry.get("native") == Some(&Value::Bool(true));
            let source = match files.get(name) {
                _ if name == WORKER => AgentSource::Bridge,
                Some(known) if known.source != AgentSource::OpencodeBuiltIn || native => {
                    known.source.clone()
                }
                _ if native => AgentSource::OpencodeBuiltIn,
                _ => AgentSource::Plugin,
            };
            let info = AgentInfo::from_ruleset(
                name,
                entry.get("description").and_then(Value::as_str),
                mode,
                entry.get("hidden") == Some(&Value::Bool(true)),
                &rules,
                source,
            );
            out.insert(name.to_owned(), info);
        }
        Roster {
            agents: out,
            warnings,
            origin: RosterOrigin::Opencode {
                via: via.to_owned(),
            },
            load_error: None,
            plugins,
        }
    }

    /// This roster, marked as read from files because opencode could not be asked (`why`).
    pub fn with_fallback_reason(mut self, why: impl Into<String>) -> Roster {
        self.origin = RosterOrigin::Files {
            why: Some(why.into()),
        };
        self
    }

    /// This roster, with opencode's own message for a configuration it refuses to load: every
    /// run would fail, so delegations are refused until it is fixed.
    pub fn with_load_error(mut self, message: impl Into<String>) -> Roster {
        self.load_error = Some(message.into());
        self
    }

    /// Where the agents were learnt.
    pub fn origin(&self) -> &RosterOrigin {
        &self.origin
    }

    /// opencode's message when it refuses to load its configuration here.
    pub fn load_error(&self) -> Option<&str> {
        self.load_error.as_deref()
    }

    /// The plugins opencode's configuration loads (as configured), when opencode was asked.
    pub fn plugins(&self) -> &[String] {
        &self.plugins
    }

    /// The agents offered for delegation: every agent that is not hidden, sorted by name.
    pub fn offered(&self) -> impl Iterator<Item = &AgentInfo> {
        self.agents.values().filter(|a| !a.hidden)
    }

    /// The agent with this name.
    pub fn get(&self, name: &str) -> Option<&AgentInfo> {
        self.agents.get(name)
    }

    /// Every agent, sorted by name.
    pub fn agents(&self) -> impl Iterator<Item = &AgentInfo> {
        self.agents.values()
    }

    /// Every agent name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.agents.keys().map(String::as_str).collect()
    }

    /// Problems met while reading agent files (each one line).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// `$XDG_CONFIG_HOME/opencode`, else `~/.config/opencode`.
fn global_config_dir(env: &dyn Environment) -> Option<PathBuf> {
    match env.var("XDG_CONFIG_HOME").filter(|v| !v.trim().is_empty()) {
        Some(x) => Some(PathBuf::from(x).join("opencode")),
        None => env.home_dir().map(|h| h.join(".config").join("opencode")),
    }
}

#[derive(Default)]
struct Loader {
    configs: BTreeMap<String, (Value, AgentSource)>,
    /// The config's `mode` entries (opencode's older name for primary agents), merged across
    /// sources; opencode merges them into `agent` after every source, as `mode: "primary"`.
    modes: BTreeMap<String, (Value, AgentSource)>,
    warnings: Vec<String>,
}

impl Loader {
    fn builtins(&mut self) {
        let builtins = [
            (
                "build",
                json!({"description": "opencode's default agent: every tool allowed.", "mode": "primary"}),
            ),
            (
                "plan",
                json!({"description": "opencode's planning agent: edit tools denied except plan files.", "mode": "primary",
                "permission": {"edit": {"*": "deny", ".opencode/plans/*.md": "allow"}}}),
            ),
            (
                "general",
                json!({"description": "opencode's general-purpose subagent for multi-step research and tasks.", "mode": "subagent",
                "permission": {"todowrite": "deny"}}),
            ),
            (
                "explore",
                json!({"description": "opencode's read-only explorer subagent (search and read tools, shell allowed).", "mode": "subagent",
                "permission": {"*": "deny", "grep": "allow", "glob": "allow", "list": "allow", "bash": "allow", "read": "allow", "webfetch": "allow", "websearch": "allow"}}),
            ),
        ];
        for (name, cfg) in builtins {
            self.configs
                .insert(name.to_owned(), (cfg, AgentSource::OpencodeBuiltIn));
        }
        // opencode's internal agents: listed, never offered.
        for name in ["compaction", "title", "summary"] {
            self.configs.insert(
                name.to_owned(),
                (
                    json!({"mode": "primary", "hidden": true, "permission": "deny"}),
                    AgentSource::OpencodeBuiltIn,
                ),
            );
        }
        self.configs.insert(
            WORKER.to_owned(),
            (worker_agent_config(), AgentSource::Bridge),
        );
    }

    fn merge(&mut self, name: &str, cfg: &Value, source: AgentSource) {
        match self.configs.get_mut(name) {
            Some((existing, src)) => {
                merge_config(existing, cfg);
                *src = source;
            }
            None => {
                self.configs.insert(name.to_owned(), (cfg.clone(), source));
            }
        }
    }

    fn config_file(&mut self, env: &dyn Environment, path: &Path) {
        if !env.exists(path) {
            return;
        }
        let Some(text) = env.read_to_string(path) else {
            self.warnings.push(format!(
                "{}: cannot be read; its agents are ignored",
                path.display()
            ));
            return;
        };
        match parse_jsonc(&text) {
            Ok(value) => self.config_value(&value, AgentSource::File(path.to_path_buf())),
            Err(e) => self.warnings.push(format!(
                "{}: not valid JSON ({e}); its agents are ignored",
                path.display()
            )),
        }
    }

    fn config_value(&mut self, value: &Value, source: AgentSource) {
        for (name, cfg) in value
            .get("mode")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(_, c)| c.is_object())
        {
            match self.modes.get_mut(name) {
                Some((existing, src)) => {
                    merge_config(existing, cfg);
                    *src = source.clone();
                }
                None => {
                    self.modes
                        .insert(name.clone(), (cfg.clone(), source.clone()));
                }
            }
        }
        let Some(agents) = value.get("agent").and_then(Value::as_object) else {
            return;
        };
        for (name, cfg) in agents {
            if cfg.is_object() {
                self.merge(name, cfg, source.clone());
            } else {
                self.warnings.push(format!(
                    "{source}: agent {name:?} is not an object; ignored"
                ));
            }
        }
    }

    fn markdown_dir(
        &mut self,
        env: &dyn Environment,
        root: &Path,
        dir: &Path,
        recursive: bool,
        default_mode: AgentMode,
    ) {
        for path in env.read_dir(dir) {
            if env.is_dir(&path) {
                if recursive {
                    self.markdown_dir(env, root, &path, recursive, default_mode);
                }
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("md") {
                continue;
            }
            let Ok(rel) = path
                .with_extension("")
                .strip_prefix(root)
                .map(Path::to_path_buf)
            else {
                continue;
            };
            let name = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            let Some(text) = env.read_to_string(&path) else {
                self.warnings.push(format!(
                    "{}: cannot be read; agent {name} ignored",
                    path.display()
                ));
                continue;
            };
            // A file that names no mode keeps the mode an earlier layer gave the agent (as
            // opencode does); a new agent gets the directory's default.
            let mut cfg = match self.configs.get(&name).and_then(|(c, _)| c.get("mode")) {
                Some(_) => json!({}),
                None => json!({"mode": default_mode.as_str()}),
            };
            let (front, body) = split_frontmatter(&text);
            if let Some(front) = front {
                match parse_yaml(front) {
                    Ok(Value::Object(map)) => merge_config(&mut cfg, &Value::Object(map)),
                    Ok(Value::Null) => {}
                    Ok(_) => self.warnings.push(format!(
                        "{}: frontmatter is not a mapping; agent {name} listed as mode all, editing",
                        path.display()
                    )),
                    Err(e) => {
                        self.warnings.push(format!(
                            "{}: frontmatter {e}; agent {name} listed as mode all, editing",
                            path.display()
                        ));
                        cfg = json!({"mode": "all"});
                    }
                }
            }
            let body = body.trim();
            if !body.is_empty() {
                cfg["prompt"] = Value::from(body);
            }
            self.merge(&name, &cfg, AgentSource::File(path.clone()));
        }
    }

    fn finish(mut self) -> Roster {
        for (name, (mut cfg, source)) in std::mem::take(&mut self.modes) {
            cfg["mode"] = Value::from("primary");
            self.merge(&name, &cfg, source);
        }
        let agents = self
            .configs
            .into_iter()
            .filter(|(_, (cfg, _))| cfg.get("disable") != Some(&Value::Bool(true)))
            .map(|(name, (cfg, source))| {
                let info = AgentInfo::from_config(&name, &cfg, source);
                (name, info)
            })
            .collect();
        Roster {
            agents,
            warnings: self.warnings,
            ..Roster::default()
        }
    }
}
