//! The warm local servers: one `opencode serve` per kind of run (its project, whether it may
//! write there, its environment and config overlay), because the kernel fence and opencode's
//! config are per process. Started on the first task that needs it and shared by the tasks that
//! follow, by every bridge on the same state directory.
//!
//! A server is a service that outlives the bridge while it has work: each one is noted in the
//! state directory, and one idle rule stops it, whoever applies it ([`super::notes`]).
//!
//! **A bridge's end.** A clean stop leaves a server that has a task left running on it, a turn
//! running, or another live bridge attached ([`Warm::end`]); every other server of the bridge
//! stops with it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bridge_proc::ProcId;
use opencode_client::backend::ServeProcess;
use opencode_client::http::HttpClient;

use super::notes::{
    Note, Noted, STOP_GRACE, attached, attachment, files_of, private_dir, read_notes, reaper_tick,
    retired_grace, spawn_watcher, touch, turn_in, update_note, used_age, write_note,
};
// The sweep a bridge makes as it opens the state directory, named where the supervisor asks.
pub(crate) use super::notes::sweep_notes;

/// One warm server in this bridge: started by it (`process`), or adopted from its note.
#[derive(Debug)]
pub(crate) struct Warm {
    process: Mutex<Option<ServeProcess>>,
    ident: ProcId,
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
    /// Tasks of this bridge left running on it at the bridge's stop.
    left: AtomicUsize,
    /// Its configuration changed: no new task goes to it.
    retired: AtomicBool,
    /// Stopped or let go: nothing more is done with it.
    settled: AtomicBool,
    /// The bridge attached to it (this one).
    me: Option<ProcId>,
}

impl Warm {
    /// Whether the server's configuration of `dir` is still `identity` (first use: noted).
    fn current_for(&self, dir: &Path, identity: u64) -> bool {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let first = !loaded.contains_key(dir);
        let current = *loaded.entry(dir.to_path_buf()).or_insert(identity) == identity;
        drop(loaded);
        if first && let Some(note) = &self.note {
            update_note(note, |n| {
                n.loaded.entry(dir.to_path_buf()).or_insert(identity);
            });
        }
        current
    }

    fn alive(&self) -> bool {
        match self
            .process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(p) => !p.has_exited(),
            None => !self.settled.load(Ordering::SeqCst) && self.ident.is_alive(),
        }
    }

    fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        if let Some(note) = &self.note {
            update_note(note, |n| n.retired = true);
        }
    }

    /// Whether a turn runs on it (in any directory it worked in).
    fn has_turn(&self) -> Result<bool, String> {
        let dirs: Vec<PathBuf> = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        turn_in(&self.http, &dirs)
    }

    /// Stops it: ours through its process (stopped and reaped), an adopted one after its
    /// identity check; its files go.
    fn stop(&self) {
        if self.settled.swap(true, Ordering::SeqCst) {
            return;
        }
        let p = self
            .process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match p {
            Some(p) => drop(p),
            None => {
                bridge_proc::stop_left_group(self.ident, STOP_GRACE);
            }
        }
        if let Some(note) = &self.note {
            match Noted::read(note) {
                Some(n) if n.note.server == self.ident.into() => n.forget(),
                _ => {
                    let _ = std::fs::remove_dir_all(files_of(note));
                }
            }
        }
    }

    /// Lets it run on without this bridge: no longer ours to reap, its note and files stay.
    fn leave(&self) {
        if self.settled.swap(true, Ordering::SeqCst) {
            return;
        }
        let p = self
            .process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(p) = p {
            p.leave();
        }
        if let (Some(note), Some(me)) = (&self.note, self.me) {
            let _ = std::fs::remove_file(attachment(note, me));
        }
    }

    /// This bridge is done with it: it stays while it has work (a task left running on it, a
    /// turn running, another live bridge attached), and stops otherwise. Blocking.
    fn end(&self) {
        if self.settled.load(Ordering::SeqCst) {
            return;
        }
        let noted = self.note.is_some();
        let others = self.note.as_deref().map(attached).unwrap_or_default();
        let others = others.iter().any(|b| Some(*b) != self.me);
        let work = self.left.load(Ordering::SeqCst) > 0
            || others
            || (self.alive() && self.has_turn().unwrap_or(true));
        if work && noted && self.alive() {
            self.leave();
        } else {
            self.stop();
        }
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.end();
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

    /// The server's id (pid and start time), recorded with the task.
    pub(crate) fn ident(&self) -> ProcId {
        self.0.ident
    }

    /// Whether the server is still running.
    pub(crate) fn alive(&self) -> bool {
        self.0.alive()
    }

    /// The task is left running on the server at the bridge's stop: the server stays.
    pub(crate) fn leave_running(&self) {
        self.0.left.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.users.fetch_sub(1, Ordering::SeqCst);
        if let Some(note) = &self.0.note {
            touch(note);
        }
    }
}

