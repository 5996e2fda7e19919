//! The project allowlist of the secret guard: found from the task cwd up to the project root,
//! an allowed value passes, every other finding still refuses, and `PolicyView` shows the file
//! and its entry count (never the values).

use std::path::Path;

use bridge_policy::view::PolicyView;
use bridge_policy::{DelegationRequest, FakeEnv, RefusalKind, Roster, Tier, evaluate};

const ALLOWED: &str = "AKIAZ7Q4M2KD8XW3PL6T";
const OTHER: &str = "ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi";

fn world(allow: &str) -> FakeEnv {
    FakeEnv::new()
        .with_home("/home/u")
        .with_dir("/home/u/p/.git")
        .with_dir("/home/u/p/src/deep")
        .with_file("/home/u/p/.claude/opencode-bridge-secrets.allow", allow)
}

fn run(env: &FakeEnv, cwd: &str, prompt: &str) -> Result<(), bridge_policy::Refusal> {
    let cwd = Path::new(cwd);
    let roster = Roster::load(env, cwd);
    evaluate(
        &DelegationRequest::new(Tier::Easy, prompt, cwd),
        env,
        &roster,
    )
    .map(|_| ())
}

#[test]
fn allowed_value_passes_and_others_still_refuse() {
    let env = world(&format!("# test fixture key\n{ALLOWED}\n"));
    let only_allowed = format!("Use the fixture key {ALLOWED} in tests/aws.rs");
    assert!(run(&env, "/home/u/p/src/deep", &only_allowed).is_ok());
    let both = format!("{only_allowed}\nand GITHUB_TOKEN={OTHER}");
    let refusal = run(&env, "/home/u/p/src/deep", &both).unwrap_err();
    assert_eq!(refusal.kind, RefusalKind::Secret);
    assert_eq!(refusal.secret.unwrap().line, 2);
    assert!(
        refusal
            .message
            .contains(".claude/opencode-bridge-secrets.allow")
    );
    assert!(!refusal.message.contains(OTHER));
}

#[test]
fn patterns_match_whole_values_only() {
    let env = world("re:AKIAZ7Q4[A-Z0-9]{12}\n");
    assert!(run(&env, "/home/u/p", &format!("key {ALLOWED}")).is_ok());
    let prefix_only = world("re:AKIA\n"); // a prefix is not the whole value
    assert!(run(&prefix_only, "/home/u/p", &format!("key {ALLOWED}")).is_err());
}

#[test]
fn no_allowlist_outside_the_project() {
    // the file above the project root is not read
    let env = FakeEnv::new()
        .with_home("/home/u")
        .with_file("/home/u/.claude/opencode-bridge-secrets.allow", ALLOWED)
        .with_dir("/home/u/p/.git");
    assert!(run(&env, "/home/u/p", &format!("key {ALLOWED}")).is_err());
}

#[test]
fn policy_view_shows_the_file_and_count_not_values() {
    let env = world(&format!("{ALLOWED}\nre:sk_test_.*\nre:(\n"));
    let view = PolicyView::build(&env, Path::new("/home/u/p/src"), None).unwrap();
    let allow = view.secret_allowlist.expect("allowlist in force");
    assert_eq!(
        allow.path,
        "/home/u/p/.claude/opencode-bridge-secrets.allow"
    );
    assert_eq!(allow.entries, 2);
    assert_eq!(allow.problems.len(), 1);
    let json = serde_json::to_string(&allow).unwrap();
    assert!(!json.contains(ALLOWED) && !json.contains("sk_test"));
}
