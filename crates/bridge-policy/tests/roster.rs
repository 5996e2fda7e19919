//! Roster parsing from opencode agent files (`tests/agents/`), and a live comparison with what
//! the real opencode lists for the same files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use bridge_policy::roster::{
    Access, AgentMode, AgentSource, Shell, config_content, config_overlay, merge_config,
    worker_agent_config,
};
use bridge_policy::{Environment, FakeEnv, Roster, SystemEnv};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agents")
}

/// Adds every file under `from` to `env`, re-rooted at `to`.
fn add_tree(mut env: FakeEnv, from: &Path, to: &Path) -> FakeEnv {
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            env = add_tree(env.with_dir(&target), &path, &target);
        } else {
            env = env.with_file(&target, &std::fs::read_to_string(&path).unwrap());
        }
    }
    env
}

/// Home `/h` with the fixture config as `~/.config/opencode`, and the fixture project at
/// `/h/proj` (a git worktree).
fn fixture_env() -> FakeEnv {
    let env = FakeEnv::new().with_home("/h");
    let env = add_tree(env, &fixtures().join("config"), Path::new("/h/.config"));
    let env = add_tree(env, &fixtures().join("project"), Path::new("/h/proj"));
    env.with_dir("/h/proj/.git")
}

#[test]
fn roster_from_fixture_files() {
    let roster = Roster::load(&fixture_env(), Path::new("/h/proj/src"));
    assert!(roster.warnings().is_empty(), "{:?}", roster.warnings());
    // (name, access, shell, edit tools, opencode mode)
    let expected: Vec<(&str, Access, Shell, bool, AgentMode)> = vec![
        (
            "auditor",
            Access::ReadOnly,
            Shell::Denied,
            false,
            AgentMode::All,
        ),
        (
            "build",
            Access::Editing,
            Shell::Full,
            true,
            AgentMode::Primary,
        ),
        (
            "deep-research",
            Access::ReadOnly,
            Shell::Denied,
            false,
            AgentMode::Subagent,
        ),
        (
            "designer",
            Access::Editing,
            Shell::Full,
            true,
            AgentMode::Subagent,
        ),
        (
            "explorer",
            Access::ReadOnly,
            Shell::Restricted,
            false,
            AgentMode::Subagent,
        ),
        (
            "fixer",
            Access::Editing,
            Shell::Full,
            true,
            AgentMode::Subagent,
        ),
        (
            "general",
            Access::Editing,
            Shell::Full,
            true,
            AgentMode::Subagent,
        ),
        (
            "librarian",
            Access::ReadOnly,
            Shell::Denied,
            false,
            AgentMode::Subagent,
        ),
        (
            "local-helper",
            Access::ReadOnly,
            Shell::Denied,
            false,
            AgentMode::All,
        ),
        (
            "oracle",
            Access::ReadOnly,
            Shell::Restricted,
            false,
            AgentMode::Subagent,
        ),
        (
            "plan",
            Access::Editing,
            Shell::Full,
            true,
            AgentMode::Primary,
        ),
        (
            "planner",
            Access::ReadOnly,
            Shell::Denied,
            false,
            AgentMode::Primary,
        ),
        (
            "review",
            Access::Editing,
            Shell::Full,
            true,
            AgentMode::Primary,
        ),
        (
            "team/docs",
            Access::Editing,
            Shell::Full,
            true,
            AgentMode::Subagent,
        ),
        (
            "worker",
            Access::Editing,
            Shell::Full,
            true,
            AgentMode::Primary,
        ),
    ];
    // opencode's internal agents are listed as hidden and never offered.
    let hidden: Vec<&str> = roster
        .agents()
        .filter(|a| a.hidden)
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(hidden, ["compaction", "summary", "title"]);
    let got: Vec<(&str, Access, Shell, bool, AgentMode)> = roster
        .offered()
        .map(|a| {
            (
                a.name.as_str(),
                a.access,
                a.shell,
                a.edit_tools,
                a.opencode_mode,
            )
        })
        .collect();
    assert_eq!(got, expected);

    let librarian = roster.get("librarian").unwrap();
    assert_eq!(
        librarian.description.as_deref(),
        Some(
            "Looks up library documentation, API references and examples, and quotes the sources it used."
        )
    );
    assert_eq!(
        librarian.source,
        AgentSource::File("/h/.config/opencode/agents/librarian.md".into())
    );
    // agent directories come after every opencode.json (as in opencode 1.18): the project's
    // opencode.json cannot change a markdown agent of the global directory, while the project's
    // .opencode/agents overrides it
    let fixer = roster.get("fixer").unwrap();
    assert_eq!(
        fixer.description.as_deref(),
        Some("Implements a written blueprint and runs the tests until they pass")
    );
    assert_eq!(
        roster.get("team/docs").unwrap().source,
        AgentSource::File("/h/proj/.opencode/agents/team/docs.md".into())
    );
    assert_eq!(roster.get("worker").unwrap().source, AgentSource::Bridge);
    assert!(
        roster.get("explore").is_none(),
        "disabled in opencode.jsonc"
    );
}

