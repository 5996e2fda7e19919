//! Private worlds: the runner state each (project, access) writes, and nobody else reads.
//!
//! A run writes more than its project: opencode's store, logs and snapshot repositories (data
//! and state directories), provider packages and the models list (cache), npm's and bun's
//! package caches; `claude` its config directory. When those are the user's own, every run
//! shares them with every other run and with the user's own opencode, claude and npx, and
//! whatever a run plants there (an injected session, a snapshot repository's git config, a
//! package in the npx cache) is read or executed later by something else, unfenced.
//!
//! So every run gets a [`World`]: directories under the bridge's state directory
//! (`<state>/worlds/<project>-<ro|rw>-<hash>/`), one per project and access, that its
//! environment points the runner at (`XDG_DATA_HOME`, `XDG_STATE_HOME`, `XDG_CACHE_HOME`,
//! npm's and bun's caches, `CLAUDE_CONFIG_DIR`) and the fence lets it write. Nothing of one
//! world is granted to a run of another, and the user's tools never look there.
//!
//! A world is seeded without writing back: the user's provider logins are linked by reference
//! (a symlink to opencode's `auth.json` or Claude Code's `.credentials.json`, which the bridge
//! never opens; the fence grants that one file, [`World::credentials`]), the models list is
//! copied. Everything a run could have changed in its world is checked again before each run
//! ([`World::prepare`]): a directory the bridge grants that is no longer a real directory owned
//! by the user (a run replaced it with a symlink to `$HOME`) is removed and made anew.

use std::path::{Path, PathBuf};

use crate::plan::RunKind;

/// The runner directories of one (project, access).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    root: PathBuf,
    project: PathBuf,
    editing: bool,
}

/// Where the user's own runner state is, as the bridge's environment says (for seeding).
#[derive(Debug, Clone, Default)]
pub struct UserDirs {
    /// opencode's data directory (`$XDG_DATA_HOME/opencode`), where `auth.json` lives.
    pub opencode_data: Option<PathBuf>,
    /// opencode's cache directory (`$XDG_CACHE_HOME/opencode`), with `models.json`.
    pub opencode_cache: Option<PathBuf>,
    /// Claude Code's config directory (`$CLAUDE_CONFIG_DIR` or `~/.claude`).
    pub claude_config: Option<PathBuf>,
    /// opencode's global configuration directory (`$OPENCODE_CONFIG_DIR`, else
    /// `$XDG_CONFIG_HOME/opencode`, else `~/.config/opencode`), linked into an opencode 2
    /// server's ([`World::opencode2_config`]).
    pub opencode_config: Option<PathBuf>,
}

impl UserDirs {
    /// The user's directories from an environment lookup (`HOME`, `XDG_*`,
    /// `CLAUDE_CONFIG_DIR`).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> UserDirs {
        let abs = |k: &str| {
            get(k)
                .filter(|v| !v.trim().is_empty())
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        let home = abs("HOME");
        let xdg =
            |k: &str, fallback: &str| abs(k).or_else(|| home.as_ref().map(|h| h.join(fallback)));
        UserDirs {
            opencode_data: xdg("XDG_DATA_HOME", ".local/share").map(|d| d.join("opencode")),
            opencode_cache: xdg("XDG_CACHE_HOME", ".cache").map(|d| d.join("opencode")),
            opencode_config: abs("OPENCODE_CONFIG_DIR")
                .or_else(|| xdg("XDG_CONFIG_HOME", ".config").map(|d| d.join("opencode"))),
            claude_config: abs("CLAUDE_CONFIG_DIR").or_else(|| home.map(|h| h.join(".claude"))),
        }
    }
}

/// The file a world's record of itself is kept in (its project and access), read by whoever
/// lists worlds ([`all`]).
const RECORD: &str = "world.json";

/// Where worlds live for a bridge without a state directory: a private directory of this
/// user's in the system's temp dir.
pub fn fallback_state_dir() -> PathBuf {
    std::env::temp_dir().join(format!("opencode-bridge-{}", current_uid()))
}

/// The directory every world lives under, inside the bridge's state directory.
pub fn worlds_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("worlds")
}

impl World {
    /// The world of `project` (canonical) with this access, under `state_dir`.
    pub fn of(state_dir: &Path, project: &Path, editing: bool) -> World {
        World {
            root: worlds_dir(state_dir).join(dir_name(project, editing)),
            project: project.to_path_buf(),
            editing,
        }
    }

    /// The world's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The project it belongs to.
    pub fn project(&self) -> &Path {
        &self.project
    }

