//! Mode detection: every source, their precedence, conflicts, nested projects, missing HOME,
//! CLAUDE_CONFIG_DIR set and unset, unrecognised values.

use std::path::Path;

use bridge_policy::mode::{MarkerKind, ModeDecision, ModeSource, Reading, project_root};
use bridge_policy::{FakeEnv, Mode, PolicyError};

const HOME: &str = "/home/u";
const PROJECT: &str = "/home/u/work/proj";
const CWD: &str = "/home/u/work/proj/src/deep";

/// A world with a home directory and a project (marked by `.git`).
fn world() -> FakeEnv {
    FakeEnv::new()
        .with_home(HOME)
        .with_dir(format!("{PROJECT}/.git"))
        .with_dir(CWD)
}

fn project_sensitive(env: FakeEnv) -> FakeEnv {
    env.with_file(format!("{PROJECT}/.claude/sensitive"), "")
}
fn project_insensitive(env: FakeEnv) -> FakeEnv {
    env.with_file(format!("{PROJECT}/.claude/insensitive"), "")
}
fn home_insensitive(env: FakeEnv) -> FakeEnv {
    env.with_file(format!("{HOME}/.claude/insensitive"), "")
}
fn claude_config_insensitive(env: FakeEnv) -> FakeEnv {
    env.with_var("CLAUDE_CONFIG_DIR", "/cfg/claude-b")
        .with_file("/cfg/claude-b/insensitive", "")
}

/// Mode detection with the `mode` argument as a tool call gives it (text): parsed once by
/// [`Mode::from_arg`], then detected with the typed mode.
fn detect_mode(env: &FakeEnv, cwd: &Path, arg: Option<&str>) -> Result<ModeDecision, PolicyError> {
    bridge_policy::mode::detect_mode(env, cwd, Mode::from_arg(arg)?)
}

fn env_source(name: &'static str) -> ModeSource {
    ModeSource::EnvVar { name }
}

fn marker(kind: MarkerKind, path: &str) -> ModeSource {
    ModeSource::Marker {
        marker: kind,
        path: Some(path.into()),
    }
}

