//! The opencode process table: every opencode process on the machine, read from `/proc`.
//!
//! A process counts as opencode when its executable or its `argv[0]` is named `opencode`
//! (or `opencode.exe`, the name the npm package gives the platform binary), or when it is a
//! `node`/`bun` launcher whose script is named `opencode`. When a launcher's child is the
//! platform binary with the same arguments, only the child is listed. Processes that cannot
//! be read (other users', vanished ones) are skipped, never fatal.
//!
//! The walk looks at each process through its two cheapest files first (the `exe` link, then
//! `comm`) and reads the command line, `stat` and `cwd` only of the few whose names could be
//! opencode's: see [`first_look`] for why that cannot miss one.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bridge_proc::BootClock;

/// What an opencode process is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessKind {
    /// `opencode run`.
    Run,
    /// The interactive TUI (`opencode` with no subcommand, or a directory).
    Tui,
    /// `opencode serve` / `opencode web`.
    Serve,
    /// Any other subcommand (`debug`, `session`, `api`, ...), named.
    Other(String),
}

impl ProcessKind {
    /// Short name: `run`, `tui`, `serve` or the subcommand.
    pub fn as_str(&self) -> &str {
        match self {
            ProcessKind::Run => "run",
            ProcessKind::Tui => "tui",
            ProcessKind::Serve => "serve",
            ProcessKind::Other(s) => s,
        }
    }
}

/// What the bridge knows of one of its warm servers ([`OpencodeProcess::bridge_server`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WarmServer {
    /// The tasks running on it as sessions, ascending (empty: none).
    pub tasks: Vec<u64>,
    /// How long since its last activity (a task, a turn); zero while one is on it.
    pub idle: Duration,
    /// Held by this bridge (started or adopted); otherwise left by a bridge that stopped or
    /// died, or held by another bridge on the same state directory.
    pub held: bool,
}

/// One opencode process.
#[derive(Debug, Clone, PartialEq)]
pub struct OpencodeProcess {
    /// Process id.
    pub pid: i32,
    /// Parent process id.
    pub ppid: i32,
    /// What it is doing.
    pub kind: ProcessKind,
    /// Time since it started.
    pub elapsed: Duration,
    /// `--agent` value.
    pub agent: Option<String>,
    /// Exact `--title` value.
    pub title: Option<String>,
    /// `-m/--model` value.
    pub model: Option<String>,
    /// Working directory: `--dir` when given, else the process's cwd (None when unreadable).
    pub cwd: Option<PathBuf>,
    /// Session id: `-s/--session` when given; filled in by the supervisor for its own tasks.
    pub session_id: Option<String>,
    /// The id of the bridge task that started it, if any.
    pub task_id: Option<u64>,
    /// A warm `opencode serve` of the serve engine noted in this bridge's state directory:
    /// the tasks running on it, how long it has been idle, and whether this bridge holds it.
    /// `None` for every other process.
    pub bridge_server: Option<WarmServer>,
    /// The full command line.
    pub cmdline: Vec<String>,
}

fn base(s: &str) -> &str {
    Path::new(s)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(s)
}

fn is_opencode_name(name: &str) -> bool {
    matches!(name, "opencode" | "opencode.exe")
}

/// Splits a command line into (is_launcher, opencode arguments) when it is an opencode process.
fn opencode_args(cmdline: &[String], exe: Option<&Path>) -> Option<(bool, Vec<String>)> {
    let argv0 = cmdline.first()?;
    let exe_name = exe.and_then(|e| e.file_name()).and_then(|n| n.to_str());
    if is_opencode_name(base(argv0)) || exe_name.is_some_and(is_opencode_name) {
        if matches!(base(argv0), "node" | "bun" | "nodejs")
            && cmdline.get(1).is_some_and(|a| is_opencode_name(base(a)))
        {
            return Some((true, cmdline[2..].to_vec()));
        }
        return Some((false, cmdline[1..].to_vec()));
    }
    if matches!(base(argv0), "node" | "bun" | "nodejs")
        && cmdline.get(1).is_some_and(|a| is_opencode_name(base(a)))
    {
        return Some((true, cmdline[2..].to_vec()));
    }
    None
}

