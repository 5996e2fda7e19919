//! The kernel fence around every delegated run, in one place.
//!
//! **Invariant: every process the bridge starts for an agent (a run, the roster's temporary
//! `opencode serve`) is confined before exec, or not started unless the caller allowed that.**
//! A [`Plan`] lists what a run's process tree may touch: paths it may read (and execute), paths
//! it may write, the few devices it may open. [`Fence::prepare`] turns a plan into a Linux
//! Landlock ruleset in the bridge (opening the paths, negotiating the kernel's ABI with the
//! `landlock` crate), and [`Fence::apply_to`] makes the child restrict itself with it between
//! fork and exec: everything the run starts (plugins, MCP servers, custom tools, shells,
//! subagents) inherits the restriction, which cannot be lifted, and the bridge itself stays
//! unconfined. Signals to processes outside the run's domain are denied too (ABI 6 and later).
//!
//! What a run needs is decided by [`plan::for_run`] from the run's world ([`RunWorld`]): the
//! system directories, the runner's binary, the runner's own data, state, cache and temp
//! directories, the project (read-only agents: read; editing agents: read and write), and
//! nothing else of the home directory.
//!
//! [`Sandbox`] is the user's choice (`OPENCODE_BRIDGE_SANDBOX`): `auto` confines where the
//! kernel can and says why not elsewhere, `required` refuses to start a run it cannot confine,
//! `off` starts runs unconfined. [`Confinement`] is what a run got, shown in every status.
//!
//! Every path a plan names is resolved by the fence itself (`resolve`): a symlink where any run
//! may write, or one of another user, refuses the run, and so does any reason the ruleset
//! cannot be built other than a kernel without Landlock, even under `auto`.
//!
//! The one module of this crate with `unsafe` code is [`apply`]: two system calls in the forked
//! child.

#![deny(missing_docs)]

mod apply;
pub mod plan;
pub mod protected;
mod resolve;
pub mod world;

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

pub use plan::{OwnWorktree, Plan, Project, Rights, RunKind, RunWorld, for_run, project_of};
pub use world::{UserDirs, World};

/// What the user asked for (`OPENCODE_BRIDGE_SANDBOX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sandbox {
    /// Confine where the kernel can; elsewhere run unconfined and say why.
    #[default]
    Auto,
    /// Refuse to start a run that cannot be confined.
    Required,
    /// Start runs unconfined.
    Off,
}

impl Sandbox {
    /// Parses `auto`, `required` or `off` (any case, surrounding blanks ignored).
    ///
    /// ```
    /// assert_eq!(bridge_fence::Sandbox::parse(" Required"), Ok(bridge_fence::Sandbox::Required));
    /// assert!(bridge_fence::Sandbox::parse("on").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Sandbox, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(Sandbox::Auto),
            "required" => Ok(Sandbox::Required),
            "off" => Ok(Sandbox::Off),
            other => Err(format!(
                "OPENCODE_BRIDGE_SANDBOX={other:?} is not auto, required or off"
            )),
        }
    }

    /// The word the variable takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Sandbox::Auto => "auto",
            Sandbox::Required => "required",
            Sandbox::Off => "off",
        }
    }
}

/// What a run got: confined by the kernel, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// Landlock confines the run's process tree; `abi` is the kernel's Landlock ABI version.
    Confined {
        /// The kernel's Landlock ABI version.
        abi: u8,
    },
    /// The run is not confined, and why.
    Unconfined(String),
}

impl Confinement {
    /// Whether the run is confined.
    pub fn is_confined(&self) -> bool {
        matches!(self, Confinement::Confined { .. })
    }
}

impl fmt::Display for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Confinement::Confined { abi } => write!(f, "confined (Landlock ABI {abi})"),
            Confinement::Unconfined(why) => write!(f, "not confined: {why}"),
        }
    }
}

/// The Landlock ABI version the running kernel offers, or why it offers none.
pub fn kernel_abi() -> Result<u8, String> {
    apply::kernel_abi()
}

/// The newest ABI whose rights this crate asks for; a newer kernel is used at this level.
const TARGET: ABI = ABI::V6;

/// A prepared fence: the ruleset to apply in a child, or the reason a run goes unconfined.
#[derive(Debug, Clone)]
pub struct Fence {
    ruleset: Option<Arc<OwnedFd>>,
    confinement: Confinement,
}

impl Fence {
    /// A fence that confines nothing (`off`), saying why.
    pub fn none(why: impl Into<String>) -> Fence {
        Fence {
            ruleset: None,
            confinement: Confinement::Unconfined(why.into()),
        }
    }

