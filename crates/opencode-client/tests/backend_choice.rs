//! Which backend is chosen, and why, from the environment.

use opencode_client::backend::{ClientConfig, choose_backend_with, has_api_command};
use opencode_client::{
    ClientError, Liveness, ScanContext, Session, SessionFilter, SessionList, SessionSource,
    SessionTranscript,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A store stand-in: the tests only look at which backend was picked.
#[derive(Debug)]
struct FakeStore;

impl SessionSource for FakeStore {
    fn name(&self) -> &'static str {
        "store"
    }
    fn list(&self, _: &SessionFilter, _: &ScanContext) -> Result<SessionList, ClientError> {
        Ok(SessionList {
            sessions: vec![],
            scanned: 0,
            partial: None,
            backend: "store",
        })
    }
    fn get(&self, id: &str, _: &ScanContext) -> Result<Session, ClientError> {
        Err(ClientError::NotFound { id: id.into() })
    }
    fn transcript(
        &self,
        id: &str,
        _: Option<usize>,
        _: &ScanContext,
    ) -> Result<SessionTranscript, ClientError> {
        Err(ClientError::NotFound { id: id.into() })
    }
    fn rename(&self, id: &str, _: &str, _: &ScanContext) -> Result<Session, ClientError> {
        Err(ClientError::NotFound { id: id.into() })
    }
}

fn config(pairs: &[(&str, String)]) -> Result<ClientConfig, ClientError> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    ClientConfig::from_lookup(|k| map.get(k).cloned())
}

/// Chooses with the fake store; returns (backend name, reason, how often the store was opened).
fn choose(cfg: &ClientConfig) -> Result<(&'static str, String, usize), ClientError> {
    let opened = AtomicUsize::new(0);
    let open = |_: &Path| -> Result<Box<dyn SessionSource>, ClientError> {
        opened.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(FakeStore))
    };
    let (src, why) = choose_backend_with(cfg, &open)?;
    Ok((src.name(), why, opened.load(Ordering::SeqCst)))
}

struct World {
    _dir: tempfile::TempDir,
    data: PathBuf,
    db: PathBuf,
}

fn world(with_db: bool) -> World {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("opencode")).unwrap();
    let db = data.join("opencode").join("opencode.db");
    if with_db {
        std::fs::write(&db, b"").unwrap();
    }
    World {
        _dir: dir,
        data,
        db,
    }
}

fn v1_like_bin() -> PathBuf {
    // Any binary whose help has no `api` command.
    PathBuf::from("/bin/true")
}

#[test]
fn server_url_wins_over_an_existing_store() {
    let w = world(true);
    let cfg = config(&[
        ("XDG_DATA_HOME", w.data.display().to_string()),
        ("OPENCODE_BRIDGE_SERVER_URL", "http://127.0.0.1:4096".into()),
    ])
    .unwrap();
    let (name, why, opened) = choose(&cfg).unwrap();
    assert_eq!(name, "server");
    assert_eq!(opened, 0);
    assert!(why.contains("OPENCODE_BRIDGE_SERVER_URL is set"), "{why}");
    assert!(why.contains("http://127.0.0.1:4096"), "{why}");
}

#[test]
fn the_store_is_used_when_it_exists() {
    let w = world(true);
    let cfg = config(&[
        ("XDG_DATA_HOME", w.data.display().to_string()),
        ("OPENCODE_BIN", v1_like_bin().display().to_string()),
    ])
    .unwrap();
    let (name, why, opened) = choose(&cfg).unwrap();
    assert_eq!((name, opened), ("store", 1));
    assert!(why.contains(&w.db.display().to_string()), "{why}");
}

#[test]
fn without_a_store_a_v2_cli_means_the_api_backend() {
    let w = world(false);
    let v2 = bridge_testkit::bins::fake_opencode_v2();
    assert!(has_api_command(&v2));
    assert!(!has_api_command(&v1_like_bin()));
    assert!(!has_api_command(Path::new("/nonexistent/opencode")));
    let cfg = config(&[
        ("XDG_DATA_HOME", w.data.display().to_string()),
        ("OPENCODE_BIN", v2.display().to_string()),
    ])
    .unwrap();
    let (name, why, _) = choose(&cfg).unwrap();
    assert_eq!(name, "api");
    assert!(why.contains("has an `api` command"), "{why}");
}

#[test]
fn nothing_usable_is_store_missing_naming_the_path() {
    let w = world(false);
    let cfg = config(&[
        ("XDG_DATA_HOME", w.data.display().to_string()),
        ("OPENCODE_BIN", v1_like_bin().display().to_string()),
    ])
    .unwrap();
    let e = choose(&cfg).unwrap_err();
    assert!(matches!(e, ClientError::StoreMissing { .. }), "{e:?}");
    assert!(e.to_string().contains(&w.db.display().to_string()), "{e}");
}

#[test]
fn the_override_wins_and_is_checked() {
    let w = world(true);
    let base = [("XDG_DATA_HOME", w.data.display().to_string())];
    let with = |k: &'static str, v: &str| {
        let mut p = base.to_vec();
        p.push((k, v.to_string()));
        p
    };
    let cfg = config(&with("OPENCODE_BRIDGE_BACKEND", "api")).unwrap();
    let (name, why, opened) = choose(&cfg).unwrap();
    assert_eq!((name, opened), ("api", 0));
    assert!(why.contains("OPENCODE_BRIDGE_BACKEND=api"), "{why}");

    // server without a URL says what is missing.
    let cfg = config(&with("OPENCODE_BRIDGE_BACKEND", "server")).unwrap();
    let e = choose(&cfg).unwrap_err();
    assert!(e.to_string().contains("OPENCODE_BRIDGE_SERVER_URL"), "{e}");

    // store is forced even with a server URL around.
    let mut p = with("OPENCODE_BRIDGE_BACKEND", "STORE");
    p.push(("OPENCODE_BRIDGE_SERVER_URL", "http://127.0.0.1:1".into()));
    let (name, _, _) = choose(&config(&p).unwrap()).unwrap();
    assert_eq!(name, "store");

    let e = config(&with("OPENCODE_BRIDGE_BACKEND", "sqlite")).unwrap_err();
    let m = e.to_string();
    assert!(m.contains("store, server, api") && !m.contains('\n'), "{m}");

    // An https URL is refused with a hint, not silently used.
    let p = vec![(
        "OPENCODE_BRIDGE_SERVER_URL",
        "https://example.invalid".to_string(),
    )];
    let e = choose(&config(&p).unwrap()).unwrap_err();
    assert!(e.to_string().contains("https is not supported"), "{e}");
}

#[test]
fn scan_context_takes_the_configured_deadline() {
    let cfg = config(&[("OPENCODE_BRIDGE_SCAN_DEADLINE_MS", "1234".into())]).unwrap();
    let step = std::time::Duration::from_millis(1234);
    let before = std::time::Instant::now();
    let ctx = cfg.scan_context(Liveness::default());
    let after = std::time::Instant::now();
    assert!(ctx.deadline >= before + step && ctx.deadline <= after + step);
    assert!(ctx.now_ms > 1_700_000_000_000);
}
