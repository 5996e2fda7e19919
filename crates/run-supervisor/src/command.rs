//! How an `opencode run` is invoked: binary lookup, capability detection, arguments,
//! environment and the prompt's way in.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bridge_policy::roster::config_content;

use crate::argv::Argv;
use crate::spec::TaskSpec;

/// opencode's inline config, which every run gets with the bridge's overlay merged in.
const CONFIG_CONTENT: &str = bridge_env::OPENCODE_CONFIG_CONTENT.name;

/// What the installed opencode binary supports, learnt once from `--version` and
/// `run --help` (never guessed).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// First line of `opencode --version`.
    pub version: String,
    /// `run --standalone` exists (opencode v2).
    pub standalone: bool,
    /// `run --auto` exists.
    pub auto: bool,
    /// `run --variant` exists.
    pub variant: bool,
    /// `run --title` exists.
    pub title: bool,
    /// The contract the binary speaks (`--help` lists an `api` command: opencode 2).
    pub contract: opencode_client::Contract,
}

impl Capabilities {
    /// Reads capabilities from the text of `--version` and `run --help`.
    pub fn from_outputs(version: &str, run_help: &str) -> Capabilities {
        let has = |flag: &str| {
            run_help
                .split(|c: char| c.is_whitespace() || c == ',')
                .any(|w| w == flag)
        };
        Capabilities {
            version: version.lines().next().unwrap_or("").trim().to_owned(),
            standalone: has("--standalone"),
            auto: has("--auto"),
            variant: has("--variant"),
            title: has("--title"),
            contract: opencode_client::Contract::V1,
        }
    }
}

/// Finds the opencode binary from `explicit` (`OPENCODE_BIN`): a path, a bare name looked up
/// on `PATH`, or unset for `opencode` on `PATH` (see [`bridge_env::Program::find`]).
pub fn resolve_binary(explicit: Option<&Path>) -> Result<PathBuf, String> {
    bridge_env::OPENCODE.find(explicit)
}

/// Variables that tie a process to another opencode instance; a child run must not inherit
/// them. The one list lives in `bridge-proc` (each entry explained there).
pub use bridge_proc::DROPPED_ENV;

/// The variables that name a run's temporary directory.
pub(crate) const TMP_VARS: [&str; 3] = ["TMPDIR", "TMP", "TEMP"];

/// A private temporary directory (mode 0700, made anew, never reused), removed with everything
/// in it when dropped: a run's `TMPDIR`, the only temp space the fence lets it write.
#[derive(Debug)]
pub(crate) struct PrivateTmp(pub(crate) PathBuf);

