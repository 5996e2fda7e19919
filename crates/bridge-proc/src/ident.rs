//! Process identity: a pid together with its start time, and the reads of `/proc/<pid>/stat`
//! that check it.
//!
//! A pid alone can be reused as soon as its process is reaped; the start time (field 22 of
//! `/proc/<pid>/stat`, clock ticks after boot) tells the new process from the old one. Every
//! signal this crate sends to a single process goes through [`ProcId::signal`], which checks it.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A process known by pid and start time (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcId {
    /// Process id.
    pub pid: i32,
    /// `/proc/<pid>/stat` start time, in clock ticks after boot.
    pub start_time: u64,
}

/// Basic facts of one `/proc` entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatInfo {
    pub(crate) ppid: i32,
    pub(crate) pgrp: i32,
    pub(crate) state: char,
    pub(crate) start_time: u64,
}

pub(crate) fn stat_of(pid: i32) -> Option<StatInfo> {
    let mut path = String::with_capacity(24);
    let mut buf = Vec::with_capacity(512);
    read_stat(pid, &mut path, &mut buf)
}

/// Reads and parses `/proc/<pid>/stat` with buffers the caller reuses (a whole-table walk
/// makes one open, one read and one close per process, and no allocation).
pub(crate) fn read_stat(pid: i32, path: &mut String, buf: &mut Vec<u8>) -> Option<StatInfo> {
    use std::fmt::Write as _;
    use std::io::Read as _;
    path.clear();
    let _ = write!(path, "/proc/{pid}/stat");
    buf.clear();
    std::fs::File::open(&*path).ok()?.read_to_end(buf).ok()?;
    parse_stat(buf)
}

/// The fields of a `/proc/<pid>/stat` line this module needs. The command name (field 2) is
/// in parentheses and may itself hold spaces and parentheses, so the fields after it are
/// counted from its last `)`.
fn parse_stat(line: &[u8]) -> Option<StatInfo> {
    let close = line.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(line.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?; // field 3
    let ppid = fields.next()?.parse().ok()?; // field 4
    let pgrp = fields.next()?.parse().ok()?; // field 5
    let start_time = fields.nth(16)?.parse().ok()?; // field 22
    Some(StatInfo {
        ppid,
        pgrp,
        state,
        start_time,
    })
}

/// Reads the start time of `pid`, if it exists.
pub fn start_time(pid: i32) -> Option<u64> {
    stat_of(pid).map(|s| s.start_time)
}

impl ProcId {
    /// Identifies a running process by its pid.
    pub fn of(pid: i32) -> Option<ProcId> {
        start_time(pid).map(|start_time| ProcId { pid, start_time })
    }

    /// True while the same process exists and is not a zombie.
    pub fn is_alive(&self) -> bool {
        matches!(stat_of(self.pid), Some(s) if s.start_time == self.start_time && s.state != 'Z')
    }

    /// True while the same process exists (possibly as a zombie waiting to be reaped).
    pub fn exists(&self) -> bool {
        matches!(stat_of(self.pid), Some(s) if s.start_time == self.start_time)
    }

    /// Sends `sig` if the pid still belongs to this process. Returns true when sent.
    pub fn signal(&self, sig: Signal) -> bool {
        if !self.is_alive() {
            return false;
        }
        kill(Pid::from_raw(self.pid), sig).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let line = b"4242 (we(i)rd) name) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1234 56 18446744073709551615\n";
        let st = parse_stat(line).expect("parsed");
        assert_eq!(st.state, 'S');
        assert_eq!(st.ppid, 17);
        assert_eq!(st.pgrp, 4242);
        assert_eq!(st.start_time, 987654);
        assert!(parse_stat(b"12 (cut").is_none());
        assert!(parse_stat(b"12 (short) S 1 2").is_none());
    }
}
