//! The notes of the warm local servers, and the idle rule applied to them: what every bridge on
//! the same state directory, and each server's watcher, know of a server the pool started.
//!
//! A server is a service that outlives the bridge while it has work. Each one is noted in
//! `<state>/serve/<pid>.json` (mode 0600, in the state directory, which no run's fence grants):
//! its id (pid and start time), the bridge that started it, its URL and password, its kind of
//! run (the pool's key), its `TMPDIR`, the identity of each task directory's configuration when
//! it first worked there, and whether it is retired. Beside it, `<pid>.d/` holds its output
//! (`log`: the server writes to a file, not a pipe to a bridge that may end), `used` (whose
//! modification time is the server's last activity: a lease taken or given back, a turn seen
//! running) and one `bridge-<pid>-<start>` file per bridge attached to it.
//!
//! **The idle rule, one for everyone.** A server with no turn running (`/session/status` of each
//! directory it worked in) whose `used` is older than the idle time
//! (`OPENCODE_BRIDGE_SERVE_IDLE_MIN`) stops, whether or not a bridge is attached; a retired
//! server stops as soon as it has no turn. It is applied by the pool's reaper in each bridge that
//! holds the server, by the server's watcher (`opencode-bridge serve-watch NOTE`, started with
//! the server: it runs while no bridge does, see [`serve_watch`]), and by every bridge that opens
//! the state directory ([`sweep_notes`]). Whoever stops a server it did not start checks its
//! identity first ([`bridge_proc::stop_left_group`]: still that process, leading its group).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use bridge_proc::ProcId;
use opencode_client::http::{BasicAuth, HttpClient};
use serde::{Deserialize, Serialize};

use crate::registry::StoredProc;
use crate::runner::serve::session;

/// How long a stopped server's group has to end before SIGKILL.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(3);

/// What is noted of a warm server (`<state>/serve/<pid>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Note {
    #[serde(flatten)]
    pub server: StoredProc,
    /// The bridge that started it.
    pub bridge: StoredProc,
    /// Its URL and password (user `opencode`); empty in notes of older bridges.
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub password: String,
    /// The pool's key: which kind of run it serves.
    #[serde(default)]
    pub key: String,
    /// Its private `TMPDIR`, removed once it is stopped.
    #[serde(default)]
    pub tmp: Option<PathBuf>,
    #[serde(default)]
    pub confinement: String,
    /// The identity of each task directory's configuration when it first worked there.
    #[serde(default)]
    pub loaded: BTreeMap<PathBuf, u64>,
    /// Its configuration changed: no new task goes to it; it stops once it has no turn.
    #[serde(default)]
    pub retired: bool,
    /// The idle time of the bridge that started it, which its watcher applies.
    #[serde(default)]
    pub idle_ms: u64,
}

/// A note and where it lies.
#[derive(Debug, Clone)]
pub(crate) struct Noted {
    pub path: PathBuf,
    pub note: Note,
}

impl Noted {
    pub(super) fn read(path: &Path) -> Option<Noted> {
        let bytes = std::fs::read(path).ok()?;
        let note = serde_json::from_slice(&bytes).ok()?;
        Some(Noted {
            path: path.to_path_buf(),
            note,
        })
    }

    /// `<pid>.d/`.
    pub(super) fn dir(&self) -> PathBuf {
        files_of(&self.path)
    }

    pub fn server(&self) -> ProcId {
        self.note.server.into()
    }

    pub fn alive(&self) -> bool {
        self.server().is_alive()
    }

    pub(super) fn client(&self, timeout: Duration) -> Option<HttpClient> {
        if self.note.url.is_empty() {
            return None;
        }
        let auth = BasicAuth::new("opencode", self.note.password.clone());
        HttpClient::new(&self.note.url, Some(auth), timeout, 32 * 1024 * 1024).ok()
    }

    /// How long since its last activity.
    pub fn idle_for(&self) -> Duration {
        used_age(&self.path)
    }

    /// Whether a turn runs on it, in any directory it worked in.
    fn has_turn(&self, http: &HttpClient) -> Result<bool, String> {
        turn_in(http, self.note.loaded.keys())
    }

    /// The live bridges attached to it.
    fn attached(&self) -> Vec<ProcId> {
        attached(&self.path)
    }

