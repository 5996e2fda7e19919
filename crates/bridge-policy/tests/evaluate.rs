//! Delegation decisions: tiers, agents per mode with and without `mechanical`, default agents,
//! unknown agents, secrets, the final prompt, and the policy view.

use std::path::Path;

use bridge_policy::roster::{Access, AgentInfo, AgentMode, AgentSource, Shell};
use bridge_policy::view::PolicyView;
use bridge_policy::{DelegationRequest, FakeEnv, Mode, RefusalKind, Roster, Tier, evaluate};
use serde_json::json;

const CWD: &str = "/w/proj";

fn agent(name: &str, read_only: bool) -> AgentInfo {
    let cfg = if read_only {
        json!({"mode": "subagent", "permission": {"edit": "deny", "bash": "deny"}})
    } else {
        json!({"mode": "subagent"})
    };
    AgentInfo::from_config(name, &cfg, AgentSource::ConfigContent)
}

/// The opencode-config roster plus the built-ins.
fn full_roster() -> Roster {
    let mut agents: Vec<AgentInfo> = ["explorer", "librarian", "deep-research", "oracle"]
        .iter()
        .map(|n| agent(n, true))
        .collect();
    agents.extend(
        ["fixer", "designer", "general"]
            .iter()
            .map(|n| agent(n, false)),
    );
    agents.push(AgentInfo::from_config(
        "worker",
        &bridge_policy::roster::worker_agent_config(),
        AgentSource::Bridge,
    ));
    Roster::from_agents(agents)
}

fn env_in(mode: Option<&str>) -> FakeEnv {
    let env = FakeEnv::new().with_dir(format!("{CWD}/.git"));
    match mode {
        Some(m) => env.with_var("OPENCODE_BRIDGE_MODE", m),
        None => env,
    }
}

fn request<'a>(tier: Tier, agent: Option<&'a str>, mechanical: bool) -> DelegationRequest<'a> {
    let mut request = DelegationRequest::new(
        tier,
        "Rename parse_date to parse_iso_date in src/ and update callers",
        Path::new(CWD),
    );
    request.agent = agent;
    request.mechanical = mechanical;
    request
}

