//! The seccomp filter every fenced run gets: no unix socket of its own making, so no connection
//! to a named unix socket outside the run (the user's ssh-agent, gpg-agent, D-Bus session bus,
//! docker), which Landlock up to ABI 7 does not govern (abstract sockets are Landlock's
//! `scope`, ABI 6).
//!
//! A small classic-BPF program, written out here rather than with a crate: it is a dozen
//! instructions, and each one is read below.
//!
//! - `socket(AF_UNIX, …)` fails with `EPERM`: no unix socket to `connect` or `sendto` with.
//! - `socketpair(AF_UNIX, SOCK_STREAM | SOCK_SEQPACKET, …)` is allowed (a pair joined to each
//!   other only: runtimes use them for a child's standard streams); a datagram pair is
//!   refused, because a datagram socket can be connected again, or `sendto` any named socket.
//! - `io_uring_setup` fails with `EPERM`: io_uring's `SOCKET` and `CONNECT` operations are not
//!   system calls a filter sees. Programs fall back to ordinary system calls.
//! - A system call of another ABI (32-bit x86 on x86-64, whose `socketcall` hides its
//!   arguments from a filter; x32) fails with `EPERM`.
//!
//! Every other call is allowed, so a refusal is an error the program sees, never a kill.

/// `AUDIT_ARCH_*` of the architectures this filter knows (linux/audit.h).
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xC000_00B7;

/// The x32 ABI's bit in a system call number on x86-64.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

// Offsets in `struct seccomp_data`: nr, arch, instruction pointer, args (little endian: the
// low 32 bits of an argument are at its offset).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0: u32 = 16;
const OFF_ARG1: u32 = 24;

/// `SOCK_TYPE_MASK`: the type of `socket`'s second argument, without `SOCK_CLOEXEC` and
/// `SOCK_NONBLOCK`.
const SOCK_TYPE_MASK: u32 = 0xf;

#[derive(Clone, Copy)]
enum To {
    Next,
    Allow,
    Deny,
    Socket,
    Pair,
}

enum Ins {
    /// Load the 32-bit word at this offset of `seccomp_data`.
    Load(u32),
    /// Keep the bits of this mask of the loaded word.
    And(u32),
    /// If the loaded word is equal to the value go to the first, else to the second.
    Eq(u32, To, To),
    /// If the loaded word is at least the value go to the first, else to the second.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    AtLeast(u32, To, To),
    /// A label (no instruction).
    Label(To),
    Ret(u32),
}

fn source() -> Vec<Ins> {
    use Ins::*;
    let mut p = vec![
        Load(OFF_ARCH),
        Eq(NATIVE_ARCH, To::Next, To::Deny),
        Load(OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    p.push(AtLeast(X32_SYSCALL_BIT, To::Deny, To::Next));
    p.extend([
        Eq(libc::SYS_socket as u32, To::Socket, To::Next),
        Eq(libc::SYS_socketpair as u32, To::Pair, To::Next),
        Eq(libc::SYS_io_uring_setup as u32, To::Deny, To::Allow),
        Label(To::Socket),
        Load(OFF_ARG0),
        Eq(libc::AF_UNIX as u32, To::Deny, To::Allow),
        Label(To::Pair),
        Load(OFF_ARG0),
        Eq(libc::AF_UNIX as u32, To::Next, To::Allow),
        Load(OFF_ARG1),
        And(SOCK_TYPE_MASK),
        Eq(libc::SOCK_STREAM as u32, To::Allow, To::Next),
        Eq(libc::SOCK_SEQPACKET as u32, To::Allow, To::Deny),
        Label(To::Allow),
        Ret(RET_ALLOW),
        Label(To::Deny),
        Ret(RET_EPERM),
    ]);
    p
}

/// The filter, as instructions for `PR_SET_SECCOMP`; `None` on an architecture it does not
/// know (the run then has no filter, and `doctor` says so).
pub(crate) fn program() -> Option<Vec<libc::sock_filter>> {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return None;
    }
    let src = source();
    // Where each label lands, counted in instructions.
    let mut at = Vec::new();
    let mut n = 0usize;
    for ins in &src {
        match ins {
            Ins::Label(l) => at.push((label(*l), n)),
            _ => n += 1,
        }
    }
    let target = |from: usize, to: To| -> u8 {
        match to {
            To::Next => 0,
            l => {
                let dest = at
                    .iter()
                    .find(|(k, _)| *k == label(l))
                    .map(|(_, i)| *i)
                    .expect("every label of the program is placed");
                u8::try_from(dest - from - 1).expect("a jump fits in 8 bits")
            }
        }
    };
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let mut out = Vec::new();
    for ins in &src {
        let i = out.len();
        match *ins {
            Ins::Load(off) => out.push(stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, off)),
            Ins::And(mask) => out.push(stmt(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, mask)),
            Ins::Eq(v, t, f) => out.push(libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                jt: target(i, t),
                jf: target(i, f),
                k: v,
            }),
            Ins::AtLeast(v, t, f) => out.push(libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
                jt: target(i, t),
                jf: target(i, f),
                k: v,
            }),
            Ins::Label(_) => {}
            Ins::Ret(v) => out.push(stmt(libc::BPF_RET | libc::BPF_K, v)),
        }
    }
    Some(out)
}

