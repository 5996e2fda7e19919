//! Session titles `LANE/agent: task` and the convention checker.

use std::path::Path;

use bridge_policy::naming::{check_title, clean_title, lane_name, session_title, task_words};

/// (lane, cwd, agent, prompt, explicit title, expected)
type TitleCase<'a> = (
    Option<&'a str>,
    &'a str,
    &'a str,
    &'a str,
    Option<&'a str>,
    &'a str,
);

#[test]
fn titles_from_lane_directory_and_prompt() {
    let cases: Vec<TitleCase> = vec![
        (
            None,
            "/w/project-a",
            "worker",
            "rename api_key to apiKey in the loader",
            None,
            "PROJECT-A/worker: rename api_key to apiKey in the loader",
        ),
        (
            Some("docs"),
            "/w/x",
            "librarian",
            "Collect API notes.",
            None,
            "DOCS/librarian: Collect API notes",
        ),
        (
            Some("beta lane!"),
            "/w/x",
            "fixer",
            "# Task: fix the flaky test in tests/io.rs please now ok",
            None,
            "BETA-LANE/fixer: fix the flaky test in tests/io.rs please now",
        ),
        (
            None,
            "/w/Über repo",
            "explorer",
            "- [ ] find **all** `unsafe` blocks",
            None,
            "ÜBER-REPO/explorer: find all unsafe blocks",
        ),
        (
            None,
            "/w/r",
            "oracle",
            "```rust\nfn main() {}\n```\nReview [the diff](https://x.test/d) for races",
            None,
            "R/oracle: Review the diff for races",
        ),
        (
            None,
            "/w/r",
            "worker",
            "Fix\nthe build\n",
            None,
            "R/worker: Fix the build",
        ),
        (
            None,
            "/w/r",
            "worker",
            "see https://example.test/issue/1\n\n> quote: add retries to fetch()",
            None,
            "R/worker: see quote: add retries to fetch()",
        ),
        (
            None,
            "/",
            "worker",
            "one two three",
            None,
            "ROOT/worker: one two three",
        ),
        (
            Some("x"),
            "/w/r",
            "worker",
            "ignored",
            Some("  CUSTOM/title: kept\nas is "),
            "CUSTOM/title: kept as is",
        ),
        (
            Some("x"),
            "/w/r",
            "worker",
            "used when the title is blank",
            Some("  "),
            "X/worker: used when the title is blank",
        ),
    ];
    for (lane, cwd, agent, prompt, explicit, expected) in cases {
        assert_eq!(
            session_title(lane, Path::new(cwd), agent, prompt, explicit),
            expected,
            "{prompt:?}"
        );
    }
}

#[test]
fn lane_is_sanitised_and_clipped() {
    assert_eq!(lane_name(Some("a/b:c  d"), Path::new("/")), "A-B-C-D");
    assert_eq!(
        lane_name(None, Path::new("/w/my.project_v2")),
        "MY.PROJECT_V2"
    );
    assert_eq!(lane_name(Some("---"), Path::new("/w/fallback")), "ROOT");
    assert_eq!(lane_name(Some(&"x".repeat(40)), Path::new("/")).len(), 24);
}

#[test]
fn task_keeps_three_to_eight_words() {
    assert_eq!(
        task_words("one two three four five six seven eight nine ten"),
        "one two three four five six seven eight"
    );
    assert_eq!(task_words("**Goal:** add tests"), "add tests");
    assert_eq!(task_words(""), "");
}

