//! Every path a fence grants is the real path, and never one a run could have redirected.
//!
//! A plan names paths as the environment spells them (`$XDG_CACHE_HOME/opencode`, the project,
//! `~/.npm`). Some of them lie where runs write: a run that may write `$XDG_CACHE_HOME` can
//! replace `$XDG_CACHE_HOME/opencode` with a symlink to `$HOME`, and the next run's write rule on
//! its cache would then be a write rule on the home directory. So each path is resolved here one
//! component at a time, and a symlink met on the way is refused when the directory holding it
//! is one some run may write (the plan's *guarded* areas and its write rules), or when it belongs
//! to another user than the bridge's (or root). A symlink the user made where no run writes
//! (`~/.cargo` on another disk) is followed. A path granted for writing must be the user's own.
//!
//! The rule's file descriptor is then opened on the real path without following a last
//! symlink, and `/proc/self/fd` must show that same path: a symlink swapped in after the check
//! is caught rather than granted.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// At most this many symlinks on the way to one path (the kernel's own limit is 40).
const MAX_LINKS: usize = 40;

/// A path resolved as far as it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The real path of the longest existing part.
    pub(crate) real: PathBuf,
    /// The components that do not exist (yet), in order, below `real`.
    pub(crate) missing: Vec<OsString>,
}

/// Where runs may write, made real for comparison (a path that is a symlink the user made,
/// such as `~/.cache` on another disk, is compared by where it leads; it is kept as written
/// too).
pub(crate) fn areas(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        if let Ok(r) = resolve(p, &[], false) {
            let mut real = r.real;
            real.extend(r.missing);
            out.push(real);
        }
        out.push(p.clone());
    }
    out
}

/// Resolves `path` (absolute) component by component. With `check`, a symlink met whose
/// directory is at or beneath one of `guarded`, or that belongs to another user than the
/// bridge's and root, is an error naming it.
pub(crate) fn resolve(path: &Path, guarded: &[PathBuf], check: bool) -> Result<Resolved, String> {
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, path);
    let mut real = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = pending.pop() {
        match Path::new(&name).components().next() {
            Some(Component::ParentDir) => {
                real.pop();
                continue;
            }
            Some(Component::Normal(_)) => {}
            _ => continue,
        }
        let next = real.join(&name);
        let meta = match std::fs::symlink_metadata(&next) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut missing = vec![name];
                missing.extend(pending.drain(..).rev());
                return Ok(Resolved { real, missing });
            }
            Err(e) => return Err(format!("cannot look at {}: {e}", next.display())),
        };
        if !meta.file_type().is_symlink() {
            real = next;
            continue;
        }
        if check {
            trust_link(&next, &real, meta.uid(), guarded, path)?;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(format!(
                "{} leads through more than {MAX_LINKS} symlinks",
                path.display()
            ));
        }
        let target = std::fs::read_link(&next)
            .map_err(|e| format!("cannot read the symlink {}: {e}", next.display()))?;
        if target.is_absolute() {
            real = PathBuf::from("/");
        }
        push_components(&mut pending, &target);
    }
    Ok(Resolved {
        real,
        missing: vec![],
    })
}

/// Pushes the components of `p` so that the first is popped first.
fn push_components(pending: &mut Vec<OsString>, p: &Path) {
    let parts: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

fn trust_link(
    link: &Path,
    dir: &Path,
    owner: u32,
    guarded: &[PathBuf],
    asked: &Path,
) -> Result<(), String> {
    if let Some(area) = guarded.iter().find(|a| dir.starts_with(a)) {
        return Err(format!(
            "{} leads through the symlink {}, in {}, which runs may write: a run could have planted it. Remove the symlink (a real directory there is fine) and start the task again",
            asked.display(),
            link.display(),
            area.display()
        ));
    }
    let me = euid();
    if owner != 0 && Some(owner) != me {
        return Err(format!(
            "{} leads through the symlink {}, which belongs to uid {owner}, not to you or root: remove it, or grant nothing through it",
            asked.display(),
            link.display()
        ));
    }
    Ok(())
}

/// The bridge's effective user id (from `/proc/self/status`, so no system call is needed).
pub(crate) fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Creates the missing part of `r` one directory at a time (mode 0700), so no symlink is
/// followed on the way; returns the real path of the whole.
pub(crate) fn create_missing(r: &Resolved) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let mut real = r.real.clone();
    for name in &r.missing {
        if name == ".." {
            return Err(format!(
                "{} names a missing directory through `..`",
                real.join(name).display()
            ));
        }
        real.push(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&real) {
            Ok(()) => {}
            Err(e) => {
                return Err(format!("cannot create {} for the run: {e}", real.display()));
            }
        }
    }
    Ok(real)
}

