use super::*;

#[test]
fn task_ids_in_several_spellings() {
    for s in ["3", "task 3", "task-3", "t3", "#3", " 3 "] {
        assert_eq!(parse_task_id(s), Ok(3), "{s}");
    }
    assert!(
        parse_task_id("ses_abc")
            .unwrap_err()
            .contains("not a task id")
    );
}

#[test]
fn the_fence_resolves_first_and_accepts_only_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    let root_c = root.canonicalize().unwrap();
    let inside = |p: &Path| within_root(p, &root).map(|d| d.path().to_path_buf());
    assert_eq!(inside(&root), Ok(root_c.clone()));
    assert_eq!(inside(&root.join("a/b")), Ok(root_c.join("a/b")));
    let shown = format!("{:?}", within_root(&outside, &root));
    assert!(!shown.contains("outside/\""), "no trailing slash: {shown}");
    // not there yet: placed where it would be
    assert_eq!(inside(&root.join("a/new/x")), Ok(root_c.join("a/new/x")));
    for out in [
        outside.clone(),
        root.join("a/../.."),
        root.join("link"),
        // a directory that does not exist below a link that leads out
        root.join("link/not-yet"),
        PathBuf::from("/"),
        PathBuf::from(""),
    ] {
        assert!(
            matches!(within_root(&out, &root), Err(OutsideRoot::Outside { .. })),
            "{out:?}: {:?}",
            within_root(&out, &root)
        );
    }
    let long = PathBuf::from(format!("/{}", "a/".repeat(3000)));
    assert_eq!(within_root(&long, &root), Err(OutsideRoot::TooLong(6001)));
    assert!(matches!(
        within_root(&root, &tmp.path().join("no-root")),
        Err(OutsideRoot::Root(_))
    ));
}

#[test]
fn secrets_replaced_counts_new_markers_only() {
    assert!(secrets_replaced("ghp_x", "[secret]"));
    assert!(!secrets_replaced("a [secret] b", "a [secret] b"));
    assert!(!secrets_replaced("docs", "docs"));
}

#[test]
fn replies_are_capped() {
    let long = "x".repeat(REPLY_CAP_CHARS + 5);
    let capped = cap_reply(&long);
    assert!(capped.starts_with(&"x".repeat(REPLY_CAP_CHARS)));
    assert!(capped.contains("5 characters cut"));
    assert_eq!(cap_reply("short"), "short");
}