#[test]
fn checker_explains_what_is_wrong() {
    let cases: Vec<(&str, &[&str])> = vec![
        ("DOCS/librarian: collect API notes", &[]),
        ("PROJECT-A/team/docs: write the install guide", &[]),
        ("New session - 2026-11-29T10:00:00Z", &["missing \": \""]),
        (
            "Entropy-based selection of RNA structures",
            &["missing \": \""],
        ),
        ("DOCS librarian: collect API notes", &["has no \"/\""]),
        (
            "docs/librarian: collect API notes",
            &["LANE \"docs\" is not in capitals"],
        ),
        (
            "MY LANE/worker: do the thing now",
            &["LANE \"MY LANE\" contains spaces"],
        ),
        ("DOCS/: collect API notes", &["agent is empty"]),
        ("DOCS/librarian: notes", &["task has 1 word(s)"]),
        (
            "DOCS/librarian: one two three four five six seven eight nine",
            &["task has 9 words"],
        ),
        (
            "docs/: x",
            &["not in capitals", "agent is empty", "task has 1 word(s)"],
        ),
    ];
    for (title, expected) in cases {
        let problems = check_title(title);
        assert_eq!(problems.len(), expected.len(), "{title}: {problems:?}");
        for (p, e) in problems.iter().zip(expected.iter()) {
            assert!(p.contains(e), "{title}: {p:?} should contain {e:?}");
        }
    }
    // every generated title follows the convention
    let t = session_title(
        None,
        Path::new("/w/api"),
        "worker",
        "Add a unit test for parse_date",
        None,
    );
    assert!(check_title(&t).is_empty(), "{t}");
}

#[test]
fn titles_never_carry_a_secret() {
    let cwd = Path::new("/w/api");
    let cases = [
        // a vendor token the guard knows
        "Use ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi to list the repos",
        // a password given to a name
        "password=Zq8#rT2!vLp9 is wrong, fix the login",
        // a random token no rule would refuse on its own (no secret word near it)
        "call q9XzL2mT7vB4nK8sW3pR6yH1 from the deploy job",
    ];
    for prompt in cases {
        let t = session_title(None, cwd, "worker", prompt, None);
        for secret in ["ghp_4Fq9", "Zq8#rT2", "q9XzL2mT7"] {
            assert!(!t.contains(secret), "{prompt:?} gave {t:?}");
        }
        assert!(t.contains("[secret]"), "{t}");
    }
    // explicit titles too
    let t = session_title(
        None,
        cwd,
        "worker",
        "x",
        Some("DOCS/worker: rotate AKIAZ7Q4M2KD8XW3PL6T now"),
    );
    assert_eq!(t, "DOCS/worker: rotate [secret] now");
    // ordinary words stay
    let t = session_title(
        None,
        cwd,
        "worker",
        "Rename parse_configuration_file to load_config",
        None,
    );
    assert_eq!(
        t,
        "API/worker: Rename parse_configuration_file to load_config"
    );
}

/// Secrets given where a title is made other than the prompt: the lane (or the directory name it
/// defaults to), an explicit title, a rename. None reaches the title, not even in part (the lane
/// is cut to 24 characters, which would keep a token's first 24 upper-cased).
#[test]
fn lanes_and_renames_never_carry_a_secret() {
    let secrets = [
        "ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi",
        "AKIAZ7Q4M2KD8XW3PL6T",
        "q9XzL2mT7vB4nK8sW3pR6yH1",
        "sk-proj-Vq3mX9tL2pR7sB4nK8wZ1yH6dF5gJ0cA",
    ];
    let cwd = Path::new("/w/api");
    for secret in secrets {
        let head: String = secret.chars().take(8).collect::<String>().to_uppercase();
        for lane in [secret.to_owned(), format!("docs {secret}")] {
            let t = session_title(
                Some(&lane),
                cwd,
                "worker",
                "Add retries to the fetcher",
                None,
            );
            assert!(
                !t.to_uppercase().contains(&head),
                "lane {lane:?} gave {t:?}"
            );
            assert!(t.contains("SECRET/worker: "), "{t}");
        }
        // a directory named like a token
        let dir = format!("/w/{secret}");
        let t = session_title(
            None,
            Path::new(&dir),
            "worker",
            "Add retries to the fetcher",
            None,
        );
        assert!(!t.to_uppercase().contains(&head), "cwd {dir:?} gave {t:?}");
        // a rename, or an explicit title, with line breaks around the token
        let renamed = clean_title(&format!("DOCS/worker: rotate\n{secret}\tnow"));
        assert_eq!(renamed, "DOCS/worker: rotate [secret] now");
    }
    // an ordinary lane is kept
    assert_eq!(lane_name(Some("docs-2026.q3"), cwd), "DOCS-2026.Q3");
}
