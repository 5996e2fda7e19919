//! The bridge's warm local servers: one `opencode serve` per kind of run (its project, whether
//! it may write there, its environment and config overlay), because the kernel fence and
//! opencode's config are per process. Started on the first task that needs it, shared by the
//! tasks that follow, restarted when it died, stopped once idle for the idle time and when the
//! supervisor ends (dropping a [`opencode_client::backend::ServeProcess`] stops and reaps it).
//!
//! A bridge that dies without stopping them (SIGKILL, a crash) cannot stop them: each server it
//! starts is noted in `<state>/serve/<pid>.json` (its id and the bridge's), and the next bridge
//! on that state directory stops the servers whose bridge is gone ([`stop_left_servers`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bridge_proc::ProcId;
use opencode_client::backend::ServeProcess;
use opencode_client::http::HttpClient;
use serde::{Deserialize, Serialize};

use crate::registry::StoredProc;

/// What is noted of a warm server: its id and the id of the bridge that started it.
#[derive(Debug, Serialize, Deserialize)]
struct Note {
    #[serde(flatten)]
    server: StoredProc,
    bridge: StoredProc,
}

/// Stops the warm servers noted in `dir` whose bridge is gone (SIGTERM to each one's process
/// group, SIGKILL after 3 s; only while the noted pid is still that process, leading its own
/// group), and removes their notes. A server of a live bridge is left alone. Returns how many
/// were stopped.
pub(crate) fn stop_left_servers(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut stopped = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Some(note) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Note>(&b).ok())
        else {
            // Torn or foreign: nothing in it can be signalled.
            let _ = std::fs::remove_file(&path);
            continue;
        };
        if ProcId::from(note.bridge).exists() {
            continue;
        }
        if bridge_proc::stop_left_group(note.server.into(), Duration::from_secs(3)) {
            stopped += 1;
        }
        let _ = std::fs::remove_file(&path);
    }
    stopped
}

/// One warm server.
#[derive(Debug)]
pub(crate) struct Warm {
    process: Mutex<Option<ServeProcess>>,
    http: HttpClient,
    confinement: String,
    pid: u32,
    users: AtomicUsize,
    idle_since: Mutex<Instant>,
    /// Its note (`<state>/serve/<pid>.json`), removed once it is stopped.
    note: Option<PathBuf>,
    /// The identity of each task directory's configuration when the server first worked there
    /// ([`opencode_client::config_files`]): opencode loads a directory's configuration once.
    loaded: Mutex<HashMap<PathBuf, u64>>,
}

impl Warm {
    /// Whether the server's configuration of `dir` is still `identity` (first use: noted).
    fn current_for(&self, dir: &Path, identity: u64) -> bool {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        *loaded.entry(dir.to_path_buf()).or_insert(identity) == identity
    }