#[test]
fn broken_and_unreadable_files_become_warnings() {
    let env = FakeEnv::new()
        .with_home("/h")
        .with_file("/h/.config/opencode/agents/broken.md", "---\ndescription: ok\n  bad: indent\n---\nbody\n")
        .with_file("/h/.config/opencode/opencode.json", "{ not json")
        .with_var("OPENCODE_CONFIG_CONTENT", "{\"agent\": {\"inline\": {\"mode\": \"primary\", \"permission\": {\"edit\": \"deny\", \"bash\": \"deny\"}}}}");
    let roster = Roster::load(&env, Path::new("/h/p"));
    let broken = roster
        .get("broken")
        .expect("opencode still lists an agent with broken frontmatter");
    assert_eq!(
        (broken.opencode_mode, broken.access),
        (AgentMode::All, Access::Editing)
    );
    assert_eq!(roster.warnings().len(), 2, "{:?}", roster.warnings());
    assert!(roster.warnings()[0].contains("opencode.json: not valid JSON"));
    assert!(roster.warnings()[1].contains("broken.md: frontmatter line 2"));
    let inline = roster.get("inline").unwrap();
    assert_eq!(
        (inline.access, inline.source.clone()),
        (Access::ReadOnly, AgentSource::ConfigContent)
    );
}

#[test]
fn xdg_config_home_and_opencode_config_dir_are_searched() {
    let env = FakeEnv::new()
        .with_home("/h")
        .with_var("XDG_CONFIG_HOME", "/xdg")
        .with_var("OPENCODE_CONFIG_DIR", "/extra")
        .with_file(
            "/h/.config/opencode/agents/ignored.md",
            "---\nmode: primary\n---\n",
        )
        .with_file(
            "/xdg/opencode/agents/fromxdg.md",
            "---\nmode: primary\n---\n",
        )
        .with_file("/extra/agent/fromextra.md", "---\nmode: subagent\n---\n");
    let roster = Roster::load(&env, Path::new("/h/p"));
    assert!(roster.get("ignored").is_none());
    assert!(roster.get("fromxdg").is_some());
    assert_eq!(
        roster.get("fromextra").unwrap().opencode_mode,
        AgentMode::Subagent
    );
}

