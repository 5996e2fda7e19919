//! The system calls that confine a child, made between fork and exec, and the few questions
//! asked of the kernel in the bridge (the Landlock ABI, whether seccomp and namespaces work, a
//! mount's flags). The one module of the crate with `unsafe` code.
//!
//! Everything the child does is prepared in the bridge ([`ChildSetup`]): paths as C strings,
//! the uid and gid maps as bytes, the seccomp program as instructions. Between fork and exec
//! only system calls on that prepared data are made: no allocation, no lock.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The kernel's Landlock ABI version (`landlock_create_ruleset(NULL, 0, VERSION)`).
pub(crate) fn kernel_abi() -> Result<u8, String> {
    // SAFETY: a null attribute with size 0 and the VERSION flag is the documented way to ask
    // for the ABI version; no memory is read or written.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v >= 1 {
        return Ok(u8::try_from(v).unwrap_or(u8::MAX));
    }
    let e = io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no Landlock (Linux 5.13 or later is needed)".into(),
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot parameter)".into()
        }
        _ => format!("cannot ask the kernel for its Landlock ABI: {e}"),
    })
}

/// Whether this kernel has seccomp filters (`prctl(PR_GET_SECCOMP)` answers instead of
/// `EINVAL`).
pub(crate) fn seccomp_available() -> Result<(), String> {
    // SAFETY: PR_GET_SECCOMP takes no pointer; it only returns the calling thread's mode.
    let r = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if r >= 0 {
        Ok(())
    } else {
        Err(format!(
            "this kernel has no seccomp filters: {}",
            io::Error::last_os_error()
        ))
    }
}

/// The flags of the mount `path` lies on that a bind of it must keep when it is remounted
/// read-only (`nosuid`, `nodev`, `noexec`, the atime flags): in a user namespace those the
/// parent namespace set are locked, and a remount that drops one is refused.
pub(crate) fn mount_flags_to_keep(path: &CStr) -> io::Result<libc::c_ulong> {
    // SAFETY: `statvfs` is plain data; zeroed is a valid value for it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `st` a valid out pointer for the call.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut keep = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            keep |= ms_flag;
        }
    }
    Ok(keep)
}

/// The effective user id of the bridge.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The effective group id of the bridge.
pub(crate) fn egid() -> u32 {
    // SAFETY: getegid cannot fail and touches no memory.
    unsafe { libc::getegid() }
}

/// A new user namespace's maps: the bridge's own uid and gid, mapped to themselves.
#[derive(Debug)]
pub(crate) struct UserMaps {
    /// `/proc/self/uid_map`'s content.
    pub uid_map: Vec<u8>,
    /// `/proc/self/gid_map`'s content.
    pub gid_map: Vec<u8>,
}

/// One bind of a path onto itself in the child's mount namespace.
#[derive(Debug)]
pub(crate) struct Bind {
    /// The path (absolute, canonical, no symlink on the way).
    pub path: CString,
    /// Remounted read-only (a protected path), or left writable (an ancestor of one, bound
    /// only so that it is a mount point, which cannot be renamed or removed).
    pub read_only: bool,
    /// The flags of the underlying mount to keep on the read-only remount.
    pub keep: libc::c_ulong,
}

/// A private mount namespace for the child and the binds made in it.
#[derive(Debug)]
pub(crate) struct Mounts {
    /// A user namespace first (an unprivileged bridge), or a mount namespace alone (the bridge
    /// holds `CAP_SYS_ADMIN`).
    pub user: Option<UserMaps>,
    /// The binds, parents before children.
    pub binds: Vec<Bind>,
}

/// The capabilities the child gives up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    /// The highest capability number (`/proc/sys/kernel/cap_last_cap`).
    pub last: u32,
    /// Whether the bounding set is emptied too (needs `CAP_SETPCAP`: root, or a child that made
    /// its own user namespace).
    pub bounding: bool,
}

/// A seccomp program (classic BPF), built by [`crate::seccomp`].
pub(crate) struct Filter(pub Vec<libc::sock_filter>);

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({} instructions)", self.0.len())
    }
}

/// Everything the child does between fork and exec, in this order: its own mount namespace
/// and binds, the capabilities dropped, `no_new_privs`, the seccomp filter, Landlock.
#[derive(Debug, Default)]
pub(crate) struct ChildSetup {
    pub mounts: Option<Mounts>,
    pub caps: Option<Caps>,
    pub seccomp: Option<Filter>,
    pub ruleset: Option<Arc<OwnedFd>>,
}

