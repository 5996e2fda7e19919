//! Private worlds with the real opencode 1.18.33: a run of one project cannot read or write what
//! a run of another project left in its world (its store, with the other project's prompts),
//! nor the user's own opencode state, nor the npx cache the user's `npx -y …` runs packages
//! from. The fake model makes the agent's shell try each, and the disk is checked; with the
//! fence off the same writes land, so the refusals are the worlds' and the fence's.

use std::path::{Path, PathBuf};

use crate::common::live::{bash, fenced_supervisor, run_to_end, write};
use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use run_supervisor::{Engine, Sandbox, Supervisor, TaskSpec, TaskState};

struct Worlds {
    sb: OpencodeSandbox,
    state: tempfile::TempDir,
    root: PathBuf,
    a: PathBuf,
    b: PathBuf,
    npx_pkg: PathBuf,
    user_data: PathBuf,
}

fn setup(llm: &FakeLlm) -> Worlds {
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let top = sb.root().canonicalize().unwrap();
    let root = top.join("projects");
    let (a, b) = (root.join("a"), root.join("b"));
    for p in [&a, &b] {
        std::fs::create_dir_all(p).unwrap();
        bridge_testkit::git_repo(p, &[("README.md", "# p\n")]);
    }
    // What the user's own `npx -y pkg` would run, and the user's own opencode data.
    let npx_pkg = top.join("home/.npm/_npx/0123abcd/node_modules/pkg/index.js");
    std::fs::create_dir_all(npx_pkg.parent().unwrap()).unwrap();
    std::fs::write(&npx_pkg, "original\n").unwrap();
    let user_data = top.join("data/opencode");
    std::fs::create_dir_all(&user_data).unwrap();
    Worlds {
        sb,
        state: tempfile::tempdir().unwrap(),
        root,
        a,
        b,
        npx_pkg,
        user_data,
    }
}

fn supervisor(w: &Worlds, oc: &Path, sandbox: Sandbox, engine: Engine) -> Supervisor {
    fenced_supervisor(
        oc,
        &w.sb,
        &w.root,
        sandbox,
        engine,
        Some(w.state.path().to_path_buf()),
    )
}

async fn run(sup: &Supervisor, prompt: &str, cwd: &Path) -> run_supervisor::TaskOutput {
    let mut spec = TaskSpec::new(prompt, cwd, "worker", "LIVE/worker: worlds");
    spec.model = Some("fk/script".into());
    // The widest permissions opencode has: only the worlds and the fence stand in the way.
    spec.auto_approve = true;
    run_to_end(sup, spec).await
}

/// Project B's task leaves its prompt in its world's store; project A's task then tries to read
/// that store, plant a file in B's world, rewrite the user's npx cache and write the user's
/// own opencode data directory.
async fn attack(oc: &Path, engine: Engine, sandbox: Sandbox) -> (Worlds, PathBuf) {
    let llm = FakeLlm::start().unwrap();
    let w = setup(&llm);
    let sup = supervisor(&w, oc, sandbox, engine);
    let b_secret = format!("B-PROMPT-SECRET-{}", 5 * 1000 + 7);
    let out_b = run(
        &sup,
        &format!(
            "Note {b_secret}.\n{}",
            write(&w.b.join("note.txt"), "from b\n")
        ),
        &w.b,
    )
    .await;
    assert_eq!(
        out_b.snapshot.state,
        TaskState::Succeeded,
        "{:?}",
        out_b.snapshot
    );
    assert_eq!(out_b.snapshot.engine, engine.as_str());
    let b_world = bridge_fence::World::of(w.state.path(), &w.b, true);
    let b_db = b_world.opencode_db();
    assert!(
        b_db.is_file(),
        "B's session lives in B's world: {}",
        b_db.display()
    );
    assert!(
        !w.user_data.join("opencode.db").exists(),
        "no run writes the user's own store"
    );
    let b_data = b_db.parent().unwrap().to_path_buf();
    let script = format!(
        "cp {db} stolen.db; cat {db}* > stolen-all.txt; echo planted > {bd}/planted.txt; echo planted > {npx}; echo planted > {ud}/planted.txt; echo done > ran.txt",
        db = b_db.display(),
        bd = b_data.display(),
        npx = w.npx_pkg.display(),
        ud = w.user_data.display(),
    );
    let out_a = run(&sup, &format!("Do it.\n{}", bash(&script)), &w.a).await;
    assert_eq!(
        out_a.snapshot.engine,
        engine.as_str(),
        "{:?}",
        out_a.snapshot
    );
    assert!(
        w.a.join("ran.txt").exists(),
        "the attack ran: {:?}",
        out_a.snapshot
    );
    let a_world = bridge_fence::World::of(w.state.path(), &w.a, true);
    assert_ne!(a_world.root(), b_world.root());
    assert!(
        a_world.opencode_db().is_file(),
        "A's session lives in A's world"
    );
    sup.shutdown().await;
    (w, b_data)
}

fn stolen(w: &Worlds) -> String {
    let mut s = String::new();
    for f in ["stolen.db", "stolen-all.txt"] {
        s.push_str(&String::from_utf8_lossy(
            &std::fs::read(w.a.join(f)).unwrap_or_default(),
        ));
    }
    s
}

async fn a_run_cannot_reach_another_worlds_store_the_npx_cache_or_the_users_data(engine: Engine) {
    let oc = require_opencode!();
    let (w, b_data) = attack(&oc, engine, Sandbox::Auto).await;
    assert!(
        !stolen(&w).contains("B-PROMPT-SECRET-5007"),
        "project A read project B's prompt from B's world"
    );
    assert!(
        !b_data.join("planted.txt").exists(),
        "A planted a file in B's world"
    );
    assert_eq!(
        std::fs::read_to_string(&w.npx_pkg).unwrap(),
        "original\n",
        "A rewrote a package in the user's npx cache"
    );
    assert!(
        !w.user_data.join("planted.txt").exists(),
        "A wrote the user's own opencode data"
    );
}

#[tokio::test]
async fn live_run_a_run_cannot_reach_another_worlds_store_the_npx_cache_or_the_users_data() {
    a_run_cannot_reach_another_worlds_store_the_npx_cache_or_the_users_data(Engine::Run).await;
}

#[tokio::test]
async fn live_serve_a_run_cannot_reach_another_worlds_store_the_npx_cache_or_the_users_data() {
    a_run_cannot_reach_another_worlds_store_the_npx_cache_or_the_users_data(Engine::Serve).await;
}

/// The control: with the fence off, the same script reads B's store and writes everywhere it
/// aimed, so the refusals above are the worlds' and the fence's, not the script's.
#[tokio::test]
async fn live_run_with_the_fence_off_the_same_attack_lands() {
    let oc = require_opencode!();
    let (w, b_data) = attack(&oc, Engine::Run, Sandbox::Off).await;
    assert!(stolen(&w).contains("B-PROMPT-SECRET-5007"));
    assert!(b_data.join("planted.txt").exists());
    assert_eq!(std::fs::read_to_string(&w.npx_pkg).unwrap(), "planted\n");
    assert!(w.user_data.join("planted.txt").exists());
}