impl PrivateTmp {
    /// Makes `<base>/opencode-bridge-run-<pid>-<n>-<what>` (`base`: the system's temp dir when
    /// `None`).
    pub(crate) fn create(base: Option<PathBuf>, what: &str) -> Result<PrivateTmp, String> {
        use std::os::unix::fs::DirBuilderExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        // Unique in this process (several supervisors may share it, each with a task 1) and,
        // with the pid, on the machine; `create` never reuses what is already there.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = base.unwrap_or_else(std::env::temp_dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&base)
            .map_err(|e| format!("cannot create {}: {e}", base.display()))?;
        let mut last = None;
        for _ in 0..16 {
            let dir = base.join(format!(
                "opencode-bridge-run-{}-{}-{what}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(PrivateTmp(dir)),
                Err(e) => last = Some((dir, e)),
            }
        }
        let (dir, e) = last.expect("tried at least once");
        Err(format!(
            "cannot create a private temporary directory {}: {e}",
            dir.display()
        ))
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `bin args…` (stdin closed, at most 30 s) and returns its stdout then its stderr. The
/// probe runs in an empty private directory (its cwd, `PWD` and `TMPDIR`), fenced like a
/// read-only run there under `sandbox` (`kind` says which runner's own directories it may
/// write), so no project's plugins load in it and it writes nothing of anyone's.
pub async fn output_text(
    bin: &Path,
    args: &[&str],
    env: &[(String, String)],
    kind: bridge_fence::RunKind,
    sandbox: bridge_fence::Sandbox,
) -> Result<String, String> {
    let tmp = PrivateTmp::create(None, "probe")?;
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(args)
        .current_dir(&tmp.0)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for k in DROPPED_ENV {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env("PWD", &tmp.0);
    for k in TMP_VARS {
        cmd.env(k, &tmp.0);
    }
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !DROPPED_ENV.contains(&k.as_str()))
        .collect();
    vars.extend(env.iter().cloned());
    let world = bridge_fence::RunWorld {
        kind,
        program: bin.to_path_buf(),
        project: tmp.0.clone(),
        editing: false,
        tmp: tmp.0.clone(),
        extra_read: vec![],
        extra_write: vec![],
        env: vars,
        credentials: vec![],
    };
    bridge_fence::Fence::prepare(&bridge_fence::for_run(&world), sandbox)?
        .apply_to(cmd.as_std_mut());
    let fut = cmd.output();
    let o = tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .map_err(|_| {
            format!(
                "`{} {}` did not answer within 30 s",
                bin.display(),
                args.join(" ")
            )
        })?
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
    s.push('\n');
    s.push_str(&String::from_utf8_lossy(&o.stderr));
    Ok(s)
}

/// Runs `bin --version` and `bin run --help` and reads the capabilities.
pub async fn detect(
    bin: &Path,
    env: &[(String, String)],
    sandbox: bridge_fence::Sandbox,
) -> Result<Capabilities, String> {
    let out = |args| output_text(bin, args, env, bridge_fence::RunKind::Opencode, sandbox);
    let version = out(&["--version"]).await?;
    let help = out(&["run", "--help"]).await?;
    if !help.contains("--format") {
        // opencode 2 has no `run` (its `run --help` is the top-level help): its tasks go to a
        // server of it (the serve engine). The preview's `--version` says `vlocal`; its help
        // names the line.
        let top = out(&["--help"]).await.unwrap_or_default();
        if opencode_client::Contract::from_help(&top) == opencode_client::Contract::V2 {
            let named = top
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with("OpenCode 2") || l.starts_with("opencode 2"))
                .map(|l| l.trim_end_matches(" command line interface").to_owned());
            let version = version.lines().next().unwrap_or("").trim().to_owned();
            return Ok(Capabilities {
                // Every status and result that names the version says the contract too.
                version: match named {
                    Some(n) if !version.is_empty() => format!("{n} ({version}), v2 contract"),
                    Some(n) => format!("{n}, v2 contract"),
                    None => format!("{version}, v2 contract"),
                },
                contract: opencode_client::Contract::V2,
                ..Capabilities::default()
            });
        }
        return Err(format!(
            "{} does not look like opencode: `run --help` lists no --format option",
            bin.display()
        ));
    }
    Ok(Capabilities::from_outputs(&version, &help))
}

/// Splits `provider/model#variant`.
pub fn split_model(spec: &str) -> (String, Option<String>) {
    match spec.split_once('#') {
        Some((m, v)) if !v.trim().is_empty() => (m.trim().to_owned(), Some(v.trim().to_owned())),
        Some((m, _)) => (m.trim().to_owned(), None),
        None => (spec.trim().to_owned(), None),
    }
}

/// Everything needed to spawn one attempt.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The binary.
    pub program: PathBuf,
    /// Arguments after the program.
    pub args: Vec<OsString>,
    /// Variables to remove from the inherited environment.
    pub env_remove: Vec<String>,
    /// Variables to set (after removal).
    pub env_set: Vec<(String, String)>,
    /// Bytes written to stdin, then stdin is closed.
    pub stdin: Vec<u8>,
    /// The prompt file written for an oversized prompt (deleted after the task).
    pub prompt_file: Option<(PathBuf, String)>,
}

/// Inputs besides the spec that shape a launch.
#[derive(Debug, Clone)]
pub struct LaunchContext<'a> {
    /// The binary.
    pub program: &'a Path,
    /// Its capabilities.
    /// The run's working directory (canonical; also its `PWD`).
    pub cwd: &'a Path,
    pub caps: &'a Capabilities,
    /// The default model (`OPENCODE_BRIDGE_MODEL`).
    pub default_model: Option<&'a str>,
    /// Environment every child gets (config-level), applied before the task's own.
    pub base_env: &'a [(String, String)],
    /// Prompts longer than this many bytes go in an attached file.
    pub prompt_file_threshold: usize,
    /// Where an oversized prompt's file is written.
    pub prompt_file_path: PathBuf,
}