fn lease(w: &Arc<Warm>) -> Lease {
    w.users.fetch_add(1, Ordering::SeqCst);
    if let Some(note) = &w.note {
        touch(note);
    }
    Lease(Arc::clone(w))
}

/// A warm server as `opencode_processes` shows it.
#[derive(Debug, Clone)]
pub(crate) struct ServerView {
    pub pid: u32,
    /// How long it has been idle (0 while a task or turn is on it, as far as it is known).
    pub idle: Duration,
    /// Held by this bridge (started or adopted).
    pub held: bool,
}

/// The warm servers, by key.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    servers: tokio::sync::Mutex<HashMap<String, Arc<Warm>>>,
    /// Servers held but not for new tasks: retired ones, and ones adopted for a left task when
    /// their key had another server.
    others: Mutex<Vec<Arc<Warm>>>,
    reaper: std::sync::OnceLock<()>,
    /// Where each server started is noted, and the bridge's own id (`None`: no state directory,
    /// nothing noted).
    notes: Option<(PathBuf, ProcId)>,
    /// The watcher program ([`super::notes::serve_watch`]).
    watcher: Option<PathBuf>,
    /// The limit of each call to a noted server.
    timeout: Duration,
    /// The idle time ([`crate::spec::SupervisorConfig::serve_idle`]).
    idle: Duration,
    /// The last time a local server could not be started, and why: for [`DOWN_FOR`] after it,
    /// tasks run as `opencode run` without trying again (a server that hangs at start would
    /// otherwise cost each task the whole startup limit).
    down: Mutex<Option<(Instant, String)>>,
}

/// How long after a failed start local servers are not tried again.
pub(crate) const DOWN_FOR: Duration = Duration::from_secs(5 * 60);

impl Pool {
    /// A pool noting its servers in `dir` as started by `bridge`, watched by `watcher`.
    pub(crate) fn noting_in(
        dir: PathBuf,
        bridge: ProcId,
        watcher: Option<PathBuf>,
        (timeout, idle): (Duration, Duration),
    ) -> Pool {
        Pool {
            servers: tokio::sync::Mutex::default(),
            others: Mutex::default(),
            reaper: std::sync::OnceLock::new(),
            notes: Some((dir, bridge)),
            watcher,
            timeout,
            idle,
            down: Mutex::new(None),
        }
    }