    /// Whether its runs edit the project.
    pub fn editing(&self) -> bool {
        self.editing
    }

    /// `XDG_DATA_HOME` of its runs: opencode's store (`opencode/opencode.db`) is beneath.
    pub fn data_home(&self) -> PathBuf {
        self.root.join("data")
    }

    /// opencode's store in this world.
    pub fn opencode_db(&self) -> PathBuf {
        self.data_home().join("opencode/opencode.db")
    }

    fn state_home(&self) -> PathBuf {
        self.root.join("state")
    }

    fn cache_home(&self) -> PathBuf {
        self.root.join("cache")
    }

    fn npm_cache(&self) -> PathBuf {
        self.root.join("npm")
    }

    fn bun_cache(&self) -> PathBuf {
        self.root.join("bun")
    }

    fn claude_config(&self) -> PathBuf {
        self.root.join("claude")
    }

    /// The variables that point a runner of `kind` at this world. For opencode:
    /// `XDG_DATA_HOME`, `XDG_STATE_HOME`, `XDG_CACHE_HOME`, npm's and bun's package caches;
    /// for `claude`: `CLAUDE_CONFIG_DIR` too (its config and session files).
    pub fn env(&self, kind: RunKind) -> Vec<(String, String)> {
        let s = |p: PathBuf| p.to_string_lossy().into_owned();
        let mut env = vec![
            ("XDG_DATA_HOME".to_owned(), s(self.data_home())),
            ("XDG_STATE_HOME".to_owned(), s(self.state_home())),
            ("XDG_CACHE_HOME".to_owned(), s(self.cache_home())),
            ("npm_config_cache".to_owned(), s(self.npm_cache())),
            ("BUN_INSTALL_CACHE_DIR".to_owned(), s(self.bun_cache())),
        ];
        if kind == RunKind::Claude {
            env.push(("CLAUDE_CONFIG_DIR".to_owned(), s(self.claude_config())));
        }
        env
    }

    /// The directories of the world a run of `kind` writes (each made a real, private
    /// directory by [`prepare`](Self::prepare)).
    fn granted(&self, kind: RunKind) -> Vec<PathBuf> {
        let mut dirs = vec![
            self.data_home(),
            self.data_home().join("opencode"),
            self.state_home(),
            self.state_home().join("opencode"),
            self.cache_home(),
            self.cache_home().join("opencode"),
            self.npm_cache(),
            self.bun_cache(),
        ];
        if kind == RunKind::Claude {
            dirs.push(self.claude_config());
        }
        dirs
    }

    /// The user's credential files this world links to, with whether the runner writes them
    /// (Claude Code refreshes its OAuth token in place; opencode only reads its logins). The
    /// fence grants these files, never the directories they live in.
    pub fn credentials(&self, kind: RunKind, user: &UserDirs) -> Vec<(PathBuf, bool)> {
        match kind {
            RunKind::Opencode => user
                .opencode_data
                .iter()
                .map(|d| (d.join("auth.json"), false))
                .collect(),
            RunKind::Claude => user
                .claude_config
                .iter()
                .map(|d| (d.join(".credentials.json"), true))
                .collect(),
        }
    }