#[test]
fn every_source_alone_and_in_conflict() {
    type Build = fn(FakeEnv) -> FakeEnv;
    let ps = format!("{PROJECT}/.claude/sensitive");
    let pi = format!("{PROJECT}/.claude/insensitive");
    let hi = format!("{HOME}/.claude/insensitive");
    let ci = "/cfg/claude-b/insensitive".to_owned();
    // (case, world, mode argument, expected mode, expected deciding source)
    let cases: Vec<(&str, Build, Option<&str>, Mode, ModeSource)> = vec![
        (
            "nothing set",
            |e| e,
            None,
            Mode::Blueprint,
            ModeSource::Default,
        ),
        (
            "argument sensitive",
            |e| e,
            Some("sensitive"),
            Mode::Sensitive,
            ModeSource::Argument,
        ),
        (
            "argument insensitive",
            |e| e,
            Some("insensitive"),
            Mode::Insensitive,
            ModeSource::Argument,
        ),
        (
            "argument blueprint",
            |e| e,
            Some("Blueprint"),
            Mode::Blueprint,
            ModeSource::Argument,
        ),
        (
            "bridge env",
            |e| e.with_var("OPENCODE_BRIDGE_MODE", "insensitive"),
            None,
            Mode::Insensitive,
            env_source("OPENCODE_BRIDGE_MODE"),
        ),
        (
            "opencode env",
            |e| e.with_var("OPENCODE_MODE", "sensitive"),
            None,
            Mode::Sensitive,
            env_source("OPENCODE_MODE"),
        ),
        (
            "project sensitive marker",
            project_sensitive,
            None,
            Mode::Sensitive,
            marker(MarkerKind::ProjectSensitive, &ps),
        ),
        (
            "project insensitive marker",
            project_insensitive,
            None,
            Mode::Insensitive,
            marker(MarkerKind::ProjectInsensitive, &pi),
        ),
        (
            "home insensitive marker",
            home_insensitive,
            None,
            Mode::Insensitive,
            marker(MarkerKind::HomeInsensitive, &hi),
        ),
        (
            "CLAUDE_CONFIG_DIR marker",
            claude_config_insensitive,
            None,
            Mode::Insensitive,
            marker(MarkerKind::ClaudeConfigInsensitive, &ci),
        ),
        // sensitive wins whatever disagrees
        (
            "argument insensitive vs project sensitive",
            project_sensitive,
            Some("insensitive"),
            Mode::Sensitive,
            marker(MarkerKind::ProjectSensitive, &ps),
        ),
        (
            "env insensitive vs env sensitive",
            |e| {
                e.with_var("OPENCODE_BRIDGE_MODE", "insensitive")
                    .with_var("OPENCODE_MODE", "sensitive")
            },
            None,
            Mode::Sensitive,
            env_source("OPENCODE_MODE"),
        ),
        (
            "both project markers",
            |e| project_insensitive(project_sensitive(e)),
            None,
            Mode::Sensitive,
            marker(MarkerKind::ProjectSensitive, &ps),
        ),
        (
            "home insensitive vs env sensitive",
            |e| home_insensitive(e).with_var("OPENCODE_MODE", "sensitive"),
            None,
            Mode::Sensitive,
            env_source("OPENCODE_MODE"),
        ),
        (
            "argument blueprint vs env sensitive",
            |e| e.with_var("OPENCODE_BRIDGE_MODE", "sensitive"),
            Some("blueprint"),
            Mode::Sensitive,
            env_source("OPENCODE_BRIDGE_MODE"),
        ),
        // without sensitive, the first source in order decides
        (
            "argument blueprint vs home insensitive",
            home_insensitive,
            Some("blueprint"),
            Mode::Blueprint,
            ModeSource::Argument,
        ),
        (
            "env blueprint vs project insensitive",
            |e| project_insensitive(e).with_var("OPENCODE_MODE", "blueprint"),
            None,
            Mode::Blueprint,
            env_source("OPENCODE_MODE"),
        ),
        (
            "bridge env before opencode env",
            |e| {
                e.with_var("OPENCODE_BRIDGE_MODE", "blueprint")
                    .with_var("OPENCODE_MODE", "insensitive")
            },
            None,
            Mode::Blueprint,
            env_source("OPENCODE_BRIDGE_MODE"),
        ),
        (
            "project insensitive before home",
            |e| home_insensitive(project_insensitive(e)),
            None,
            Mode::Insensitive,
            marker(MarkerKind::ProjectInsensitive, &pi),
        ),
        (
            "empty env counts as unset",
            |e| e.with_var("OPENCODE_MODE", "  "),
            None,
            Mode::Blueprint,
            ModeSource::Default,
        ),
        (
            "empty argument counts as unset",
            home_insensitive,
            Some(""),
            Mode::Insensitive,
            marker(MarkerKind::HomeInsensitive, &hi),
        ),
        (
            "values ignore case and blanks",
            |e| e.with_var("OPENCODE_MODE", " SENSITIVE\n"),
            None,
            Mode::Sensitive,
            env_source("OPENCODE_MODE"),
        ),
    ];
    for (name, build, arg, mode, source) in cases {
        let env = build(world());
        let d = detect_mode(&env, Path::new(CWD), arg).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(d.mode, mode, "{name}");
        assert_eq!(d.decided_by, source, "{name}");
        assert_eq!(d.consulted.len(), 7, "{name}: every source is consulted");
        assert_eq!(
            d.project_root.as_deref(),
            Some(Path::new(PROJECT)),
            "{name}"
        );
    }
}

