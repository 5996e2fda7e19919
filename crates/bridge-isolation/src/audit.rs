//! The post-run audit: what a run really did, compared with what was asked. Fail closed.
//!
//! opencode can run another agent or model than the one asked for (1.x replaces a subagent by
//! its default agent, a plugin or a config can switch models), and then the policy the bridge
//! decided is not the one that ran. So when an opencode run ends, the supervisor reads the
//! session's own record ([`SessionReader`], implemented outside this crate on opencode's store
//! or server) and [`audit`] compares it with the task:
//!
//! - **agent**: every assistant message of the task's runs (created since the task was
//!   accepted, so the earlier turns of a follow-up's session do not count) must carry the asked
//!   agent; opencode's internal helpers (`compaction`, `title`, `summary`) are left out. A
//!   message of another agent fails the task, kind `agent`.
//! - **model**: when the task asked for a model (its own or the bridge's default), every such
//!   message must carry it as `provider/model` (a `#variant` is not part of the comparison).
//!   Another model fails the task, kind `model`.
//! - **tool calls**: a call that ran (status `completed`) of a tool whose permission the policy
//!   believes denied for this run ([`Denied`]: read-only agents run with `edit`, `bash` and
//!   `task` denied) is a policy violation and fails the task, kind `agent`, naming the calls.
//!   A call that opencode refused (status `error`) is what the policy expects and is not one.
//! - **read-only tree**: a read-only agent's task snapshots the git tree before and after, like
//!   an editing task, and takes a [`Footprint`](crate::footprint::Footprint) of everything
//!   `git status` does not show (`.git/` config, hooks and attributes, ignored paths, a tree
//!   outside git); any file changed in between is a policy violation (kind `agent`, the files
//!   named, [`read_only_tree`]). Another process editing the same tree at the same time is
//!   counted too: the message says so.
//!
//! A mismatch fails only a run that would otherwise have succeeded; a run that already failed
//! (or was cancelled, or timed out) keeps its own failure and the audit's finding goes to the
//! note. When the session cannot be read (no session id, the store unreadable, no assistant
//! message recorded), the run is **not failed**: [`Audit::note`] says `not audited: …` and why,
//! and the tool-call and tree checks still run on what the run itself printed.
//!
//! Everything here is pure; the reading is behind [`SessionReader`].

use std::time::SystemTime;

use crate::calls::ToolCall;
use crate::changes::ChangedFiles;
use crate::footprint::Touched;

/// opencode's internal agents that write assistant messages of their own into a session.
pub const HELPER_AGENTS: [&str; 3] = ["compaction", "title", "summary"];

/// One assistant message as opencode recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Turn {
    /// `agent` of the message (`mode` when it has none).
    pub agent: Option<String>,
    /// `providerID/modelID`.
    pub model: Option<String>,
}

/// What a session's record says the task's runs used.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Used {
    /// The assistant messages created since the task was accepted, oldest first.
    pub turns: Vec<Turn>,
    /// Their tool calls, oldest first (`status`: `pending`, `running`, `completed`, `error`).
    pub tool_calls: Vec<ToolCall>,
}

/// Reads what a session used. Implemented by the MCP server on opencode's store or server
/// (`opencode_client::usage`); tests supply their own.
pub trait SessionReader: Send + Sync + std::fmt::Debug {
    /// The assistant messages of `session_id` created at or after `since`, with their tool
    /// calls; an error says why the session could not be read (one line).
    fn read(&self, session_id: &str, since: SystemTime) -> Result<Used, String>;
}

/// The permissions the policy believes denied in a run, by opencode permission name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Denied {
    /// `edit`: write, edit, patch, multiedit, apply_patch.
    pub edit: bool,
    /// `bash`.
    pub bash: bool,
    /// `task` (subagents).
    pub task: bool,
}

impl Denied {
    /// What a read-only run is started with: the permissions
    /// `bridge_policy::roster::read_only_permissions` sets to `deny`.
    pub fn read_only() -> Denied {
        let p = bridge_policy::roster::read_only_permissions();
        let deny = |k: &str| p.get(k).and_then(|v| v.as_str()) == Some("deny");
        Denied {
            edit: deny("edit"),
            bash: deny("bash"),
            task: deny("task"),
        }
    }