#[test]
fn overlay_promotes_subagents_and_defines_worker() {
    let roster = Roster::load(&fixture_env(), Path::new("/h/proj"));
    let overlay = config_overlay(roster.get("explorer").unwrap()).unwrap();
    // explorer is read-only: its run is default-deny, under `agent` and under `mode` (which
    // opencode merges into `agent` after every config source).
    let p = bridge_policy::roster::read_only_permissions();
    assert_eq!(
        overlay,
        serde_json::json!({"agent": {"explorer": {"mode": "all", "permission": p}},
                           "mode": {"explorer": {"permission": p}}})
    );
    assert_eq!(p["*"], "deny");
    assert_eq!(
        (&p["edit"], &p["bash"], &p["task"]),
        (&"deny".into(), &"deny".into(), &"deny".into())
    );
    let overlay = config_overlay(roster.get("worker").unwrap()).unwrap();
    assert_eq!(overlay["agent"]["worker"], worker_agent_config());
    assert_eq!(config_overlay(roster.get("review").unwrap()), None);
}

/// Real files, env vars from a map (tests must not change the process environment).
struct Sandbox {
    vars: BTreeMap<&'static str, String>,
}

impl Environment for Sandbox {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }
    fn home_dir(&self) -> Option<PathBuf> {
        self.vars.get("HOME").map(PathBuf::from)
    }
    fn exists(&self, path: &Path) -> bool {
        SystemEnv.exists(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        SystemEnv.is_dir(path)
    }
    fn read_to_string(&self, path: &Path) -> Option<String> {
        SystemEnv.read_to_string(path)
    }
    fn read_dir(&self, path: &Path) -> Vec<PathBuf> {
        SystemEnv.read_dir(path)
    }
}

/// The real opencode, or `None` (a note, the test skipped) outside CI; under CI, whatever
/// the spelling of `CI`, a missing binary fails the test (the shared helper decides).
fn real_opencode() -> Option<PathBuf> {
    let found = bridge_testkit::real_opencode();
    if found.is_none() {
        eprintln!("note: OPENCODE_BRIDGE_TEST_OPENCODE not set; live test skipped");
    }
    found
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// `name (mode)` lines of `opencode agent list`.
fn listed_agents(stdout: &str) -> BTreeSet<(String, String)> {
    stdout
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace))
        .filter_map(|l| {
            let (name, rest) = l.rsplit_once(" (")?;
            Some((name.to_owned(), rest.strip_suffix(')')?.to_owned()))
        })
        .collect()
}

/// The real opencode, given the same files plus the bridge's overlay for `worker` and a promoted
/// subagent, knows exactly the agents (and modes) the roster predicts.
#[test]
fn live_roster_matches_opencode_agent_list() {
    let Some(opencode) = real_opencode() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let config = tmp.path().join("config");
    let project = tmp.path().join("proj");
    copy_tree(&fixtures().join("config"), &config);
    copy_tree(&fixtures().join("project"), &project);
    std::fs::create_dir_all(project.join(".git")).unwrap();
    std::fs::create_dir_all(&home).unwrap();

    let cache = std::env::var("OPENCODE_BRIDGE_TEST_CACHE")
        .map(|c| PathBuf::from(c).join("xdg-cache"))
        .unwrap_or_else(|_| tmp.path().join("cache"));
    let mut vars: BTreeMap<&'static str, String> = BTreeMap::new();
    vars.insert("HOME", home.display().to_string());
    vars.insert("XDG_CONFIG_HOME", config.display().to_string());
    vars.insert(
        "XDG_DATA_HOME",
        tmp.path().join("data").display().to_string(),
    );
    vars.insert(
        "XDG_STATE_HOME",
        tmp.path().join("state").display().to_string(),
    );
    vars.insert("XDG_CACHE_HOME", cache.display().to_string());

    let before = Roster::load(&Sandbox { vars: vars.clone() }, &project);
    let mut overlay = config_overlay(before.get("worker").unwrap()).unwrap();
    merge_config(
        &mut overlay,
        &config_overlay(before.get("explorer").unwrap()).unwrap(),
    );
    vars.insert("OPENCODE_CONFIG_CONTENT", overlay.to_string());
    let roster = Roster::load(&Sandbox { vars: vars.clone() }, &project);

    let mut cmd = Command::new(&opencode);
    cmd.arg("agent")
        .arg("list")
        .current_dir(&project)
        .env_clear();
    cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd.env("PWD", &project);
    for (k, v) in &vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run opencode agent list");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "opencode agent list failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let hidden = ["compaction", "title", "summary"];
    let listed: BTreeSet<(String, String)> = listed_agents(&stdout)
        .into_iter()
        .filter(|(n, _)| !hidden.contains(&n.as_str()))
        .collect();
    let predicted: BTreeSet<(String, String)> = roster
        .offered()
        .map(|a| (a.name.clone(), a.opencode_mode.as_str().to_owned()))
        .collect();
    assert_eq!(
        predicted, listed,
        "roster vs `opencode agent list`:\n{stdout}"
    );
    assert!(listed.contains(&("worker".to_owned(), "primary".to_owned())));
    // The read-only overlay sets explorer's permissions under `mode.explorer` too, which opencode
    // merges into the agent as `mode: "primary"`: it runs as itself, directly, either way.
    assert!(listed.contains(&("explorer".to_owned(), "primary".to_owned())));
}