/// Options that take a value in opencode's CLI (so their value is not the subcommand).
const VALUE_OPTS: &[&str] = &[
    "-m",
    "--model",
    "--agent",
    "--title",
    "--format",
    "-s",
    "--session",
    "--dir",
    "--port",
    "--hostname",
    "--log-level",
    "--variant",
    "--attach",
    "-p",
    "--password",
    "-u",
    "--username",
    "--command",
    "--prompt",
    "--cors",
];

fn option_value(args: &[String], names: &[&str]) -> Option<String> {
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            break;
        }
        for n in names {
            if a == n {
                return args.get(i + 1).cloned();
            }
            if let Some(v) = a.strip_prefix(&format!("{n}=")) {
                return Some(v.to_owned());
            }
        }
        i += 1;
    }
    None
}

fn subcommand(args: &[String]) -> Option<&str> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" {
            return None;
        }
        if a.starts_with('-') {
            if VALUE_OPTS.contains(&a) {
                i += 1;
            }
            i += 1;
            continue;
        }
        return Some(a);
    }
    None
}

/// What an opencode command line says about the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgsInfo {
    /// Kind from the subcommand.
    pub kind: ProcessKind,
    /// `--agent`.
    pub agent: Option<String>,
    /// `--title`.
    pub title: Option<String>,
    /// `-m/--model`.
    pub model: Option<String>,
    /// `--dir`.
    pub dir: Option<String>,
    /// `-s/--session`.
    pub session: Option<String>,
}

/// Parses the kind, agent, title, model, dir and session of an opencode argument list.
pub fn describe_args(args: &[String]) -> ArgsInfo {
    let kind = match subcommand(args) {
        None => ProcessKind::Tui,
        Some("run") => ProcessKind::Run,
        Some("serve") | Some("web") => ProcessKind::Serve,
        Some(s) if s.starts_with('/') || s.starts_with('.') || s.starts_with('~') => {
            ProcessKind::Tui
        }
        Some(s) => ProcessKind::Other(s.to_owned()),
    };
    ArgsInfo {
        kind,
        agent: option_value(args, &["--agent"]),
        title: option_value(args, &["--title"]),
        model: option_value(args, &["-m", "--model"]),
        dir: option_value(args, &["--dir"]),
        session: option_value(args, &["-s", "--session"]),
    }
}

struct Raw {
    pid: i32,
    ppid: i32,
    start_ticks: u64,
    args: Vec<String>,
    cmdline: Vec<String>,
    cwd: Option<PathBuf>,
}

/// Scans `/proc` for opencode processes. Never fails: unreadable entries are skipped.
pub fn scan() -> Vec<OpencodeProcess> {
    scan_in(Path::new("/proc"))
}

/// Whether a file or process name could belong to an opencode process: it contains `opencode`,
/// `node` or `bun`. Deliberately wider than the rule in [`opencode_args`], which decides.
fn may_be_opencode(name: &[u8]) -> bool {
    [&b"opencode"[..], b"node", b"bun"]
        .iter()
        .any(|w| name.windows(w.len()).any(|x| x == *w))
}

/// What the first look at a process says.
#[derive(Debug, PartialEq, Eq)]
enum FirstLook {
    /// Its name could be opencode's: read its command line.
    Candidate,
    /// Not opencode, a kernel thread, a zombie, or gone.
    Skip,
}

