//! Where opencode keeps its SQLite store, resolved the way opencode 1.18 does.
//!
//! - `OPENCODE_DB` set: an absolute path is used as is; `:memory:` has no file and is refused;
//!   any other value is a name relative to the data dir.
//! - Otherwise the data dir is `$XDG_DATA_HOME/opencode` (when `XDG_DATA_HOME` is an absolute
//!   path), else `$HOME/.local/share/opencode`, and the store is `opencode.db` in it.
//! - opencode builds of a non-release channel write `opencode-<channel>.db` instead. The bridge
//!   cannot know the channel of the binary that wrote the store, so: `opencode.db` when it
//!   exists; else, when exactly one `opencode-*.db` exists, that one; else (none, or several
//!   channel stores) `opencode.db`, which then reports "store not found" and names the channel
//!   stores it saw, so the user can pick one with `OPENCODE_DB`.

use crate::error::ClientError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The outcome of resolving the store path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorePath {
    /// The file to open.
    pub path: PathBuf,
    /// Channel stores (`opencode-*.db`) seen next to it when it was not found directly.
    pub channel_candidates: Vec<PathBuf>,
}

/// The opencode data dir from the given environment lookup.
pub fn data_dir(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let nonempty = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(x) = nonempty("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Some(x.join("opencode"));
    }
    nonempty("HOME").map(|h| h.join(".local").join("share").join("opencode"))
}

/// Resolves the store path from the given environment lookup (pass `|k| std::env::var_os(k)`).
pub fn resolve_store_path(
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<StorePath, ClientError> {
    let data = data_dir(env);
    if let Some(db) = env(bridge_env::OPENCODE_DB.name).filter(|v| !v.is_empty()) {
        if db == ":memory:" {
            return Err(ClientError::StoreMissing {
                path: "OPENCODE_DB=:memory: (an in-memory store has no file to read)".into(),
            });
        }
        let p = PathBuf::from(&db);
        let path = if p.is_absolute() {
            p
        } else {
            match &data {
                Some(d) => d.join(p),
                None => return Err(no_home()),
            }
        };
        return Ok(StorePath {
            path,
            channel_candidates: Vec::new(),
        });
    }
    let dir = data.ok_or_else(no_home)?;
    Ok(pick_in_dir(&dir))
}

/// Resolves from the process environment.
pub fn resolve_from_env() -> Result<StorePath, ClientError> {
    resolve_store_path(&|k| std::env::var_os(k))
}

fn no_home() -> ClientError {
    ClientError::StoreMissing {
        path: "$HOME/.local/share/opencode/opencode.db (neither XDG_DATA_HOME nor HOME is set)"
            .into(),
    }
}

fn pick_in_dir(dir: &Path) -> StorePath {
    let main = dir.join("opencode.db");
    if main.is_file() {
        return StorePath {
            path: main,
            channel_candidates: Vec::new(),
        };
    }
    let mut channels: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("opencode-") && n.ends_with(".db"))
                && p.is_file()
        })
        .collect();
    channels.sort();
    if channels.len() == 1 {
        return StorePath {
            path: channels.remove(0),
            channel_candidates: Vec::new(),
        };
    }
    StorePath {
        path: main,
        channel_candidates: channels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn default_and_xdg() {
        let p = resolve_store_path(&env(&[("HOME", "/nonexistent-home")])).unwrap();
        assert_eq!(
            p.path,
            PathBuf::from("/nonexistent-home/.local/share/opencode/opencode.db")
        );
        let p = resolve_store_path(&env(&[("HOME", "/h"), ("XDG_DATA_HOME", "/nonexistent-x")]))
            .unwrap();
        assert_eq!(p.path, PathBuf::from("/nonexistent-x/opencode/opencode.db"));
        // A relative XDG_DATA_HOME is ignored, as the XDG spec says.
        let p = resolve_store_path(&env(&[("HOME", "/h"), ("XDG_DATA_HOME", "rel")])).unwrap();
        assert_eq!(
            p.path,
            PathBuf::from("/h/.local/share/opencode/opencode.db")
        );
    }

    #[test]
    fn opencode_db_override() {
        let e = env(&[("HOME", "/h"), ("OPENCODE_DB", "/abs/x.db")]);
        assert_eq!(
            resolve_store_path(&e).unwrap().path,
            PathBuf::from("/abs/x.db")
        );
        let e = env(&[("HOME", "/h"), ("OPENCODE_DB", "custom.db")]);
        assert_eq!(
            resolve_store_path(&e).unwrap().path,
            PathBuf::from("/h/.local/share/opencode/custom.db")
        );
        let e = env(&[("HOME", "/h"), ("OPENCODE_DB", ":memory:")]);
        assert!(matches!(
            resolve_store_path(&e),
            Err(ClientError::StoreMissing { .. })
        ));
    }

    #[test]
    fn channel_stores() {
        let d = tempfile::tempdir().unwrap();
        let oc = d.path().join("opencode");
        std::fs::create_dir_all(&oc).unwrap();
        let x = d.path().to_string_lossy().into_owned();
        let e = env(&[("XDG_DATA_HOME", &x)]);
        std::fs::write(oc.join("opencode-beta.db"), b"").unwrap();
        std::fs::write(oc.join("opencode-beta.db-wal"), b"").unwrap();
        assert_eq!(
            resolve_store_path(&e).unwrap().path,
            oc.join("opencode-beta.db")
        );
        std::fs::write(oc.join("opencode-dev.db"), b"").unwrap();
        let p = resolve_store_path(&e).unwrap();
        assert_eq!(p.path, oc.join("opencode.db"));
        assert_eq!(p.channel_candidates.len(), 2);
        std::fs::write(oc.join("opencode.db"), b"").unwrap();
        assert_eq!(resolve_store_path(&e).unwrap().path, oc.join("opencode.db"));
    }
}