#[test]
fn consulted_lists_every_source_with_its_reading() {
    let env = home_insensitive(world()).with_var("OPENCODE_MODE", "");
    let d = detect_mode(&env, Path::new(CWD), None).unwrap();
    let readings: Vec<(String, Reading)> = d
        .consulted
        .iter()
        .map(|c| (c.source.to_string(), c.reading.clone()))
        .collect();
    assert_eq!(
        readings,
        vec![
            ("the mode argument".to_owned(), Reading::NotSet),
            ("env OPENCODE_BRIDGE_MODE".to_owned(), Reading::NotSet),
            ("env OPENCODE_MODE".to_owned(), Reading::Empty),
            (
                format!("marker file {PROJECT}/.claude/sensitive"),
                Reading::Absent
            ),
            (
                format!("marker file {PROJECT}/.claude/insensitive"),
                Reading::Absent
            ),
            (
                format!("marker file {HOME}/.claude/insensitive"),
                Reading::Says(Mode::Insensitive)
            ),
            (
                "marker file $CLAUDE_CONFIG_DIR/insensitive".to_owned(),
                Reading::Skipped("CLAUDE_CONFIG_DIR not set".to_owned())
            ),
        ]
    );
    assert_eq!(
        d.reason(),
        format!("insensitive (from marker file {HOME}/.claude/insensitive)")
    );
}

#[test]
fn missing_home_skips_the_home_marker() {
    let env = FakeEnv::new()
        .with_dir(format!("{PROJECT}/.git"))
        .with_file(format!("{HOME}/.claude/insensitive"), "");
    let d = detect_mode(&env, Path::new(CWD), None).unwrap();
    assert_eq!(d.mode, Mode::Blueprint);
    let home = &d.consulted[5];
    assert_eq!(
        home.reading,
        Reading::Skipped("home directory unknown (HOME not set)".to_owned())
    );
    assert_eq!(home.source.to_string(), "marker file ~/.claude/insensitive");
}

#[test]
fn claude_config_dir_set_unset_and_with_tilde() {
    // unset: skipped
    let d = detect_mode(&world(), Path::new(CWD), None).unwrap();
    assert!(matches!(d.consulted[6].reading, Reading::Skipped(_)));
    // set, marker absent
    let env = world().with_var("CLAUDE_CONFIG_DIR", "/cfg/other");
    let d = detect_mode(&env, Path::new(CWD), None).unwrap();
    assert_eq!(d.consulted[6].reading, Reading::Absent);
    assert_eq!(d.mode, Mode::Blueprint);
    // set with ~/ and marker present
    let env = world()
        .with_var("CLAUDE_CONFIG_DIR", "~/.claude-work")
        .with_file(format!("{HOME}/.claude-work/insensitive"), "");
    let d = detect_mode(&env, Path::new(CWD), None).unwrap();
    assert_eq!(d.mode, Mode::Insensitive);
    assert_eq!(
        d.decided_by,
        marker(
            MarkerKind::ClaudeConfigInsensitive,
            &format!("{HOME}/.claude-work/insensitive")
        )
    );
}

#[test]
fn nested_projects_use_the_nearest_root_only() {
    // outer project is sensitive; inner project (its own .git) is insensitive
    let outer = "/w/outer";
    let inner = "/w/outer/vendor/inner";
    let env = FakeEnv::new()
        .with_dir(format!("{outer}/.git"))
        .with_file(format!("{outer}/.claude/sensitive"), "")
        .with_dir(format!("{inner}/.git"))
        .with_file(format!("{inner}/.claude/insensitive"), "")
        .with_dir(format!("{inner}/src"));
    let d = detect_mode(&env, Path::new(&format!("{inner}/src")), None).unwrap();
    assert_eq!(d.project_root.as_deref(), Some(Path::new(inner)));
    assert_eq!(d.mode, Mode::Insensitive);
    let d = detect_mode(&env, Path::new(&format!("{outer}/vendor")), None).unwrap();
    assert_eq!(d.project_root.as_deref(), Some(Path::new(outer)));
    assert_eq!(d.mode, Mode::Sensitive);
    // a .claude directory alone also marks a root
    let env = FakeEnv::new()
        .with_file("/a/b/.claude/sensitive", "")
        .with_dir("/a/b/c");
    assert_eq!(
        project_root(&env, Path::new("/a/b/c")).as_deref(),
        Some(Path::new("/a/b"))
    );
    assert_eq!(
        detect_mode(&env, Path::new("/a/b/c"), None).unwrap().mode,
        Mode::Sensitive
    );
}

