//! Every git command the bridge runs is built here ([`command`]), so that nothing of a
//! repository runs in the bridge.
//!
//! A repository can make git run its own code: `core.fsmonitor` (run by `status`, `diff`, `add`
//! on every call), hooks (`post-checkout` on `worktree add`), filter drivers named in
//! `.gitattributes` or `.git/info/attributes` and defined as `filter.<driver>.clean`, `smudge` or
//! `process` (run by `status`, `diff`, `add`, `apply` and every checkout), `diff.external` and
//! `diff.<driver>.command`/`textconv`, `core.pager`, `core.sshCommand`. A read-only agent that
//! can write `.git/config` would then run code in the bridge's next git call. So every git gets:
//!
//! - on its command line (which wins over every config file, the repository's included):
//!   `core.fsmonitor=false`, `core.hooksPath=/dev/null` (git looks for `/dev/null/<hook>`,
//!   which cannot exist), `diff.external=` (empty: if anything ever asked for it, git fails to
//!   run it instead of running the repository's), `core.pager=cat` and `--no-pager`,
//!   `core.sshCommand=false`, `core.askPass=`, `credential.helper=` and `protocol.allow=never`
//!   (no transport at all: nothing here fetches), `submodule.recurse=false`, `gc.auto=0`,
//!   `maintenance.auto=false`;
//! - for every filter driver any config file defines (read just before, with `git config
//!   --list` under this same fence, includes followed), `filter.<driver>.clean`, `smudge` and
//!   `process` set empty and `required=false`, through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`
//!   (no quoting: a driver's name may hold `=` or `.`). git runs a driver only when the config
//!   names a command for it, so whatever the attributes say, no filter runs: files are read and
//!   written as they are (a Git LFS checkout shows its pointer files);
//! - for every hook any config file configures (git 2.54+: `hook.<name>.command` and
//!   `.event`, which `core.hooksPath` does not cover), `hook.<name>.enabled=false` and
//!   `hook.<name>.command=true` (on older git these keys mean nothing);
//! - `diff`, `show` and `log` get `--no-ext-diff --no-textconv --no-color` right after the
//!   subcommand, `status` gets `--ignore-submodules=all` (a submodule would be looked into by a
//!   `git status` of its own, under the submodule's config), and `status.submoduleSummary=false`,
//!   `diff.submodule=short` are set; a `diff` against the working tree passes
//!   `--ignore-submodules` itself (`changes.rs`, `worktree.rs`);
//! - an environment of its own: every `GIT_*` variable of the bridge's environment is dropped
//!   (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`, `GIT_EXEC_PATH`, `GIT_SSH_COMMAND`,
//!   `GIT_EXTERNAL_DIFF`, `GIT_CONFIG_PARAMETERS`, ...), then `GIT_CONFIG_NOSYSTEM=1`,
//!   `GIT_ATTR_NOSYSTEM=1`, `GIT_TERMINAL_PROMPT=0`, `GIT_OPTIONAL_LOCKS=0` (not even the index
//!   is refreshed), `GIT_PAGER=cat`, `GIT_NO_REPLACE_OBJECTS=1` (a `refs/replace` ref cannot
//!   change what a diff reads), `GIT_NO_LAZY_FETCH=1`; a caller sets `GIT_INDEX_FILE` on the
//!   returned command only on purpose (the isolated worktree's private index); stdin is null.
//!
//! `safe.directory` is left as git has it: a repository owned by another user is refused, as
//! git refuses it for the user (the repository's own config cannot widen it).

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

/// Config set on every git's command line (`-c`), in this order.
pub const FENCE: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("status.submoduleSummary", "false"),
    ("diff.submodule", "short"),
];

/// The environment every git gets (after every inherited `GIT_*` is dropped).
pub const ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_ATTR_NOSYSTEM", "1"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_OPTIONAL_LOCKS", "0"),
    ("GIT_PAGER", "cat"),
    ("GIT_NO_REPLACE_OBJECTS", "1"),
    ("GIT_NO_LAZY_FETCH", "1"),
];

/// Subcommands that could run a diff driver, and what they get right after the subcommand.
const DIFF_LIKE: &[&str] = &["diff", "show", "log"];
const NO_DRIVERS: &[&str] = &["--no-ext-diff", "--no-textconv", "--no-color"];
/// `status` would run a `git status` inside each submodule, under the submodule's own config
/// (its filters are not the ones read here): submodules are not looked into.
const STATUS: &[&str] = &["--ignore-submodules=all"];

/// The keys set for each filter driver a config defines: no command, not required.
const FILTER_KEYS: &[(&str, &str)] = &[
    ("clean", ""),
    ("smudge", ""),
    ("process", ""),
    ("required", "false"),
];

/// The keys set for each configured hook (git 2.54+: `hook.<name>.command` with
/// `hook.<name>.event`, which `core.hooksPath` does not cover): disabled, and its command
/// `true` should a git not know `enabled`.
const HOOK_KEYS: &[(&str, &str)] = &[("enabled", "false"), ("command", "true")];

/// git with the fence's options and environment, run in `dir` (`-C`), with no extra config.
fn base(dir: &Path) -> Command {
    let mut c = Command::new("git");
    for (k, _) in std::env::vars_os() {
        if k.as_encoded_bytes().starts_with(b"GIT_") {
            c.env_remove(k);
        }
    }
    c.envs(ENV.iter().copied());
    c.arg("--no-pager").arg("-C").arg(dir);
    for (k, v) in FENCE {
        c.arg("-c").arg(format!("{k}={v}"));
    }
    c.stdin(Stdio::null());
    c
}

