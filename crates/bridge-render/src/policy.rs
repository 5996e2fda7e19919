//! The `opencode_policy` text and the MCP server instructions.

use bridge_policy::Roster;
use bridge_policy::roster::{Access, AgentMode, AgentSource};
use bridge_policy::view::PolicyView;

/// `opencode_policy`: the mode and why, every source consulted, the allowed agents, tier rules,
/// verification rules and the roster.
pub fn policy(view: &PolicyView) -> String {
    let d = &view.decision;
    let mut out = format!("mode: {}\n", view.reason);
    out.push_str(&format!("  {}\n", view.mode_summary));
    match &d.project_root {
        Some(root) => out.push_str(&format!("project root: {}\n", root.display())),
        None => out.push_str("project root: none (no .claude or .git above the directory)\n"),
    }
    out.push_str("sources consulted (sensitive wins; otherwise the first that names a mode):\n");
    for c in &d.consulted {
        out.push_str(&format!("  {}: {}\n", c.source, c.reading));
    }
    out.push_str("other modes:\n");
    for m in view.modes.iter().filter(|m| m.mode != d.mode) {
        out.push_str(&format!("  {}: {}\n", m.mode, m.summary));
    }

    out.push_str(&format!("\ndefault agent: {}\n", view.default_agent));
    let allowed: Vec<String> = view
        .allowed_agents
        .iter()
        .map(|a| {
            let mut s = a.name.clone();
            if a.mechanical_only {
                s.push_str(" (mechanical: true only)");
            }
            if !a.installed {
                s.push_str(" (not installed)");
            }
            s
        })
        .collect();
    out.push_str(&format!("allowed agents: {}\n", allowed.join(", ")));
    if !view.refused_agents.is_empty() {
        out.push_str(&format!(
            "refused agents: {}\n",
            view.refused_agents.join(", ")
        ));
    }

    out.push_str("\ntiers (opencode_start refuses hard and unsure):\n");
    for r in view.tier_rules {
        out.push_str(&format!("  - {r}\n"));
    }
    let from = match &view.tiers.path {
        Some(p) => format!("the project's, from {}", p.display()),
        None => format!(
            "the defaults; a project replaces them with .claude/{}",
            bridge_policy::tier::TIERS_FILE
        ),
    };
    out.push_str(&format!("delegate (easy/medium; {from}):\n"));
    for r in &view.tiers.delegate {
        out.push_str(&format!("  - {r}\n"));
    }
    out.push_str("keep (hard):\n");
    for r in &view.tiers.keep {
        out.push_str(&format!("  - {r}\n"));
    }
    for p in &view.tiers.problems {
        out.push_str(&format!("  warning: {p}\n"));
    }
    out.push_str("verify every result (it is an untrusted draft):\n");
    for r in view.verification_rules {
        out.push_str(&format!("  - {r}\n"));
    }

    out.push_str(&format!(
        "\nroster ({} agents, {}):\n",
        view.roster.len(),
        view.roster_origin
    ));
    if let Some(e) = &view.roster_load_error {
        out.push_str(&format!(
            "  opencode refuses to load its configuration here, so every delegation is refused: {e}\n"
        ));
    }
    if !view.plugins.is_empty() {
        out.push_str(&format!("  plugins: {}\n", view.plugins.join(", ")));
    }
    let rows: Vec<Vec<String>> = view
        .roster
        .iter()
        .map(|a| {
            vec![
                a.name.clone(),
                if a.hidden {
                    format!("{} (hidden, not offered)", a.access.as_str())
                } else {
                    a.access.as_str().to_string()
                },
                a.opencode_mode.as_str().to_string(),
                a.source.clone(),
                a.description
                    .as_deref()
                    .map(|d| crate::human::one_line(d, 100))
                    .unwrap_or_default(),
                a.access_note.clone(),
            ]
        })
        .collect();
    for line in crate::human::table(&rows, &[]) {
        out.push_str(&format!("  {line}\n"));
    }
    for w in &view.roster_warnings {
        out.push_str(&format!("  warning: {w}\n"));
    }
    if let Some(allow) = &view.secret_allowlist {
        out.push_str(&format!(
            "\nsecret allowlist: {} ({} entries)\n",
            allow.path, allow.entries
        ));
        for p in &allow.problems {
            out.push_str(&format!("  warning: {p}\n"));
        }
    }
    out
}