    /// Builds the kernel ruleset for `plan` under `mode`. With `required`, a kernel without
    /// Landlock is an error that says what to do; with `auto` it is a fence that confines
    /// nothing and says why; with `off` nothing is asked of the kernel. Any other reason the
    /// fence cannot be built (a path a run could have redirected, a directory that cannot be
    /// made, a rule the kernel refuses) is an error under `auto` too: a run never goes
    /// unconfined because of something another run left behind.
    pub fn prepare(plan: &Plan, mode: Sandbox) -> Result<Fence, String> {
        if mode == Sandbox::Off {
            return Ok(Fence::none("OPENCODE_BRIDGE_SANDBOX=off"));
        }
        let built = match kernel_abi() {
            Ok(abi) => build(plan).map(|fd| (abi, fd)),
            Err(why) => Err(Unbuilt::NoLandlock(why)),
        };
        Fence::decide(built, mode)
    }

    /// What `mode` makes of a ruleset that was built (with the kernel's ABI) or could not be.
    fn decide(built: Result<(u8, OwnedFd), Unbuilt>, mode: Sandbox) -> Result<Fence, String> {
        match (built, mode) {
            (Ok((abi, fd)), _) => Ok(Fence {
                ruleset: Some(Arc::new(fd)),
                confinement: Confinement::Confined { abi },
            }),
            (Err(Unbuilt::Refused(why)), _) => {
                Err(format!("refused: the run's fence cannot be built: {why}"))
            }
            (Err(Unbuilt::NoLandlock(why)), Sandbox::Required) => Err(format!(
                "refused: OPENCODE_BRIDGE_SANDBOX=required and the run cannot be confined: {why}. Use a kernel with Landlock enabled (Linux 5.13 or later, `lsm=landlock,...`), or set OPENCODE_BRIDGE_SANDBOX=auto to run unconfined."
            )),
            (Err(Unbuilt::NoLandlock(why)), _) => Ok(Fence::none(why)),
        }
    }

    /// What a run started with this fence gets.
    pub fn confinement(&self) -> &Confinement {
        &self.confinement
    }

    /// Makes the process `cmd` starts restrict itself to this fence between fork and exec (a
    /// fence that confines nothing changes nothing). If the kernel refuses then, the spawn
    /// fails: a run is never started less confined than its status says.
    pub fn apply_to(&self, cmd: &mut std::process::Command) {
        if let Some(fd) = &self.ruleset {
            apply::restrict_in_child(cmd, Arc::clone(fd));
        }
    }
}

/// Why a fence was not built: the kernel has no Landlock (the one reason `auto` runs
/// unconfined), or anything else (which refuses the run whatever the mode).
#[derive(Debug)]
enum Unbuilt {
    NoLandlock(String),
    Refused(String),
}

fn build(plan: &Plan) -> Result<OwnedFd, Unbuilt> {
    let fs_all = AccessFs::from_all(TARGET);
    let read = AccessFs::from_read(TARGET);
    let device =
        read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev | AccessFs::MakeChar;
    let err = |e: landlock::RulesetError| {
        Unbuilt::Refused(format!("the kernel refused the Landlock ruleset: {e}"))
    };
    let guarded = resolve::areas(&plan.guarded());
    for dir in plan.dirs_to_create() {
        let r = resolve::resolve(dir, &guarded, true).map_err(Unbuilt::Refused)?;
        resolve::create_missing(&r).map_err(Unbuilt::Refused)?;
    }
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(fs_all)
        .map_err(err)?
        .scope(Scope::from_all(TARGET))
        .map_err(err)?
        .create()
        .map_err(err)?;
    for (path, rights) in plan.rules() {
        // Resolved where it is, never through a symlink a run could have planted; a path that
        // does not exist is skipped (nothing beneath it can be reached either).
        let r = resolve::resolve(path, &guarded, true).map_err(Unbuilt::Refused)?;
        if !r.missing.is_empty() {
            continue;
        }
        let own = *rights == Rights::Write;
        let file = resolve::open_rule(&r.real, path, own).map_err(Unbuilt::Refused)?;
        let is_dir = file.metadata().map(|m| m.is_dir()).unwrap_or(false);
        let mut access = match rights {
            Rights::Read => read,
            Rights::Write => fs_all,
            Rights::Device => device,
        };
        if !is_dir {
            // A rule on a file may only carry the rights that apply to files.
            access &= AccessFs::from_file(TARGET);
        }
        ruleset = ruleset
            .add_rule(PathBeneath::new(file, access))
            .map_err(err)?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| Unbuilt::NoLandlock("this kernel does not enforce Landlock".to_owned()))
}

