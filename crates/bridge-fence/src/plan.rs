//! What a confined run may touch ([`Plan`]), and the one decision of what each kind of run
//! needs ([`for_run`]). Measured on opencode 1.18.33 (`strace -f -e trace=%file`, then runs
//! under the fence): see docs/POLICY.md "The kernel fence".

use std::path::{Path, PathBuf};

/// The rights a rule grants beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rights {
    /// Read files, list directories, execute.
    Read,
    /// Everything: read, write, create, remove, rename.
    Write,
    /// A device: read, write, truncate and ioctl, no creation.
    Device,
}

/// A list of paths and the rights beneath each. Paths that do not exist when the fence is
/// built are skipped (nothing beneath them can be reached either).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    rules: Vec<(PathBuf, Rights)>,
    create: Vec<PathBuf>,
    protect: Option<PathBuf>,
    seed: Vec<(PathBuf, &'static str)>,
    guarded: Vec<PathBuf>,
}

impl Plan {
    /// An empty plan: the run may touch nothing.
    pub fn new() -> Plan {
        Plan::default()
    }

    /// Allows reading (and executing) beneath `path`.
    pub fn read(&mut self, path: impl Into<PathBuf>) -> &mut Plan {
        self.add(path.into(), Rights::Read)
    }

    /// Allows everything beneath `path`.
    pub fn write(&mut self, path: impl Into<PathBuf>) -> &mut Plan {
        self.add(path.into(), Rights::Write)
    }

    /// Allows everything beneath the directory `path`, which the fence creates (and its
    /// parents) if it is missing: a runner's own data, state, cache or temp directory, which
    /// the run itself could not create once confined.
    pub fn own_dir(&mut self, path: impl Into<PathBuf>) -> &mut Plan {
        let path = path.into();
        if path.is_absolute() && !self.create.contains(&path) {
            self.create.push(path.clone());
        }
        self.add(path, Rights::Write)
    }

    /// Keeps the protected paths ([`crate::protected::PROTECTED`]) of the project whose top is
    /// `top` read-only, even where a rule lets the run write the project: bound read-only in the
    /// run's own mount namespace where the kernel lets the bridge make one.
    pub fn protect(&mut self, top: impl Into<PathBuf>) -> &mut Plan {
        self.protect = Some(top.into());
        self
    }

    /// Writes `content` to the file `path` before the run starts, if its directory exists and
    /// the file does not: what the runner itself writes there at start, and would die of not
    /// writing once the directory is read-only.
    pub fn seed(&mut self, path: impl Into<PathBuf>, content: &'static str) -> &mut Plan {
        self.seed.push((path.into(), content));
        self
    }

