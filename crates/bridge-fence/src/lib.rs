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
//! The one module of this crate with `unsafe` code is [`apply`]: two system calls in the forked
//! child.

#![deny(missing_docs)]

mod apply;
pub mod plan;
pub mod protected;

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

pub use plan::{OwnWorktree, Plan, Project, Rights, RunKind, RunWorld, for_run, project_of};

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
    /// Landlock, or a ruleset the kernel refuses, is an error that says what to do; with `auto`
    /// it is a fence that confines nothing and says why; with `off` nothing is asked of the
    /// kernel.
    pub fn prepare(plan: &Plan, mode: Sandbox) -> Result<Fence, String> {
        if mode == Sandbox::Off {
            return Ok(Fence::none("OPENCODE_BRIDGE_SANDBOX=off"));
        }
        Fence::decide(
            kernel_abi().and_then(|abi| build(plan).map(|fd| (abi, fd))),
            mode,
        )
    }

    /// What `mode` makes of a ruleset that was built (with the kernel's ABI) or could not be.
    fn decide(built: Result<(u8, OwnedFd), String>, mode: Sandbox) -> Result<Fence, String> {
        match (built, mode) {
            (Ok((abi, fd)), _) => Ok(Fence {
                ruleset: Some(Arc::new(fd)),
                confinement: Confinement::Confined { abi },
            }),
            (Err(why), Sandbox::Required) => Err(format!(
                "refused: OPENCODE_BRIDGE_SANDBOX=required and the run cannot be confined: {why}. Use a kernel with Landlock enabled (Linux 5.13 or later, `lsm=landlock,...`), or set OPENCODE_BRIDGE_SANDBOX=auto to run unconfined."
            )),
            (Err(why), _) => Ok(Fence::none(why)),
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

fn build(plan: &Plan) -> Result<OwnedFd, String> {
    let fs_all = AccessFs::from_all(TARGET);
    let read = AccessFs::from_read(TARGET);
    let device =
        read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev | AccessFs::MakeChar;
    let err = |e: landlock::RulesetError| format!("the kernel refused the Landlock ruleset: {e}");
    for dir in plan.dirs_to_create() {
        create_private_dir(dir)?;
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
        let Some(fd) = open_path(path) else { continue };
        let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
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
            .add_rule(PathBeneath::new(fd, access))
            .map_err(err)?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| "this kernel does not enforce Landlock".to_owned())
}

fn create_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {} for the run: {e}", dir.display()))
}

fn open_path(path: &Path) -> Option<PathFd> {
    PathFd::new(path).ok()
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

    #[test]
    fn without_landlock_auto_runs_unconfined_and_says_why_and_required_refuses() {
        let none = || Err("this kernel has no Landlock (Linux 5.13 or later is needed)".to_owned());
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