/// Prepares the command line, environment and stdin of a run in `cwd` (already canonical).
pub fn build_launch(
    spec: &TaskSpec,
    cwd: &Path,
    ctx: &LaunchContext<'_>,
) -> Result<Launch, String> {
    // Every value goes as one `--name=value` element (crate::argv): none can be an option.
    let mut args = Argv::new(&["run"]);
    args.value("--format", "json").value("--agent", &spec.agent);
    if let Some(session) = spec.session.as_deref().filter(|s| !s.trim().is_empty()) {
        // A follow-up in an existing session keeps that session's title.
        args.value("--session", session.trim());
    } else if !spec.title.is_empty() {
        args.value("--title", &spec.title);
    }
    if spec.auto_approve && ctx.caps.auto {
        args.word("--auto");
    }
    let model = spec
        .model
        .as_deref()
        .or(ctx.default_model)
        .filter(|m| !m.trim().is_empty());
    if let Some(m) = model {
        let (model, variant) = split_model(m);
        args.value("--model", model);
        if let Some(v) = variant {
            if ctx.caps.variant {
                args.value("--variant", v);
            } else {
                return Err(format!(
                    "model variant `{v}` was asked for but opencode {} has no --variant option: drop `#{v}` from the model",
                    ctx.caps.version
                ));
            }
        }
    }
    if ctx.caps.standalone {
        args.word("--standalone");
    }

    let mut env_set: Vec<(String, String)> = ctx.base_env.to_vec();
    env_set.extend(spec.env.iter().cloned());
    // opencode 1.18.33 works in $PWD, not in the process's cwd.
    env_set.push(("PWD".into(), cwd.to_string_lossy().into_owned()));
    let existing = spec
        .env
        .iter()
        .rev()
        .chain(ctx.base_env.iter().rev())
        .find(|(k, _)| k == CONFIG_CONTENT)
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var(CONFIG_CONTENT).ok());
    // What the policy decided for the run (its overlay) is applied as it is.
    let content = config_content(existing.as_deref(), spec.config_overlay.as_ref())?;
    env_set.retain(|(k, _)| k != CONFIG_CONTENT && !DROPPED_ENV.contains(&k.as_str()));
    env_set.push((CONFIG_CONTENT.into(), content));

    let (stdin, prompt_file) = if spec.prompt.len() > ctx.prompt_file_threshold {
        let path = ctx.prompt_file_path.clone();
        let pointer = format!(
            "The complete task is in the attached file {} ({} characters). Read all of it (in parts if one read is cut short), then do exactly what it says.",
            path.display(),
            spec.prompt.chars().count()
        );
        // Last, and joined to its value: `-f` is an array option that swallows the words after it.
        args.value("--file", &path);
        (
            pointer.clone().into_bytes(),
            Some((path, spec.prompt.clone())),
        )
    } else {
        (spec.prompt.clone().into_bytes(), None)
    };

    Ok(Launch {
        program: ctx.program.to_path_buf(),
        args: args.into_args(),
        env_remove: DROPPED_ENV.iter().map(|s| s.to_string()).collect(),
        env_set,
        stdin,
        prompt_file,
    })
}

/// Gives a run's launch exactly the environment it needs (the one place for both runners,
/// every run and every warm server): of the bridge's own environment only what
/// [`bridge_proc::env::kept`] keeps (the system's basics, proxies and CA bundles, the
/// runner's own settings; `claude` also its `ANTHROPIC_*`/`CLAUDE_CODE_*`), the provider keys
/// of the run's model (`provider/model` → [`bridge_proc::provider_key_names`]; with no model
/// named, the variables named `*_API_KEY`), the variables its opencode configuration names as
/// `{env:NAME}`, and what the user named in `OPENCODE_BRIDGE_PASS_ENV`; then its world's
/// directories (`world`) over everything. Every other inherited variable is removed.
pub fn confine_env(
    launch: &mut Launch,
    kind: bridge_fence::RunKind,
    model: Option<&str>,
    pass_env: &[String],
    world: &[(String, String)],
) {
    let mut pass: Vec<String> = pass_env.to_vec();
    match model.map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => {
            if let Some((provider, _)) = m.split_once('/') {
                pass.extend(bridge_proc::provider_key_names(provider));
            }
        }
        None => pass.extend(
            std::env::vars()
                .map(|(k, _)| k)
                .filter(|k| k.ends_with("_API_KEY")),
        ),
    }
    if let Some((_, content)) = launch.env_set.iter().find(|(k, _)| k == CONFIG_CONTENT) {
        pass.extend(env_references(content));
    }
    let prefixes: &[&str] = match kind {
        bridge_fence::RunKind::Claude => bridge_proc::env::CLAUDE_KEPT_PREFIXES,
        bridge_fence::RunKind::Opencode => &[],
    };
    let mut remove = bridge_proc::dropped_names(std::env::vars(), prefixes, &pass);
    for k in std::mem::take(&mut launch.env_remove) {
        if !remove.contains(&k) {
            remove.push(k);
        }
    }
    remove.sort();
    launch.env_remove = remove;
    launch
        .env_set
        .retain(|(k, _)| !world.iter().any(|(w, _)| w == k));
    launch.env_set.extend(world.iter().cloned());
}