    fn all(&self) -> Vec<Arc<Warm>> {
        let mut all: Vec<Arc<Warm>> = self
            .servers
            .try_lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        all.extend(
            self.others
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        all
    }

    /// Every live warm server of the state directory (held by this bridge or not), with how
    /// long it has been idle.
    pub(crate) fn views(&self) -> Vec<ServerView> {
        let held = self.all();
        let mut views: Vec<ServerView> = held
            .iter()
            .filter(|w| w.alive())
            .map(|w| ServerView {
                pid: w.pid,
                idle: if w.users.load(Ordering::SeqCst) > 0 {
                    Duration::ZERO
                } else {
                    let since = w
                        .idle_since
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .elapsed();
                    w.note.as_deref().map_or(since, |n| used_age(n).min(since))
                },
                held: true,
            })
            .collect();
        if let Some((dir, _)) = &self.notes {
            for n in read_notes(dir) {
                if n.alive() && !views.iter().any(|v| v.pid as i32 == n.note.server.pid) {
                    views.push(ServerView {
                        pid: n.note.server.pid as u32,
                        idle: n.idle_for(),
                        held: false,
                    });
                }
            }
        }
        views
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

    /// A warm server from its note: attached to this bridge, for new tasks of its kind or to
    /// follow a task left on it.
    fn adopt(&self, n: &Noted) -> Result<Arc<Warm>, String> {
        let http = n
            .client(self.timeout)
            .ok_or_else(|| "its note has no address".to_owned())?;
        // opencode 1 answers `/global/health`, opencode 2 `/api/health`.
        opencode_client::Contract::of_server(&http)
            .map_err(|e| format!("it does not answer: {e}"))?;
        let me = self.notes.as_ref().map(|(_, me)| *me);
        if let Some(me) = me {
            let _ = private_dir(&n.dir());
            let _ = std::fs::write(attachment(&n.path, me), b"");
        }
        Ok(Arc::new(Warm {
            process: Mutex::new(None),
            ident: n.server(),
            http,
            confinement: n.note.confinement.clone(),
            pid: n.note.server.pid as u32,
            users: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            note: Some(n.path.clone()),
            loaded: Mutex::new(n.note.loaded.clone().into_iter().collect()),
            left: AtomicUsize::new(0),
            retired: AtomicBool::new(n.note.retired),
            settled: AtomicBool::new(false),
            me,
        }))
    }

    /// A noted server of another bridge (or of an earlier one) for `key`, still current for
    /// `dir`: adopted. One whose configuration of `dir` changed is retired on the spot.
    fn adopt_for(&self, key: &str, dir: &Path, identity: u64) -> Option<Arc<Warm>> {
        let (notes, _) = self.notes.as_ref()?;
        for n in read_notes(notes) {
            if n.note.key != key || n.note.retired || n.note.url.is_empty() || !n.alive() {
                continue;
            }
            if n.note.loaded.get(dir).is_some_and(|&i| i != identity) {
                update_note(&n.path, |n| n.retired = true);
                continue;
            }
            if let Ok(w) = self.adopt(&n)
                && w.current_for(dir, identity)
            {
                return Some(w);
            }
        }
        None
    }

    /// The server `ident` a task of an earlier bridge was left running on, to follow it.
    pub(crate) async fn lease_of(self: &Arc<Self>, ident: ProcId) -> Result<Lease, String> {
        self.start_reaper(self.idle);
        if let Some(w) = self
            .all()
            .into_iter()
            .find(|w| w.ident == ident && w.alive())
        {
            return Ok(lease(&w));
        }
        let this = Arc::clone(self);
        let found = tokio::task::spawn_blocking(move || {
            let (dir, _) = this
                .notes
                .as_ref()
                .ok_or_else(|| "no state directory notes servers".to_owned())?;
            // A server busy with turns may be slow to answer: a few tries.
            let mut why = String::from("it is not noted in the state directory, or has ended");
            for _ in 0..5 {
                let Some(n) = read_notes(dir)
                    .into_iter()
                    .find(|n| n.server() == ident && n.alive())
                else {
                    break;
                };
                match this.adopt(&n) {
                    Ok(w) => return Ok((n.note.key.clone(), w)),
                    Err(e) => why = e,
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(why)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        let (key, w) = found.map_err(|why| {
            format!(
                "the local opencode serve it ran on (pid {}) cannot be used: {why}",
                ident.pid
            )
        })?;
        let l = lease(&w);
        let mut servers = self.servers.lock().await;
        let vacant = servers.get(&key).is_none_or(|s| !s.alive());
        if vacant && !w.retired.load(Ordering::SeqCst) {
            servers.insert(key, w);
        } else {
            self.others
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(w);
        }
        Ok(l)
    }

    /// Notes a server just started (and attaches this bridge); the note's path.
    fn note(
        &self,
        p: &ServeProcess,
        key: &str,
        (dir, identity): (&Path, u64),
        idle: Duration,
        log: Option<&Path>,
    ) -> Option<PathBuf> {
        let (notes, bridge) = self.notes.as_ref()?;
        let pid = p.pid();
        let note = Note {
            server: ProcId::of(pid as i32)?.into(),
            bridge: (*bridge).into(),
            url: p.http().base().to_owned(),
            password: p.password().to_owned(),
            key: key.to_owned(),
            tmp: Some(p.tmp().to_path_buf()),
            confinement: p.confinement().to_owned(),
            loaded: BTreeMap::from([(dir.to_path_buf(), identity)]),
            retired: false,
            idle_ms: idle.as_millis() as u64,
        };
        let path = notes.join(format!("{pid}.json"));
        let files = files_of(&path);
        private_dir(&files).ok()?;
        if let Some(log) = log {
            let _ = std::fs::rename(log, files.join("log"));
        }
        write_note(&path, &note).ok()?;
        let _ = std::fs::write(attachment(&path, *bridge), b"");
        touch(&path);
        if let Some(program) = &self.watcher {
            spawn_watcher(program, &path);
        }
        Some(path)
    }

    /// The server for `key` to work in `dir`, whose configuration's identity is `identity`:
    /// this bridge's, a noted one of another bridge (adopted), or one started with `start` (on
    /// the blocking pool, given where its output goes) when there is none, it died, or the
    /// configuration of `dir` changed since the server loaded it: that one is retired (no new
    /// task goes to it; it stops once its turns are done) so the task sees the configuration
    /// a new `opencode run` would. Starts are serialised: two first tasks share one start.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        key: String,
        (dir, identity): (&Path, u64),
        (idle, max): (Duration, usize),
        start: impl FnOnce(Option<&Path>) -> Result<ServeProcess, String> + Send + 'static,
    ) -> Result<Lease, String> {
        self.start_reaper(idle);
        let mut servers = self.servers.lock().await;
        if let Some(w) = servers.get(&key) {
            if w.alive() && w.current_for(dir, identity) {
                return Ok(lease(w));
            }
            // Died, was stopped, or holds an older configuration: a new one takes its place.
            // The old one is kept until its turns end.
            if let Some(old) = servers.remove(&key) {
                if old.alive() {
                    old.retire();
                }
                self.others
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(old);
            }
        }
        // Another bridge's server of the same kind, or one an earlier bridge left.
        let (this, k, d) = (Arc::clone(self), key.clone(), dir.to_path_buf());
        let adopted = tokio::task::spawn_blocking(move || this.adopt_for(&k, &d, identity))
            .await
            .ok()
            .flatten();
        if let Some(w) = adopted {
            let l = lease(&w);
            servers.insert(key, w);
            return Ok(l);
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
            tokio::task::spawn_blocking(move || old.end());
        }
        let log = self.notes.as_ref().map(|(dir, _)| {
            let _ = private_dir(dir);
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            dir.join(format!(".start-{}-{nanos}.log", std::process::id()))
        });
        let log2 = log.clone();
        let process = tokio::task::spawn_blocking(move || start(log2.as_deref()))
            .await
            .map_err(|e| format!("the server start was interrupted: {e}"))?;
        let process = match process {
            Ok(p) => p,
            Err(e) => {
                if let Some(log) = &log {
                    let _ = std::fs::remove_file(log);
                }
                return Err(e);
            }
        };
        let key2 = key.clone();
        let note = self.note(&process, &key2, (dir, identity), idle, log.as_deref());
        let warm = Arc::new(Warm {
            http: process.http().clone(),
            confinement: process.confinement().to_owned(),
            pid: process.pid(),
            ident: ProcId::of(process.pid() as i32).unwrap_or(ProcId {
                pid: process.pid() as i32,
                start_time: 0,
            }),
            note,
            process: Mutex::new(Some(process)),
            users: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            loaded: Mutex::new(HashMap::from([(dir.to_path_buf(), identity)])),
            left: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            settled: AtomicBool::new(false),
            me: self.notes.as_ref().map(|(_, me)| *me),
        });
        let l = lease(&warm);
        servers.insert(key, warm);
        Ok(l)
    }

    /// Applies the idle rule to the servers this bridge holds, every quarter of the idle time
    /// (between 0.2 and 30 s), for as long as the pool lives; a server in use is marked active.
    fn start_reaper(self: &Arc<Self>, idle: Duration) {
        if self.reaper.set(()).is_err() {
            return;
        }
        let weak = Arc::downgrade(self);
        let every = reaper_tick(idle);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(pool) = weak.upgrade() else { return };
                let held = {
                    let servers = pool.servers.lock().await;
                    let mut held: Vec<(Option<String>, Arc<Warm>)> = servers
                        .iter()
                        .map(|(k, w)| (Some(k.clone()), Arc::clone(w)))
                        .collect();
                    held.extend(
                        pool.others
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .iter()
                            .map(|w| (None, Arc::clone(w))),
                    );
                    held
                };
                let judged = tokio::task::spawn_blocking(move || {
                    let mut gone = Vec::new();
                    for (key, w) in held {
                        if w.users.load(Ordering::SeqCst) > 0 {
                            if let Some(note) = &w.note {
                                touch(note);
                            }
                            continue;
                        }
                        if !w.alive() {
                            w.stop();
                            gone.push((key, w));
                            continue;
                        }
                        let since = w
                            .idle_since
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .elapsed();
                        let used = w.note.as_deref().map_or(since, used_age);
                        let limit = if w.retired.load(Ordering::SeqCst) {
                            retired_grace(idle)
                        } else {
                            idle
                        };
                        if since.min(used) < limit {
                            continue;
                        }
                        match w.has_turn() {
                            Ok(false) => {
                                w.stop();
                                gone.push((key, w));
                            }
                            Ok(true) => {
                                if let Some(note) = &w.note {
                                    touch(note);
                                }
                            }
                            Err(_) => {}
                        }
                    }
                    gone
                })
                .await
                .unwrap_or_default();
                if judged.is_empty() {
                    continue;
                }
                let mut servers = pool.servers.lock().await;
                for (key, w) in judged {
                    match key {
                        Some(k) if servers.get(&k).is_some_and(|s| Arc::ptr_eq(s, &w)) => {
                            servers.remove(&k);
                        }
                        _ => pool
                            .others
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .retain(|o| !Arc::ptr_eq(o, &w)),
                    }
                }
            }
        });
    }

    /// The bridge is ending: each server it holds stays while it has work and stops otherwise
    /// ([`Warm::end`]).
    pub(crate) async fn exit(&self) {
        let mut all: Vec<Arc<Warm>> = self.servers.lock().await.drain().map(|(_, w)| w).collect();
        all.append(&mut self.others.lock().unwrap_or_else(|e| e.into_inner()));
        if all.is_empty() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || {
            for w in all {
                w.end();
            }
        })
        .await;
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let all: Vec<Arc<Warm>> = self.servers.get_mut().drain().map(|(_, w)| w).collect();
        for w in all {
            w.end();
        }
        for w in self
            .others
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            w.end();
        }
    }
}