/// The cheap first look at `/proc/<pid>` (`dir`): the `exe` link, and `comm` unless the link
/// already names a candidate. `dir` is a reused buffer, left as it was given.
///
/// Reading another process's `cmdline` takes its memory-map lock (and is the slow part when
/// busy node/bun processes are alive), so only candidates have it read. This cannot miss an
/// opencode process, because every way [`opencode_args`] can match shows in these two names:
/// - **Executable named `opencode`/`opencode.exe`**: that is the `exe` link itself.
/// - **`argv[0]` named `opencode`, `node`, `bun` or `nodejs`**: `argv[0]` is, unless the parent
///   forged it, the path the process was executed by, and at exec the kernel copies that
///   path's last component into `comm` (cut to 15 bytes; all five names are shorter). This
///   also covers a link named `opencode` to a binary named otherwise (the `exe` link shows the
///   target, `comm` the link's name), a script named `opencode` run through its `#!` line
///   (`comm` is the script's name), and node's `process.title`, which renames `comm` along with
///   `argv`. What is left out is a program started under a borrowed `argv[0]` (`exec -a
///   opencode sleep`) or one that rewrote its own `argv` but not its name: neither runs opencode.
/// - A process without an `exe` link (`ENOENT`) is a kernel thread, a zombie or gone: it has
///   no memory map, so its command line is empty and it was never listed.
///
/// An unreadable link (another user's process) falls back to `comm` alone.
fn first_look(dir: &mut PathBuf) -> FirstLook {
    dir.push("exe");
    let exe = std::fs::read_link(&*dir);
    dir.pop();
    match exe {
        Ok(target) => {
            let name = target.file_name().map_or(&[][..], |n| n.as_bytes());
            if may_be_opencode(name) {
                return FirstLook::Candidate;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return FirstLook::Skip,
        Err(_) => {}
    }
    dir.push("comm");
    let mut buf = [0u8; 64];
    let n = std::fs::File::open(&*dir).and_then(|mut f| f.read(&mut buf));
    dir.pop();
    match n {
        Ok(n) if may_be_opencode(&buf[..n]) => FirstLook::Candidate,
        _ => FirstLook::Skip,
    }
}

/// The table entry of one process from its raw facts.
fn entry(r: &Raw, clock: Option<&BootClock>) -> OpencodeProcess {
    let ArgsInfo {
        kind,
        agent,
        title,
        model,
        dir,
        session,
    } = describe_args(&r.args);
    let elapsed = BootClock::age_or_zero(clock, r.start_ticks);
    let cwd = match dir {
        Some(d) => {
            let p = PathBuf::from(&d);
            if p.is_absolute() {
                Some(p)
            } else {
                r.cwd.as_ref().map(|c| c.join(p))
            }
        }
        None => r.cwd.clone(),
    };
    OpencodeProcess {
        pid: r.pid,
        ppid: r.ppid,
        kind,
        elapsed,
        agent,
        title,
        model,
        cwd,
        session_id: session,
        task_id: None,
        bridge_server: None,
        cmdline: r.cmdline.clone(),
    }
}

/// The entry of a run the bridge started with `program`, whatever the binary is named (the
/// scan only recognises processes named opencode): its arguments are what follows `program`
/// on the command line (after an interpreter for a script), else everything after `argv[0]`.
pub fn own_run_entry(pid: i32, program: &Path) -> Option<OpencodeProcess> {
    let info =
        bridge_proc::ProcInfo::of(pid).filter(|i| !i.cmdline.is_empty() && !i.is_zombie())?;
    let name = program.file_name().and_then(|n| n.to_str());
    let skip = info
        .cmdline
        .iter()
        .position(|a| name.is_some_and(|n| base(a) == n))
        .unwrap_or(0);
    let raw = Raw {
        pid,
        ppid: info.ppid,
        start_ticks: info.start_time,
        args: info.cmdline[skip + 1..].to_vec(),
        cmdline: info.cmdline.clone(),
        cwd: info.cwd,
    };
    Some(entry(&raw, BootClock::now().as_ref()))
}

/// Like [`scan`] on a procfs mounted at `proc_root` (tests use a synthetic tree).
pub fn scan_in(proc_root: &Path) -> Vec<OpencodeProcess> {
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut dir = proc_root.to_path_buf();
    let mut raws = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        dir.push(&name);
        let look = first_look(&mut dir);
        // Candidates are read through one handle on their directory, so a pid reused meanwhile
        // cannot mix two processes' files.
        let p = match look {
            FirstLook::Candidate => procfs::process::Process::new_with_root(dir.clone()).ok(),
            FirstLook::Skip => None,
        };
        dir.pop();
        let Some(p) = p else { continue };
        let Ok(cmdline) = p.cmdline() else { continue };
        if cmdline.is_empty() {
            continue;
        }
        let exe = p.exe().ok();
        let Some((_launcher, args)) = opencode_args(&cmdline, exe.as_deref()) else {
            continue;
        };
        let Ok(st) = p.stat() else { continue };
        if st.state == 'Z' {
            continue;
        }
        raws.push(Raw {
            pid: p.pid,
            ppid: st.ppid,
            start_ticks: st.starttime,
            args,
            cmdline,
            cwd: p.cwd().ok(),
        });
    }
    // Drop a launcher (or wrapper) whose child is an opencode process with the same arguments.
    let by_parent: HashMap<i32, Vec<usize>> =
        raws.iter()
            .enumerate()
            .fold(HashMap::new(), |mut m, (i, r)| {
                m.entry(r.ppid).or_default().push(i);
                m
            });
    let clock = BootClock::in_root(proc_root);
    let mut out = Vec::new();
    for r in &raws {
        let shadowed = by_parent
            .get(&r.pid)
            .is_some_and(|kids| kids.iter().any(|&k| raws[k].args == r.args));
        if shadowed {
            continue;
        }
        out.push(entry(r, clock.as_ref()));
    }
    out.sort_by_key(|p| p.pid);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn recognises_binary_launcher_and_others() {
        let bin = v(&[
            "/x/opencode-linux-x64/bin/opencode",
            "run",
            "--format",
            "json",
        ]);
        assert_eq!(
            opencode_args(&bin, None),
            Some((false, v(&["run", "--format", "json"])))
        );
        let node = v(&[
            "node",
            "/usr/lib/node_modules/opencode-ai/bin/opencode",
            "serve",
        ]);
        assert_eq!(opencode_args(&node, None), Some((true, v(&["serve"]))));
        let exe_only = v(&["/x/.bin/oc-wrapper", "run"]);
        assert_eq!(
            opencode_args(
                &exe_only,
                Some(Path::new("/x/opencode-ai/bin/opencode.exe"))
            ),
            Some((false, v(&["run"])))
        );
        assert_eq!(
            opencode_args(&v(&["bash", "-c", "opencode run"]), None),
            None
        );
        assert_eq!(opencode_args(&v(&["/usr/bin/opencodex"]), None), None);
    }

    #[test]
    fn describes_run_tui_serve_and_others() {
        let a = describe_args(&v(&[
            "run",
            "--format",
            "json",
            "--agent",
            "worker",
            "--title",
            "BETA/worker: fix it",
            "-m",
            "fk/ok",
            "--dir",
            "/p",
            "-s",
            "ses_1",
        ]));
        assert_eq!(a.kind, ProcessKind::Run);
        assert_eq!(a.agent.as_deref(), Some("worker"));
        assert_eq!(a.title.as_deref(), Some("BETA/worker: fix it"));
        assert_eq!(a.model.as_deref(), Some("fk/ok"));
        assert_eq!(a.dir.as_deref(), Some("/p"));
        assert_eq!(a.session.as_deref(), Some("ses_1"));
        assert_eq!(describe_args(&v(&[])).kind, ProcessKind::Tui);
        assert_eq!(describe_args(&v(&["/home/u/proj"])).kind, ProcessKind::Tui);
        assert_eq!(
            describe_args(&v(&["--model", "a/b"])).kind,
            ProcessKind::Tui
        );
        assert_eq!(
            describe_args(&v(&["serve", "--port", "4096"])).kind,
            ProcessKind::Serve
        );
        assert_eq!(
            describe_args(&v(&["--port", "4096", "web"])).kind,
            ProcessKind::Serve
        );
        assert_eq!(
            describe_args(&v(&["debug", "agent", "x"])).kind,
            ProcessKind::Other("debug".into())
        );
        assert_eq!(
            describe_args(&v(&["--title=a b", "run"])).title.as_deref(),
            Some("a b")
        );
    }

    /// A `/proc/<pid>` entry with the files the scan reads.
    fn fake_proc(root: &Path, pid: i32, ppid: i32, cmdline: &[&str], cwd: &Path) {
        let d = root.join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        let comm = Path::new(cmdline[0]).file_name().unwrap().to_str().unwrap();
        // Field 22 (start time) is 500 ticks: 5 s after boot at 100 ticks/s.
        let stat = format!(
            "{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 500 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
        );
        std::fs::write(d.join("stat"), stat).unwrap();
        let short: String = comm.chars().take(15).collect();
        std::fs::write(d.join("comm"), format!("{short}\n")).unwrap();
        let mut cl = cmdline.join("\0");
        cl.push('\0');
        std::fs::write(d.join("cmdline"), cl).unwrap();
        std::os::unix::fs::symlink(cwd, d.join("cwd")).unwrap();
        std::os::unix::fs::symlink(cmdline[0], d.join("exe")).unwrap();
    }

    #[test]
    fn a_synthetic_proc_tree_is_read_and_bad_entries_are_skipped() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::write(r.join("uptime"), "65.00 100.00\n").unwrap();
        let proj = tempfile::tempdir().unwrap();
        // The npm launcher and the platform binary it started, with the same arguments.
        let args = [
            "run",
            "--format",
            "json",
            "--agent",
            "explorer",
            "--title",
            "DOCS/explorer: read the notes",
        ];
        let mut node = vec!["node", "/usr/lib/node_modules/opencode-ai/bin/opencode"];
        node.extend(args);
        fake_proc(r, 100, 1, &node, proj.path());
        let mut bin = vec!["/usr/lib/node_modules/opencode-linux-x64/bin/opencode"];
        bin.extend(args);
        fake_proc(r, 101, 100, &bin, proj.path());
        fake_proc(
            r,
            200,
            1,
            &["/usr/bin/opencode", "serve", "--port", "4096"],
            proj.path(),
        );
        fake_proc(r, 300, 1, &["/usr/bin/opencode"], proj.path());
        fake_proc(r, 400, 1, &["/usr/bin/vim", "opencode.json"], proj.path());
        // Unreadable / vanished entries: an empty dir, a dir with a stat but no cmdline.
        std::fs::create_dir_all(r.join("500")).unwrap();
        fake_proc(r, 600, 1, &["/usr/bin/opencode", "run"], proj.path());
        std::fs::remove_file(r.join("600/cmdline")).unwrap();
        // Gone between its command line and its stat; a zombie.
        fake_proc(r, 610, 1, &["/usr/bin/opencode", "run"], proj.path());
        std::fs::remove_file(r.join("610/stat")).unwrap();
        fake_proc(r, 620, 1, &["/usr/bin/opencode", "run"], proj.path());
        let stat = std::fs::read_to_string(r.join("620/stat")).unwrap();
        std::fs::write(r.join("620/stat"), stat.replace(") S ", ") Z ")).unwrap();
        // Run through a link named `opencode` to a binary named otherwise: only `argv[0]`
        // (and `comm`) say opencode.
        fake_proc(r, 700, 1, &["/home/u/bin/opencode", "serve"], proj.path());
        std::fs::remove_file(r.join("700/exe")).unwrap();
        std::os::unix::fs::symlink("/opt/oc/oc-1.18", r.join("700/exe")).unwrap();
        // Run through a link named otherwise to the opencode binary: only `exe` says so.
        fake_proc(
            r,
            710,
            1,
            &["/home/u/bin/launch-the-opencode-agent", "run"],
            proj.path(),
        );
        std::fs::remove_file(r.join("710/exe")).unwrap();
        std::os::unix::fs::symlink("/opt/oc/opencode", r.join("710/exe")).unwrap();
        // A kernel thread: no exe link, empty cmdline.
        fake_proc(r, 800, 2, &["kworker/0:1"], proj.path());
        std::fs::remove_file(r.join("800/exe")).unwrap();
        std::fs::write(r.join("800/cmdline"), "").unwrap();
        let table = scan_in(r);
        let pids: Vec<i32> = table.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![101, 200, 300, 700, 710], "{table:#?}");
        assert_eq!(table[3].kind, ProcessKind::Serve);
        assert_eq!(table[4].kind, ProcessKind::Run);
        let run = &table[0];
        assert_eq!(run.kind, ProcessKind::Run);
        assert_eq!(run.agent.as_deref(), Some("explorer"));
        assert_eq!(run.title.as_deref(), Some("DOCS/explorer: read the notes"));
        assert_eq!(run.cwd.as_deref(), Some(proj.path()));
        assert_eq!(run.ppid, 100);
        let ticks = procfs::ticks_per_second() as f64;
        let want = 65.0 - 500.0 / ticks;
        assert!(
            (run.elapsed.as_secs_f64() - want).abs() < 0.01,
            "{:?}",
            run.elapsed
        );
        assert_eq!(table[1].kind, ProcessKind::Serve);
        assert_eq!(table[2].kind, ProcessKind::Tui);
    }

    #[test]
    fn names_that_may_be_opencode() {
        for n in [
            "opencode",
            "opencode.exe",
            "opencode-linux-",
            "fake-opencode-v",
            ".opencode-wrapp",
            "node",
            "nodejs",
            "bun",
            "opencode (deleted)",
        ] {
            assert!(may_be_opencode(n.as_bytes()), "{n}");
        }
        for n in [
            "sleep",
            "bash",
            "kworker/0:1",
            "systemd",
            "claude",
            "opencod",
            "",
        ] {
            assert!(!may_be_opencode(n.as_bytes()), "{n}");
        }
    }

    /// A bare `/proc/<pid>` with just an `exe` (a link, a plain file standing for a link that
    /// cannot be read, or none) and a `comm`.
    fn looked_at(exe: Option<&str>, unreadable_exe: bool, comm: Option<&str>) -> FirstLook {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("42");
        std::fs::create_dir_all(&d).unwrap();
        if let Some(t) = exe {
            std::os::unix::fs::symlink(t, d.join("exe")).unwrap();
        }
        if unreadable_exe {
            std::fs::write(d.join("exe"), "").unwrap();
        }
        if let Some(c) = comm {
            std::fs::write(d.join("comm"), format!("{c}\n")).unwrap();
        }
        let mut dir = d.clone();
        let look = first_look(&mut dir);
        assert_eq!(dir, d, "the path buffer is given back as it was");
        look
    }

    #[test]
    fn the_first_look_reads_exe_then_comm() {
        use FirstLook::*;
        // The executable's name decides without `comm`.
        assert_eq!(looked_at(Some("/x/bin/opencode"), false, None), Candidate);
        assert_eq!(looked_at(Some("/usr/bin/node"), false, None), Candidate);
        // A link named opencode to another binary: `comm` has the link's name.
        assert_eq!(
            looked_at(Some("/opt/oc/oc-1.18"), false, Some("opencode")),
            Candidate
        );
        assert_eq!(
            looked_at(Some("/usr/bin/sleep"), false, Some("sleep")),
            Skip
        );
        assert_eq!(looked_at(Some("/usr/bin/sleep"), false, None), Skip);
        // No exe link: kernel thread, zombie or gone, whatever `comm` says.
        assert_eq!(looked_at(None, false, Some("opencode")), Skip);
        // An unreadable link (another user's process): `comm` alone.
        assert_eq!(looked_at(None, true, Some("node")), Candidate);
        assert_eq!(looked_at(None, true, Some("bash")), Skip);
        assert_eq!(looked_at(None, true, None), Skip);
    }

    /// Child processes, each leading its own process group; the groups are killed and the
    /// children reaped on drop (so a shell's `sleep` goes too).
    struct Kids(Vec<std::process::Child>);

    impl Drop for Kids {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let pgid = nix::unistd::Pid::from_raw(c.id() as i32);
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                let _ = c.wait();
            }
        }
    }

    fn system_bin(name: &str) -> PathBuf {
        ["/bin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("no {name} in /bin or /usr/bin"))
    }

    /// Starts `path` in its own process group. A binary copied a moment ago can be busy
    /// (another test thread forked while the copy was open for writing): retried.
    fn spawn(path: &Path, args: &[&str]) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let mut tries = 0;
        loop {
            match std::process::Command::new(path)
                .args(args)
                .stdin(std::process::Stdio::null())
                .process_group(0)
                .spawn()
            {
                Ok(c) => return c,
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("start {}: {e}", path.display()),
            }
        }
    }

    #[test]
    fn real_processes_are_found_by_exe_by_argv0_and_as_node_launchers() {
        let t = tempfile::tempdir().unwrap();
        let dir = |d: &str| {
            let p = t.path().join(d);
            std::fs::create_dir_all(&p).unwrap();
            p
        };
        let (bin, real, lib) = (dir("bin"), dir("real"), dir("lib"));
        let sleep = system_bin("sleep");
        // The opencode binary run through a link whose 26-character name `comm` cuts to
        // `launch-the-open`: found by its executable.
        std::fs::copy(&sleep, real.join("opencode")).unwrap();
        let long = bin.join("launch-the-opencode-agent!");
        std::os::unix::fs::symlink(real.join("opencode"), &long).unwrap();
        // A link named `opencode` to a binary named otherwise: found by `argv[0]` only.
        std::fs::copy(&sleep, real.join("dozer")).unwrap();
        std::os::unix::fs::symlink(real.join("dozer"), bin.join("opencode")).unwrap();
        // `node /path/opencode run ...` (a shell standing in for node) and a node running
        // something else.
        std::fs::copy(system_bin("sh"), bin.join("node")).unwrap();
        std::fs::write(lib.join("opencode"), "sleep 30; :\n").unwrap();
        std::fs::write(lib.join("server.js"), "sleep 30; :\n").unwrap();
        // Not opencode: a longer name, a plain sleep, and a borrowed `argv[0]` (see
        // `first_look`).
        std::fs::copy(&sleep, bin.join("opencodex")).unwrap();
        let mut kids = Kids(vec![
            spawn(&long, &["30"]),
            spawn(&bin.join("opencode"), &["31"]),
            spawn(
                &bin.join("node"),
                &[
                    lib.join("opencode").to_str().unwrap(),
                    "run",
                    "--title",
                    "T",
                ],
            ),
            spawn(
                &bin.join("node"),
                &[lib.join("server.js").to_str().unwrap()],
            ),
            spawn(&bin.join("opencodex"), &["30"]),
            spawn(&sleep, &["30"]),
        ]);
        {
            use std::os::unix::process::CommandExt;
            let c = std::process::Command::new(&sleep)
                .arg0("opencode")
                .arg("30")
                .process_group(0)
                .spawn()
                .unwrap();
            kids.0.push(c);
        }
        let pids: Vec<i32> = kids.0.iter().map(|c| c.id() as i32).collect();
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", pids[0])).unwrap();
        assert_eq!(comm.trim_end(), "launch-the-open");
        let table = scan();
        let ours: Vec<&OpencodeProcess> = table.iter().filter(|p| pids.contains(&p.pid)).collect();
        let found: Vec<i32> = ours.iter().map(|p| p.pid).collect();
        assert_eq!(found, pids[..3].to_vec(), "{ours:#?}");
        assert_eq!(ours[0].kind, ProcessKind::Other("30".into()));
        assert_eq!(ours[1].cmdline[0], bin.join("opencode").to_str().unwrap());
        assert_eq!(ours[2].kind, ProcessKind::Run);
        assert_eq!(ours[2].title.as_deref(), Some("T"));
        assert_eq!(
            ours[2].cwd.as_deref(),
            Some(std::env::current_dir().unwrap().as_path())
        );
    }

    /// The synthetic tree above has each vanishing point in turn; here real processes come
    /// and go while the scans run.
    #[test]
    fn processes_that_exit_mid_scan_are_skipped() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let t = tempfile::tempdir().unwrap();
        let stay = t.path().join("opencode");
        std::fs::copy(system_bin("sleep"), &stay).unwrap();
        let kids = Kids(vec![spawn(&stay, &["30"])]);
        let pid = kids.0[0].id() as i32;
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let started = std::sync::Arc::new(AtomicUsize::new(0));
        // Opencode-named processes that live about a millisecond, some killed at once.
        let churn: Vec<_> = (0..2)
            .map(|_| {
                let (stop, started, stay) = (stop.clone(), started.clone(), stay.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let n = started.fetch_add(1, Ordering::Relaxed);
                        let mut c = spawn(&stay, &["0.001"]);
                        if n % 3 == 0 {
                            let _ = c.kill();
                        }
                        let _ = c.wait();
                    }
                })
            })
            .collect();
        let mut seen = 0;
        for _ in 0..100 {
            let table = scan();
            assert!(table.iter().any(|p| p.pid == pid), "{table:#?}");
            assert!(table.iter().all(|p| !p.cmdline.is_empty()));
            seen += table
                .iter()
                .filter(|p| p.cmdline.len() == 2 && p.cmdline[1] == "0.001")
                .count();
        }
        stop.store(true, Ordering::Relaxed);
        for c in churn {
            c.join().unwrap();
        }
        eprintln!(
            "{} short-lived processes, {seen} sightings",
            started.load(Ordering::Relaxed)
        );
        assert!(started.load(Ordering::Relaxed) > 0);
        drop(kids);
        assert!(scan().iter().all(|p| p.pid != pid));
    }

    #[test]
    fn scan_never_fails_and_skips_itself() {
        let me = std::process::id() as i32;
        assert!(scan().iter().all(|p| p.pid != me));
    }
}