/// The variable names an opencode configuration reads as `{env:NAME}`.
fn env_references(content: &str) -> Vec<String> {
    content
        .match_indices("{env:")
        .filter_map(|(i, m)| {
            let rest = &content[i + m.len()..];
            let end = rest.find('}')?;
            let name = &rest[..end];
            (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
                .then(|| name.to_owned())
        })
        .collect()
}

/// Canonicalises `cwd` and checks that it lies inside `root` (also canonicalised), so `..`
/// and symlinks cannot lead a task out of the allowed tree.
pub fn check_cwd(cwd: &Path, root: &Path) -> Result<PathBuf, crate::error::StartError> {
    let canon = cwd
        .canonicalize()
        .map_err(|e| crate::error::StartError::CwdMissing {
            cwd: cwd.to_path_buf(),
            reason: e.to_string(),
        })?;
    if !canon.is_dir() {
        return Err(crate::error::StartError::CwdMissing {
            cwd: cwd.to_path_buf(),
            reason: "not a directory".into(),
        });
    }
    let root_c = root
        .canonicalize()
        .map_err(|e| crate::error::StartError::CwdMissing {
            cwd: root.to_path_buf(),
            reason: format!("OPENCODE_BRIDGE_ROOT cannot be resolved: {e}"),
        })?;
    if canon.starts_with(&root_c) {
        Ok(canon)
    } else {
        Err(crate::error::StartError::CwdOutsideRoot {
            cwd: canon,
            root: root_c,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP_1_18: &str = "opencode run [message..]\n  -m, --model   model\n      --agent  agent\n      --format\n      --title  title\n      --variant   model variant\n      --auto   auto-approve\n";

    fn ctx(caps: &Capabilities) -> LaunchContext<'_> {
        LaunchContext {
            cwd: Path::new("/p"),
            program: Path::new("/bin/opencode"),
            caps,
            default_model: Some("fk/default"),
            base_env: &[],
            prompt_file_threshold: 100,
            prompt_file_path: PathBuf::from("/tmp/opencode/p.md"),
        }
    }

    fn strs(a: &[OsString]) -> Vec<String> {
        a.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn capabilities_come_from_the_help_text() {
        let c = Capabilities::from_outputs("1.18.33\n", HELP_1_18);
        assert_eq!(c.version, "1.18.33");
        assert!(c.auto && c.variant && c.title);
        assert!(!c.standalone);
        let c2 = Capabilities::from_outputs(
            "2.2.7",
            &format!("{HELP_1_18}      --standalone  run without the service\n"),
        );
        assert!(c2.standalone);
    }

    #[test]
    fn args_carry_agent_title_model_variant_and_auto() {
        let caps = Capabilities::from_outputs("1.18.33", HELP_1_18);
        let mut spec = TaskSpec::new("do it", "/p", "worker", "P/worker: do it");
        spec.model = Some("prov/m#high".into());
        let l = build_launch(&spec, Path::new("/p"), &ctx(&caps)).unwrap();
        assert_eq!(
            strs(&l.args),
            [
                "run",
                "--format=json",
                "--agent=worker",
                "--title=P/worker: do it",
                "--auto",
                "--model=prov/m",
                "--variant=high"
            ]
        );
        assert_eq!(l.stdin, b"do it");
        assert!(l.env_set.contains(&("PWD".into(), "/p".into())));
        assert!(
            l.env_remove
                .contains(&"OPENCODE_SERVER_PASSWORD".to_owned())
        );
        assert!(l.env_remove.contains(&"OPENCODE_RUN_ID".to_owned()));
        spec.model = None;
        let l = build_launch(&spec, Path::new("/p"), &ctx(&caps)).unwrap();
        assert!(strs(&l.args).contains(&"--model=fk/default".to_owned()));
    }

    #[test]
    fn a_follow_up_names_the_session_and_keeps_its_title() {
        let caps = Capabilities::from_outputs("1.18.33", HELP_1_18);
        let mut spec = TaskSpec::new("and now the tests", "/p", "worker", "P/worker: x");
        spec.session = Some("ses_abc".into());
        let a = strs(
            &build_launch(&spec, Path::new("/p"), &ctx(&caps))
                .unwrap()
                .args,
        );
        assert!(a.contains(&"--session=ses_abc".to_owned()), "{a:?}");
        assert!(!a.iter().any(|x| x.starts_with("--title")), "{a:?}");
    }

    #[test]
    fn caller_strings_are_never_options() {
        let caps = Capabilities::from_outputs("1.18.33", HELP_1_18);
        for v in crate::argv::INJECTION_SAMPLES {
            let mut spec = TaskSpec::new("p", "/p", v, v);
            spec.model = Some(format!("{v}#{v}"));
            spec.auto_approve = false;
            let a = strs(
                &build_launch(&spec, Path::new("/p"), &ctx(&caps))
                    .unwrap()
                    .args,
            );
            assert_eq!(
                a,
                [
                    "run".to_owned(),
                    "--format=json".into(),
                    format!("--agent={v}"),
                    format!("--title={v}"),
                    format!("--model={v}"),
                    format!("--variant={v}"),
                ],
                "{v}"
            );
            spec.session = Some(v.into());
            let a = strs(
                &build_launch(&spec, Path::new("/p"), &ctx(&caps))
                    .unwrap()
                    .args,
            );
            assert!(a.contains(&format!("--session={v}")), "{a:?}");
            assert!(!a.contains(&v.to_owned()), "{v} stands alone: {a:?}");
        }
    }

    #[test]
    fn standalone_only_when_advertised() {
        let spec = TaskSpec::new("x", "/p", "worker", "t");
        let c1 = Capabilities::from_outputs("1.18.33", HELP_1_18);
        assert!(
            !strs(
                &build_launch(&spec, Path::new("/p"), &ctx(&c1))
                    .unwrap()
                    .args
            )
            .contains(&"--standalone".to_owned())
        );
        let mut c2 = c1.clone();
        c2.standalone = true;
        assert!(
            strs(
                &build_launch(&spec, Path::new("/p"), &ctx(&c2))
                    .unwrap()
                    .args
            )
            .contains(&"--standalone".to_owned())
        );
    }

    #[test]
    fn oversized_prompts_go_in_a_file() {
        let caps = Capabilities::from_outputs("1.18.33", HELP_1_18);
        let spec = TaskSpec::new("y".repeat(101), "/p", "worker", "t");
        let l = build_launch(&spec, Path::new("/p"), &ctx(&caps)).unwrap();
        let a = strs(&l.args);
        assert_eq!(a.last().unwrap(), "--file=/tmp/opencode/p.md");
        assert!(
            String::from_utf8(l.stdin)
                .unwrap()
                .contains("/tmp/opencode/p.md")
        );
        assert_eq!(l.prompt_file.unwrap().1.len(), 101);
    }

    #[test]
    fn model_variants_split() {
        assert_eq!(split_model("a/b#high"), ("a/b".into(), Some("high".into())));
        assert_eq!(split_model("a/b"), ("a/b".into(), None));
        assert_eq!(split_model("a/b#"), ("a/b".into(), None));
    }

    #[test]
    fn cwd_must_stay_inside_root() {
        let root = tempfile::tempdir().unwrap();
        let inside = root.path().join("proj");
        std::fs::create_dir(&inside).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        assert!(check_cwd(&inside, root.path()).is_ok());
        assert!(matches!(
            check_cwd(&inside.join("../.."), root.path()),
            Err(crate::error::StartError::CwdOutsideRoot { .. })
        ));
        assert!(matches!(
            check_cwd(&root.path().join("link"), root.path()),
            Err(crate::error::StartError::CwdOutsideRoot { .. })
        ));
        assert!(matches!(
            check_cwd(&root.path().join("nope"), root.path()),
            Err(crate::error::StartError::CwdMissing { .. })
        ));
    }
}
