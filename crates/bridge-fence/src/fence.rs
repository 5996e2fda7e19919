//! The fence itself: what the user asked for (`Sandbox`), what a run got (`Confinement`), and
//! the Landlock ruleset, seccomp filter and namespaces a `Fence` applies to a child.

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::layers::{self, Mechanisms, Namespaces, Protection, mechanisms};
use crate::plan::{Plan, Rights};
use crate::{apply, protected, resolve, seccomp};
use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

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

/// A prepared fence: the ruleset to apply in a child, or the reason a run goes unconfined, and
/// the layers besides Landlock ([`Layers`]).
#[derive(Debug, Clone)]
pub struct Fence {
    ruleset: Option<Arc<OwnedFd>>,
    confinement: Confinement,
    layers: Layers,
    child: Option<Arc<apply::ChildSetup>>,
}

/// What a fence adds to Landlock for its run (nothing under `off`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layers {
    /// The run drops every capability (and the bounding set, where the bridge may empty it).
    pub capabilities_dropped: bool,
    /// The run gets the seccomp filter: no unix socket of its own making, no io_uring.
    pub seccomp: bool,
    /// The run's own mount namespace, where its protected paths are bound read-only.
    pub namespace: Option<Namespaces>,
    /// An editing run's protected paths: those bound read-only, those left to the check after
    /// the run (missing when it starts, symlinks, or every one where no namespace can be made).
    pub protection: Protection,
    /// Why the protected paths are not bound, when they are not.
    pub unbound_why: Option<String>,
}

