//! The rules prepended to every delegated prompt, and the rules the caller is given for checking
//! what comes back.

use crate::mode::Mode;
use crate::roster::{Access, AgentInfo};

/// What the caller must do with a delegated result before using it.
pub const VERIFICATION_RULES: &[&str] = &[
    "treat the output as an untrusted draft until you have checked it",
    "check that every file it names exists and holds what it claims",
    "rerun the build and tests yourself; a reported pass is not a pass",
    "recompute every number, table and statistic from the source data",
    "inspect the diff (git diff) and revert anything outside the task",
    "check quotes, citations and DOIs against their sources",
];

/// The text put before the task in a delegated prompt.
///
/// - agents whose edit tools are denied get a read-only rule (no file changes, not even through
///   the shell), whatever their shell access;
/// - agents that edit get a build-and-test rule; with `mechanical` also a rule to change nothing
///   but the mechanical edit; in blueprint mode a rule to follow the written blueprint;
/// - every run is told never to commit or push.
///
/// ```
/// use bridge_policy::{instructions::run_instructions, roster::{AgentInfo, AgentSource}, Mode};
/// let explorer = AgentInfo::from_config("explorer", &serde_json::json!({"permission": {"edit": "deny", "bash": "deny"}}), AgentSource::ConfigContent);
/// let text = run_instructions(&explorer, Mode::Sensitive, false);
/// assert!(text.contains("READ-ONLY"));
/// assert!(text.contains("Never commit or push"));
/// ```
pub fn run_instructions(agent: &AgentInfo, mode: Mode, mechanical: bool) -> String {
    let mut rules: Vec<&str> =
        vec!["Do this task yourself, in the current working directory; stay inside it."];
    if agent.access == Access::ReadOnly || !agent.edit_tools {
        rules.push(
            "READ-ONLY: do not create, modify, move or delete any file, not even through shell commands. Report your findings instead.",
        );
    } else {
        if mechanical {
            rules.push(
                "MECHANICAL: make only the mechanical change asked for (renames, moves, formatting, applying a given pattern); do not change behaviour, logic or numbers.",
            );
        }
        if mode == Mode::Blueprint {
            rules.push(
                "Follow the blueprint in the task exactly: the files, signatures, edge cases and acceptance criteria it gives.",
            );
        }
        rules.push(
            "After changing code, run the project's build and tests (the task's test command if it names one) and fix what fails until they pass.",
        );
    }
    rules.push("Never commit or push: no git commit, git push, tag, rebase or reset.");
    rules.push(
        "End with a short report: what you did, the files you touched, the commands you ran with their results, and what you could not verify.",
    );
    let mut text = String::from("Rules for this delegated task:\n");
    for rule in rules {
        text.push_str("- ");
        text.push_str(rule);
        text.push('\n');
    }
    text
}
