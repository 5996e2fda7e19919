//! Untrusted directories outside the root, with the real opencode 1.18.33: each holds a plugin
//! that writes a marker when it is loaded and an MCP server that writes one when it is started.
//! Asked about one (`opencode_start`, `opencode_policy`, a rename or a follow-up of a session
//! there), the bridge answers without any opencode process there: no marker, nothing new in the
//! directory (opencode installs a plugin directory's dependencies into `.opencode/node_modules/`
//! and adds `$schema` to its `opencode.json`), and the wrapper that logs every opencode the
//! bridge starts saw none there. A bridge whose root holds such a directory shows first that its
//! plugin does run when opencode is started there, so the test is not vacuous; that bridge also
//! shows a secret given as `lane`, `label` or a rename's title never reaches opencode's store.

use crate::common;
use crate::untrusted::{SECRETS, hostile_dir, leaks, logging_wrapper, tree};

use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use common::{Server, World};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Lines of the wrapper's log whose `PWD` or real cwd is `dir` or below it.
fn ran_in(log: &Path, dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            let mut f = l.split('|');
            let (pwd, cwd) = (f.next().unwrap_or(""), f.next().unwrap_or(""));
            [pwd, cwd]
                .iter()
                .any(|p| *p == dir || p.starts_with(&format!("{dir}/")))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn live_an_untrusted_directory_runs_nothing_before_the_answer_is_no() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let root = sb.project_dir().to_path_buf();
    // `evil` is never asked about by a bridge whose root holds it; `twin` is, first.
    let (evil, twin) = (world.path("outside/evil"), world.path("elsewhere/twin"));
    let (evil_marks, twin_marks) = (world.path("markers/evil"), world.path("markers/twin"));
    hostile_dir(&evil, &evil_marks);
    hostile_dir(&twin, &twin_marks);
    let evil = evil.canonicalize().unwrap();
    let twin = twin.canonicalize().unwrap();
    std::os::unix::fs::symlink(&evil, root.join("link")).unwrap();
    let pristine = tree(&evil);
    let (wrapper, log) = logging_wrapper(&world, &oc);
    let env = |root: &Path| {
        let mut env = common::sandbox_env_for_bridge(&sb);
        env.push(("OPENCODE_BIN", wrapper.display().to_string()));
        env.push(("OPENCODE_BRIDGE_ROOT", root.display().to_string()));
        env.push(("OPENCODE_BRIDGE_RETRIES", "0".into()));
        env
    };
    let mut next = 0;
    let mut call = |server: &mut Server, tool: &str, args: serde_json::Value| {
        next += 1;
        server.call_text(next, tool, args)
    };

    // 1. The control: a bridge whose root is the twin asks opencode there, and the plugin runs.
    // (The twin's `.opencode/` is set aside first: opencode installs a plugin directory's
    // dependencies from npm before it loads anything, 20-60 s here; the plugin its
    // `opencode.json` names loads at once.) It also runs a task there with secrets in its lane
    // and label, and renames the session with a secret in the title.
    std::fs::rename(twin.join(".opencode"), world.path("parked-opencode")).unwrap();
    let mut wide = Server::start_in(&world, &env(&twin), &twin);
    wide.initialize();
    let (policy, _) = call(&mut wide, "opencode_policy", json!({}));
    assert!(policy.contains("from opencode itself"), "{policy}");
    assert!(
        twin_marks.join("config-plugin-ran").is_file(),
        "the plugin did not run under opencode serve, so the checks below would prove nothing"
    );
    assert!(!ran_in(&log, &twin).is_empty());
    let (started, is_error) = call(
        &mut wide,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hello to the team", "model": "fk/ok",
               "lane": SECRETS[0], "label": format!("night {}", SECRETS[1])}),
    );
    assert!(!is_error, "{started}");
    assert_eq!(leaks(&started), None, "{started}");
    let task = started
        .strip_prefix("started task ")
        .and_then(|t| t.split(':').next())
        .unwrap()
        .to_owned();
    let (waited, _) = call(
        &mut wide,
        "opencode_wait",
        json!({"ids": [task], "timeout_s": 55}),
    );
    assert!(waited.starts_with("all 1 task(s) finished"), "{waited}");
    let (status, _) = call(&mut wide, "opencode_status", json!({"id": task}));
    assert!(status.contains("succeeded"), "{status}");
    let session = status
        .split_whitespace()
        .find(|w| w.starts_with("ses_"))
        .unwrap_or_else(|| panic!("no session in {status}"))
        .trim_end_matches([',', ')', ';'])
        .to_owned();
    let (renamed, is_error) = call(
        &mut wide,
        "opencode_session_rename",
        json!({"id": session, "title": format!("TWIN/worker: rotate {} now", SECRETS[2])}),
    );
    assert!(!is_error, "{renamed}");
    assert!(
        renamed.contains("warning: a secret in `title` was replaced"),
        "{renamed}"
    );
    // What opencode's store holds now (read back through the bridge).
    let (sessions, _) = call(&mut wide, "opencode_sessions", json!({"limit": 5}));
    assert!(
        sessions.contains("TWIN/worker: rotate [secret] now"),
        "{sessions}"
    );
    assert_eq!(leaks(&sessions), None, "{sessions}");
    let (list, _) = call(&mut wide, "opencode_list", json!({}));
    assert_eq!(leaks(&list), None, "{list}");
    drop(wide);

    // 2. A bridge whose root is the project: every way of naming the untouched directory, and
    // a rename and a follow-up of the twin's session.
    for m in tree(&twin_marks) {
        std::fs::remove_file(m).unwrap();
    }
    let twin_ran = ran_in(&log, &twin).len();
    let twin_before = tree(&twin);
    let mut narrow = Server::start_in(&world, &env(&root), &root);
    narrow.initialize();
    let mut answers = Vec::new();
    for cwd in [evil.display().to_string(), "link".into(), "link/new".into()] {
        answers.push(call(
            &mut narrow,
            "opencode_start",
            json!({"tier": "easy", "prompt": "List the files", "model": "fk/ok", "cwd": cwd}),
        ));
        answers.push(call(&mut narrow, "opencode_policy", json!({"cwd": cwd})));
    }
    answers.push(call(
        &mut narrow,
        "opencode_start",
        json!({"tier": "easy", "prompt": "And now list the files", "model": "fk/ok", "session": session}),
    ));
    let (renamed, renamed_is_error) = call(
        &mut narrow,
        "opencode_session_rename",
        json!({"id": session, "title": "TWIN/worker: a harmless new title"}),
    );
    // The root's own policy is asked of opencode (through the wrapper), so the log is live.
    let (policy, is_error) = call(&mut narrow, "opencode_policy", json!({}));
    assert!(
        !is_error && policy.contains("from opencode itself"),
        "{policy}"
    );
    drop(narrow);
    assert!(
        !ran_in(&log, &root).is_empty(),
        "the wrapper recorded no opencode in the root:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(
        ran_in(&log, &evil),
        Vec::<String>::new(),
        "opencode ran there"
    );
    assert_eq!(
        ran_in(&log, &twin).len(),
        twin_ran,
        "opencode ran in the twin"
    );
    assert_eq!(tree(&evil_marks), Vec::<PathBuf>::new(), "code ran there");
    assert_eq!(
        tree(&twin_marks),
        Vec::<PathBuf>::new(),
        "code ran in the twin"
    );
    assert_eq!(tree(&evil), pristine, "the outside directory changed");
    assert_eq!(tree(&twin), twin_before, "the twin changed");
    for (text, is_error) in &answers {
        assert!(*is_error, "{text}");
        assert!(text.contains("is outside OPENCODE_BRIDGE_ROOT"), "{text}");
    }
    assert!(renamed_is_error, "{renamed}");
    assert!(
        renamed.contains("outside OPENCODE_BRIDGE_ROOT")
            && renamed.contains(&twin.display().to_string()),
        "{renamed}"
    );
}