    /// The permission a tool needs, when it is one of the denied ones.
    pub fn denies(&self, tool: &str) -> Option<&'static str> {
        match tool {
            "write" | "edit" | "patch" | "multiedit" | "apply_patch" if self.edit => Some("edit"),
            "bash" if self.bash => Some("bash"),
            "task" if self.task => Some("task"),
            _ => None,
        }
    }
}

/// What the task asked for.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// The agent passed to `--agent`.
    pub agent: &'a str,
    /// The model passed to `-m` (`provider/model`, maybe with `#variant`); `None`: opencode's
    /// own default, not compared.
    pub model: Option<&'a str>,
    /// The agent is read-only.
    pub read_only: bool,
    /// Permissions denied in the run (read-only agents: [`Denied::read_only`] whatever this says).
    pub denied: Denied,
}

/// Whom a finding blames: the kind of failure the task gets from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The agent: it was not the one asked, or did what its permissions deny.
    Agent,
    /// The model: another one answered.
    Model,
}

/// A finding that fails the task: whom it blames, what was found (one line, at most 600
/// characters, the form of a failure's message) and what to do about it. The supervisor turns
/// it into the task's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Whom it blames.
    pub blame: Blame,
    /// What was found.
    pub message: String,
    /// What to do about it.
    pub advice: String,
}

impl Finding {
    fn new(blame: Blame, message: impl Into<String>, advice: &str) -> Self {
        Finding {
            blame,
            message: one_line(&message.into(), 600),
            advice: advice.to_owned(),
        }
    }
}

/// `s` with its whitespace runs as single spaces, cut to `max` characters (then ending in `…`).
fn one_line(s: &str, max: usize) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= max {
        joined
    } else {
        let mut out: String = joined.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// What the audit found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Audit {
    /// The failure the task gets (the first of: agent, model, read-only tree, tool calls).
    pub failure: Option<Finding>,
    /// One line for the result: what was checked, or `not audited: …`, plus any further
    /// finding beyond the failure.
    pub note: String,
}

/// The model as compared: `provider/model` without a `#variant`.
fn bare_model(m: &str) -> &str {
    m.split_once('#').map_or(m, |(head, _)| head).trim()
}

fn list(items: &[String], max: usize) -> String {
    let mut out = items
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > max {
        out.push_str(&format!(" and {} more", items.len() - max));
    }
    out
}

/// The policy violation of a read-only run that changed its tree: the files `git status` saw
/// change (`tree`) and the entries the footprint saw change (`disk`: `.git/`, ignored paths,
/// a tree outside git), named; `None` when neither changed.
pub fn read_only_tree(
    agent: &str,
    tree: Option<&ChangedFiles>,
    disk: Option<&Touched>,
) -> Option<Finding> {
    let mut files: Vec<String> = tree
        .map(|c| c.files.iter().map(|f| f.path.clone()).collect())
        .unwrap_or_default();
    for p in disk.map(|d| d.paths.as_slice()).unwrap_or_default() {
        if !files.contains(p) {
            files.push(p.clone());
        }
    }
    if files.is_empty() {
        return None;
    }
    files.sort();
    Some(Finding::new(
        Blame::Agent,
        format!(
            "policy violation: the working tree changed while read-only agent `{agent}` ran: {}",
            list(&files, 10)
        ),
        "A read-only task must not change files. Look at the changes (git status, git diff; for .git/ files, ignored files and trees outside git compare them by hand) and undo what you did not make; a changed .git/config or .git/hooks/* can run code the next time you use git in that repository, so check them before running git there. If another process edited the same tree at the same time its edits are counted too, so run read-only tasks in a tree no one is editing.",
    ))
}

