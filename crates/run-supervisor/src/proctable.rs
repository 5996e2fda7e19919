//! The opencode process table: every opencode process on the machine, read from `/proc`.
//!
//! A process counts as opencode when its executable or its `argv[0]` is named `opencode`
//! (or `opencode.exe`, the name the npm package gives the platform binary), or when it is a
//! `node`/`bun` launcher whose script is named `opencode`. When a launcher's child is the
//! platform binary with the same arguments, only the child is listed. Processes that cannot
//! be read (other users', vanished ones) are skipped, never fatal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

fn uptime_secs(proc_root: &Path) -> Option<f64> {
    let s = std::fs::read_to_string(proc_root.join("uptime")).ok()?;
    s.split_whitespace().next()?.parse().ok()
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

/// Like [`scan`] on a procfs mounted at `proc_root` (tests use a synthetic tree).
pub fn scan_in(proc_root: &Path) -> Vec<OpencodeProcess> {
    let me = std::process::id() as i32;
    let Ok(iter) = procfs::process::all_processes_with_root(proc_root) else {
        return Vec::new();
    };
    let mut raws = Vec::new();
    for p in iter.flatten() {
        if p.pid == me {
            continue;
        }
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
    let tps = procfs::ticks_per_second().max(1) as f64;
    let up = uptime_secs(proc_root);
    let mut out = Vec::new();
    for r in &raws {
        let shadowed = by_parent
            .get(&r.pid)
            .is_some_and(|kids| kids.iter().any(|&k| raws[k].args == r.args));
        if shadowed {
            continue;
        }
        let ArgsInfo {
            kind,
            agent,
            title,
            model,
            dir,
            session,
        } = describe_args(&r.args);
        let elapsed = up
            .map(|u| (u - r.start_ticks as f64 / tps).max(0.0))
            .map(Duration::from_secs_f64)
            .unwrap_or_default();
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
        out.push(OpencodeProcess {
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
            cmdline: r.cmdline.clone(),
        });
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
        let table = scan_in(r);
        let pids: Vec<i32> = table.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![101, 200, 300], "{table:#?}");
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
    fn scan_never_fails_and_skips_itself() {
        let me = std::process::id() as i32;
        assert!(scan().iter().all(|p| p.pid != me));
    }
}
