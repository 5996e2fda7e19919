//! Helpers shared by the supervisor's integration tests.
#![allow(dead_code)]

pub mod live;

use std::path::Path;
use std::time::Duration;

use run_supervisor::{ProcId, Supervisor, TaskId, TaskSnapshot, TaskState};

/// Tests in one binary share the process: those that count our zombie children run one at a
/// time.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Zombie processes whose parent is this test process.
pub fn zombie_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    if let Ok(iter) = procfs::process::all_processes() {
        for p in iter.flatten() {
            if let Ok(st) = p.stat()
                && st.ppid == me
                && st.state == 'Z'
            {
                out.push(st.pid);
            }
        }
    }
    out
}

/// Asserts that no zombie child of ours remains (waiting briefly for in-flight reaps).
pub async fn assert_no_zombies() {
    for _ in 0..100 {
        if zombie_children().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let named: Vec<String> = zombie_children()
        .into_iter()
        .map(|pid| {
            let comm = procfs::process::Process::new(pid)
                .and_then(|p| p.stat())
                .map(|s| s.comm)
                .unwrap_or_default();
            format!("{pid} ({comm})")
        })
        .collect();
    panic!("zombie children left: {named:?}");
}

/// Asserts every process is gone (or its pid now belongs to another process).
pub fn assert_all_dead(procs: &[ProcId]) {
    for p in procs {
        assert!(!p.exists(), "process {} survived", p.pid);
    }
}

/// Waits until `pred` holds for the task's snapshot, or panics after `timeout`.
pub async fn wait_until(
    sup: &Supervisor,
    id: TaskId,
    timeout: Duration,
    pred: impl Fn(&TaskSnapshot) -> bool,
) -> TaskSnapshot {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let s = sup.status(id).expect("task exists");
        if pred(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached within {timeout:?}; last status {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for a task to finish within `timeout`.
pub async fn finish(sup: &Supervisor, id: TaskId, timeout: Duration) -> TaskSnapshot {
    tokio::time::timeout(timeout, sup.wait(id))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "task {id} did not finish within {timeout:?}: {:?}",
                sup.status(id)
            )
        })
        .expect("task exists")
}

/// Reads pids written by the fake (one per line) and identifies them.
pub async fn read_pidfile(path: &Path, want: usize) -> Vec<ProcId> {
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(path) {
            let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() >= want {
                return pids.into_iter().filter_map(ProcId::of).collect();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the fake did not write {want} pids to {}", path.display());
}

/// Shorthand.
pub fn finished(s: &TaskSnapshot) -> bool {
    s.state.is_finished()
}

/// Shorthand.
pub fn running(s: &TaskSnapshot) -> bool {
    s.state == TaskState::Running && s.pid.is_some()
}

/// The nice value of process `pid`, or of the calling thread for `None` (nice values are per
/// thread, and a run inherits the one of the thread that starts it).
pub fn nice_of(pid: Option<i32>) -> i64 {
    use procfs::FromRead;
    let path = pid.map_or("/proc/thread-self/stat".to_owned(), |p| {
        format!("/proc/{p}/stat")
    });
    procfs::process::Stat::from_file(path)
        .expect("a live process")
        .nice
}

/// A scan context for reading a test's opencode store now (30 s deadline).
pub fn store_scan_context() -> opencode_client::ScanContext {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    opencode_client::ScanContext {
        deadline: std::time::Instant::now() + Duration::from_secs(30),
        now_ms,
        liveness: opencode_client::Liveness::default(),
    }
}

/// The opencode stores of the runs' worlds under a supervisor's state directory (runs write
/// their sessions there, never in the user's store).
pub fn world_stores(state: &std::path::Path) -> Vec<std::path::PathBuf> {
    bridge_fence::world::all(state)
        .into_iter()
        .map(|w| w.opencode_db())
        .filter(|db| db.is_file())
        .collect()
}
