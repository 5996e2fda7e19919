//! The registry's writer: one thread that writes the records a supervisor hands it, so no file
//! is written while the task table is locked and the async runtime never waits on the disk.
//!
//! Records arrive over a channel in the order they were made. The writer takes everything that
//! is waiting, keeps the newest `task.json` and the newest `output.json` of each task (an older
//! version that was never written is not needed any more: each record is whole), and writes
//! them. One thread, so writes of one task never overtake each other. A write can be
//! acknowledged ([`Writer::write_acked`]): the supervisor waits for that before it reports a
//! task finished, so a finished task's outcome is on disk before anyone is told of it, and
//! only then may the task leave memory.

use std::collections::BTreeMap;
use std::sync::mpsc;

use super::{Registry, TaskOutputRecord, TaskRecord};

enum Job {
    /// A task's record; with `Some` output also its output; `ack` is told whether both were
    /// written.
    Write {
        task: Box<TaskRecord>,
        output: Option<Box<TaskOutputRecord>>,
        ack: Option<tokio::sync::oneshot::Sender<bool>>,
    },
    /// Answered once everything sent before it is written.
    Flush(mpsc::Sender<()>),
}

/// The writer thread's name.
pub(crate) const WRITER_THREAD: &str = "registry-writer";

/// A handle to the writer thread. Dropping the last handle lets the thread write what is left
/// and exit.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    tx: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Write { task, ack, .. } => {
                write!(f, "Write({}, acked {})", task.id, ack.is_some())
            }
            Job::Flush(_) => f.write_str("Flush"),
        }
    }
}

#[derive(Default)]
struct Pending {
    task: Option<Box<TaskRecord>>,
    output: Option<Box<TaskOutputRecord>>,
    acks: Vec<tokio::sync::oneshot::Sender<bool>>,
}

impl Writer {
    /// Starts the writer thread of `registry`. `written(id, session)` is called (on the writer
    /// thread, before any acknowledgement of the write is sent) each time a `task.json` naming a
    /// session is on disk: a supervisor shows a session id only once a restarted bridge could.
    pub(crate) fn new(registry: Registry, written: impl Fn(u64, &str) + Send + 'static) -> Writer {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name(WRITER_THREAD.into())
            .spawn(move || run(&registry, &rx, &written));
        if let Err(e) = spawned {
            // Without a thread nothing would be written; say so (the tasks still run and are
            // answered from memory).
            tracing::warn!("cannot start the registry writer: {e}; tasks are kept in memory only");
        }
        Writer { tx }
    }

    /// Queues a task's record (and output) for writing.
    pub(crate) fn write(&self, task: TaskRecord, output: Option<TaskOutputRecord>) {
        let _ = self.tx.send(Job::Write {
            task: Box::new(task),
            output: output.map(Box::new),
            ack: None,
        });
    }

    /// Queues a task's record (and output); the answer says whether they were written (false
    /// too when the writer is gone).
    pub(crate) fn write_acked(
        &self,
        task: TaskRecord,
        output: Option<TaskOutputRecord>,
    ) -> tokio::sync::oneshot::Receiver<bool> {
        let (ack, rx) = tokio::sync::oneshot::channel();
        let _ = self.tx.send(Job::Write {
            task: Box::new(task),
            output: output.map(Box::new),
            ack: Some(ack),
        });
        rx
    }

    /// Blocks until everything queued before the call is written (or the writer is gone).
    pub(crate) fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        if self.tx.send(Job::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }
}

fn run(registry: &Registry, rx: &mpsc::Receiver<Job>, written: &dyn Fn(u64, &str)) {
    while let Ok(first) = rx.recv() {
        let mut pending: BTreeMap<u64, Pending> = BTreeMap::new();
        let mut flushes = Vec::new();
        let mut job = Some(first);
        while let Some(j) = job {
            match j {
                Job::Write { task, output, ack } => {
                    let p = pending.entry(task.id).or_default();
                    p.task = Some(task);
                    if output.is_some() {
                        p.output = output;
                    }
                    p.acks.extend(ack);
                }
                // Everything before it is in `pending` and is written below, before the answer.
                Job::Flush(done) => flushes.push(done),
            }
            job = rx.try_recv().ok();
        }
        for (id, p) in pending {
            let mut ok = true;
            if let Some(t) = &p.task {
                let done = registry.write_task(t);
                if done && let Some(session) = &t.session_id {
                    written(id, session);
                }
                ok &= done;
            }
            if let Some(o) = &p.output {
                ok &= registry.write_output(id, o);
            }
            for ack in p.acks {
                let _ = ack.send(ok);
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskState;

    #[test]
    fn the_newest_record_is_written_and_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(dir.path()).unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = std::sync::Arc::clone(&seen);
        let w = Writer::new(reg.clone(), move |id, session| {
            s.lock().unwrap().push((id, session.to_owned()))
        });
        let id = reg.next_id().unwrap();
        let mut t = super::super::tests::task(&reg, id, TaskState::Running, None);
        for n in 0..50u32 {
            t.attempts = n;
            w.write(t.clone(), None);
        }
        t.state = TaskState::Succeeded.as_str().into();
        let o = TaskOutputRecord {
            text: "the answer".into(),
            ..TaskOutputRecord::default()
        };
        let ack = w.write_acked(t.clone(), Some(o));
        assert_eq!(ack.blocking_recv(), Ok(true));
        let back = reg.read_task(id).unwrap();
        assert_eq!(back.attempts, 49, "the newest record is the one on disk");
        assert_eq!(back.state(), TaskState::Succeeded);
        assert_eq!(reg.read_output(id).unwrap().text, "the answer");
        assert!(seen.lock().unwrap().is_empty(), "no record named a session");
        t.session_id = Some("ses_1".into());
        assert_eq!(w.write_acked(t.clone(), None).blocking_recv(), Ok(true));
        assert_eq!(*seen.lock().unwrap(), [(id, "ses_1".to_owned())]);
        // A write that cannot happen is acknowledged as failed, and flush still returns.
        std::fs::remove_dir_all(dir.path()).unwrap();
        std::fs::write(dir.path(), "not a directory").unwrap();
        assert_eq!(w.write_acked(t, None).blocking_recv(), Ok(false));
        w.flush();
    }
}