    /// The files [`seed`](Self::seed) named.
    pub fn seeds(&self) -> &[(PathBuf, &'static str)] {
        &self.seed
    }

    /// The project whose protected paths stay read-only ([`protect`](Self::protect)).
    pub fn protected_top(&self) -> Option<&Path> {
        self.protect.as_deref()
    }

    /// Marks `path` as a directory some run may write (this one or another kind): a symlink
    /// beneath it, met while the fence resolves a path, is refused, since a run could have
    /// planted it. The plan's own write rules are guarded too.
    pub fn guard(&mut self, path: impl Into<PathBuf>) -> &mut Plan {
        let path = path.into();
        if path.is_absolute() && !self.guarded.contains(&path) {
            self.guarded.push(path);
        }
        self
    }

    /// The directories [`guard`](Self::guard) named, and the plan's write rules.
    pub fn guarded(&self) -> Vec<PathBuf> {
        let mut out = self.guarded.clone();
        for (p, r) in &self.rules {
            if *r == Rights::Write && !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }

    /// The directories [`own_dir`](Self::own_dir) named.
    pub fn dirs_to_create(&self) -> &[PathBuf] {
        &self.create
    }

    /// Allows using the device `path` (or the devices beneath it).
    pub fn device(&mut self, path: impl Into<PathBuf>) -> &mut Plan {
        self.add(path.into(), Rights::Device)
    }

    fn add(&mut self, path: PathBuf, rights: Rights) -> &mut Plan {
        if path.is_absolute() && !self.rules.contains(&(path.clone(), rights)) {
            self.rules.push((path, rights));
        }
        self
    }

    /// The rules, in the order they were added.
    pub fn rules(&self) -> &[(PathBuf, Rights)] {
        &self.rules
    }

    /// Whether `path` may be written under this plan (a rule grants its whole subtree).
    pub fn may_write(&self, path: &Path) -> bool {
        self.rules
            .iter()
            .any(|(p, r)| *r == Rights::Write && path.starts_with(p))
    }

    /// Whether `path` may be read under this plan.
    pub fn may_read(&self, path: &Path) -> bool {
        self.rules.iter().any(|(p, _)| path.starts_with(p))
    }
}

/// Which program a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// `opencode run` or `opencode serve`.
    Opencode,
    /// `claude -p`.
    Claude,
}

/// Everything [`for_run`] needs to know about one run.
#[derive(Debug, Clone)]
pub struct RunWorld {
    /// Which program.
    pub kind: RunKind,
    /// The program as it will be executed.
    pub program: PathBuf,
    /// The project the run works on (the git worktree containing its cwd, or its cwd): read by
    /// every run, written only when `editing`.
    pub project: PathBuf,
    /// Whether the agent may edit the project.
    pub editing: bool,
    /// The run's private temporary directory (its `TMPDIR`), read and written.
    pub tmp: PathBuf,
    /// More paths the run reads (an oversized prompt's file, an isolated worktree's repository).
    pub extra_read: Vec<PathBuf>,
    /// More paths an editing run writes (an isolated worktree's administrative directory).
    pub extra_write: Vec<PathBuf>,
    /// The run's environment as it will see it (`HOME`, `XDG_*`, `PATH`, `CLAUDE_CONFIG_DIR`,
    /// npm's and bun's caches): for a run in a [`World`](crate::World), its world's
    /// directories.
    pub env: Vec<(String, String)>,
    /// The user's login files the run's world links to ([`World::credentials`](crate::World::credentials)):
    /// each granted alone, read, or read and written when `true`; never its directory.
    pub credentials: Vec<(PathBuf, bool)>,
}

impl RunWorld {
    fn var(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }

    /// `$XDG_<kind>_HOME`, else `$HOME/<fallback>`.
    fn xdg(&self, kind: &str, fallback: &str) -> Option<PathBuf> {
        self.var(&format!("XDG_{kind}_HOME"))
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| self.home().map(|h| h.join(fallback)))
    }
}

/// System directories every run reads: programs, libraries, `/etc` (certificates, resolver,
/// users, git's system config), `/proc` and `/sys` (runtimes read their own limits there).
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/run",
    "/nix/store",
    "/snap",
];

/// Devices every run may open: the null and random devices and shared memory. Never a disk,
/// and never a terminal: `/dev/tty` and `/dev/pts/*` are the user's terminals (same owner), where
/// a run could write over what the user reads or, with `TIOCSTI`, type into their shell.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/shm",
    "/dev/fd",
];

/// Toolchains under the home directory that a run reads (compilers, interpreters, package
/// caches): never `~/.ssh`, credentials files, shell history or other projects.
pub const HOME_TOOLCHAINS_READ: &[&str] = &[
    ".cargo/bin",
    ".cargo/registry",
    ".cargo/git",
    ".cargo/config.toml",
    ".cargo/config",
    ".rustup",
    ".nvm",
    ".npm",
    ".pyenv",
    ".local/bin",
    ".local/lib",
    ".bun",
    ".deno",
    ".volta",
    ".asdf",
    ".sdkman",
    "go/pkg",
    ".gitconfig",
    ".config/git/config",
    ".config/git/ignore",
    ".config/git/attributes",
];