    fn alive(&self) -> bool {
        self.process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|p| !p.has_exited())
    }

    fn stop(&self) {
        let p = self
            .process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(p);
        if let Some(note) = &self.note {
            let _ = std::fs::remove_file(note);
        }
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A task's use of a warm server; the server counts as idle once every lease is dropped.
#[derive(Debug)]
pub(crate) struct Lease(Arc<Warm>);

impl Lease {
    pub(crate) fn http(&self) -> &HttpClient {
        &self.0.http
    }

    pub(crate) fn confinement(&self) -> &str {
        &self.0.confinement
    }

    pub(crate) fn pid(&self) -> u32 {
        self.0.pid
    }

    /// Whether the server is still running.
    pub(crate) fn alive(&self) -> bool {
        self.0.alive()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.users.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The warm servers, by key.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    servers: tokio::sync::Mutex<HashMap<String, Arc<Warm>>>,
    reaper: std::sync::OnceLock<()>,
    /// Where each server started is noted, and the bridge's own id (`None`: no state directory,
    /// nothing noted).
    notes: Option<(PathBuf, ProcId)>,
    /// The last time a local server could not be started, and why: for [`DOWN_FOR`] after it,
    /// tasks run as `opencode run` without trying again (a server that hangs at start would
    /// otherwise cost each task the whole startup limit).
    down: Mutex<Option<(Instant, String)>>,
}

/// How long after a failed start local servers are not tried again.
pub(crate) const DOWN_FOR: Duration = Duration::from_secs(5 * 60);

impl Pool {
    /// A pool noting its servers in `dir` as started by `bridge`.
    pub(crate) fn noting_in(dir: PathBuf, bridge: ProcId) -> Pool {
        Pool {
            servers: tokio::sync::Mutex::default(),
            reaper: std::sync::OnceLock::new(),
            notes: Some((dir, bridge)),
            down: Mutex::new(None),
        }
    }

    /// The pids of the warm servers (none while another caller holds the table).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.servers
            .try_lock()
            .map(|s| s.values().filter(|w| w.alive()).map(|w| w.pid).collect())
            .unwrap_or_default()
    }

    /// Why a local server could not be started, when that was less than [`DOWN_FOR`] ago.
    pub(crate) fn down_recently(&self) -> Option<String> {
        let down = self.down.lock().unwrap_or_else(|e| e.into_inner());
        let (at, why) = down.as_ref()?;
        let ago = at.elapsed();
        (ago < DOWN_FOR).then(|| {
            format!(
                "{why} ({} s ago; the bridge tries again {} s after that)",
                ago.as_secs(),
                DOWN_FOR.as_secs()
            )
        })
    }

    /// Notes that a local server could not be started.
    pub(crate) fn mark_down(&self, why: &str) {
        *self.down.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), why.to_owned()));
    }

    /// Notes a server just started; the note's path.
    fn note(&self, pid: u32) -> Option<PathBuf> {
        let (dir, bridge) = self.notes.as_ref()?;
        let note = Note {
            server: ProcId::of(pid as i32)?.into(),
            bridge: (*bridge).into(),
        };
        std::fs::create_dir_all(dir).ok()?;
        let path = dir.join(format!("{pid}.json"));
        let tmp = dir.join(format!(".{pid}.json.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(&note).ok()?).ok()?;
        std::fs::rename(&tmp, &path).ok()?;
        Some(path)
    }

    /// The server for `key` to work in `dir`, whose configuration's identity is `identity`;
    /// started with `start` (on the blocking pool) when there is none, it died, or the
    /// configuration of `dir` changed since the server loaded it: that one is retired (no new
    /// task goes to it; it is stopped once its running tasks are done) so the task sees the
    /// configuration a new `opencode run` would. Starts are serialised: two first tasks share
    /// one start.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        key: String,
        (dir, identity): (&Path, u64),
        (idle, max): (Duration, usize),
        start: impl FnOnce() -> Result<ServeProcess, String> + Send + 'static,
    ) -> Result<Lease, String> {
        self.start_reaper(idle);
        let mut servers = self.servers.lock().await;
        if let Some(w) = servers.get(&key) {
            if w.alive() && w.current_for(dir, identity) {
                w.users.fetch_add(1, Ordering::SeqCst);
                return Ok(Lease(Arc::clone(w)));
            }
            // Died, was stopped, or holds an older configuration: a new one takes its place.
            // The old one stops when its last lease goes (`Warm`'s drop), or now when it has
            // none.
            if let Some(old) = servers.remove(&key)
                && old.users.load(Ordering::SeqCst) == 0
            {
                tokio::task::spawn_blocking(move || old.stop());
            }
        }
        // Room for one more: the servers idle longest go first; one with a task running stays
        // (the limit is then passed rather than a task stopped).
        while servers.len() >= max.max(1) {
            let oldest = servers
                .iter()
                .filter(|(_, w)| w.users.load(Ordering::SeqCst) == 0)
                .min_by_key(|(_, w)| *w.idle_since.lock().unwrap_or_else(|e| e.into_inner()))
                .map(|(k, _)| k.clone());
            let Some(old) = oldest.and_then(|k| servers.remove(&k)) else {
                break;
            };
            tokio::task::spawn_blocking(move || old.stop());
        }
        let process = tokio::task::spawn_blocking(start)
            .await
            .map_err(|e| format!("the server start was interrupted: {e}"))??;
        let warm = Arc::new(Warm {
            http: process.http().clone(),
            confinement: process.confinement().to_owned(),
            pid: process.pid(),
            note: self.note(process.pid()),
            process: Mutex::new(Some(process)),
            users: AtomicUsize::new(1),
            idle_since: Mutex::new(Instant::now()),
            loaded: Mutex::new(HashMap::from([(dir.to_path_buf(), identity)])),
        });
        servers.insert(key, Arc::clone(&warm));
        Ok(Lease(warm))
    }

    /// Stops servers idle for longer than `idle`, every few seconds, for as long as the pool
    /// lives.
    fn start_reaper(self: &Arc<Self>, idle: Duration) {
        if self.reaper.set(()).is_err() {
            return;
        }
        let weak = Arc::downgrade(self);
        let every = (idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(30));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(pool) = weak.upgrade() else { return };
                let idle_ones: Vec<Arc<Warm>> = {
                    let mut servers = pool.servers.lock().await;
                    let keys: Vec<String> = servers
                        .iter()
                        .filter(|(_, w)| {
                            w.users.load(Ordering::SeqCst) == 0
                                && (w
                                    .idle_since
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .elapsed()
                                    >= idle
                                    || !w.alive())
                        })
                        .map(|(k, _)| k.clone())
                        .collect();
                    keys.iter().filter_map(|k| servers.remove(k)).collect()
                };
                if !idle_ones.is_empty() {
                    let _ = tokio::task::spawn_blocking(move || {
                        for w in idle_ones {
                            w.stop();
                        }
                    })
                    .await;
                }
            }
        });
    }

    /// Stops every server (the supervisor is ending).
    pub(crate) async fn stop_all(&self) {
        let all: Vec<Arc<Warm>> = self.servers.lock().await.drain().map(|(_, w)| w).collect();
        if all.is_empty() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || {
            for w in all {
                w.stop();
            }
        })
        .await;
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for w in self.servers.get_mut().values() {
            w.stop();
        }
    }
}
