//! The layers of the fence besides Landlock, decided in the bridge: the capabilities a run gives
//! up, the seccomp filter ([`crate::seccomp`]), and the private mount namespace in which an
//! editing run's protected paths are bound read-only. [`Mechanisms`] says which of them this
//! machine offers (asked once per bridge, for every run and for `doctor`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::apply::{self, Bind, Caps, Mounts, UserMaps};
use crate::protected;

/// How a run gets its own mount namespace on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespaces {
    /// The bridge holds `CAP_SYS_ADMIN` (it runs as root): a mount namespace alone.
    Mount,
    /// An unprivileged bridge: a user namespace (the bridge's uid and gid mapped to
    /// themselves), then a mount namespace owned by it.
    UserAndMount,
}

/// What the kernel and the bridge's privileges offer the fence, besides Landlock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mechanisms {
    /// The kernel's Landlock ABI, or why there is none.
    pub landlock: Result<u8, String>,
    /// Whether runs get the seccomp filter (no unix socket of their own), or why not.
    pub seccomp: Result<(), String>,
    /// How runs get a mount namespace for the protected paths, or why they cannot.
    pub namespaces: Result<Namespaces, String>,
    /// Whether the bridge holds capabilities (it runs as root), which every run drops, the
    /// bounding set included. Without any, a run has none to drop, and `no_new_privs` keeps a
    /// set-user-id program from giving it some.
    pub capabilities_held: bool,
}

/// What this machine offers, asked once.
pub fn mechanisms() -> Mechanisms {
    static ASKED: OnceLock<Mechanisms> = OnceLock::new();
    ASKED
        .get_or_init(|| Mechanisms {
            landlock: apply::kernel_abi(),
            seccomp: match crate::seccomp::program() {
                None => Err(format!(
                    "the seccomp filter knows no {} system calls",
                    std::env::consts::ARCH
                )),
                Some(_) => apply::seccomp_available(),
            },
            namespaces: probe_namespaces(),
            capabilities_held: capabilities_held(),
        })
        .clone()
}

const CAP_SETPCAP: u32 = 8;
const CAP_SYS_ADMIN: u32 = 21;

/// The bridge's effective capability set (`CapEff` in `/proc/self/status`).
fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

fn capabilities_held() -> bool {
    effective_caps() != 0
}

fn has_cap(cap: u32) -> bool {
    effective_caps() & (1 << cap) != 0
}

fn user_maps() -> UserMaps {
    let (uid, gid) = (apply::euid(), apply::egid());
    UserMaps {
        uid_map: format!("{uid} {uid} 1\n").into_bytes(),
        gid_map: format!("{gid} {gid} 1\n").into_bytes(),
    }
}

/// Tries, in a child that exits at once, the namespaces a run would get: a mount namespace
/// alone when the bridge holds `CAP_SYS_ADMIN`, else a user namespace first.
fn probe_namespaces() -> Result<Namespaces, String> {
    let mut why = Vec::new();
    if has_cap(CAP_SYS_ADMIN) {
        let m = Mounts {
            user: None,
            binds: vec![],
        };
        match apply::probe_mounts(&m) {
            Ok(()) => return Ok(Namespaces::Mount),
            Err(e) => why.push(format!("a mount namespace: {e}")),
        }
    }
    let m = Mounts {
        user: Some(user_maps()),
        binds: vec![],
    };
    match apply::probe_mounts(&m) {
        Ok(()) => Ok(Namespaces::UserAndMount),
        Err(e) => {
            why.push(format!("a user namespace: {e}"));
            Err(format!("the kernel refused {}", why.join("; ")))
        }
    }
}

/// The capabilities a run drops: all of them, and the bounding set where the bridge may empty
/// it (`CAP_SETPCAP`, or in the run's own user namespace).
pub(crate) fn caps(user_namespace: bool) -> Caps {
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    Caps {
        last,
        bounding: user_namespace || has_cap(CAP_SETPCAP),
    }
}