fn label(t: To) -> u8 {
    t as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one system call, as the kernel would.
    fn verdict(prog: &[libc::sock_filter], arch: u32, nr: i64, args: [u64; 2]) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                OFF_NR => nr as u32,
                OFF_ARCH => arch,
                OFF_ARG0 => args[0] as u32,
                OFF_ARG1 => args[1] as u32,
                _ => panic!("unexpected load at {off}"),
            }
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let ins = prog[pc];
            let code = u32::from(ins.code);
            if code == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS {
                acc = word(ins.k);
            } else if code == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K {
                acc &= ins.k;
            } else if code == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K {
                pc += usize::from(if acc == ins.k { ins.jt } else { ins.jf });
            } else if code == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K {
                pc += usize::from(if acc >= ins.k { ins.jt } else { ins.jf });
            } else if code == libc::BPF_RET | libc::BPF_K {
                return ins.k;
            } else {
                panic!("unknown instruction {code:#x}");
            }
            pc += 1;
        }
    }

    #[test]
    fn unix_sockets_and_io_uring_are_refused_and_everything_else_allowed() {
        let p = program().expect("a known architecture");
        let call = |nr: i64, a: u64, b: u64| verdict(&p, NATIVE_ARCH, nr, [a, b]);
        let unix = libc::AF_UNIX as u64;
        let stream = (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64;
        let dgram = (libc::SOCK_DGRAM | libc::SOCK_NONBLOCK) as u64;
        assert_eq!(call(libc::SYS_socket, unix, stream), RET_EPERM);
        assert_eq!(call(libc::SYS_socket, unix, dgram), RET_EPERM);
        assert_eq!(
            call(libc::SYS_socket, libc::AF_INET as u64, stream),
            RET_ALLOW
        );
        assert_eq!(
            call(libc::SYS_socket, libc::AF_INET6 as u64, dgram),
            RET_ALLOW
        );
        assert_eq!(call(libc::SYS_socketpair, unix, stream), RET_ALLOW);
        let seqpacket = libc::SOCK_SEQPACKET as u64;
        assert_eq!(call(libc::SYS_socketpair, unix, seqpacket), RET_ALLOW);
        assert_eq!(call(libc::SYS_socketpair, unix, dgram), RET_EPERM);
        assert_eq!(
            call(libc::SYS_socketpair, unix, libc::SOCK_RAW as u64),
            RET_EPERM
        );
        assert_eq!(call(libc::SYS_io_uring_setup, 8, 0), RET_EPERM);
        for nr in [
            libc::SYS_read,
            libc::SYS_openat,
            libc::SYS_connect,
            libc::SYS_execve,
        ] {
            assert_eq!(call(nr, unix, 0), RET_ALLOW, "{nr}");
        }
        // Another ABI is refused whole: its socketcall hides the family from the filter.
        assert_eq!(verdict(&p, 0x4000_0003, 102, [1, 0]), RET_EPERM);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            call(X32_SYSCALL_BIT as i64 + libc::SYS_socket, unix, stream),
            RET_EPERM
        );
    }
}