/// Opens `real` (a resolved path) for a rule without following a last symlink, and checks that
/// the descriptor is that path (nothing was swapped in since it was resolved) and, for a path
/// the run may write (`own`), that it belongs to the bridge's user.
pub(crate) fn open_rule(real: &Path, asked: &Path, own: bool) -> Result<File, String> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(real)
        .map_err(|e| format!("cannot open {} for the fence: {e}", real.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot look at {}: {e}", real.display()))?;
    let seen = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok();
    if meta.file_type().is_symlink() || seen.as_deref() != Some(real) {
        return Err(format!(
            "{} changed while the run's fence was built (now {}): start the task again",
            asked.display(),
            seen.map(|s| s.display().to_string())
                .unwrap_or_else(|| "unreadable".into())
        ));
    }
    if own
        && let Some(me) = euid()
        && meta.uid() != me
    {
        return Err(format!(
            "{} belongs to uid {}, not to you (uid {me}): a run is only granted to write what is yours",
            asked.display(),
            meta.uid()
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_path_resolves_to_its_real_path_and_its_missing_tail() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        symlink(root.join("a"), root.join("link")).unwrap();
        symlink("a/b", root.join("rel")).unwrap();
        let r = resolve(&root.join("link/b/c/d"), &[], true).unwrap();
        assert_eq!(r.real, root.join("a/b"));
        assert_eq!(r.missing, vec![OsString::from("c"), OsString::from("d")]);
        assert_eq!(
            resolve(&root.join("rel"), &[], true).unwrap().real,
            root.join("a/b")
        );
        assert_eq!(
            resolve(&root.join("a/b/../b"), &[], true).unwrap().real,
            root.join("a/b")
        );
    }

    #[test]
    fn a_symlink_where_runs_write_is_refused_even_dangling_and_elsewhere_followed() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let cache = root.join("cache");
        let home = root.join("home");
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        symlink(&home, cache.join("opencode")).unwrap();
        symlink(root.join("gone"), cache.join("dangling")).unwrap();
        let guarded = areas(std::slice::from_ref(&cache));
        let e = resolve(&cache.join("opencode"), &guarded, true).unwrap_err();
        assert!(
            e.contains("symlink") && e.contains("runs may write") && e.contains("opencode"),
            "{e}"
        );
        let e = resolve(&cache.join("dangling/x"), &guarded, true).unwrap_err();
        assert!(e.contains("dangling"), "{e}");
        // Without the check (the areas themselves) or outside the areas, it is followed.
        assert_eq!(
            resolve(&cache.join("opencode"), &[], false).unwrap().real,
            home
        );
        symlink(&home, root.join("mine")).unwrap();
        assert_eq!(
            resolve(&root.join("mine"), &guarded, true).unwrap().real,
            home
        );
        // A cache directory that is itself the user's symlink is an area by where it leads.
        symlink(&cache, root.join("cache-link")).unwrap();
        let guarded = areas(&[root.join("cache-link")]);
        assert!(resolve(&cache.join("opencode"), &guarded, true).is_err());
    }

    #[test]
    fn missing_directories_are_created_one_by_one_and_a_rule_opens_the_real_path() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let r = resolve(&root.join("x/y"), &[], true).unwrap();
        let made = create_missing(&r).unwrap();
        assert_eq!(made, root.join("x/y"));
        assert!(made.is_dir());
        assert!(open_rule(&made, &made, true).is_ok());
        // A path that is not the one resolved (a symlink swapped in) is refused.
        symlink(&made, root.join("swapped")).unwrap();
        let e = open_rule(&root.join("swapped"), &root.join("swapped"), false).unwrap_err();
        assert!(e.contains("changed while"), "{e}");
    }
}
