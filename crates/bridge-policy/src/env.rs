//! The world the policy reads: environment variables, the home directory and files.
//!
//! Everything the policy crate knows about the machine comes through [`Environment`], so an
//! embedding tool can supply its own view and tests can build one in memory with [`FakeEnv`].
//! [`SystemEnv`] is the real process environment and file system; it only reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Read-only access to environment variables and files.
///
/// Implementations must not fail: a file that cannot be read is `None`, a directory that cannot
/// be listed is empty.
pub trait Environment {
    /// The value of an environment variable, `None` when unset or not valid UTF-8.
    fn var(&self, name: &str) -> Option<String>;
    /// The user's home directory, `None` when unknown (for example `HOME` unset).
    fn home_dir(&self) -> Option<PathBuf>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// The whole content of a UTF-8 text file, `None` when missing or unreadable.
    fn read_to_string(&self, path: &Path) -> Option<String>;
    /// The entries of a directory (full paths, sorted), empty when missing or unreadable.
    fn read_dir(&self, path: &Path) -> Vec<PathBuf>;
}

/// The real process environment and file system (reads only).
///
/// ```
/// use bridge_policy::{Environment, SystemEnv};
/// let env = SystemEnv;
/// assert!(env.exists(std::path::Path::new("/")));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemEnv;

impl Environment for SystemEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn home_dir(&self) -> Option<PathBuf> {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn read_to_string(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    fn read_dir(&self, path: &Path) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(path) else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        out.sort();
        out
    }
}

/// An in-memory environment for tests and embedders.
///
/// Files are added with their content; their parent directories exist implicitly. Directories
/// can be added on their own with [`FakeEnv::with_dir`].
///
/// ```
/// use bridge_policy::{Environment, FakeEnv};
/// use std::path::Path;
///
/// let env = FakeEnv::new()
///     .with_home("/home/ada")
///     .with_var("OPENCODE_MODE", "sensitive")
///     .with_file("/home/ada/p/.claude/insensitive", "")
///     .with_dir("/home/ada/p/.git");
/// assert_eq!(env.var("OPENCODE_MODE").as_deref(), Some("sensitive"));
/// assert!(env.exists(Path::new("/home/ada/p/.claude")));
/// assert_eq!(env.read_dir(Path::new("/home/ada/p")).len(), 2);
/// ```
#[derive(Debug, Clone, Default)]
pub struct FakeEnv {
    vars: BTreeMap<String, String>,
    home: Option<PathBuf>,
    files: BTreeMap<PathBuf, String>,
    dirs: BTreeSet<PathBuf>,
}

impl FakeEnv {
    /// An empty world: no variables, no home directory, only `/`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets an environment variable.
    pub fn with_var(mut self, name: &str, value: &str) -> Self {
        self.vars.insert(name.to_owned(), value.to_owned());
        self
    }

    /// Sets the home directory (and creates it).
    pub fn with_home(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        self = self.with_dir(path.clone());
        self.home = Some(path);
        self
    }

    /// Adds a file with its content; its parent directories exist from now on.
    pub fn with_file(mut self, path: impl Into<PathBuf>, content: &str) -> Self {
        let path = path.into();
        if let Some(parent) = path.parent() {
            self = self.with_dir(parent.to_path_buf());
        }
        self.files.insert(path, content.to_owned());
        self
    }

    /// Adds a directory and its parents.
    pub fn with_dir(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        for ancestor in path.ancestors() {
            if ancestor.as_os_str().is_empty() {
                break;
            }
            self.dirs.insert(ancestor.to_path_buf());
        }
        self
    }
}

impl Environment for FakeEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    fn home_dir(&self) -> Option<PathBuf> {
        self.home.clone()
    }

    fn exists(&self, path: &Path) -> bool {
        self.files.contains_key(path) || self.dirs.contains(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.dirs.contains(path)
    }

    fn read_to_string(&self, path: &Path) -> Option<String> {
        self.files.get(path).cloned()
    }

    fn read_dir(&self, path: &Path) -> Vec<PathBuf> {
        let children = self
            .files
            .keys()
            .chain(self.dirs.iter())
            .filter(|p| p.parent() == Some(path))
            .cloned();
        let set: BTreeSet<PathBuf> = children.collect();
        set.into_iter().collect()
    }
}