/// With no agent files at all, the bridge's overlay alone makes `worker` a primary agent that
/// the real opencode knows (so `run --agent worker` does not fall back to `build`).
#[test]
fn live_worker_is_a_primary_agent_without_any_roster() {
    let Some(opencode) = real_opencode() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("proj");
    std::fs::create_dir_all(project.join(".git")).unwrap();
    let cache = std::env::var("OPENCODE_BRIDGE_TEST_CACHE")
        .map(|c| PathBuf::from(c).join("xdg-cache"))
        .unwrap_or_else(|_| tmp.path().join("cache"));
    let worker = Roster::load(&FakeEnv::new(), &project)
        .get("worker")
        .cloned()
        .unwrap();
    let overlay = config_overlay(&worker).unwrap();
    let out = Command::new(&opencode)
        .args(["agent", "list"])
        .current_dir(&project)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PWD", &project)
        .env("HOME", tmp.path().join("home"))
        .env("XDG_CONFIG_HOME", tmp.path().join("config"))
        .env("XDG_DATA_HOME", tmp.path().join("data"))
        .env("XDG_STATE_HOME", tmp.path().join("state"))
        .env("XDG_CACHE_HOME", cache)
        .env("OPENCODE_CONFIG_CONTENT", overlay.to_string())
        .output()
        .expect("run opencode agent list");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = listed_agents(&String::from_utf8_lossy(&out.stdout));
    assert!(
        listed.contains(&("worker".to_owned(), "primary".to_owned())),
        "worker missing from {listed:?}"
    );
}

#[test]
fn a_markdown_agent_without_a_mode_keeps_the_mode_an_earlier_layer_gave_it() {
    let env = FakeEnv::new()
        .with_home("/h")
        .with_file(
            "/h/.config/opencode/opencode.json",
            r#"{"agent": {"oracle": {"mode": "subagent", "model": "x/y"}}}"#,
        )
        .with_file(
            "/h/.config/opencode/agents/oracle.md",
            "---\ndescription: Second opinion\n---\nYou review.\n",
        )
        .with_file(
            "/h/.config/opencode/agents/fresh.md",
            "---\ndescription: New\n---\n",
        );
    let roster = Roster::load(&env, Path::new("/h/p"));
    assert_eq!(
        roster.get("oracle").unwrap().opencode_mode,
        AgentMode::Subagent
    );
    assert_eq!(roster.get("fresh").unwrap().opencode_mode, AgentMode::All);
}

#[test]
fn a_frontmatter_with_a_repeated_key_is_broken_as_opencode_reads_it() {
    let env = FakeEnv::new().with_home("/h").with_file(
        "/h/.config/opencode/agents/twice.md",
        "---\nmode: subagent\npermission:\n  edit: deny\n  bash: deny\npermission:\n  edit: allow\n---\n",
    );
    let roster = Roster::load(&env, Path::new("/h/p"));
    let twice = roster.get("twice").unwrap();
    assert_eq!(
        (twice.opencode_mode, twice.access),
        (AgentMode::All, Access::Editing)
    );
    assert!(
        roster
            .warnings()
            .iter()
            .any(|w| w.contains("duplicate key `permission`")),
        "{:?}",
        roster.warnings()
    );
}