/// What opencode 1.18.33 writes to `.gitignore` in each of its config directories (a project's
/// `.opencode` among them) when the file is missing, as it loads the configuration; it dies
/// when that write fails with `EROFS` (it lives with `EACCES`). `.opencode` is read-only in an
/// editing run ([`crate::protected`]), so the fence writes this first (`Config.ensureGitignore`).
pub const OPENCODE_GITIGNORE: &str =
    "node_modules\npackage.json\npackage-lock.json\nbun.lock\n.gitignore";

/// Package caches of the user's an editing run may write (it builds, installs and tests). Not
/// npm's: `npx` runs packages from `~/.npm/_npx`, so a run that could write there could change
/// what the user's next `npx -y pkg` executes; a run's npm and bun caches are its world's.
pub const HOME_CACHES_WRITE: &[&str] = &[".cargo/registry", ".cargo/git", "go/pkg"];

/// What a run needs, and nothing more:
///
/// - everyone reads [`SYSTEM_READ`], the directories on its `PATH` (but not `/`, the home
///   directory or an ancestor of it), the runner's installation (its binary's `node_modules`
///   tree, or its directory), [`HOME_TOOLCHAINS_READ`], and the project;
/// - everyone writes its private `tmp` and the runner's own directories, which for a run in a
///   [`World`](crate::World) are its world's: opencode's data, state and cache
///   (`$XDG_*_HOME/opencode`) and npm's and bun's caches (`npm_config_cache`,
///   `BUN_INSTALL_CACHE_DIR`; `~/.npm` only for a run outside any world); `claude`'s config
///   directory (`$CLAUDE_CONFIG_DIR`, else `~/.claude` and `~/.claude.json`);
/// - the user's login files its world links to, each file alone ([`RunWorld::credentials`]);
/// - opencode's global config directory is read, not written (a run that could write it could
///   plant a plugin for every later opencode);
/// - an editing run also writes the project, [`HOME_CACHES_WRITE`] and `$XDG_CACHE_HOME`, but
///   not the project's protected paths ([`crate::protected`], [`Plan::protect`]);
/// - devices: [`DEVICES`] only.
///
/// Every directory an editing run of either runner in this environment may write is
/// [guarded](Plan::guard): a symlink there is refused when the fence is built, whoever planted it.
pub fn for_run(w: &RunWorld) -> Plan {
    let mut plan = rules_for(w);
    for kind in [RunKind::Opencode, RunKind::Claude] {
        let widest = RunWorld {
            kind,
            editing: true,
            ..w.clone()
        };
        for (p, r) in rules_for(&widest).rules() {
            if *r == Rights::Write {
                plan.guard(p);
            }
        }
    }
    plan
}

fn rules_for(w: &RunWorld) -> Plan {
    let mut plan = Plan::new();
    for p in SYSTEM_READ {
        plan.read(*p);
    }
    for p in DEVICES {
        plan.device(*p);
    }
    let home = w.home();
    let is_home_or_above =
        |p: &Path| p == Path::new("/") || home.as_deref().is_some_and(|h| h.starts_with(p));
    if let Some(path) = w.var("PATH") {
        for dir in std::env::split_paths(path) {
            if dir.is_absolute() && !is_home_or_above(&dir) {
                plan.read(dir);
            }
        }
    }
    plan.read(installation(&w.program));
    if let Some(h) = &home {
        for p in HOME_TOOLCHAINS_READ {
            plan.read(h.join(p));
        }
    }
    plan.read(&w.project);
    for p in &w.extra_read {
        plan.read(p);
    }
    plan.own_dir(&w.tmp);
    match w.kind {
        RunKind::Opencode => {
            for (kind, fallback) in [
                ("DATA", ".local/share"),
                ("STATE", ".local/state"),
                ("CACHE", ".cache"),
            ] {
                if let Some(d) = w.xdg(kind, fallback) {
                    plan.own_dir(d.join("opencode"));
                }
            }
            if let Some(d) = w.xdg("CONFIG", ".config") {
                plan.read(d.join("opencode"));
            }
            // Config the user pointed opencode at.
            for key in ["OPENCODE_CONFIG_DIR", "OPENCODE_CONFIG"] {
                if let Some(p) = w.var(key) {
                    plan.read(p);
                }
            }
            let caches = ["npm_config_cache", "BUN_INSTALL_CACHE_DIR"];
            let mut in_world = false;
            for key in caches {
                if let Some(p) = w.var(key).map(PathBuf::from).filter(|p| p.is_absolute()) {
                    plan.own_dir(p);
                    in_world = true;
                }
            }
            if let Some(h) = &home {
                if !in_world {
                    plan.own_dir(h.join(".npm"));
                }
                plan.read(h.join(".opencode"));
            }
        }
        RunKind::Claude => {
            match w.var("CLAUDE_CONFIG_DIR") {
                Some(d) => {
                    plan.own_dir(d);
                }
                None => {
                    if let Some(h) = &home {
                        plan.own_dir(h.join(".claude"));
                        plan.write(h.join(".claude.json"));
                    }
                }
            };
        }
    }
    for (file, write) in &w.credentials {
        if *write {
            plan.write(file);
        } else {
            plan.read(file);
        }
    }
    if w.editing {
        plan.write(&w.project);
        plan.protect(&w.project);
        if w.kind == RunKind::Opencode {
            plan.seed(w.project.join(".opencode/.gitignore"), OPENCODE_GITIGNORE);
        }
        for p in &w.extra_write {
            plan.write(p);
        }
        if let Some(h) = &home {
            for p in HOME_CACHES_WRITE {
                plan.write(h.join(p));
            }
        }
        if let Some(d) = w.xdg("CACHE", ".cache") {
            plan.write(d);
        }
    }
    plan
}