    /// Stops it (SIGTERM to its group, SIGKILL after [`STOP_GRACE`], only while it is still that
    /// process leading its group) and removes its files. Blocks up to the grace.
    fn stop(&self) -> bool {
        let stopped = bridge_proc::stop_left_group(self.server(), STOP_GRACE);
        self.forget();
        stopped
    }

    /// Removes its note, its files and its `TMPDIR` (it is gone).
    pub(super) fn forget(&self) {
        if let Some(tmp) = &self.note.tmp {
            let _ = std::fs::remove_dir_all(tmp);
        }
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir_all(self.dir());
    }
}

/// `<pid>.d/` of the note at `note`.
pub(super) fn files_of(note: &Path) -> PathBuf {
    note.with_extension("d")
}

/// Marks the server of `note` active now.
pub(super) fn touch(note: &Path) {
    let dir = files_of(note);
    let _ = private_dir(&dir);
    let used = dir.join("used");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&used);
    if let Ok(f) = file {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// How long since the server of `note` was last active (its `used`, else its note).
pub(super) fn used_age(note: &Path) -> Duration {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let at = modified(&files_of(note).join("used")).or_else(|| modified(note));
    at.and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default()
}

pub(super) fn attachment(note: &Path, bridge: ProcId) -> PathBuf {
    files_of(note).join(format!("bridge-{}-{}", bridge.pid, bridge.start_time))
}

/// The live bridges attached to the server of `note` (files of dead ones are removed).
pub(super) fn attached(note: &Path) -> Vec<ProcId> {
    let Ok(entries) = std::fs::read_dir(files_of(note)) else {
        return Vec::new();
    };
    let mut live = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("bridge-")) else {
            continue;
        };
        let id = rest.split_once('-').and_then(|(p, s)| {
            Some(ProcId {
                pid: p.parse().ok()?,
                start_time: s.parse().ok()?,
            })
        });
        match id {
            Some(b) if b.is_alive() => live.push(b),
            _ => {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    live
}

pub(super) fn private_dir(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
}

/// Writes a note whole (mode 0600, through a temporary name).
pub(super) fn write_note(path: &Path, note: &Note) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(note).map_err(std::io::Error::other)?)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// Changes a note under an exclusive lock (`<pid>.d/lock`), so two bridges' changes both land.
pub(super) fn update_note(path: &Path, change: impl FnOnce(&mut Note)) {
    let dir = files_of(path);
    let _ = private_dir(&dir);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))
        .ok()
        .and_then(|f| nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).ok());
    if let Some(mut n) = Noted::read(path) {
        change(&mut n.note);
        let _ = write_note(path, &n.note);
    }
    drop(lock);
}

/// Whether a turn runs on the server in any of `dirs`.
pub(super) fn turn_in<'a>(
    http: &HttpClient,
    dirs: impl IntoIterator<Item = &'a PathBuf>,
) -> Result<bool, String> {
    for dir in dirs {
        match session::any_busy(http, dir) {
            Ok(true) => return Ok(true),
            Ok(false) => {}
            // An opencode 2 server has no `/session/status`; its running sessions are listed
            // once for all directories.
            Err(e) => return super::v2::any_busy(http).map_err(|_| e),
        }
    }
    Ok(false)
}

/// Every note in `dir` (unreadable ones are left out).
pub(crate) fn read_notes(dir: &Path) -> Vec<Noted> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut notes: Vec<Noted> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| Noted::read(&p))
        .collect();
    notes.sort_by_key(|n| n.note.server.pid);
    notes
}

/// How long a retired server may go without a lease before it stops (a lease holder touches
/// `used` more often than this).
pub(super) fn retired_grace(idle: Duration) -> Duration {
    reaper_tick(idle) * 2
}

pub(super) fn reaper_tick(idle: Duration) -> Duration {
    (idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(30))
}