#[test]
fn opencode_s_answer_replaces_the_file_reading() {
    let files = Roster::load(&fixture_env(), Path::new("/h/proj"));
    let rules = |extra: serde_json::Value| {
        let mut r = vec![serde_json::json!({"permission": "*", "pattern": "*", "action": "allow"})];
        r.extend(extra.as_array().unwrap().iter().cloned());
        serde_json::Value::Array(r)
    };
    let listed = serde_json::json!([
        {"name": "build", "mode": "subagent", "native": true, "hidden": true, "permission": rules(serde_json::json!([]))},
        {"name": "explorer", "mode": "subagent", "native": false, "permission": rules(serde_json::json!([
            {"permission": "edit", "pattern": "*", "action": "deny"},
            {"permission": "bash", "pattern": "*", "action": "deny"},
            {"permission": "bash", "pattern": "rg *", "action": "allow"}]))},
        {"name": "designer", "mode": "subagent", "native": false, "permission": rules(serde_json::json!([
            {"permission": "edit", "pattern": "*", "action": "ask"}]))},
        {"name": "orchestrator", "mode": "primary", "native": false, "permission": rules(serde_json::json!([
            {"permission": "edit", "pattern": "*", "action": "ask"},
            {"permission": "bash", "pattern": "*", "action": "ask"}]))},
        {"name": "worker", "mode": "primary", "native": false, "permission": rules(serde_json::json!([]))}
    ]);
    let r = Roster::from_opencode(&listed, &files, vec!["oh-my-opencode-slim".into()], "test");
    // Only what opencode lists: the fixture's librarian, oracle, ... are gone.
    assert_eq!(
        r.names(),
        ["build", "designer", "explorer", "orchestrator", "worker"]
    );
    // A plugin can hide a built-in; it is then never offered.
    assert!(r.get("build").unwrap().hidden);
    assert!(r.offered().all(|a| a.name != "build"));
    let explorer = r.get("explorer").unwrap();
    assert_eq!(
        (explorer.access, explorer.shell),
        (Access::ReadOnly, Shell::Restricted)
    );
    assert!(
        explorer.access_note.contains("rg *"),
        "{}",
        explorer.access_note
    );
    assert_eq!(
        explorer.source,
        AgentSource::File("/h/.config/opencode/agents/explorer.md".into())
    );
    // edit: ask with a free shell edits under --auto; with the shell asking too it cannot.
    assert_eq!(r.get("designer").unwrap().access, Access::Editing);
    assert_eq!(r.get("orchestrator").unwrap().access, Access::ReadOnly);
    assert_eq!(r.get("orchestrator").unwrap().source, AgentSource::Plugin);
    assert_eq!(r.get("worker").unwrap().source, AgentSource::Bridge);
    assert_eq!(r.plugins(), ["oh-my-opencode-slim"]);
}

#[test]
fn config_content_merges_and_overrides_subagent_mode() {
    // The run's overlay as the policy makes it for a subagent, plus the task's own settings.
    let sub = bridge_policy::AgentInfo::from_config(
        "reviewer",
        &serde_json::json!({"mode": "subagent"}),
        AgentSource::ConfigContent,
    );
    let mut overlay = serde_json::json!({"agent": {"x": {"steps": 3}}});
    merge_config(&mut overlay, &config_overlay(&sub).unwrap());
    let existing =
        r#"{"model":"a/b","agent":{"worker":{"prompt":"mine"},"x":{"temperature":0.1}}}"#;
    let c: serde_json::Value =
        serde_json::from_str(&config_content(Some(existing), Some(&overlay)).unwrap()).unwrap();
    assert_eq!(c["model"], "a/b");
    assert_eq!(c["agent"]["worker"]["prompt"], "mine");
    assert_eq!(c["agent"]["worker"]["mode"], "primary");
    assert_eq!(c["agent"]["x"]["temperature"], 0.1);
    assert_eq!(c["agent"]["x"]["steps"], 3);
    assert_eq!(c["agent"]["reviewer"]["mode"], "all");
    assert!(config_content(Some("not json"), None).is_err());
    let plain: serde_json::Value =
        serde_json::from_str(&config_content(None, None).unwrap()).unwrap();
    assert_eq!(plain["agent"]["worker"], worker_agent_config());
}