/// Compares a finished run with what was asked (see the module docs). `used` is the session's
/// record or why it could not be read; `run_calls` are the tool calls the run printed (used
/// when the record cannot be read); `tree` is what changed in the git tree while a read-only
/// agent ran, `disk` what changed in its footprint (`.git/`, ignored paths, a tree outside
/// git) (`None`: not tracked).
pub fn audit(
    asked: &Asked<'_>,
    used: Result<&Used, &str>,
    run_calls: &[ToolCall],
    tree: Option<&ChangedFiles>,
    disk: Option<&Touched>,
) -> Audit {
    let mut failures: Vec<Finding> = Vec::new();
    let mut note = Vec::new();
    let mut calls = run_calls;
    match used {
        Err(why) => note.push(format!("not audited: {why}")),
        Ok(u) => {
            if !u.tool_calls.is_empty() {
                calls = &u.tool_calls;
            }
            let turns: Vec<&Turn> = u
                .turns
                .iter()
                .filter(|t| {
                    !t.agent
                        .as_deref()
                        .is_some_and(|a| HELPER_AGENTS.contains(&a))
                })
                .collect();
            if turns.is_empty() {
                note.push(
                    "not audited: the session records no assistant message of this task".into(),
                );
            } else {
                let agents = distinct(turns.iter().filter_map(|t| t.agent.as_deref()));
                let others: Vec<String> = agents
                    .iter()
                    .filter(|a| a.as_str() != asked.agent)
                    .cloned()
                    .collect();
                if !others.is_empty() {
                    failures.push(Finding::new(
                        Blame::Agent,
                        format!(
                            "opencode ran agent {} instead of the asked `{}` (the session's record says so): the policy decided for `{}` was not the one enforced",
                            others.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", "),
                            asked.agent,
                            asked.agent
                        ),
                        "Do not use this result as the asked agent's work. Check the agent with `opencode agent list` (a `mode: subagent` agent, a plugin or a config that renames agents makes opencode run another one), then start the task again.",
                    ));
                }
                let models = distinct(turns.iter().filter_map(|t| t.model.as_deref()));
                if let Some(want) = asked.model.map(bare_model) {
                    let others: Vec<String> = models
                        .iter()
                        .filter(|m| m.as_str() != want)
                        .cloned()
                        .collect();
                    if !others.is_empty() {
                        failures.push(Finding::new(
                            Blame::Model,
                            format!(
                                "opencode used model {} instead of the asked `{want}` (the session's record says so)",
                                others.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
                            ),
                            "Check the model name against `opencode models` and the agent's own `model` setting (an agent's model or a plugin can override the one passed with -m), then start the task again.",
                        ));
                    }
                }
                note.push(format!(
                    "audited: agent {}, model {} in {} assistant message{}",
                    if agents.is_empty() {
                        "not recorded".to_owned()
                    } else {
                        agents.join(", ")
                    },
                    if models.is_empty() {
                        "not recorded".to_owned()
                    } else {
                        models.join(", ")
                    },
                    turns.len(),
                    if turns.len() == 1 { "" } else { "s" }
                ));
            }
        }
    }
    if asked.read_only {
        if let Some(f) = read_only_tree(asked.agent, tree, disk) {
            failures.push(f);
        }
        if let Some(n) = disk.and_then(|d| d.note.as_deref()) {
            note.push(n.to_owned());
        }
    }
    let denied = if asked.read_only {
        Denied::read_only()
    } else {
        asked.denied
    };
    let forbidden: Vec<String> = calls
        .iter()
        .filter(|c| c.status == "completed")
        .filter_map(|c| {
            denied.denies(&c.tool).map(|perm| match &c.title {
                Some(t) if !t.is_empty() => format!("{} `{}` ({perm} denied)", c.tool, t),
                _ => format!("{} ({perm} denied)", c.tool),
            })
        })
        .collect();
    if !forbidden.is_empty() {
        failures.push(Finding::new(
            Blame::Agent,
            format!(
                "policy violation: agent `{}` made tool calls its permissions deny: {}",
                asked.agent,
                list(&forbidden, 5)
            ),
            "The agent's permissions did not hold in this run: check what the files it touched contain now (git diff) and the agent's opencode config (a plugin or a project config may override the bridge's), and do not rely on it being read-only.",
        ));
    }
    let mut failures = failures.into_iter();
    let failure = failures.next();
    for more in failures {
        note.push(format!("also: {}", more.message));
    }
    Audit {
        failure,
        note: note.join("; "),
    }
}

fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.iter().any(|o| o == i) {
            out.push(i.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::{ChangeSource, FileChange};

    fn turn(agent: &str, model: &str) -> Turn {
        Turn {
            agent: Some(agent.into()),
            model: Some(model.into()),
        }
    }

    fn call(tool: &str, status: &str, title: &str) -> ToolCall {
        ToolCall {
            tool: tool.into(),
            status: status.into(),
            title: Some(title.into()),
            error: None,
            ..Default::default()
        }
    }

    fn asked<'a>(agent: &'a str, model: Option<&'a str>, read_only: bool) -> Asked<'a> {
        Asked {
            agent,
            model,
            read_only,
            denied: Denied::default(),
        }
    }

    #[test]
    fn a_read_only_run_is_audited_against_the_overlay_it_runs_with() {
        assert_eq!(
            Denied::read_only(),
            Denied {
                edit: true,
                bash: true,
                task: true
            }
        );
        let d = Denied::read_only();
        for (tool, perm) in [
            ("write", "edit"),
            ("apply_patch", "edit"),
            ("bash", "bash"),
            ("task", "task"),
        ] {
            assert_eq!(d.denies(tool), Some(perm), "{tool}");
        }
        assert_eq!(d.denies("read"), None);
        assert_eq!(Denied::default().denies("write"), None);
    }

    #[test]
    fn the_asked_agent_and_model_pass() {
        let used = Used {
            turns: vec![
                turn("explorer", "fk/ok"),
                turn("compaction", "fk/small"),
                turn("explorer", "fk/ok"),
            ],
            tool_calls: vec![call("read", "completed", "a.rs")],
        };
        let a = audit(
            &asked("explorer", Some("fk/ok#high"), true),
            Ok(&used),
            &[],
            None,
            None,
        );
        assert_eq!(a.failure, None);
        assert_eq!(
            a.note,
            "audited: agent explorer, model fk/ok in 2 assistant messages"
        );
    }

    #[test]
    fn another_agent_fails_with_kind_agent_and_another_model_is_noted() {
        let used = Used {
            turns: vec![turn("build", "fk/other")],
            tool_calls: vec![],
        };
        let a = audit(
            &asked("explorer", Some("fk/ok"), false),
            Ok(&used),
            &[],
            None,
            None,
        );
        let f = a.failure.unwrap();
        assert_eq!(f.blame, Blame::Agent);
        assert!(
            f.message
                .contains("`build` instead of the asked `explorer`"),
            "{}",
            f.message
        );
        assert!(f.advice.contains("opencode agent list"));
        assert!(
            a.note.contains("also: opencode used model `fk/other`"),
            "{}",
            a.note
        );
    }

    #[test]
    fn another_model_fails_with_kind_model() {
        let used = Used {
            turns: vec![turn("worker", "fk/ok"), turn("worker", "fk/other")],
            tool_calls: vec![],
        };
        let a = audit(
            &asked("worker", Some("fk/ok"), false),
            Ok(&used),
            &[],
            None,
            None,
        );
        let f = a.failure.unwrap();
        assert_eq!(f.blame, Blame::Model);
        assert!(
            f.message
                .contains("`fk/other` instead of the asked `fk/ok`")
        );
        // No model asked: opencode's default is not compared.
        let a = audit(&asked("worker", None, false), Ok(&used), &[], None, None);
        assert_eq!(a.failure, None);
        assert!(a.note.contains("model fk/ok, fk/other"), "{}", a.note);
    }

    #[test]
    fn an_unreadable_session_is_not_audited_and_does_not_fail() {
        let a = audit(
            &asked("worker", Some("fk/ok"), false),
            Err("the store cannot be opened"),
            &[],
            None,
            None,
        );
        assert_eq!(a.failure, None);
        assert_eq!(a.note, "not audited: the store cannot be opened");
        let a = audit(
            &asked("worker", Some("fk/ok"), false),
            Ok(&Used::default()),
            &[],
            None,
            None,
        );
        assert_eq!(a.failure, None);
        assert!(a.note.starts_with("not audited:"), "{}", a.note);
    }

    #[test]
    fn calls_a_read_only_agent_could_not_make_are_a_violation() {
        let run_calls = vec![
            call("read", "completed", "a.rs"),
            call("write", "error", "b.rs"),
            call("bash", "completed", "echo hi > c"),
            call("write", "completed", "d.rs"),
        ];
        let a = audit(
            &asked("explorer", None, true),
            Err("no session"),
            &run_calls,
            None,
            None,
        );
        let f = a.failure.unwrap();
        assert_eq!(f.blame, Blame::Agent);
        assert_eq!(
            f.message,
            "policy violation: agent `explorer` made tool calls its permissions deny: bash `echo hi > c` (bash denied), write `d.rs` (edit denied)"
        );
        // An editing agent with a free shell may do all of that.
        let a = audit(
            &asked("worker", None, false),
            Err("x"),
            &run_calls,
            None,
            None,
        );
        assert_eq!(a.failure, None);
        // One whose shell the policy believes denied may not run bash.
        let mut ask = asked("worker", None, false);
        ask.denied.bash = true;
        let f = audit(&ask, Err("x"), &run_calls, None, None)
            .failure
            .unwrap();
        assert!(f.message.contains("bash `echo hi > c`"), "{}", f.message);
        assert!(!f.message.contains("write"), "{}", f.message);
    }

    #[test]
    fn a_read_only_run_that_changed_the_tree_names_the_files() {
        let tree = ChangedFiles {
            source: ChangeSource::Git,
            files: vec![FileChange {
                path: "src/lib.rs".into(),
                added: Some(1),
                removed: Some(0),
                status: "modified".into(),
            }],
        };
        let used = Used {
            turns: vec![turn("explorer", "fk/ok")],
            tool_calls: vec![],
        };
        let a = audit(
            &asked("explorer", None, true),
            Ok(&used),
            &[],
            Some(&tree),
            None,
        );
        let f = a.failure.unwrap();
        assert_eq!(f.blame, Blame::Agent);
        assert!(
            f.message
                .ends_with("changed while read-only agent `explorer` ran: src/lib.rs"),
            "{}",
            f.message
        );
        // The same change in an editing agent's task is its work.
        let a = audit(
            &asked("explorer", None, false),
            Ok(&used),
            &[],
            Some(&tree),
            None,
        );
        assert_eq!(a.failure, None);
    }

    #[test]
    fn a_read_only_run_that_wrote_git_config_hooks_or_ignored_files_names_them() {
        let disk = Touched {
            paths: vec![
                ".git/config".into(),
                ".git/hooks/pre-commit".into(),
                "src/lib.rs".into(),
                "target/out.log".into(),
            ],
            note: Some("the tree has more than 100000 entries: ...".into()),
        };
        let tree = ChangedFiles {
            source: ChangeSource::Git,
            files: vec![FileChange {
                path: "src/lib.rs".into(),
                added: Some(1),
                removed: Some(0),
                status: "modified".into(),
            }],
        };
        let a = audit(
            &asked("explorer", None, true),
            Err("no session"),
            &[],
            Some(&tree),
            Some(&disk),
        );
        let f = a.failure.unwrap();
        assert_eq!(f.blame, Blame::Agent);
        assert_eq!(
            f.message,
            "policy violation: the working tree changed while read-only agent `explorer` ran: .git/config, .git/hooks/pre-commit, src/lib.rs, target/out.log"
        );
        assert!(f.advice.contains(".git/config"), "{}", f.advice);
        assert!(a.note.contains("more than 100000 entries"), "{}", a.note);
        // Outside git there is only the footprint.
        let only = Touched {
            paths: vec!["notes.txt".into()],
            note: None,
        };
        let f = audit(
            &asked("explorer", None, true),
            Err("x"),
            &[],
            None,
            Some(&only),
        )
        .failure
        .unwrap();
        assert!(f.message.ends_with("ran: notes.txt"), "{}", f.message);
        // An unchanged footprint is no finding; an editing agent's footprint is not compared.
        let a = audit(
            &asked("explorer", None, true),
            Err("x"),
            &[],
            None,
            Some(&Touched::default()),
        );
        assert_eq!(a.failure, None);
        let a = audit(
            &asked("worker", None, false),
            Err("x"),
            &[],
            None,
            Some(&only),
        );
        assert_eq!(a.failure, None);
    }
}