/// The idle rule for one noted server nobody in this process holds: stops it when it has no
/// turn and was idle long enough (`idle`; a retired one after [`retired_grace`]). A turn seen
/// running counts as activity. Returns whether it was stopped.
fn apply_idle_rule(n: &Noted, idle: Duration, timeout: Duration) -> bool {
    let Some(http) = n.client(timeout) else {
        return false;
    };
    match n.has_turn(&http) {
        Ok(true) => {
            touch(&n.path);
            false
        }
        Ok(false) => {
            let limit = if n.note.retired {
                retired_grace(idle)
            } else {
                idle
            };
            n.idle_for() >= limit && n.stop()
        }
        // Cannot tell (busy, or not answering): decided on a later look.
        Err(_) => false,
    }
}

/// What a bridge does with the notes it finds as it opens the state directory: a server that is
/// gone leaves no files; one noted by an older bridge (no URL) is stopped once its bridge is
/// gone (as before); any other with no live bridge attached is held to the idle rule (its
/// watcher may be gone). A server with a bridge attached is that bridge's to judge. Returns how
/// many were stopped.
pub(crate) fn sweep_notes(dir: &Path, idle: Duration, timeout: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut stopped = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Some(n) = Noted::read(&path) else {
            // Torn or foreign: nothing in it can be signalled.
            let _ = std::fs::remove_file(&path);
            continue;
        };
        if !n.alive() {
            n.forget();
            continue;
        }
        if n.note.url.is_empty() {
            if !ProcId::from(n.note.bridge).exists() && n.stop() {
                stopped += 1;
            }
            continue;
        }
        if n.attached().is_empty() && apply_idle_rule(&n, idle, timeout) {
            stopped += 1;
        }
    }
    stopped
}

/// The watcher of one warm server (`opencode-bridge serve-watch NOTE`): it applies the idle rule
/// to the server of `note` (with the idle time noted there) until the server is gone, then
/// removes its files. It looks at the server's process every 250 ms and asks the server whether
/// a turn runs every quarter of the idle time (between 0.5 and 30 s). Exit code 0.
pub fn serve_watch(note: &Path) -> i32 {
    let Some(first) = Noted::read(note) else {
        return 0;
    };
    let idle = Duration::from_millis(first.note.idle_ms.max(1_000));
    let every = reaper_tick(idle).max(Duration::from_millis(500));
    let mut asked = Instant::now();
    let mut last = first;
    // Since when the note has been gone while the server lives (see `orphan_idle`).
    let mut orphaned: Option<Instant> = None;
    loop {
        std::thread::sleep(Duration::from_millis(250));
        match Noted::read(note) {
            Some(n) => {
                last = n;
                orphaned = None;
            }
            None if !last.alive() => return 0,
            None => {
                orphaned.get_or_insert_with(Instant::now);
            }
        }
        if !last.alive() {
            last.forget();
            return 0;
        }
        if asked.elapsed() < every {
            continue;
        }
        asked = Instant::now();
        let timeout = Duration::from_secs(10);
        let stopped = match orphaned.as_mut() {
            None => apply_idle_rule(&last, idle, timeout),
            Some(since) => orphan_idle(&last, since, idle, timeout),
        };
        if stopped {
            return 0;
        }
    }
}

/// A live server whose note is gone: its state directory was removed under it (a bridge only
/// removes a note once its server is gone), so no bridge can find, adopt or stop it again. Its
/// watcher, which holds its identity from the note as it was, stops it (start time checked) once
/// it has had no turn for the idle time since the note went or since its last turn (`since`).
fn orphan_idle(n: &Noted, since: &mut Instant, idle: Duration, timeout: Duration) -> bool {
    if since.elapsed() < idle {
        return false;
    }
    let Some(http) = n.client(timeout) else {
        return n.stop();
    };
    match n.has_turn(&http) {
        Ok(true) => {
            *since = Instant::now();
            false
        }
        Ok(false) => n.stop(),
        Err(_) => false,
    }
}

