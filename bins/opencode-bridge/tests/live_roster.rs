//! The roster is what opencode runs, and "read-only" holds under the bridge's own flags: the real
//! opencode 1.18.33 with our fake LLM, a roster of public-config shapes (ask rules, shell
//! allowlists, plugin agents, a hidden agent), driven through the bridge binary.

use crate::common;

use bridge_testkit::fake_llm::ESCAPE_FILES;
use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use common::{Server, World};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A local plugin that adds agents through opencode's `config` hook, the way roster plugins
/// (oh-my-opencode-slim and the like) do: its defaults under whatever the user configured.
const PLUGIN: &str = r#"
const added = {
  oracle: { description: "Plugin oracle: second opinion", mode: "subagent",
            permission: { edit: "deny", bash: { "*": "deny", "timeout *": "allow" } } },
  librarian: { description: "Plugin librarian: docs lookups", mode: "subagent",
               permission: { edit: "ask", bash: "deny", webfetch: "allow" } },
  fixer: { description: "Plugin fixer: implements a blueprint", mode: "subagent" },
  "hidden-helper": { description: "Internal helper of the plugin", mode: "subagent", hidden: true },
};
export const RosterPlugin = async () => ({
  config: async (cfg) => {
    cfg.agent = cfg.agent || {};
    for (const [name, def] of Object.entries(added)) {
      cfg.agent[name] = { ...def, ...(cfg.agent[name] || {}) };
    }
  },
});
"#;

/// Agents the policy must call read-only (each a shape seen in public configurations).
const READ_ONLY: [&str; 7] = [
    "plan",           // the built-in with edit and bash overridden to `ask`
    "build-ask",      // a primary agent whose edit and bash ask
    "timeout-runner", // edit denied, shell allowlist `timeout *`
    "echo-checker",   // markdown: edit denied, shell allowlist `echo*`
    "reviewer",       // markdown: edit ask, shell ask with `git diff*` allowed
    "oracle",         // plugin: edit denied, shell allowlist `timeout *`
    "librarian",      // plugin: edit ask, shell denied
];
/// Agents that edit.
const EDITING: [&str; 2] = ["worker", "fixer"];

struct Live {
    _llm: FakeLlm,
    sb: OpencodeSandbox,
    world: World,
    oc: PathBuf,
}

/// Where the plugin's dependencies (which opencode installs from npm into `.opencode/` on first
/// load, 20-45 s) are kept between runs.
fn plugin_deps_cache() -> Option<PathBuf> {
    bridge_testkit::sandbox::test_cache_dir().map(|c| c.join("opencode-1.18.33-plugin-deps"))
}

const PLUGIN_DEPS: [&str; 3] = ["package.json", "package-lock.json", "node_modules"];

impl Live {
    fn new(oc: PathBuf) -> Live {
        let llm = FakeLlm::start().unwrap();
        let sb = OpencodeSandbox::with_config(
            &llm.base_url(),
            json!({"agent": {
                "plan": {"permission": {"edit": "ask", "bash": "ask"}},
                "build-ask": {"mode": "primary", "description": "build, asking first",
                              "permission": {"edit": "ask", "bash": "ask"}},
                "timeout-runner": {"mode": "subagent", "description": "runs checks under timeout",
                                   "permission": {"edit": "deny", "bash": {"*": "deny", "timeout *": "allow"}}}
            }}),
        )
        .unwrap();
        let proj = sb.project_dir();
        std::fs::create_dir_all(proj.join(".git")).unwrap();
        let agents = proj.join(".opencode/agents");
        std::fs::create_dir_all(&agents).unwrap();
        std::fs::write(
            agents.join("echo-checker.md"),
            "---\ndescription: Echoes what it checked\nmode: subagent\npermission:\n  edit: deny\n  bash:\n    \"*\": deny\n    \"echo*\": allow\n---\nYou check things and say so.\n",
        )
        .unwrap();
        std::fs::write(
            agents.join("reviewer.md"),
            "---\ndescription: Reviews diffs\nmode: subagent\npermission:\n  edit: ask\n  bash:\n    \"*\": ask\n    \"git diff*\": allow\n---\nYou review.\n",
        )
        .unwrap();
        let plugins = proj.join(".opencode/plugin");
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::write(plugins.join("roster.js"), PLUGIN).unwrap();
        if let Some(cache) = plugin_deps_cache().filter(|c| c.join("node_modules").is_dir()) {
            for name in PLUGIN_DEPS {
                common::copy_tree(&cache.join(name), &proj.join(".opencode").join(name));
            }
        }
        Live {
            _llm: llm,
            sb,
            world: World::new(),
            oc,
        }
    }