/// The project a run in `cwd` works on, and what git needs beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// The nearest directory at or above `cwd`, not above the boundary, that holds a `.git`
    /// directory, or the bridge's own worktree; else `cwd` itself.
    pub top: PathBuf,
    /// For the bridge's own worktree: its repository's git directory, which git reads
    /// (objects, refs). Empty otherwise.
    pub read: Vec<PathBuf>,
    /// For the bridge's own worktree: its administrative directory (`.git/worktrees/<name>`:
    /// index, `HEAD`), which git writes in an editing run. Empty otherwise.
    pub write: Vec<PathBuf>,
}

/// A linked worktree the bridge made itself (an isolated task's), as the bridge recorded it
/// when it made it, before any run: its directory, its administrative directory and its
/// repository's git directory. What the worktree's `.git` file or `commondir` say now is never
/// read: a run may have rewritten them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnWorktree {
    /// The worktree's top directory.
    pub dir: PathBuf,
    /// Its administrative directory (`<git dir>/worktrees/<name>`).
    pub admin: PathBuf,
    /// The repository's git directory (the common dir).
    pub common: PathBuf,
}

/// Finds the [`Project`] of `cwd` (canonical) without running anything: it walks up from
/// `cwd` looking for `.git`, never above `boundary` (the bridge's root, or an isolated task's
/// worktree), so a run never gets a tree wider than the one it was given.
///
/// Only a `.git` **directory** makes a project. A `.git` file (`gitdir: …`) or symlink points
/// elsewhere, and any run that could write the tree could have written it: it counts only when
/// it is the top of `own`, the bridge's own worktree, and then the paths granted are the ones
/// the bridge recorded in `own`, not the ones the file names. Any other `.git` file or symlink
/// stops the project at `cwd`, and nothing it names is granted.
pub fn project_of(cwd: &Path, boundary: &Path, own: Option<&OwnWorktree>) -> Project {
    let just_cwd = || Project {
        top: cwd.to_path_buf(),
        read: vec![],
        write: vec![],
    };
    for dir in cwd.ancestors() {
        if !dir.starts_with(boundary) {
            break;
        }
        match std::fs::symlink_metadata(dir.join(".git")) {
            Ok(m) if m.is_dir() => {
                return Project {
                    top: dir.to_path_buf(),
                    read: vec![],
                    write: vec![],
                };
            }
            Ok(_) => {
                return match own.filter(|o| o.dir == dir) {
                    Some(o) => match (o.admin.canonicalize(), o.common.canonicalize()) {
                        (Ok(admin), Ok(common)) => Project {
                            top: dir.to_path_buf(),
                            read: vec![common],
                            write: vec![admin],
                        },
                        _ => Project {
                            top: dir.to_path_buf(),
                            read: vec![],
                            write: vec![],
                        },
                    },
                    None => just_cwd(),
                };
            }
            Err(_) => {}
        }
        if dir == boundary {
            break;
        }
    }
    just_cwd()
}