/// Starts the watcher of the server noted at `note`, in a process group of its own, reaped by a
/// thread of this bridge while it runs (afterwards by whoever adopts it).
pub(super) fn spawn_watcher(program: &Path, note: &Path) {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(program);
    cmd.arg("serve-watch")
        .arg(note)
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    match cmd.spawn() {
        Ok(mut child) => {
            let _ = std::thread::Builder::new()
                .name("serve-watch-reaper".into())
                .spawn(move || child.wait());
        }
        Err(e) => tracing::warn!(
            "the watcher of a warm server could not start ({e}); the next bridge applies its idle rule"
        ),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn note_in(dir: &Path, server: ProcId, bridge: ProcId) -> PathBuf {
        let path = dir.join(format!("{}.json", server.pid));
        let note = Note {
            server: server.into(),
            bridge: bridge.into(),
            url: "http://127.0.0.1:9".into(),
            password: "pw".into(),
            key: "k".into(),
            tmp: None,
            confinement: String::new(),
            loaded: BTreeMap::new(),
            retired: false,
            idle_ms: 60_000,
        };
        write_note(&path, &note).unwrap();
        path
    }

    /// A note is the user's alone, its changes under the lock all land, and the idle clock is
    /// `used`'s age.
    #[test]
    fn notes_are_private_changes_land_and_used_is_the_idle_clock() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let me = ProcId::of(std::process::id() as i32).unwrap();
        let path = note_in(dir.path(), me, me);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        update_note(&path, |n| {
            n.loaded.insert(PathBuf::from("/a"), 1);
        });
        update_note(&path, |n| n.retired = true);
        let n = Noted::read(&path).unwrap();
        assert_eq!(n.note.loaded.get(Path::new("/a")), Some(&1));
        assert!(n.note.retired);
        let used = files_of(&path).join("used");
        touch(&path);
        let f = std::fs::File::options().write(true).open(&used).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(120))
            .unwrap();
        assert!(
            n.idle_for() >= Duration::from_secs(119),
            "{:?}",
            n.idle_for()
        );
        touch(&path);
        assert!(n.idle_for() < Duration::from_secs(60));
    }

    /// A bridge attached is listed while it lives; a dead one's file is cleared.
    #[test]
    fn only_live_bridges_count_as_attached() {
        let dir = tempfile::tempdir().unwrap();
        let me = ProcId::of(std::process::id() as i32).unwrap();
        let path = note_in(dir.path(), me, me);
        private_dir(&files_of(&path)).unwrap();
        std::fs::write(attachment(&path, me), b"").unwrap();
        let dead = ProcId {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        std::fs::write(attachment(&path, dead), b"").unwrap();
        assert_eq!(attached(&path), vec![me]);
        assert!(!attachment(&path, dead).exists());
    }

    /// A server whose state directory is removed under it is stopped by its watcher once idle,
    /// not left running where no bridge can find it.
    #[test]
    fn a_server_whose_note_is_removed_is_stopped_by_its_watcher_once_idle() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("servers");
        std::fs::create_dir(&state).unwrap();
        // The "server": a process leading its own group, as a warm server does.
        let mut server = std::process::Command::new("sleep")
            .arg("600")
            .process_group(0)
            .spawn()
            .unwrap();
        let id = ProcId::of(server.id() as i32).unwrap();
        let me = ProcId::of(std::process::id() as i32).unwrap();
        let path = note_in(&state, id, me);
        update_note(&path, |n| n.idle_ms = 1_000);
        touch(&path);
        let watched = path.clone();
        let watcher = std::thread::spawn(move || serve_watch(&watched));
        // The watcher has read the note; the state directory goes well before the idle time.
        std::thread::sleep(Duration::from_millis(400));
        std::fs::remove_dir_all(&state).unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(status) = server.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let Some(status) = status else {
            let _ = server.kill();
            let _ = server.wait();
            panic!("the server was left running after its note was removed");
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(15), "{status:?}");
        assert_eq!(watcher.join().unwrap(), 0);
    }

    /// The sweep forgets a server that is gone (its note, its files, its `TMPDIR`).
    #[test]
    fn the_sweep_forgets_a_server_that_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let me = ProcId::of(std::process::id() as i32).unwrap();
        let gone = ProcId {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        let path = note_in(dir.path(), gone, me);
        let tmp = dir.path().join("tmp-of-server");
        std::fs::create_dir(&tmp).unwrap();
        update_note(&path, |n| n.tmp = Some(tmp.clone()));
        touch(&path);
        assert_eq!(
            sweep_notes(dir.path(), Duration::from_secs(60), Duration::from_secs(1)),
            0
        );
        assert!(!path.exists() && !files_of(&path).exists() && !tmp.exists());
    }
}
