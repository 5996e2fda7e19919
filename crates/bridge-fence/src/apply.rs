//! The two system calls that confine a child, made between fork and exec, and the kernel's ABI
//! version. The one module of the crate with `unsafe` code.

#![allow(unsafe_code)]

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

/// Makes the child `cmd` starts call `prctl(PR_SET_NO_NEW_PRIVS)` and
/// `landlock_restrict_self(ruleset)` before exec. The ruleset's descriptor stays open in the
/// bridge as long as `cmd` (the closure owns it); it is close-on-exec, so the run never holds
/// it. A refusal fails the spawn with the kernel's error.
pub(crate) fn restrict_in_child(cmd: &mut std::process::Command, ruleset: Arc<OwnedFd>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe work
    // is allowed: two system calls on the child itself and a read of errno on failure; no
    // allocation, no lock. The descriptor is alive: the closure owns an `Arc` to it.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