#[test]
fn no_project_root_skips_project_markers() {
    let env = FakeEnv::new().with_home(HOME).with_dir("/tmp/scratch");
    let d = detect_mode(&env, Path::new("/tmp/scratch"), None).unwrap();
    assert_eq!(d.project_root, None);
    assert!(
        matches!(d.consulted[3].reading, Reading::Skipped(ref why) if why.contains("no project root"))
    );
    assert!(matches!(d.consulted[4].reading, Reading::Skipped(_)));
    assert_eq!(d.mode, Mode::Blueprint);
}

#[test]
fn unrecognised_values_are_refused_naming_the_setting() {
    let cases: Vec<(FakeEnv, Option<&str>, &str)> = vec![
        (
            world().with_var("OPENCODE_MODE", "sensitve"),
            None,
            "env OPENCODE_MODE is \"sensitve\"",
        ),
        (
            world().with_var("OPENCODE_BRIDGE_MODE", "strict"),
            None,
            "env OPENCODE_BRIDGE_MODE is \"strict\"",
        ),
        (world(), Some("careful"), "the mode argument is \"careful\""),
        // an invalid value is refused even when another source says sensitive
        (
            project_sensitive(world()).with_var("OPENCODE_MODE", "on"),
            None,
            "env OPENCODE_MODE is \"on\"",
        ),
    ];
    for (env, arg, expected) in cases {
        let err = detect_mode(&env, Path::new(CWD), arg).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with(expected), "{text}");
        assert!(
            text.contains("blueprint, sensitive or insensitive"),
            "{text}"
        );
        assert!(matches!(err, PolicyError::InvalidMode { .. }));
    }
    let long = "x".repeat(500);
    let err = detect_mode(
        &world().with_var("OPENCODE_MODE", &long),
        Path::new(CWD),
        None,
    )
    .unwrap_err();
    assert!(err.to_string().len() < 200, "long values are clipped");
}

#[test]
fn mode_names_round_trip() {
    for mode in Mode::ALL {
        assert_eq!(Mode::parse(mode.as_str()), Some(mode));
        assert!(!mode.summary().is_empty());
    }
}

#[test]
fn one_file_is_consulted_once_when_the_project_is_the_home_directory() {
    // Issue 16 item 10: in the home directory (and with CLAUDE_CONFIG_DIR=~/.claude) the
    // project's insensitive marker is the home one; `policy` listed it two or three times.
    let env = FakeEnv::new()
        .with_home(HOME)
        .with_file(format!("{HOME}/.claude/sensitive"), "")
        .with_var("CLAUDE_CONFIG_DIR", "~/.claude");
    let d = detect_mode(&env, Path::new(HOME), None).unwrap();
    assert_eq!(d.mode, Mode::Sensitive);
    let lines: Vec<String> = d
        .consulted
        .iter()
        .map(|c| format!("{}: {}", c.source, c.reading))
        .collect();
    let insensitive = format!("marker file {HOME}/.claude/insensitive: absent");
    assert_eq!(
        lines.iter().filter(|l| **l == insensitive).count(),
        1,
        "{lines:#?}"
    );
    assert_eq!(
        lines[3..],
        [
            format!("marker file {HOME}/.claude/sensitive: sensitive"),
            insensitive.clone(),
        ],
        "{lines:#?}"
    );
}