    fn env(&self, extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
        let mut env = common::sandbox_env_for_bridge(&self.sb);
        env.push(("OPENCODE_BIN", self.oc.to_string_lossy().into_owned()));
        env.push((
            "OPENCODE_BRIDGE_ROOT",
            self.sb.project_dir().to_string_lossy().into_owned(),
        ));
        env.push(("OPENCODE_BRIDGE_MAX_PARALLEL", "10".into()));
        env.push(("OPENCODE_BRIDGE_RETRIES", "0".into()));
        // Nine tasks start at once, each asking opencode (or starting a server) that loads a
        // plugin: on 2 busy cores one call can take longer than the default 45 s.
        env.push(("OPENCODE_BRIDGE_API_TIMEOUT_MS", "150000".into()));
        env.extend(extra.iter().cloned());
        env
    }

    fn server(&self, extra: &[(&'static str, String)]) -> Server {
        let mut s = Server::start_in(&self.world, &self.env(extra), self.sb.project_dir());
        s.initialize();
        s
    }
}

fn escaped_files(dir: &Path) -> Vec<&'static str> {
    ESCAPE_FILES
        .iter()
        .copied()
        .filter(|f| dir.join(f).exists())
        .collect()
}

/// Waits until every task in `ids` ended (opencode_wait all, 55 s at a time).
fn wait_all(server: &mut Server, ids: &[String], next: &mut i64) -> String {
    let deadline = Instant::now() + Duration::from_secs(400);
    loop {
        *next += 1;
        let (text, _) = server.call_text(
            *next,
            "opencode_wait",
            json!({"ids": ids, "mode": "all", "timeout_s": 55}),
        );
        if text.starts_with("all ") {
            return text;
        }
        assert!(Instant::now() < deadline, "tasks did not end: {text}");
    }
}

// On both engines: an `opencode run` per task, and sessions on the warm local `opencode serve`.
#[test]
fn live_run_the_roster_comes_from_opencode_and_read_only_tasks_write_nothing() {
    the_roster_comes_from_opencode_and_read_only_tasks_write_nothing("run");
}

#[test]
fn live_serve_the_roster_comes_from_opencode_and_read_only_tasks_write_nothing() {
    the_roster_comes_from_opencode_and_read_only_tasks_write_nothing("serve");
}

fn the_roster_comes_from_opencode_and_read_only_tasks_write_nothing(engine: &str) {
    let oc = require_opencode!();
    let live = Live::new(oc);
    let proj = live.sb.project_dir().to_path_buf();
    let mut server = live.server(&[("OPENCODE_BRIDGE_ENGINE", engine.into())]);
    let mut next = 1;

    // The roster is opencode's: plugin agents present and usable, the hidden one marked.
    let (policy, _) = server.call_text(next, "opencode_policy", json!({}));
    assert!(policy.contains("from opencode itself"), "{policy}");
    assert!(policy.contains("plugins: "), "{policy}");
    let row = |name: &str| {
        policy
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing from the roster:\n{policy}"))
            .to_owned()
    };
    for name in READ_ONLY {
        assert!(row(name).contains(" read-only "), "{}", row(name));
    }
    for name in EDITING {
        assert!(row(name).contains(" editing "), "{}", row(name));
    }
    assert!(row("hidden-helper").contains("(hidden, not offered)"));
    assert!(row("oracle").contains("a plugin"), "{}", row("oracle"));
    assert!(row("title").contains("(hidden, not offered)"));
    // opencode installed the plugin's dependencies: keep them for the next run.
    if let Some(cache) = plugin_deps_cache().filter(|c| !c.join("node_modules").is_dir()) {
        let tmp = cache.with_extension(format!("tmp{}", std::process::id()));
        for name in PLUGIN_DEPS {
            common::copy_tree(&proj.join(".opencode").join(name), &tmp.join(name));
        }
        let _ = std::fs::rename(&tmp, &cache);
    }

    next += 1;
    let (refused, is_error) = server.call_text(
        next,
        "opencode_start",
        json!({"tier": "easy", "agent": "hidden-helper", "prompt": "Say hello", "model": "fk/ok"}),
    );
    assert!(is_error, "{refused}");
    assert!(refused.contains("is hidden in opencode"), "{refused}");

    // Every agent runs a model that tries every way of writing, in its own directory.
    let mut ids = Vec::new();
    for name in READ_ONLY.iter().chain(EDITING.iter()) {
        let dir = proj.join(format!("work-{}", name.replace('/', "-")));
        std::fs::create_dir_all(&dir).unwrap();
        next += 1;
        let (text, is_error) = server.call_text(
            next,
            "opencode_start",
            json!({"tier": "easy", "agent": name, "prompt": "Write the files you are asked to write.",
                   "model": "fk/escape", "cwd": dir.to_string_lossy()}),
        );
        assert!(!is_error, "{name}: {text}");
        let id = text
            .strip_prefix("started task ")
            .and_then(|t| t.split(':').next())
            .unwrap_or_else(|| panic!("{text}"))
            .to_owned();
        ids.push((name, id, dir));
    }
    let all: Vec<String> = ids.iter().map(|(_, id, _)| id.clone()).collect();
    let waited = wait_all(&mut server, &all, &mut next);

    for (name, id, dir) in &ids {
        next += 1;
        let (result, _) = server.call_text(next, "opencode_result", json!({"id": id}));
        // Run where asked (a server that did not start would have fallen back to `run`).
        assert!(
            result.contains(&format!("engine: {engine}")),
            "{name}: {result}"
        );
        let written = escaped_files(dir);
        if READ_ONLY.contains(name) {
            assert!(
                written.is_empty(),
                "read-only {name} wrote {written:?}:\n{result}\n{waited}"
            );
        } else {
            assert!(
                written.contains(&"escape-write.txt") && written.contains(&"escape-echo.txt"),
                "editing {name} did not edit ({written:?}):\n{result}"
            );
        }
    }
    // Nothing anywhere else in the project either (a subagent could write next door).
    let stray: Vec<String> = common::walk(&proj)
        .into_iter()
        .filter(|p| ESCAPE_FILES.iter().any(|f| p.ends_with(f)))
        .filter(|p| {
            !EDITING
                .iter()
                .any(|e| p.starts_with(proj.join(format!("work-{e}"))))
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

#[test]
fn live_a_configuration_opencode_refuses_is_reported_with_its_message() {
    let oc = require_opencode!();
    let live = Live::new(oc);
    let cfg = live.sb.config_home().join("opencode/opencode.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    config["provider"]["fk"]["options"]["apiKey"] = json!("{file:~/.secrets/missing-key}");
    std::fs::write(&cfg, config.to_string()).unwrap();
    let mut server = live.server(&[]);

    let (policy, _) = server.call_text(1, "opencode_policy", json!({}));
    assert!(
        policy.contains("opencode refuses to load its configuration here")
            && policy.contains("missing-key"),
        "{policy}"
    );
    let (start, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hello", "model": "fk/ok"}),
    );
    assert!(is_error, "{start}");
    assert!(
        start.contains("opencode refuses to load its configuration")
            && start.contains("bad file reference"),
        "{start}"
    );
    drop(server);

    // doctor: FAIL with opencode's own words, exit 1.
    let out = std::process::Command::new(common::binary())
        .arg("doctor")
        .env_clear()
        .envs(live.world.env())
        .envs(live.env(&[]).into_iter().map(|(k, v)| (k.to_string(), v)))
        .current_dir(live.sb.project_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL") && l.contains("bad file reference")),
        "{text}"
    );
}