/// The filter drivers and configured hooks (section, name) that any config file visible from
/// `dir` defines a key for.
fn planted(dir: &Path) -> Result<Vec<(&'static str, OsString)>, String> {
    let out = base(dir)
        .args(["config", "--list", "-z"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!(
            "git cannot read the repository's config: {}",
            line.trim()
        ));
    }
    Ok(subsections_in(&out.stdout))
}

/// `filter.<name>.*` and `hook.<name>.*` subsections in `git config --list -z` output
/// (`key\nvalue\0` records; section and key are lower-cased by git, the subsection is as
/// written).
fn subsections_in(list: &[u8]) -> Vec<(&'static str, OsString)> {
    use std::os::unix::ffi::OsStrExt;
    let mut found: Vec<(&'static str, OsString)> = Vec::new();
    for rec in list.split(|&b| b == 0) {
        let key = rec.split(|&b| b == b'\n').next().unwrap_or_default();
        for section in ["filter", "hook"] {
            let Some(rest) = key
                .strip_prefix(section.as_bytes())
                .and_then(|r| r.strip_prefix(b"."))
            else {
                continue;
            };
            // <section>.<name>.<var>: the name is everything up to the last dot.
            let Some(dot) = rest.iter().rposition(|&b| b == b'.') else {
                continue;
            };
            let name = std::ffi::OsStr::from_bytes(&rest[..dot]).to_os_string();
            if !found.iter().any(|(s, n)| *s == section && *n == name) {
                found.push((section, name));
            }
        }
    }
    found
}

/// A git command run in `dir` under the fence (see the module docs), `args` appended (with
/// `--no-ext-diff --no-textconv --no-color` after a `diff`, `show` or `log`). Fails only when
/// the config cannot be read (git would then fail too).
pub fn command(dir: &Path, args: &[&str]) -> Result<Command, String> {
    let planted = planted(dir)?;
    let mut c = base(dir);
    let mut n = 0usize;
    for (section, d) in &planted {
        let keys = if *section == "filter" {
            FILTER_KEYS
        } else {
            HOOK_KEYS
        };
        for (var, value) in keys {
            let mut key = OsString::from(section);
            key.push(".");
            key.push(d);
            key.push(".");
            key.push(var);
            c.env(format!("GIT_CONFIG_KEY_{n}"), key);
            c.env(format!("GIT_CONFIG_VALUE_{n}"), value);
            n += 1;
        }
    }
    if n > 0 {
        c.env("GIT_CONFIG_COUNT", n.to_string());
    }
    if let Some((sub, rest)) = args.split_first() {
        c.arg(sub);
        if DIFF_LIKE.contains(sub) {
            c.args(NO_DRIVERS);
        }
        if *sub == "status" {
            c.args(STATUS);
        }
        c.args(rest);
    }
    Ok(c)
}

/// Runs [`command`] and returns stdout when git succeeded (stderr is dropped).
pub fn output(dir: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let out = command(dir, args)
        .ok()?
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_and_hook_names_come_from_every_key() {
        let list = b"core.bare\nfalse\0filter.lfs.clean\ngit-lfs clean -- %f\0filter.lfs.process\nx\0filter.a=b.c.smudge\ny\0diff.evil.textconv\nz\0filter.noval\0hook.lint.command\nx\0hook.lint.event\npre-commit\0hooks.x\ny\0";
        let names: Vec<String> = subsections_in(list)
            .into_iter()
            .map(|(s, n)| format!("{s} {}", n.to_string_lossy()))
            .collect();
        assert_eq!(names, ["filter lfs", "filter a=b.c", "hook lint"]);
    }

    #[test]
    fn every_git_gets_the_fence_and_no_inherited_git_variable() {
        let d = tempfile::tempdir().unwrap();
        bridge_testkit::git(d.path(), &["init", "-q"]);
        bridge_testkit::git(d.path(), &["config", "filter.x.clean", "cat"]);
        let c = command(d.path(), &["diff", "--stat"]).unwrap();
        let args: Vec<String> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for (k, v) in FENCE {
            assert!(args.contains(&format!("{k}={v}")), "{k}: {args:?}");
        }
        let at = args.iter().position(|a| a == "diff").unwrap();
        assert_eq!(
            args[at..],
            [
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--stat"
            ]
        );
        let envs: Vec<(String, Option<String>)> = c
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        for (k, v) in ENV {
            assert!(
                envs.contains(&(k.to_string(), Some(v.to_string()))),
                "{k}: {envs:?}"
            );
        }
        for (k, v) in [
            ("GIT_CONFIG_COUNT", "4"),
            ("GIT_CONFIG_KEY_0", "filter.x.clean"),
            ("GIT_CONFIG_VALUE_0", ""),
            ("GIT_CONFIG_KEY_3", "filter.x.required"),
            ("GIT_CONFIG_VALUE_3", "false"),
        ] {
            assert!(
                envs.contains(&(k.to_string(), Some(v.to_string()))),
                "{k}: {envs:?}"
            );
        }
        // Every GIT_* of the bridge's own environment (if any) is removed.
        for (k, _) in std::env::vars() {
            if k.starts_with("GIT_") && !ENV.iter().any(|(e, _)| *e == k) {
                assert!(envs.contains(&(k.clone(), None)), "{k} inherited");
            }
        }
    }
}