    /// Makes the world ready for a run of `kind`: its directories exist as real directories of
    /// this user with mode 0700 (anything else in their place, a symlink a run left, is removed
    /// first), its record names its project and access, the user's logins are linked by
    /// reference (never read) and the models list is copied when the world has none.
    pub fn prepare(&self, kind: RunKind, user: &UserDirs) -> Result<(), String> {
        let worlds = self.root.parent().unwrap_or(&self.root);
        if let Some(state) = worlds.parent() {
            std::fs::create_dir_all(state)
                .map_err(|e| format!("cannot create {}: {e}", state.display()))?;
        }
        real_private_dir(worlds)?;
        real_private_dir(&self.root)?;
        for dir in self.granted(kind) {
            real_private_dir(&dir)?;
        }
        let record = serde_record(&self.project, self.editing);
        let path = self.root.join(RECORD);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(record.as_str()) {
            std::fs::write(&path, record)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        for (file, _) in self.credentials(kind, user) {
            let link = match kind {
                RunKind::Opencode => self.data_home().join("opencode/auth.json"),
                RunKind::Claude => self.claude_config().join(".credentials.json"),
            };
            link_to(&link, &file)?;
        }
        if kind == RunKind::Opencode
            && let Some(cache) = &user.opencode_cache
        {
            let (from, to) = (
                cache.join("models.json"),
                self.cache_home().join("opencode/models.json"),
            );
            if from.is_file() && std::fs::symlink_metadata(&to).is_err() {
                // A copy, never a link: a run may rewrite its world's list, not the user's.
                let _ = std::fs::copy(&from, &to);
            }
            // The provider packages opencode installed in the user's cache, so a fresh world
            // downloads none of them (best effort: what is not copied is installed on first use).
            let world_cache = self.cache_home().join("opencode");
            if std::fs::symlink_metadata(world_cache.join("node_modules")).is_err() {
                let mut budget = SeedBudget::default();
                for name in PROVIDER_SEED {
                    copy_tree(&cache.join(name), &world_cache.join(name), &mut budget);
                }
            }
        }
        Ok(())
    }
}

/// What of opencode's cache directory holds its provider packages (`npm`/`bun` installs there).
const PROVIDER_SEED: [&str; 4] = [
    "package.json",
    "bun.lock",
    "package-lock.json",
    "node_modules",
];

/// The most a world's seeding copies: past it the rest is left to opencode's own install.
#[derive(Debug)]
struct SeedBudget {
    bytes: u64,
    files: u32,
}

impl Default for SeedBudget {
    fn default() -> SeedBudget {
        SeedBudget {
            bytes: 256 << 20,
            files: 20_000,
        }
    }
}

/// Copies the regular files and directories of `from` to `to` (which must not exist yet),
/// following no symlink on either side and keeping within `budget`. Errors leave the copy
/// partial, never anything outside `to`.
fn copy_tree(from: &Path, to: &Path, budget: &mut SeedBudget) {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(meta) = std::fs::symlink_metadata(from) else {
        return;
    };
    if budget.files == 0 || std::fs::symlink_metadata(to).is_ok() {
        return;
    }
    if meta.is_dir() {
        if std::fs::create_dir(to).is_err() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(from) else {
            return;
        };
        for e in entries.flatten() {
            copy_tree(&e.path(), &to.join(e.file_name()), budget);
        }
    } else if meta.is_file() && meta.len() <= budget.bytes {
        let (Ok(mut src), Ok(mut dst)) = (
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(from),
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o755)
                .open(to),
        ) else {
            return;
        };
        if std::io::copy(&mut src, &mut dst).is_ok() {
            budget.bytes -= meta.len();
            budget.files -= 1;
        }
    }
}

impl World {
    /// The configuration directory of an opencode 2 server in this world
    /// (`OPENCODE_CONFIG_DIR`, which replaces opencode 2's global configuration directory, and
    /// which it reads; it ignores `OPENCODE_CONFIG_CONTENT`): every entry of the user's own
    /// configuration directory `user` linked by reference (never read), and `overlay` (the
    /// run's inline configuration, the bridge's rules in it) as `opencode.jsonc`, which
    /// opencode loads after `opencode.json` and whose agent rules it appends. One directory per
    /// overlay (`config2-<hash>`), its links and overlay written again each time. A user `opencode.jsonc` leaves no place
    /// for the overlay: refused with one line.
    pub fn opencode2_config(&self, user: Option<&Path>, overlay: &str) -> Result<PathBuf, String> {
        const OVERLAY: &str = "opencode.jsonc";
        let dir = self
            .root
            .join(format!("config2-{:016x}", fnv1a(overlay.as_bytes())));
        // A server of this overlay may be reading it: entries are linked again in place.
        real_private_dir(&dir)?;
        if let Some(user) = user
            && let Ok(entries) = std::fs::read_dir(user)
        {
            for e in entries.flatten() {
                let name = e.file_name();
                if name == OVERLAY {
                    return Err(format!(
                        "{} holds an {OVERLAY}, where opencode 2 would have to read the bridge's rules: the bridge cannot give them to an opencode 2 server beside it",
                        user.display()
                    ));
                }
                link_to(&dir.join(&name), &e.path())?;
            }
        }
        let path = dir.join(OVERLAY);
        std::fs::write(&path, overlay)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(dir)
    }
}

/// Every world under `state_dir` with the project and access its record names (worlds whose
/// record cannot be read are left out), for reading the sessions they hold.
pub fn all(state_dir: &Path) -> Vec<World> {
    let Ok(entries) = std::fs::read_dir(worlds_dir(state_dir)) else {
        return Vec::new();
    };
    let mut worlds: Vec<World> = entries
        .flatten()
        .filter_map(|e| {
            let root = e.path();
            let text = std::fs::read_to_string(root.join(RECORD)).ok()?;
            let (project, editing) = parse_record(&text)?;
            Some(World {
                root,
                project,
                editing,
            })
        })
        .collect();
    worlds.sort_by(|a, b| a.root.cmp(&b.root));
    worlds
}