/// Where a runner is installed: the outermost `node_modules` above its real binary (an npm
/// package runs its platform binary from a sibling package), else the binary's directory.
pub fn installation(program: &Path) -> PathBuf {
    let real = program
        .canonicalize()
        .unwrap_or_else(|_| program.to_path_buf());
    let outermost = real
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last()
        .map(Path::to_path_buf);
    outermost.unwrap_or_else(|| {
        real.parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world(editing: bool) -> RunWorld {
        RunWorld {
            kind: RunKind::Opencode,
            program: PathBuf::from("/opt/x/node_modules/opencode-ai/node_modules/oc/bin/opencode"),
            project: PathBuf::from("/home/u/projects/app"),
            editing,
            tmp: PathBuf::from("/home/u/.local/state/opencode-bridge/tmp/1"),
            extra_read: vec![],
            extra_write: vec![],
            credentials: vec![],
            env: vec![
                ("HOME".into(), "/home/u".into()),
                (
                    "PATH".into(),
                    "/usr/bin:/home/u/.cargo/bin:/home/u:/:rel".into(),
                ),
            ],
        }
    }

    #[test]
    fn a_read_only_run_writes_nothing_of_the_project_or_home() {
        let plan = for_run(&world(false));
        assert!(plan.may_read(Path::new("/home/u/projects/app/src/main.rs")));
        assert!(!plan.may_write(Path::new("/home/u/projects/app/src/main.rs")));
        assert!(!plan.may_read(Path::new("/home/u/.ssh/id_ed25519")));
        assert!(!plan.may_read(Path::new("/home/u/projects/other/secret")));
        assert!(!plan.may_write(Path::new("/home/u/.config/opencode/plugin/x.js")));
        assert!(plan.may_read(Path::new("/home/u/.config/opencode/opencode.json")));
        assert!(plan.may_write(Path::new("/home/u/.local/share/opencode/opencode.db")));
        assert!(plan.may_write(Path::new("/home/u/.local/state/opencode-bridge/tmp/1/x")));
        assert!(!plan.may_write(Path::new("/tmp/x")));
        assert!(!plan.may_read(Path::new("/tmp/x")));
        assert!(!plan.may_read(Path::new("/dev/tty")));
        assert!(!plan.may_read(Path::new("/dev/pts/0")));
        assert!(!plan.may_read(Path::new("/dev/vda")));
    }

    #[test]
    fn an_editing_run_writes_its_project_and_caches_only() {
        let plan = for_run(&world(true));
        assert!(plan.may_write(Path::new("/home/u/projects/app/src/main.rs")));
        assert!(!plan.may_write(Path::new("/home/u/projects/other/x")));
        assert!(plan.may_write(Path::new("/home/u/.cargo/registry/cache/x")));
        assert!(!plan.may_read(Path::new("/home/u/.cargo/credentials.toml")));
        assert!(!plan.may_write(Path::new("/home/u/.bashrc")));
        assert_eq!(
            plan.protected_top(),
            Some(Path::new("/home/u/projects/app"))
        );
        assert_eq!(for_run(&world(false)).protected_top(), None);
    }

    #[test]
    fn what_any_run_of_the_environment_may_write_is_guarded() {
        let g = for_run(&world(false)).guarded();
        for p in [
            "/home/u/projects/app",
            "/home/u/.cache",
            "/home/u/.cache/opencode",
            "/home/u/.local/share/opencode",
            "/home/u/.npm",
            "/home/u/.claude",
            "/home/u/.cargo/registry",
        ] {
            assert!(g.contains(&PathBuf::from(p)), "{p} is not guarded: {g:?}");
        }
        assert!(!g.contains(&PathBuf::from("/home/u")));
    }

    #[test]
    fn path_entries_that_are_home_or_above_are_not_readable_wholesale() {
        let plan = for_run(&world(false));
        assert!(plan.may_read(Path::new("/home/u/.cargo/bin/cargo")));
        assert!(!plan.rules().iter().any(|(p, _)| p == Path::new("/home/u")));
        assert!(!plan.rules().iter().any(|(p, _)| p == Path::new("/")));
    }

    #[test]
    fn the_project_is_the_git_tree_inside_the_boundary_or_the_cwd() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let repo = root.join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("src/deep")).unwrap();
        assert_eq!(project_of(&repo.join("src/deep"), &root, None).top, repo);
        // A boundary below the repository's top: the cwd, never wider.
        let sub = repo.join("src");
        assert_eq!(
            project_of(&sub.join("deep"), &sub, None).top,
            sub.join("deep")
        );
        let plain = root.join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        assert_eq!(project_of(&plain, &root, None).top, plain);
    }

    /// A linked worktree's `.git` file and `commondir`, as `git worktree add` writes them.
    fn linked(root: &Path) -> (PathBuf, OwnWorktree) {
        let admin = root.join("repo/.git/worktrees/w1");
        std::fs::create_dir_all(&admin).unwrap();
        std::fs::write(admin.join("commondir"), "../..\n").unwrap();
        let wt = root.join("wt");
        std::fs::create_dir_all(wt.join("src")).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", admin.display())).unwrap();
        let own = OwnWorktree {
            dir: wt.clone(),
            admin: admin.clone(),
            common: root.join("repo/.git"),
        };
        (wt, own)
    }

    #[test]
    fn the_bridges_own_worktree_reads_its_repository_and_writes_its_admin_dir() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (wt, own) = linked(&root);
        let p = project_of(&wt.join("src"), &wt, Some(&own));
        assert_eq!(p.top, wt);
        assert_eq!(p.read, vec![root.join("repo/.git")]);
        assert_eq!(p.write, vec![own.admin.clone()]);
        // What the `.git` file and `commondir` say now is not read: a run rewrote them.
        std::fs::write(wt.join(".git"), "gitdir: /\n").unwrap();
        std::fs::write(own.admin.join("commondir"), "/\n").unwrap();
        assert_eq!(project_of(&wt, &wt, Some(&own)), p);
    }

    #[test]
    fn a_git_file_anywhere_else_stops_the_project_at_the_cwd_and_grants_nothing() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (wt, own) = linked(&root);
        // A linked worktree the bridge did not make (or a `.git` file a run wrote).
        let p = project_of(&wt.join("src"), &root, None);
        assert_eq!(
            p,
            Project {
                top: wt.join("src"),
                read: vec![],
                write: vec![]
            }
        );
        // Another worktree than the bridge's own.
        let other = OwnWorktree {
            dir: root.join("elsewhere"),
            ..own
        };
        assert_eq!(
            project_of(&wt.join("src"), &root, Some(&other)).top,
            wt.join("src")
        );
        // A run planted `gitdir: $HOME` in a subdirectory of a real repository.
        let repo = root.join("repo");
        let sub = repo.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(".git"), "gitdir: /root\n").unwrap();
        let p = project_of(&sub, &root, None);
        assert_eq!((p.top, p.read, p.write), (sub.clone(), vec![], vec![]));
        // A `.git` symlink, even to a real git directory.
        std::fs::remove_file(sub.join(".git")).unwrap();
        std::os::unix::fs::symlink(repo.join(".git"), sub.join(".git")).unwrap();
        assert_eq!(project_of(&sub, &root, None).top, sub);
    }

    #[test]
    fn an_npm_installation_is_its_outermost_node_modules() {
        assert_eq!(
            installation(Path::new("/opt/x/node_modules/a/node_modules/b/bin/oc")),
            PathBuf::from("/opt/x/node_modules")
        );
        assert_eq!(
            installation(Path::new("/nonexistent/bin/oc")),
            PathBuf::from("/nonexistent/bin")
        );
    }
}