/// Paths a plan names that do not exist are skipped when the fence is built; this lists them
/// (for `doctor`).
pub fn missing(plan: &Plan) -> Vec<PathBuf> {
    plan.rules()
        .iter()
        .filter(|(p, _)| !p.exists())
        .map(|(p, _)| p.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    #[test]
    fn without_landlock_auto_runs_unconfined_and_says_why_and_required_refuses() {
        let none = || {
            Err(Unbuilt::NoLandlock(
                "this kernel has no Landlock (Linux 5.13 or later is needed)".to_owned(),
            ))
        };
        let auto = Fence::decide(none(), Sandbox::Auto).unwrap();
        assert_eq!(
            auto.confinement().to_string(),
            "not confined: this kernel has no Landlock (Linux 5.13 or later is needed)"
        );
        assert!(auto.ruleset.is_none());
        let refused = Fence::decide(none(), Sandbox::Required).unwrap_err();
        assert!(
            refused.starts_with("refused: OPENCODE_BRIDGE_SANDBOX=required"),
            "{refused}"
        );
        assert!(
            refused.contains("OPENCODE_BRIDGE_SANDBOX=auto"),
            "{refused}"
        );
        let off = Fence::prepare(&Plan::new(), Sandbox::Off).unwrap();
        assert_eq!(
            off.confinement().to_string(),
            "not confined: OPENCODE_BRIDGE_SANDBOX=off"
        );
    }

    #[test]
    fn a_fence_that_cannot_be_built_for_another_reason_refuses_even_under_auto() {
        for mode in [Sandbox::Auto, Sandbox::Required] {
            let e = Fence::decide(Err(Unbuilt::Refused("x is a planted symlink".into())), mode)
                .unwrap_err();
            assert_eq!(
                e,
                "refused: the run's fence cannot be built: x is a planted symlink"
            );
        }
    }

    #[test]
    fn a_symlinked_or_dangling_runner_dir_where_runs_write_refuses_the_run() {
        if kernel_abi().is_err() {
            return; // the kernel is asked first; the decision is tested above
        }
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (home, cache) = (root.join("home"), root.join("home/.cache"));
        std::fs::create_dir_all(&cache).unwrap();
        let world = |cache_dir: &Path| RunWorld {
            kind: RunKind::Opencode,
            program: PathBuf::from("/bin/sh"),
            project: root.join("proj"),
            editing: false,
            tmp: root.join("tmp"),
            extra_read: vec![],
            extra_write: vec![],
            credentials: vec![],
            env: vec![
                ("HOME".into(), home.display().to_string()),
                ("XDG_CACHE_HOME".into(), cache_dir.display().to_string()),
            ],
        };
        let plan = for_run(&world(&cache));
        // A real directory (made by the fence) is fine.
        assert!(Fence::prepare(&plan, Sandbox::Auto).is_ok());
        assert!(cache.join("opencode").is_dir());
        // An editing run replaced it with a symlink to the home directory.
        std::fs::remove_dir(cache.join("opencode")).unwrap();
        std::os::unix::fs::symlink(&home, cache.join("opencode")).unwrap();
        let e = Fence::prepare(&plan, Sandbox::Auto).unwrap_err();
        assert!(
            e.starts_with("refused: the run's fence cannot be built: ")
                && e.contains(&cache.join("opencode").display().to_string()),
            "{e}"
        );
        // Dangling: refused too, never run unconfined.
        std::fs::remove_file(cache.join("opencode")).unwrap();
        std::os::unix::fs::symlink(root.join("gone"), cache.join("opencode")).unwrap();
        assert!(Fence::prepare(&plan, Sandbox::Auto).is_err());
        assert!(!root.join("gone").exists());
        // The user's own symlink where no run writes (the cache on another disk) is followed.
        let disk = root.join("disk");
        std::fs::create_dir_all(&disk).unwrap();
        let link = home.join("cache-link");
        std::os::unix::fs::symlink(&disk, &link).unwrap();
        let fence = Fence::prepare(&for_run(&world(&link)), Sandbox::Auto).unwrap();
        assert!(fence.confinement().is_confined());
        assert!(disk.join("opencode").is_dir());
    }

    #[test]
    fn a_fenced_child_cannot_write_outside_its_plan_and_can_inside() {
        if kernel_abi().is_err() {
            return; // nothing to apply on this kernel; the decision is tested above
        }
        let d = tempfile::tempdir().unwrap();
        let (inside, outside) = (d.path().join("in"), d.path().join("out"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let mut plan = Plan::new();
        for p in plan::SYSTEM_READ {
            plan.read(*p);
        }
        plan.device("/dev/null").write(&inside);
        let fence = Fence::prepare(&plan, Sandbox::Required).unwrap();
        assert!(fence.confinement().is_confined());
        let sh = |script: &str| {
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.args(["-c", script]);
            fence.apply_to(&mut cmd);
            cmd.status().unwrap().success()
        };
        assert!(sh(&format!("echo x > {}/a", inside.display())));
        assert!(!sh(&format!("echo x > {}/b", outside.display())));
        assert!(inside.join("a").exists());
        assert!(!outside.join("b").exists());
        // The bridge itself is not confined.
        std::fs::write(outside.join("c"), "x").unwrap();
    }
}