#[test]
fn tiers() {
    let roster = full_roster();
    let env = env_in(None);
    let cases: Vec<(Option<&str>, Result<&str, &str>)> = vec![
        (Some("easy"), Ok("easy")),
        (Some("Medium"), Ok("medium")),
        (Some("hard"), Err("hard work stays with you")),
        (Some("unsure"), Err("unsure work stays with you")),
        (None, Err("tier is required")),
        (Some(" "), Err("tier is required")),
        (
            Some("trivial"),
            Err("tier \"trivial\" is not one of easy, medium, hard or unsure"),
        ),
    ];
    for (tier, expected) in cases {
        // The tier arrives as text: parsed once (missing and unknown tiers refused there),
        // then the typed request is evaluated (hard and unsure refused there).
        let got =
            Tier::from_arg(tier).and_then(|t| evaluate(&request(t, None, false), &env, &roster));
        match (got, expected) {
            (Ok(d), Ok(t)) => assert_eq!(d.tier.as_str(), t),
            (Err(r), Err(text)) => {
                assert_eq!(r.kind, RefusalKind::Tier, "{tier:?}");
                assert!(r.message.contains(text), "{tier:?}: {}", r.message);
                // one short line that points at the full rules instead of repeating them
                assert!(
                    r.message.ends_with("opencode_policy has the full rules."),
                    "{}",
                    r.message
                );
                assert!(
                    !r.message.contains('\n') && r.message.len() < 220,
                    "{}",
                    r.message
                );
                assert!(!r.message.contains("unit tests for existing behaviour"));
                assert!(!r.message.contains("statistics and every number"));
            }
            (got, expected) => panic!("{tier:?}: got {got:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn agents_per_mode_with_and_without_mechanical() {
    let roster = full_roster();
    let all = [
        "explorer",
        "librarian",
        "deep-research",
        "oracle",
        "fixer",
        "designer",
        "general",
        "worker",
    ];
    for mode in Mode::ALL {
        let env = env_in(Some(mode.as_str()));
        for name in all {
            for mechanical in [false, true] {
                let got = evaluate(&request(Tier::Easy, Some(name), mechanical), &env, &roster);
                let allowed = match mode {
                    Mode::Blueprint | Mode::Insensitive => true,
                    Mode::Sensitive => match name {
                        "explorer" | "librarian" | "deep-research" | "oracle" => true,
                        "fixer" | "worker" => mechanical,
                        _ => false,
                    },
                };
                match got {
                    Ok(d) => {
                        assert!(
                            allowed,
                            "{mode} {name} mechanical={mechanical} should be refused"
                        );
                        assert_eq!(d.agent.name, name);
                        assert_eq!(d.mode.mode, mode);
                    }
                    Err(r) => {
                        assert!(
                            !allowed,
                            "{mode} {name} mechanical={mechanical}: {}",
                            r.message
                        );
                        assert_eq!(r.kind, RefusalKind::Agent);
                        assert!(r.message.contains("sensitive"), "{}", r.message);
                        if name == "fixer" || name == "worker" {
                            assert!(r.message.contains("mechanical: true"), "{}", r.message);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn sensitive_refuses_agents_outside_its_list_even_if_installed() {
    let mut agents: Vec<AgentInfo> = full_roster().agents().cloned().collect();
    agents.push(agent("build", false));
    let roster = Roster::from_agents(agents);
    let env = env_in(Some("sensitive"));
    let r = evaluate(&request(Tier::Easy, Some("build"), true), &env, &roster).unwrap_err();
    assert_eq!(r.kind, RefusalKind::Agent);
    assert!(
        r.message.contains("from env OPENCODE_BRIDGE_MODE"),
        "{}",
        r.message
    );
}

#[test]
fn default_agent() {
    let roster = full_roster();
    let cases: Vec<(FakeEnv, &str)> = vec![
        (env_in(None), "worker"),
        (env_in(Some("insensitive")), "worker"),
        (
            env_in(None).with_var("OPENCODE_BRIDGE_AGENT", "fixer"),
            "fixer",
        ),
        (
            env_in(None).with_var("OPENCODE_BRIDGE_AGENT", "  "),
            "worker",
        ),
        (
            env_in(Some("sensitive")).with_var("OPENCODE_BRIDGE_AGENT", "fixer"),
            "explorer",
        ),
    ];
    for (env, expected) in cases {
        let d = evaluate(&request(Tier::Easy, None, false), &env, &roster).unwrap();
        assert_eq!(d.agent.name, expected);
    }
}

#[test]
fn unknown_agents_are_refused_with_the_usable_list() {
    // no roster installed: only the bridge's worker exists
    let env = env_in(None);
    let roster = Roster::load(&env, Path::new(CWD));
    let r = evaluate(
        &request(Tier::Easy, Some("librarian"), false),
        &env,
        &roster,
    )
    .unwrap_err();
    assert_eq!(r.kind, RefusalKind::Agent);
    assert!(
        r.message
            .contains("\"librarian\" is not known to opencode here"),
        "{}",
        r.message
    );
    assert!(r.message.contains("worker"), "{}", r.message);
    // the default from OPENCODE_BRIDGE_AGENT is named as such
    let env = env_in(None).with_var("OPENCODE_BRIDGE_AGENT", "ghost");
    let r = evaluate(&request(Tier::Easy, None, false), &env, &roster).unwrap_err();
    assert!(
        r.message
            .contains("(the default from OPENCODE_BRIDGE_AGENT)"),
        "{}",
        r.message
    );
    // sensitive without the roster: explorer (the default) is missing; worker is usable for mechanical jobs
    let env = env_in(Some("sensitive"));
    let r = evaluate(&request(Tier::Easy, None, false), &env, &roster).unwrap_err();
    assert!(
        r.message.contains("\"explorer\" (the default agent)"),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("Usable now: worker (mechanical only)"),
        "{}",
        r.message
    );
}

#[test]
fn invalid_mode_and_secrets_and_empty_prompts_are_refused() {
    let roster = full_roster();
    let env = env_in(None).with_var("OPENCODE_MODE", "sensitve");
    let r = evaluate(&request(Tier::Easy, None, false), &env, &roster).unwrap_err();
    assert_eq!(r.kind, RefusalKind::Mode);
    assert!(r.message.contains("OPENCODE_MODE"), "{}", r.message);

    let env = env_in(None);
    let secret = "AKIAQ3EGRT7BZXJ4PLMN";
    let mut req = request(Tier::Easy, None, false);
    let prompt = format!("Upload the logs\nwith key {secret}\n");
    req.prompt = &prompt;
    let r = evaluate(&req, &env, &roster).unwrap_err();
    assert_eq!(r.kind, RefusalKind::Secret);
    assert_eq!(
        r.secret.map(|s| (s.kind, s.line)),
        Some(("AWS access key ID", 2))
    );
    assert!(
        !r.message.contains(secret),
        "the refusal never echoes the secret"
    );
    assert!(r.message.contains("line 2"), "{}", r.message);

    req.prompt = "  \n";
    assert_eq!(
        evaluate(&req, &env, &roster).unwrap_err().kind,
        RefusalKind::Prompt
    );
}

#[test]
fn final_prompt_carries_the_run_instructions() {
    let roster = full_roster();
    let env = env_in(None);
    let d = evaluate(&request(Tier::Easy, Some("explorer"), false), &env, &roster).unwrap();
    assert!(d.prompt.starts_with("Rules for this delegated task:\n"));
    assert!(d.prompt.contains("READ-ONLY"));
    assert!(!d.prompt.contains("build and tests"));
    assert!(d.prompt.contains("Never commit or push"));
    assert!(
        d.prompt
            .ends_with("Rename parse_date to parse_iso_date in src/ and update callers")
    );
    // A read-only agent runs default-deny, its shell allowlist included.
    let p = bridge_policy::roster::read_only_permissions();
    assert_eq!(
        d.config_overlay,
        Some(
            json!({"agent": {"explorer": {"mode": "all", "permission": p}}, "mode": {"explorer": {"permission": p}}})
        )
    );

    let d = evaluate(&request(Tier::Medium, Some("fixer"), false), &env, &roster).unwrap();
    assert!(d.prompt.contains("run the project's build and tests"));
    assert!(
        d.prompt.contains("Follow the blueprint"),
        "blueprint mode asks for the blueprint"
    );
    assert!(!d.prompt.contains("READ-ONLY"));
    assert!(d.prompt.contains("Never commit or push"));

    let env = env_in(Some("sensitive"));
    let d = evaluate(&request(Tier::Easy, Some("worker"), true), &env, &roster).unwrap();
    assert!(d.prompt.contains("MECHANICAL"));
    assert!(!d.prompt.contains("Follow the blueprint"));
    assert_eq!(
        d.config_overlay.unwrap()["agent"]["worker"]["mode"],
        "primary"
    );
}

#[test]
fn edit_denied_agent_with_a_free_shell_is_editing_but_told_read_only() {
    let a = AgentInfo::from_config(
        "reviewer",
        &json!({"mode": "primary", "tools": {"write": false, "edit": false}}),
        AgentSource::ConfigContent,
    );
    assert_eq!(
        (a.access, a.edit_tools, a.shell),
        (Access::Editing, false, Shell::Full)
    );
    assert_eq!(a.opencode_mode, AgentMode::Primary);
    let text = bridge_policy::instructions::run_instructions(&a, Mode::Blueprint, false);
    assert!(text.contains("READ-ONLY"));
}

#[test]
fn permission_semantics() {
    // (permission/tools config, access, edit tools, shell)
    let cases = vec![
        (json!({}), Access::Editing, true, Shell::Full),
        (
            json!({"permission": "deny"}),
            Access::ReadOnly,
            false,
            Shell::Denied,
        ),
        (
            json!({"permission": {"*": "deny", "read": "allow"}}),
            Access::ReadOnly,
            false,
            Shell::Denied,
        ),
        (
            json!({"permission": {"*": "deny", "bash": "allow"}}),
            Access::Editing,
            false,
            Shell::Full,
        ),
        (
            json!({"permission": {"edit": "ask", "bash": "ask"}}),
            Access::ReadOnly,
            false,
            Shell::Denied,
        ),
        (
            json!({"permission": {"edit": {"*": "deny", "docs/*.md": "allow"}, "bash": "deny"}}),
            Access::Editing,
            true,
            Shell::Denied,
        ),
        (
            json!({"permission": {"edit": "deny", "bash": {"git diff*": "allow", "*": "deny"}}}),
            Access::ReadOnly,
            false,
            Shell::Restricted,
        ),
        (
            json!({"permission": {"edit": "deny", "bash": {"rm *": "deny"}}}),
            Access::Editing,
            false,
            Shell::Full,
        ),
        // opencode 1.18.33 governs the write tool by `edit`: a `write` key changes nothing.
        (
            json!({"permission": {"edit": "deny", "write": "allow", "bash": "deny"}}),
            Access::ReadOnly,
            false,
            Shell::Denied,
        ),
        (
            json!({"tools": {"edit": false, "bash": false}}),
            Access::ReadOnly,
            false,
            Shell::Denied,
        ),
        // The deprecated `tools` map loses to `permission` (opencode resolves this to edit deny).
        (
            json!({"tools": {"write": true}, "permission": {"edit": "deny", "bash": "deny"}}),
            Access::ReadOnly,
            false,
            Shell::Denied,
        ),
    ];
    for (cfg, access, edit, shell) in cases {
        let a = AgentInfo::from_config("a", &cfg, AgentSource::ConfigContent);
        assert_eq!(
            (a.access, a.edit_tools, a.shell),
            (access, edit, shell),
            "{cfg}"
        );
    }
}

#[test]
fn policy_view_has_everything_render_needs() {
    let env = FakeEnv::new()
        .with_dir(format!("{CWD}/.git"))
        .with_file(format!("{CWD}/.claude/sensitive"), "");
    let view = PolicyView::build(&env, Path::new(CWD), None).unwrap();
    assert_eq!(view.decision.mode, Mode::Sensitive);
    assert_eq!(
        view.reason,
        format!("sensitive (from marker file {CWD}/.claude/sensitive)")
    );
    assert_eq!(view.default_agent, "explorer");
    assert_eq!(view.refused_agents, ["designer", "general"]);
    let mechanical: Vec<&str> = view
        .allowed_agents
        .iter()
        .filter(|a| a.mechanical_only)
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(mechanical, ["fixer", "worker"]);
    assert!(
        view.allowed_agents
            .iter()
            .any(|a| a.name == "worker" && a.installed)
    );
    assert!(
        view.allowed_agents
            .iter()
            .any(|a| a.name == "explorer" && !a.installed)
    );
    assert!(
        !view.tier_rules.is_empty()
            && !view.tiers.delegate.is_empty()
            && !view.tiers.keep.is_empty()
    );
    assert_eq!(view.tiers, bridge_policy::tier::TierLists::default());
    assert!(
        view.verification_rules
            .iter()
            .any(|r| r.contains("git diff"))
    );
    assert!(
        view.roster
            .iter()
            .any(|a| a.name == "worker" && a.source == "bridge built-in")
    );
    assert_eq!(view.modes.len(), 3);
    let value = serde_json::to_value(&view).unwrap();
    assert_eq!(value["decision"]["mode"], "sensitive");
    assert_eq!(value["decision"]["consulted"].as_array().unwrap().len(), 7);
}

#[test]
fn a_project_file_replaces_the_delegate_and_keep_lists() {
    let file = format!("{CWD}/.claude/opencode-bridge-tiers.json");
    let env = env_in(None).with_file(
        &file,
        r#"{"delegate": ["CSS tweaks", "changelog entries"], "keep": ["database migrations"]}"#,
    );
    let view = PolicyView::build(&env, Path::new(&format!("{CWD}/src")), None).unwrap();
    assert_eq!(view.tiers.delegate, ["CSS tweaks", "changelog entries"]);
    assert_eq!(view.tiers.keep, ["database migrations"]);
    assert_eq!(view.tiers.path.as_deref(), Some(Path::new(&file)));
    assert!(view.tiers.problems.is_empty());

    // only one list given: the other keeps its default
    let env = env_in(None).with_file(&file, r#"{"keep": ["pricing code"], "other": 1}"#);
    let view = PolicyView::build(&env, Path::new(CWD), None).unwrap();
    assert_eq!(view.tiers.keep, ["pricing code"]);
    assert_eq!(
        view.tiers.delegate,
        bridge_policy::tier::TierLists::default().delegate
    );
    assert!(
        view.tiers.problems[0].contains("unknown key `other`"),
        "{:?}",
        view.tiers.problems
    );

    // a broken file: the defaults, and a warning naming the file
    let env = env_in(None).with_file(&file, "{not json");
    let view = PolicyView::build(&env, Path::new(CWD), None).unwrap();
    assert_eq!(
        view.tiers.delegate,
        bridge_policy::tier::TierLists::default().delegate
    );
    assert_eq!(view.tiers.path, None);
    assert!(
        view.tiers.problems[0].contains(&file),
        "{:?}",
        view.tiers.problems
    );
}