/// The MCP server instructions: the active policy in a few lines.
pub fn instructions(view: &PolicyView) -> String {
    let agents: Vec<String> = view
        .allowed_agents
        .iter()
        .map(|a| {
            if a.mechanical_only {
                format!("{} (mechanical only)", a.name)
            } else {
                a.name.clone()
            }
        })
        .collect();
    let mut out = format!(
        "opencode-bridge delegates EASY and MEDIUM work to opencode agents; hard work stays with you.\n\
         Active routing mode: {} — {}\n",
        view.reason, view.mode_summary
    );
    out.push_str(&format!(
        "Allowed agents: {} (default {}).\n",
        agents.join(", "),
        view.default_agent
    ));
    out.push_str(&format!("Delegate: {}.\n", view.tiers.delegate.join("; ")));
    out.push_str(&format!(
        "Keep: {}. If a silent mistake would change a result, do not delegate; if unsure, treat the job as one tier harder.\n",
        view.tiers.keep.join("; ")
    ));
    out.push_str("Verify what comes back (an untrusted draft): check the files exist, rerun the tests, recompute numbers, read the git diff.\n");
    out.push_str("For code changes prefer opencode_start's `verify` (a test command run after the agent's turn, in its fence; a failure goes back to the agent, then fails the task with kind verify); for answers you will parse, `output_schema`; to retry a start safely, `request_id`.\n");
    out.push_str("Flow: opencode_start (tier required) -> opencode_wait (returns when the task ends; opencode_status shows progress) -> opencode_result. opencode_sessions and opencode_session_output show every opencode session; opencode_policy shows the full rules.\n");
    out
}

/// The agents of the well-known opencode roster that delegation is designed around.
pub const WELL_KNOWN_AGENTS: [&str; 6] = [
    "explorer",
    "librarian",
    "deep-research",
    "oracle",
    "fixer",
    "designer",
];

/// `doctor`'s view of a roster: counts by mode and access, hidden agents, plugins and the
/// agents they added, which well-known agents are present, then one row per agent.
pub fn roster_summary(roster: &Roster) -> Vec<String> {
    let all: Vec<_> = roster.agents().collect();
    let count =
        |f: &dyn Fn(&&bridge_policy::AgentInfo) -> bool| all.iter().filter(|a| f(a)).count();
    let mut out = vec![format!(
        "{} agents: {} primary, {} subagent, {} all; {} read-only, {} editing; {} hidden (not offered)",
        all.len(),
        count(&|a| a.opencode_mode == AgentMode::Primary),
        count(&|a| a.opencode_mode == AgentMode::Subagent),
        count(&|a| a.opencode_mode == AgentMode::All),
        count(&|a| a.access == Access::ReadOnly),
        count(&|a| a.access == Access::Editing),
        count(&|a| a.hidden),
    )];
    let from_plugins: Vec<&str> = all
        .iter()
        .filter(|a| a.source == AgentSource::Plugin)
        .map(|a| a.name.as_str())
        .collect();
    if !roster.plugins().is_empty() || !from_plugins.is_empty() {
        out.push(format!(
            "plugins: {}; agents they added: {}",
            if roster.plugins().is_empty() {
                "(none listed)".to_owned()
            } else {
                roster.plugins().join(", ")
            },
            if from_plugins.is_empty() {
                "none".to_owned()
            } else {
                from_plugins.join(", ")
            }
        ));
    }
    let (present, missing): (Vec<&str>, Vec<&str>) = WELL_KNOWN_AGENTS
        .iter()
        .partition(|n| roster.get(n).is_some_and(|a| !a.hidden));
    out.push(format!(
        "well-known roster agents present: {}; missing: {}",
        if present.is_empty() {
            "none".to_owned()
        } else {
            present.join(", ")
        },
        if missing.is_empty() {
            "none".to_owned()
        } else {
            missing.join(", ")
        },
    ));
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|a| {
            vec![
                format!("  {}", a.name),
                a.opencode_mode.as_str().to_owned(),
                a.access.as_str().to_owned(),
                if a.hidden {
                    "hidden".to_owned()
                } else {
                    String::new()
                },
                a.source.to_string(),
                a.access_note.clone(),
            ]
        })
        .collect();
    out.extend(crate::human::table(&rows, &[]));
    out
}