/// What undid a read-only overlay is denied by its own key, under `agent` and `mode`; keys that
/// opencode takes only as a plain action (`question`, `doom_loop`, `webfetch`…) stay plain, and
/// read tools and `external_directory` are left alone.
#[test]
fn hardening_denies_what_undid_the_overlay_by_key() {
    use bridge_policy::permission::Ruleset;
    use bridge_policy::roster::{harden_read_only, read_only_violation};
    let ro = bridge_policy::AgentInfo::from_config(
        "team/oracle",
        &serde_json::json!({"permission": {"edit": "deny", "bash": "deny"}}),
        AgentSource::ConfigContent,
    );
    let overlay = config_overlay(&ro).unwrap();
    let resolved = Ruleset::from_opencode(&serde_json::json!([
        {"permission": "*", "pattern": "*", "action": "deny"},
        {"permission": "question", "pattern": "*", "action": "allow"},
        {"permission": "doom_loop", "pattern": "*", "action": "ask"},
        {"permission": "b*sh", "pattern": "echo *", "action": "allow"},
        {"permission": "bash", "pattern": "printf *", "action": "allow"},
        {"permission": "scribe_write", "pattern": "*", "action": "allow"},
        {"permission": "read", "pattern": "docs/*", "action": "allow"},
        {"permission": "external_directory", "pattern": "/tmp/x/*", "action": "allow"},
    ]))
    .unwrap();
    assert_eq!(
        read_only_violation(&resolved).unwrap().permission,
        "question"
    );
    let h = harden_read_only(&overlay, "team/oracle", &resolved);
    for key in ["agent", "mode"] {
        let p = &h[key]["team/oracle"]["permission"];
        assert_eq!(p["question"], "deny", "{key}: {p}");
        assert_eq!(p["doom_loop"], "deny");
        assert_eq!(p["scribe_write"], "deny");
        assert_eq!(
            p["b*sh"],
            serde_json::json!({"*": "deny", "echo *": "deny"})
        );
        assert_eq!(
            p["bash"],
            serde_json::json!({"*": "deny", "printf *": "deny"})
        );
        assert_eq!(p["*"], "deny");
        assert_eq!(p["glob"], "allow");
        assert_eq!(p["read"]["*"], "allow");
        assert!(p.get("external_directory").is_none());
    }
    // A ruleset with only denies, read tools and external_directory after the deny-all is what
    // a read-only run asks for; one without any deny-all is not.
    let fine = Ruleset::from_opencode(&serde_json::json!([
        {"permission": "*", "pattern": "*", "action": "deny"},
        {"permission": "read", "pattern": "*.env", "action": "ask"},
        {"permission": "external_directory", "pattern": "/data/tool-output/*", "action": "allow"},
        {"permission": "b*sh", "pattern": "echo *", "action": "deny"},
    ]))
    .unwrap();
    assert_eq!(read_only_violation(&fine), None);
    let none = Ruleset::from_opencode(&serde_json::json!([
        {"permission": "*", "pattern": "*", "action": "allow"},
        {"permission": "edit", "pattern": "*", "action": "deny"},
    ]))
    .unwrap();
    let v = read_only_violation(&none).unwrap();
    assert_eq!((v.permission.as_str(), v.pattern.as_str()), ("*", "*"));
}