/// `<last component>-<ro|rw>-<16 hex digits of a hash of the whole path>`: readable, and
/// distinct for distinct projects.
fn dir_name(project: &Path, editing: bool) -> String {
    let base: String = project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".to_owned())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let access = if editing { "rw" } else { "ro" };
    format!(
        "{base}-{access}-{:016x}",
        fnv1a(project.as_os_str().as_encoded_bytes())
    )
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The record: two lines, `project=<path>` and `access=<ro|rw>` (no JSON parser needed here).
fn serde_record(project: &Path, editing: bool) -> String {
    format!(
        "project={}\naccess={}\n",
        project.display(),
        if editing { "rw" } else { "ro" }
    )
}

fn parse_record(text: &str) -> Option<(PathBuf, bool)> {
    let mut project = None;
    let mut editing = None;
    for line in text.lines() {
        if let Some(p) = line.strip_prefix("project=") {
            project = Some(PathBuf::from(p));
        } else if let Some(a) = line.strip_prefix("access=") {
            editing = Some(a == "rw");
        }
    }
    Some((project?, editing?))
}

/// Makes `dir` a real directory of this user with mode 0700: a symlink, a file or a directory
/// of someone else in its place is removed first (a symlink itself, never what it points to).
fn real_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let uid = current_uid();
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() && m.uid() == uid => {
            if m.mode() & 0o077 != 0 {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
            }
            return Ok(());
        }
        Ok(m) if m.is_dir() => {
            return Err(format!(
                "{} belongs to another user: remove it, the bridge makes it anew",
                dir.display()
            ));
        }
        Ok(_) => std::fs::remove_file(dir)
            .map_err(|e| format!("cannot remove {} to make it anew: {e}", dir.display()))?,
        Err(_) => {}
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {} for the run's world: {e}", dir.display()))
}

/// Makes `link` a symlink to `target` (whatever was there is replaced; `target` is never
/// opened). Nothing is linked when `target` does not exist.
fn link_to(link: &Path, target: &Path) -> Result<(), String> {
    if std::fs::symlink_metadata(target).is_err() {
        if std::fs::symlink_metadata(link).is_ok() {
            let _ = std::fs::remove_file(link);
        }
        return Ok(());
    }
    if std::fs::read_link(link).ok().as_deref() == Some(target) {
        return Ok(());
    }
    if std::fs::symlink_metadata(link).is_ok() {
        std::fs::remove_file(link)
            .or_else(|_| std::fs::remove_dir_all(link))
            .map_err(|e| format!("cannot replace {}: {e}", link.display()))?;
    }
    std::os::unix::fs::symlink(target, link)
        .map_err(|e| format!("cannot link {} to the user's login: {e}", link.display()))
}