/// The protected paths of the project `top` that can be bound read-only, and those that
/// cannot (missing, a symlink, or reached through one: binding would follow it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protection {
    /// Bound read-only in the run's mount namespace.
    pub bound: Vec<PathBuf>,
    /// Not bound: they do not exist when the run starts, or are symlinks (or lie beneath one).
    /// Only the check after the run covers them.
    pub unbound: Vec<PathBuf>,
}

/// What [`Protection`] binds, as the child's binds: every existing protected path read-only,
/// and every directory between the project's top (included) and one of them bound onto itself,
/// writable, so that it is a mount point, which cannot be renamed or removed (a run that could
/// rename `.git` could put a `.git/hooks` of its own in its place).
pub(crate) fn plan_binds(top: &Path) -> Result<(Protection, Vec<Bind>), String> {
    let top = top
        .canonicalize()
        .map_err(|e| format!("cannot resolve the project {}: {e}", top.display()))?;
    let mut prot = Protection::default();
    let mut ro: Vec<PathBuf> = Vec::new();
    for p in protected::protected_in(&top) {
        let plain = std::fs::symlink_metadata(&p)
            .ok()
            .filter(|m| !m.file_type().is_symlink())
            .is_some()
            && p.canonicalize().is_ok_and(|c| c == p);
        if plain {
            ro.push(p);
        } else {
            prot.unbound.push(p);
        }
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for p in &ro {
        for a in p.ancestors().skip(1) {
            if !a.starts_with(&top) {
                break;
            }
            if !ro.iter().any(|r| r == a) && !dirs.iter().any(|d| d == a) {
                dirs.push(a.to_path_buf());
            }
        }
    }
    let mut all: Vec<(PathBuf, bool)> = dirs.into_iter().map(|d| (d, false)).collect();
    all.extend(ro.iter().cloned().map(|p| (p, true)));
    // Parents before children.
    all.sort_by_key(|(p, _)| p.components().count());
    let mut binds = Vec::new();
    for (path, read_only) in all {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| format!("{} holds a NUL byte", path.display()))?;
        let keep = if read_only {
            apply::mount_flags_to_keep(&c)
                .map_err(|e| format!("cannot read the mount of {}: {e}", path.display()))?
        } else {
            0
        };
        binds.push(Bind {
            path: c,
            read_only,
            keep,
        });
    }
    prot.bound = ro;
    if prot.bound.is_empty() {
        binds.clear();
    }
    Ok((prot, binds))
}

/// The mount namespace a run gets for `binds`, as this machine offers it.
pub(crate) fn mounts(ns: Namespaces, binds: Vec<Bind>) -> Mounts {
    Mounts {
        user: (ns == Namespaces::UserAndMount).then(user_maps),
        binds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_protected_paths_are_bound_read_only_under_their_bound_parents() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(top.join(".git/hooks")).unwrap();
        std::fs::write(top.join(".git/config"), "").unwrap();
        std::fs::write(top.join(".mcp.json"), "{}").unwrap();
        std::fs::create_dir_all(top.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(top.join("elsewhere"), top.join(".vscode")).unwrap();
        let (prot, binds) = plan_binds(&top).unwrap();
        assert_eq!(
            prot.bound,
            vec![
                top.join(".git/hooks"),
                top.join(".git/config"),
                top.join(".mcp.json")
            ]
        );
        assert!(prot.unbound.contains(&top.join(".vscode")), "a symlink");
        assert!(prot.unbound.contains(&top.join(".envrc")), "missing");
        let shown: Vec<(String, bool)> = binds
            .iter()
            .map(|b| {
                let p = std::path::Path::new(std::ffi::OsStr::from_bytes(b.path.as_bytes()));
                (
                    p.strip_prefix(&top).unwrap().display().to_string(),
                    b.read_only,
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                (String::new(), false),
                (".git".into(), false),
                (".mcp.json".into(), true),
                (".git/hooks".into(), true),
                (".git/config".into(), true),
            ]
        );
    }

    #[test]
    fn a_project_without_protected_paths_needs_no_bind() {
        let d = tempfile::tempdir().unwrap();
        let (prot, binds) = plan_binds(d.path()).unwrap();
        assert!(prot.bound.is_empty());
        assert!(binds.is_empty());
    }
}
