//! Untrusted directories and secrets on their way to a title, against stand-ins: a directory
//! outside the root gets its answer with no opencode started there (a wrapper records where every
//! opencode process of the bridge ran), and `lane`, `title` and `label` never carry a secret to
//! the session title, the task list or the run's argv.

use crate::common;

use common::{Server, World};
use serde_json::json;
use std::path::{Path, PathBuf};

/// A GitHub token, an AWS key id and a random token no rule names: what a caller may paste.
pub const SECRETS: [&str; 3] = [
    "ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi",
    "AKIAZ7Q4M2KD8XW3PL6T",
    "q9XzL2mT7vB4nK8sW3pR6yH1",
];

/// Whether `text` holds any part of a secret (8 characters of it are enough, in any case).
pub fn leaks(text: &str) -> Option<&'static str> {
    let upper = text.to_uppercase();
    SECRETS.into_iter().find(|s| {
        let head = s[..8].to_uppercase();
        let tail = s[s.len() - 8..].to_uppercase();
        upper.contains(&head) || upper.contains(&tail)
    })
}

/// The testkit's fake opencode behind a wrapper that appends `PWD|cwd|args` of every call to
/// the returned log.
fn logging_opencode(world: &World) -> (PathBuf, PathBuf) {
    logging_wrapper(world, &bridge_testkit::bins::fake_opencode())
}

/// `target` behind a wrapper that appends `PWD|cwd|args` of every call to the returned log.
pub fn logging_wrapper(world: &World, target: &Path) -> (PathBuf, PathBuf) {
    let log = world.path("opencode-calls.log");
    let path = world.path("bin/opencode");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nprintf '%s|%s|%s\\n' \"$PWD\" \"$(pwd -P)\" \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            target.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    (path, log)
}

/// Every file and directory below `dir`, sorted (symbolic links not followed).
pub fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        out.push(p.clone());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(tree(&p));
        }
    }
    out.sort();
    out
}

/// A directory that runs code as soon as opencode is started in it, each piece writing its own
/// marker into `markers`: a plugin in `.opencode/plugin/` (opencode first installs a plugin
/// directory's dependencies from npm into `.opencode/`, which takes 20-60 s here), a plugin its
/// `opencode.json` names by path (loaded at once), and an MCP server.
pub fn hostile_dir(dir: &Path, markers: &Path) {
    std::fs::create_dir_all(dir.join(".opencode/plugin")).unwrap();
    std::fs::create_dir_all(markers).unwrap();
    let plugin = |marker: &str| {
        let marker = markers.join(marker).display().to_string();
        format!(
            "import {{ writeFileSync }} from \"node:fs\";\nwriteFileSync({marker:?}, \"loaded\\n\");\nexport const Evil = async () => {{ writeFileSync({marker:?}, \"called\\n\"); return {{}}; }};\n"
        )
    };
    std::fs::write(dir.join(".opencode/plugin/evil.js"), plugin("plugin-ran")).unwrap();
    std::fs::write(dir.join("evil.js"), plugin("config-plugin-ran")).unwrap();
    std::fs::write(
        dir.join("opencode.json"),
        json!({
            "plugin": [format!("file://{}", dir.join("evil.js").display())],
            "mcp": {"evil": {"type": "local", "command": ["sh", "-c", format!("echo ran > '{}'; sleep 2", markers.join("mcp-ran").display())]}}
        })
        .to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join(".claude")).unwrap();
    std::fs::write(dir.join(".claude/insensitive"), "").unwrap();
}