/// This process's user (the owner of `/proc/self`), without an `unsafe` call.
fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_project_and_access_has_its_own_world() {
        let s = Path::new("/state");
        let a = World::of(s, Path::new("/w/app"), false);
        let b = World::of(s, Path::new("/w/other/app"), false);
        let a_rw = World::of(s, Path::new("/w/app"), true);
        assert_ne!(a.root(), b.root());
        assert_ne!(a.root(), a_rw.root());
        assert!(
            a.root()
                .to_str()
                .unwrap()
                .starts_with("/state/worlds/app-ro-")
        );
        assert!(
            a_rw.root()
                .to_str()
                .unwrap()
                .starts_with("/state/worlds/app-rw-")
        );
        let env = a.env(RunKind::Opencode);
        for (k, v) in &env {
            assert!(v.starts_with(a.root().to_str().unwrap()), "{k}={v}");
        }
        assert!(!env.iter().any(|(k, _)| k == "CLAUDE_CONFIG_DIR"));
        assert!(
            a.env(RunKind::Claude)
                .iter()
                .any(|(k, v)| k == "CLAUDE_CONFIG_DIR" && v.ends_with("/claude"))
        );
    }

    #[test]
    fn prepare_copies_the_users_provider_packages_but_no_symlink() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let user_cache = root.join("u/cache/opencode");
        let pkg = user_cache.join("node_modules/@ai-sdk/x");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join("index.js"), "module.exports = 1").unwrap();
        std::fs::write(user_cache.join("package.json"), "{}").unwrap();
        std::fs::create_dir_all(root.join("secret")).unwrap();
        std::os::unix::fs::symlink(root.join("secret"), pkg.join("link")).unwrap();
        let user = UserDirs {
            opencode_data: None,
            opencode_cache: Some(user_cache.clone()),
            ..UserDirs::default()
        };
        let w = World::of(&root.join("state"), &root.join("proj"), false);
        w.prepare(RunKind::Opencode, &user).unwrap();
        let seeded = w.cache_home().join("opencode/node_modules/@ai-sdk/x");
        assert_eq!(
            std::fs::read_to_string(seeded.join("index.js")).unwrap(),
            "module.exports = 1"
        );
        assert!(w.cache_home().join("opencode/package.json").is_file());
        assert!(std::fs::symlink_metadata(seeded.join("link")).is_err());
        // What a run changed in its world's copy stays there: the user's is not written, and a
        // later prepare does not copy over it.
        std::fs::write(seeded.join("index.js"), "planted").unwrap();
        w.prepare(RunKind::Opencode, &user).unwrap();
        assert_eq!(
            std::fs::read_to_string(pkg.join("index.js")).unwrap(),
            "module.exports = 1"
        );
    }

    #[test]
    fn an_opencode2_config_links_the_users_entries_and_holds_the_overlay() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let user = root.join("u/config/opencode");
        std::fs::create_dir_all(user.join("agent")).unwrap();
        std::fs::write(user.join("opencode.json"), "{}").unwrap();
        let w = World::of(&root.join("state"), &root.join("proj"), false);
        w.prepare(RunKind::Opencode, &UserDirs::default()).unwrap();
        let dir = w.opencode2_config(Some(&user), r#"{"agent":{}}"#).unwrap();
        assert!(dir.starts_with(w.root()));
        assert_eq!(
            std::fs::read_link(dir.join("opencode.json")).unwrap(),
            user.join("opencode.json")
        );
        assert_eq!(
            std::fs::read_link(dir.join("agent")).unwrap(),
            user.join("agent")
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("opencode.jsonc")).unwrap(),
            r#"{"agent":{}}"#
        );
        // Made again in place for the same overlay; another overlay has a directory of its own.
        assert_eq!(
            w.opencode2_config(Some(&user), r#"{"agent":{}}"#).unwrap(),
            dir
        );
        assert_ne!(w.opencode2_config(Some(&user), "{}").unwrap(), dir);
        // A user opencode.jsonc leaves no place for the overlay.
        std::fs::write(user.join("opencode.jsonc"), "{}").unwrap();
        let e = w.opencode2_config(Some(&user), "{}").unwrap_err();
        assert!(e.contains("opencode.jsonc") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn prepare_links_logins_copies_models_and_undoes_a_planted_symlink() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (user_data, user_cache, home) = (
            root.join("u/data/opencode"),
            root.join("u/cache/opencode"),
            root.join("home"),
        );
        for p in [&user_data, &user_cache, &home] {
            std::fs::create_dir_all(p).unwrap();
        }
        std::fs::write(user_data.join("auth.json"), "{}").unwrap();
        std::fs::write(user_cache.join("models.json"), "{\"fk\":{}}").unwrap();
        let user = UserDirs {
            opencode_data: Some(user_data.clone()),
            opencode_cache: Some(user_cache.clone()),
            claude_config: None,
            opencode_config: None,
        };
        let w = World::of(&root.join("state"), &root.join("proj"), true);
        w.prepare(RunKind::Opencode, &user).unwrap();
        let auth = w.data_home().join("opencode/auth.json");
        assert_eq!(
            std::fs::read_link(&auth).unwrap(),
            user_data.join("auth.json")
        );
        let models = w.cache_home().join("opencode/models.json");
        assert!(!models.is_symlink());
        assert_eq!(std::fs::read_to_string(&models).unwrap(), "{\"fk\":{}}");
        // A run replaced its cache dir with a symlink to $HOME: the next prepare undoes it
        // without touching $HOME.
        std::fs::write(home.join("keep"), "x").unwrap();
        let cache = w.cache_home().join("opencode");
        std::fs::remove_dir_all(&cache).unwrap();
        std::os::unix::fs::symlink(&home, &cache).unwrap();
        w.prepare(RunKind::Opencode, &user).unwrap();
        assert!(!cache.is_symlink() && cache.is_dir());
        assert!(home.join("keep").exists());
        // A dangling symlink in place of the data dir is replaced too.
        let data = w.data_home().join("opencode");
        std::fs::remove_dir_all(&data).unwrap();
        std::os::unix::fs::symlink(root.join("nowhere"), &data).unwrap();
        w.prepare(RunKind::Opencode, &user).unwrap();
        assert!(data.is_dir() && !data.is_symlink());
        let listed = all(&root.join("state"));
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].project(), root.join("proj"));
        assert!(listed[0].editing());
    }
}