/// Makes the child `cmd` starts confine itself with `setup` before exec. The ruleset's
/// descriptor stays open in the bridge as long as `cmd` (the closure owns it); it is
/// close-on-exec, so the run never holds it. A refusal fails the spawn with the kernel's error.
///
/// `cwd` is the child's working directory, absolute: the child enters it again once its binds
/// are made, since the directory it was given before (std changes directory before the hook
/// runs) lies beneath them, and paths relative to it would not meet them.
pub(crate) fn restrict_in_child(
    cmd: &mut std::process::Command,
    setup: Arc<ChildSetup>,
    cwd: Option<CString>,
) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe work
    // is allowed: `confine` makes system calls on data prepared before the fork and owned by
    // the closure (through the `Arc` and the moved `cwd`), and reads errno on failure; no
    // allocation, no lock.
    unsafe {
        cmd.pre_exec(move || confine(&setup, cwd.as_deref()));
    }
}

/// Runs `setup`'s namespace part in a forked child that exits at once: whether this kernel
/// and this bridge can make the mount namespace (and user namespace) a run would get.
pub(crate) fn probe_mounts(mounts: &Mounts) -> io::Result<()> {
    // SAFETY: the child makes only system calls on `mounts`, prepared before the fork, and
    // leaves with `_exit`, which runs no destructor, handler or atexit hook of the parent's;
    // the parent only waits for it.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            let code = match enter_namespace(mounts) {
                Ok(()) => 0,
                Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL).clamp(1, 255),
            };
            libc::_exit(code);
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(())
        } else if libc::WIFEXITED(status) {
            Err(io::Error::from_raw_os_error(libc::WEXITSTATUS(status)))
        } else {
            Err(io::Error::other("the probe child died of a signal"))
        }
    }
}

/// The child's whole confinement, in order. Async-signal-safe: system calls only.
fn confine(setup: &ChildSetup, cwd: Option<&CStr>) -> io::Result<()> {
    if let Some(mounts) = &setup.mounts {
        enter_namespace(mounts)?;
        if let Some(cwd) = cwd {
            // SAFETY: `cwd` is a valid C string.
            if unsafe { libc::chdir(cwd.as_ptr()) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    if let Some(caps) = setup.caps {
        drop_capabilities(caps)?;
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(filter) = &setup.seccomp {
        let prog = libc::sock_fprog {
            len: u16::try_from(filter.0.len()).unwrap_or(u16::MAX),
            filter: filter.0.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` points at `filter.0`, alive for the call; the kernel copies it.
        let r = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog,
                0,
                0,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if let Some(ruleset) = &setup.ruleset {
        // SAFETY: the descriptor is alive (owned through the `Arc`); no memory is passed.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) }
            != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A private mount namespace (with a user namespace first when asked), mounts no longer
/// propagated back, and the binds.
fn enter_namespace(mounts: &Mounts) -> io::Result<()> {
    let flags = libc::CLONE_NEWNS
        | if mounts.user.is_some() {
            libc::CLONE_NEWUSER
        } else {
            0
        };
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(maps) = &mounts.user {
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", &maps.uid_map)?;
        write_file(c"/proc/self/gid_map", &maps.gid_map)?;
    }
    // Nothing mounted here reaches the bridge's namespace.
    mount(None, c"/", libc::MS_REC | libc::MS_SLAVE)?;
    for b in &mounts.binds {
        mount(Some(&b.path), &b.path, libc::MS_BIND | libc::MS_REC)?;
        if b.read_only {
            mount(
                None,
                &b.path,
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | b.keep,
            )?;
        }
    }
    Ok(())
}

fn mount(source: Option<&CStr>, target: &CStr, flags: libc::c_ulong) -> io::Result<()> {
    let source = source.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is a valid C string or null (source, filesystem type, data), as
    // mount(2) allows for binds, remounts and propagation changes.
    let r = unsafe {
        libc::mount(
            source,
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a valid C string; the descriptor is closed below on every path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `data` is valid for `data.len()` bytes.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    if usize::try_from(n).ok() != Some(data.len()) {
        return Err(err);
    }
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Empties the bounding set (when asked), the ambient set, and the effective, permitted and
/// inheritable sets: an exec, even of a set-user-id root program or by uid 0, gains nothing.
fn drop_capabilities(caps: Caps) -> io::Result<()> {
    if caps.bounding {
        for cap in 0..=caps.last {
            // SAFETY: prctl with integer arguments only.
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    } != 0
    {
        let e = io::Error::last_os_error();
        // Kernels before 4.3 have no ambient set, so nothing to clear.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: a version-3 header and two data structs, as capset(2) reads for that version.
    let r = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