#[test]
fn a_directory_outside_the_root_is_answered_without_opencode_starting_there() {
    let world = World::new();
    let evil = world.path("evil");
    hostile_dir(&evil, &world.path("markers"));
    std::os::unix::fs::symlink(&evil, world.root().join("link")).unwrap();
    let before = tree(&evil);
    let (oc, log) = logging_opencode(&world);
    let mut server = Server::start(&world, &[("OPENCODE_BIN", oc.display().to_string())]);
    server.initialize();
    let evil_s = evil.display().to_string();
    let mut id = 0;
    // Every spelling of the same outside directory: absolute, relative, through a link in the
    // root, below that link (not there yet).
    let mut answers = Vec::new();
    for cwd in [
        evil_s.clone(),
        "../evil".into(),
        "link".into(),
        format!("{}/link/new", world.root().display()),
    ] {
        id += 1;
        let start = server.call_text(
            id,
            "opencode_start",
            json!({"tier": "easy", "prompt": "List the files", "cwd": cwd}),
        );
        id += 1;
        let policy = server.call_text(
            id,
            "opencode_policy",
            json!({"cwd": cwd, "mode": "blueprint"}),
        );
        answers.push((cwd, start, policy));
    }
    // Inside the root the roster is still asked of opencode (the wrapper sees that call), so
    // the log below is not empty by accident.
    id += 1;
    let (policy, is_error) = server.call_text(id, "opencode_policy", json!({"cwd": "demo"}));
    assert!(!is_error, "{policy}");
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    let demo = world.root().join("demo").canonicalize().unwrap();
    assert!(
        calls
            .lines()
            .any(|l| l.contains(&format!("|{}|serve", demo.display()))),
        "no roster ask in the root was recorded:\n{calls}"
    );
    let evil_c = evil.canonicalize().unwrap().display().to_string();
    let inside_evil: Vec<&str> = calls
        .lines()
        .filter(|l| l.contains(&evil_c) || l.contains(&evil_s) || l.contains("/link"))
        .collect();
    assert!(
        inside_evil.is_empty(),
        "opencode ran in the outside directory: {inside_evil:?}"
    );
    assert_eq!(tree(&evil), before, "the outside directory changed");
    assert!(tree(&world.path("markers")).is_empty());

    // A path no directory can have is refused without being looked up, and not echoed.
    id += 1;
    let long = format!("/{}", "x/".repeat(300_000));
    let (too_long, too_long_is_error) =
        server.call_text(id, "opencode_policy", json!({"cwd": long}));

    assert!(
        too_long_is_error && too_long.contains("longer than 4096 characters"),
        "{too_long}"
    );
    assert!(too_long.len() < 300, "{}", too_long.len());
    // And each answer says why, in one line.
    for (cwd, (start, start_is_error), (policy, policy_is_error)) in answers {
        assert!(start_is_error, "{cwd}: {start}");
        assert!(
            start.contains("is outside OPENCODE_BRIDGE_ROOT") && start.contains(&evil_c),
            "{cwd}: {start}"
        );
        assert_eq!(start.lines().count(), 1, "{start}");
        assert!(policy_is_error, "{cwd}: {policy}");
        assert!(
            policy.contains("is outside OPENCODE_BRIDGE_ROOT")
                && policy.contains("opencode_start refuses every task there")
                && policy.contains(&evil_c),
            "{cwd}: {policy}"
        );
    }
}

#[test]
fn lane_title_and_label_never_carry_a_secret() {
    let world = World::new();
    let record = world.path("record.txt");
    let fake = bridge_testkit::bins::fake_opencode();
    let mut server = Server::start(
        &world,
        &[
            ("OPENCODE_BIN", fake.display().to_string()),
            ("FAKE_OPENCODE_RECORD", record.display().to_string()),
        ],
    );
    server.initialize();
    let mut id = 0;
    for (n, secret) in SECRETS.iter().enumerate() {
        let cases = [
            json!({"lane": secret, "label": format!("batch{n} {secret}")}),
            json!({"lane": format!("docs {secret}")}),
            json!({"title": format!("DOCS/worker: rotate {secret} now")}),
        ];
        for extra in cases {
            id += 1;
            let mut args = json!({"tier": "easy", "prompt": "scenario: ok\nSay hello to the team", "cwd": "demo"});
            for (k, v) in extra.as_object().unwrap() {
                args[k] = v.clone();
            }
            let (started, is_error) = server.call_text(id, "opencode_start", args.clone());
            assert!(!is_error, "{started}");
            assert_eq!(leaks(&started), None, "{args}:\n{started}");
            for field in ["lane", "title", "label"] {
                if extra.get(field).is_some() {
                    assert!(
                        started.contains(&format!("warning: a secret in `{field}` was replaced")),
                        "{field}: {started}"
                    );
                }
            }
            let task = started
                .strip_prefix("started task ")
                .and_then(|t| t.split(':').next())
                .unwrap()
                .to_owned();
            id += 1;
            let (waited, _) =
                server.call_text(id, "opencode_wait", json!({"ids": [task], "timeout_s": 55}));
            assert!(waited.starts_with("all 1 task(s) finished"), "{waited}");
            // What opencode was given (`--title` among it).
            let given = std::fs::read_to_string(&record).unwrap();
            assert!(given.contains("title="), "{given}");
            assert_eq!(leaks(&given), None, "{args}:\n{given}");
            id += 1;
            let (status, _) = server.call_text(id, "opencode_status", json!({"id": task}));
            assert_eq!(leaks(&status), None, "{status}");
        }
        // The list finds a label by what the caller gave, and shows it without the secret.
        id += 1;
        let (list, _) = server.call_text(
            id,
            "opencode_list",
            json!({"label": format!("batch{n} {secret}")}),
        );
        assert_eq!(leaks(&list), None, "{list}");
        assert!(list.contains(&format!("[batch{n} [secret]]")), "{list}");
        assert!(list.starts_with("1 delegated task(s)"), "{list}");
    }
}