impl Fence {
    /// A fence that confines nothing (`off`), saying why.
    pub fn none(why: impl Into<String>) -> Fence {
        Fence {
            ruleset: None,
            confinement: Confinement::Unconfined(why.into()),
            layers: Layers::default(),
            child: None,
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
        let mut fence = Fence::decide(built, mode)?;
        fence.add_layers(plan, &mechanisms());
        Ok(fence)
    }

    /// Adds the layers besides Landlock that `mech` offers: the capabilities dropped, the
    /// seccomp filter, and the protected paths of `plan` bound read-only in a mount namespace.
    fn add_layers(&mut self, plan: &Plan, mech: &Mechanisms) {
        let mut layers = Layers {
            capabilities_dropped: true,
            seccomp: mech.seccomp.is_ok(),
            ..Layers::default()
        };
        let mut mounts = None;
        if let Some(top) = plan.protected_top() {
            for (path, content) in plan.seeds() {
                seed(path, content);
            }
            match (layers::plan_binds(top), &mech.namespaces) {
                (Ok((prot, binds)), Ok(ns)) => {
                    if !binds.is_empty() {
                        layers.namespace = Some(*ns);
                        mounts = Some(layers::mounts(*ns, binds));
                    }
                    layers.protection = prot;
                }
                (Ok((prot, _)), Err(why)) => {
                    let mut unbound = prot.bound;
                    unbound.extend(prot.unbound);
                    layers.protection.unbound = unbound;
                    layers.unbound_why = Some(why.clone());
                }
                (Err(why), _) => {
                    layers.protection.unbound = protected::protected_in(top);
                    layers.unbound_why = Some(why);
                }
            }
        }
        let user_ns = layers.namespace == Some(Namespaces::UserAndMount);
        let setup = apply::ChildSetup {
            mounts,
            caps: Some(layers::caps(user_ns)),
            seccomp: if layers.seccomp {
                seccomp::program().map(apply::Filter)
            } else {
                None
            },
            ruleset: self.ruleset.clone(),
        };
        self.layers = layers;
        self.child = Some(Arc::new(setup));
    }

    /// What this fence adds to Landlock.
    pub fn layers(&self) -> &Layers {
        &self.layers
    }

    /// What `mode` makes of a ruleset that was built (with the kernel's ABI) or could not be.
    fn decide(built: Result<(u8, OwnedFd), Unbuilt>, mode: Sandbox) -> Result<Fence, String> {
        match (built, mode) {
            (Ok((abi, fd)), _) => Ok(Fence {
                ruleset: Some(Arc::new(fd)),
                confinement: Confinement::Confined { abi },
                layers: Layers::default(),
                child: None,
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

    /// Makes the process `cmd` starts confine itself with this fence between fork and exec:
    /// its own mount namespace with the protected paths bound read-only, every capability
    /// dropped, `no_new_privs`, the seccomp filter, the Landlock ruleset (a fence of `off`
    /// changes nothing). If the kernel refuses then, the spawn fails: a run is never started
    /// less confined than its status says.
    pub fn apply_to(&self, cmd: &mut std::process::Command) {
        if let Some(setup) = &self.child {
            use std::os::unix::ffi::OsStrExt;
            let cwd = setup.mounts.as_ref().and_then(|_| {
                let dir = match cmd.get_current_dir() {
                    Some(d) if d.is_absolute() => d.to_path_buf(),
                    Some(d) => std::env::current_dir().ok()?.join(d),
                    None => std::env::current_dir().ok()?,
                };
                std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()
            });
            apply::restrict_in_child(cmd, Arc::clone(setup), cwd);
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

/// Writes a file the runner writes at start, when its directory is a plain directory (not a
/// symlink) and the file does not exist yet; nothing else is touched. Best effort: a run that
/// needed it fails loudly.
fn seed(path: &Path, content: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let plain_dir = path
        .parent()
        .and_then(|d| std::fs::symlink_metadata(d).ok())
        .is_some_and(|m| m.is_dir());
    if !plain_dir {
        return;
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
    {
        let _ = f.write_all(content.as_bytes());
    }
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
    use crate::plan::{self, RunKind, RunWorld, for_run};
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

    /// The plan of a run as `for_run` makes it, reduced to the system and a project.
    fn system_plan() -> Plan {
        let mut plan = Plan::new();
        for p in plan::SYSTEM_READ {
            plan.read(*p);
        }
        for p in plan::DEVICES {
            plan.device(*p);
        }
        plan
    }

    /// Runs `script` with `/bin/sh` in `fence`: whether it succeeded, and what it printed.
    fn sh(fence: &Fence, cwd: &Path, script: &str) -> (bool, String) {
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", script]).current_dir(cwd);
        fence.apply_to(&mut cmd);
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    #[test]
    fn a_fenced_child_cannot_read_another_process_environment_nor_make_a_device() {
        let mut other = std::process::Command::new("/bin/sleep")
            .arg("60")
            .env("OTHER_SERVER_PASSWORD", "pw-4f7a9c")
            .spawn()
            .unwrap();
        let d = tempfile::tempdir().unwrap();
        let dev = format!("/dev/shm/fence-test-{}", std::process::id());
        let script = format!(
            "cat /proc/{}/environ; mknod {dev} c 1 3 && echo MADE-A-DEVICE",
            other.id()
        );
        let open = Fence::prepare(&system_plan(), Sandbox::Off).unwrap();
        let (_, unfenced) = sh(&open, d.path(), &script);
        let _ = std::fs::remove_file(&dev);
        // The control: without the fence the same script reads it (and, as root, makes it).
        assert!(unfenced.contains("pw-4f7a9c"), "{unfenced}");
        let fence = Fence::prepare(&system_plan(), Sandbox::Auto).unwrap();
        assert!(fence.layers().capabilities_dropped);
        let (_, fenced) = sh(&fence, d.path(), &script);
        let made = std::path::Path::new(&dev).exists();
        let _ = std::fs::remove_file(&dev);
        other.kill().unwrap();
        let _ = other.wait();
        assert!(!fenced.contains("pw-4f7a9c"), "{fenced}");
        assert!(!fenced.contains("MADE-A-DEVICE") && !made, "{fenced}");
        // Every capability is gone, the bounding set too (as root).
        let (_, caps) = sh(
            &fence,
            d.path(),
            "grep -E '^Cap(Eff|Prm|Inh|Bnd|Amb):' /proc/self/status",
        );
        if layers::mechanisms().capabilities_held {
            assert_eq!(
                caps.lines()
                    .filter(|l| l.ends_with("\t0000000000000000"))
                    .count(),
                5,
                "{caps}"
            );
        }
    }

    /// A unix socket listening in a directory the plan does not grant, and a client of it in
    /// python (`socket.AF_UNIX`), which also makes a socket pair and a TCP socket.
    #[test]
    fn a_fenced_child_cannot_connect_to_a_unix_socket_but_keeps_socket_pairs() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let script = format!(
            "python3 -c \"
import socket
a, b = socket.socketpair(); a.send(b'p'); assert b.recv(1) == b'p'; print('PAIR-OK')
socket.socket(socket.AF_INET, socket.SOCK_STREAM).close(); print('TCP-OK')
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect('{}'); print('CONNECTED')
\"",
            path.display()
        );
        let open = Fence::prepare(&system_plan(), Sandbox::Off).unwrap();
        let (_, unfenced) = sh(&open, d.path(), &script);
        assert!(unfenced.contains("CONNECTED"), "{unfenced}");
        assert!(listener.accept().is_ok(), "the control connected");
        let fence = Fence::prepare(&system_plan(), Sandbox::Auto).unwrap();
        assert!(fence.layers().seccomp, "{:?}", layers::mechanisms());
        let (ok, fenced) = sh(&fence, d.path(), &script);
        assert!(!ok, "{fenced}");
        assert!(
            fenced.contains("PAIR-OK") && fenced.contains("TCP-OK"),
            "{fenced}"
        );
        assert!(!fenced.contains("CONNECTED"), "{fenced}");
        assert!(fenced.contains("Operation not permitted"), "{fenced}");
        assert_eq!(
            listener.accept().unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock,
            "nobody connected"
        );
    }

    /// A writable project with git's hooks and config and a `.mcp.json`.
    fn project() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().canonicalize().unwrap().join("app");
        std::fs::create_dir_all(top.join(".git/hooks")).unwrap();
        std::fs::write(top.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(top.join(".mcp.json"), "{}\n").unwrap();
        (d, top)
    }

    fn editing_plan(top: &Path) -> Plan {
        let mut plan = system_plan();
        plan.write(top).protect(top);
        plan
    }

    /// Every way a run could try to write a protected path, or undo the read-only binds.
    const ATTACKS: &str = "echo x > .git/hooks/pre-commit; echo '[core] fsmonitor = evil' >> .git/config; echo '{\"mcpServers\":{}}' > .mcp.json; mv .git .git-old; mv .git/hooks .git/hooks-old; rm .mcp.json; \
        umount .git/hooks; umount -l .git/hooks; mount -o remount,rw,bind .git/hooks; mount --bind /tmp .git/hooks; \
        for u in -Urm -Um; do unshare $u --propagation unchanged python3 -c \"$SYSCALLS\"; done; python3 -c \"$SYSCALLS\"; \
        echo ok > edited.txt; echo ok > .git/opencode";

    /// Unmounting and remounting read-write with the system calls themselves (`umount(8)` and
    /// `mount(8)` refuse a user other than root before asking the kernel): each prints
    /// `UNDONE` if the kernel let it.
    const SYSCALLS: &str = "import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
for what, r in [
    ('remount-rw', lambda: l.mount(None, b'.git/hooks', None, 0x1000 | 0x20, None)),
    ('umount', lambda: l.umount2(b'.git/hooks', 0)),
    ('detach', lambda: l.umount2(b'.git/hooks', 2)),
    ('detach-top', lambda: l.umount2(b'.', 2)),
]:
    print(what, 'UNDONE' if r() == 0 else os.strerror(ctypes.get_errno()))
";

    fn attack(fence: &Fence, top: &Path) -> String {
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", ATTACKS])
            .current_dir(top)
            .env("SYSCALLS", SYSCALLS);
        fence.apply_to(&mut cmd);
        let out = cmd.output().unwrap();
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.contains("UNDONE"), "{out}");
        // In the run's namespace, and in a nested user namespace (mapping uid 0 needs a
        // capability the run no longer has, so `-Urm` fails as root; `-Um` does not map).
        assert!(
            out.matches("detach-top").count() >= 2,
            "the attempts ran: {out}"
        );
        out
    }

    fn assert_protected(top: &Path, out: &str) {
        assert_eq!(
            std::fs::read_to_string(top.join("edited.txt")).unwrap(),
            "ok\n",
            "{out}"
        );
        assert!(
            top.join(".git/opencode").exists(),
            "the rest of .git is writable: {out}"
        );
        assert!(!top.join(".git/hooks/pre-commit").exists(), "{out}");
        assert_eq!(
            std::fs::read_to_string(top.join(".git/config")).unwrap(),
            "[core]\n",
            "{out}"
        );
        assert_eq!(
            std::fs::read_to_string(top.join(".mcp.json")).unwrap(),
            "{}\n",
            "{out}"
        );
        assert!(
            !top.join(".git-old").exists() && !top.join(".git/hooks-old").exists(),
            "{out}"
        );
        // Nothing of the run's namespace reached the bridge's.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(&top.display().to_string()), "{mounts}");
    }

    #[test]
    fn an_editing_run_cannot_write_its_protected_paths_nor_undo_the_binds() {
        let (_d, top) = project();
        let open = Fence::prepare(&editing_plan(&top), Sandbox::Off).unwrap();
        let (_, out) = sh(
            &open,
            &top,
            "echo x > .git/hooks/pre-commit; echo x > .mcp.json",
        );
        assert!(
            top.join(".git/hooks/pre-commit").exists(),
            "the control: {out}"
        );
        let (_d, top) = project();
        let fence = Fence::prepare(&editing_plan(&top), Sandbox::Auto).unwrap();
        let Ok(ns) = layers::mechanisms().namespaces else {
            // No namespace here: the layer says so, and the check after the run covers it.
            assert!(fence.layers().unbound_why.is_some());
            assert!(fence.layers().protection.bound.is_empty());
            return;
        };
        assert_eq!(fence.layers().namespace, Some(ns));
        assert_eq!(fence.layers().protection.bound.len(), 3);
        let out = attack(&fence, &top);
        assert_protected(&top, &out);
    }

    /// The binds hold by themselves, without Landlock (which refuses every mount anyway):
    /// no capability is left to unmount or remount them, and a nested user namespace gets them
    /// locked. Both ways of making the namespace: a mount namespace alone (root) and a user
    /// namespace first (an unprivileged bridge; as root it maps root).
    #[test]
    fn the_binds_hold_without_landlock_in_both_kinds_of_namespace() {
        let mech = layers::mechanisms();
        if mech.namespaces.is_err() {
            return; // nothing to bind with here: the test above checks what the layer says
        }
        let kinds: &[Namespaces] = if mech.capabilities_held {
            &[Namespaces::Mount, Namespaces::UserAndMount]
        } else {
            &[Namespaces::UserAndMount]
        };
        for &ns in kinds {
            let (_d, top) = project();
            let mut fence = Fence::none("no Landlock in this test");
            let only = Mechanisms {
                namespaces: Ok(ns),
                ..mech.clone()
            };
            fence.add_layers(&editing_plan(&top), &only);
            assert_eq!(fence.layers().namespace, Some(ns));
            let out = attack(&fence, &top);
            assert_protected(&top, &out);
        }
    }
}
