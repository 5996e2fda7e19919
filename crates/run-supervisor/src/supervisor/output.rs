//! A run's stdout and stderr, followed while it runs: every whole line is read by the
//! runner's parser before the task table is locked, then folded into the task's record.
//!
//! stdout goes to an unlinked temporary file the follower reads with `pread` on a thread of its
//! own (a pipe where no such file can be made); stderr is a pipe read on the runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::record::{Record, Save};
use super::table::{Shared, persist};
use crate::runner::Runner;
use crate::runner::opencode::events::TextBuffer;
use crate::runner::{Prepared, backend};
use crate::task::TaskId;
use bridge_proc::stream::{LineSplitter, Piece};

/// Longest line read from a run's stdout; longer lines are counted as malformed and skipped up
/// to the next newline (see [`LineSplitter`]).
const MAX_LINE: usize = 8 * 1024 * 1024;

/// Bytes asked of one read of a run's stdout. Lines that lie whole inside one read are parsed
/// where they are, without a copy.
const STDOUT_READ: usize = 256 * 1024;

/// Bytes asked of one read of a run's stderr (it carries little).
const STDERR_READ: usize = 16 * 1024;

/// Size asked for a run's stdout pipe (Linux `F_SETPIPE_SZ`; the default pipe holds 64 KiB),
/// so a run writing fast fills whole reads and both sides wake up less often. A refusal (the
/// user's pipe quota, `/proc/sys/fs/pipe-max-size`) leaves the default size.
const STDOUT_PIPE: i32 = 1 << 20;

pub(super) fn enlarge_pipe(fd: impl std::os::fd::AsFd) {
    let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(STDOUT_PIPE));
}

pub(super) async fn read_stream(
    shared: Arc<Shared>,
    id: TaskId,
    mut stream: impl AsyncRead + Unpin,
    is_stdout: bool,
) {
    let mut buf = vec![0u8; if is_stdout { STDOUT_READ } else { STDERR_READ }];
    let mut lines = LineSplitter::new(MAX_LINE);
    let Some((runner, text)) = shared.with(id, |r| (r.runner, r.summary.text_buffer())) else {
        return;
    };
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if is_stdout {
            if !fold_stdout(&shared, id, (runner, &text), &mut lines, chunk) {
                break;
            }
            continue;
        }
        let mut inner = shared.lock();
        let Some(r) = inner.tasks.get_mut(&id) else {
            break;
        };
        r.stderr.push(chunk);
    }
    if is_stdout {
        finish_stdout(&shared, id, &mut lines);
    }
}

/// Reads one stdout line by the rules of `runner` (no lock held).
fn prepare(runner: Runner, piece: Piece<'_>) -> Prepared<'_> {
    match piece {
        Piece::TooLong => Prepared::TooLong,
        Piece::Line(line) => backend(runner).prepare(line),
    }
}

/// Folds what a run wrote to stdout: every whole line of `chunk` (the rest waits in `lines`),
/// by the rules of the attempt's runner into its summary, whose text buffer is `text`. The
/// lines are parsed, and the events' text appended to the text buffer, before the task table
/// is locked, so a flood of events holds that lock only for the counting. (Copying the text is
/// most of folding a flood; a follower preempted while it holds the table's lock keeps every
/// call waiting, while the text buffer's own lock is taken only by a result and a save.) False
/// when the task is gone.
pub(super) fn fold_stdout(
    shared: &Shared,
    id: TaskId,
    (runner, text): (Runner, &TextBuffer),
    lines: &mut LineSplitter,
    chunk: &[u8],
) -> bool {
    let mut read = Vec::new();
    // Lines whole in `chunk` are read in place (their text is copied once, when folded); only
    // the line that earlier chunks began is detached from the splitter's buffer.
    let rest = lines.feed_first(chunk, |piece| {
        read.push(prepare(runner, piece).into_owned())
    });
    lines.feed_rest(rest, |piece| read.push(prepare(runner, piece)));
    {
        let mut text = text.lock();
        for line in &mut read {
            if let Prepared::Parsed(line) = line {
                line.push_text_into(&mut text);
            }
        }
    }
    let mut inner = shared.lock();
    let Some(r) = inner.tasks.get_mut(&id) else {
        return false;
    };
    for line in read {
        fold(shared, r, line);
    }
    true
}

/// Folds the last, unterminated line of a run's stdout, and notes when it was not a whole
/// event (the output was cut off).
pub(super) fn finish_stdout(shared: &Shared, id: TaskId, lines: &mut LineSplitter) {
    shared.with(id, |r| {
        let unterminated = lines.pending_bytes() > 0;
        let malformed = r.summary.malformed();
        let runner = r.runner;
        lines.finish(|piece| fold(shared, r, prepare(runner, piece)));
        if unterminated && r.summary.malformed() > malformed {
            r.summary.note_ended_mid_line();
        }
    });
}

/// Folds one stdout line (or an over-long one) into the task record.
fn fold(shared: &Shared, r: &mut Record, line: Prepared<'_>) {
    let event = r.stream.push(&mut r.summary, line);
    if event {
        r.last_event = Some(Instant::now());
    }
    // The session id goes to the registry the moment it is known: no status shows it
    // before a restarted bridge could.
    if !r.persisted_session && r.summary.session_id().is_some() {
        r.persisted_session = true;
        persist(shared, r, Save::Record);
    }
}

/// Runs `follow` on a thread of its own; the handle ends when the thread does.
///
/// Reading and parsing a flood of events is CPU work. It runs off the runtime's thread, so
/// that thread stays free to answer calls; a named thread of its own rather than one of the
/// blocking pool, which the reads that answer calls use. (A lower priority for it was tried
/// and made the worst call slower: a thread that holds the task table's lock while the
/// scheduler passes it over keeps every caller waiting.) `None` when no thread can be started:
/// then the run's output is not read (the run itself is unaffected) and a warning says so.
pub(super) fn follower(
    follow: impl FnOnce() + Send + 'static,
) -> Option<tokio::task::JoinHandle<()>> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("run-output".into())
        .spawn(move || {
            follow();
            let _ = tx.send(());
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start a thread to read a run's output: {e}");
        return None;
    }
    Some(tokio::spawn(async move {
        let _ = rx.await;
    }))
}

/// How often a run's output file is looked at for new bytes while the run lives.
const FOLLOW_EVERY: Duration = Duration::from_millis(20);

/// Consumed output is given back to the file system (a hole is punched) every this many bytes,
/// so a run that floods its output does not fill the disk.
const PUNCH_EVERY: u64 = 8 << 20;

/// An unlinked temporary file for a run's stdout, opened for appending, or `None` (then a
/// pipe is used). opencode (a Bun program) drops what it has not written yet when it exits
/// with a full stdout pipe, losing the end of a long answer; writes to a file complete at once.
pub(super) fn output_file() -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_TMPFILE.bits())
        .open(std::env::temp_dir())
        .inspect_err(|e| tracing::debug!("no output file ({e}); a pipe is used"))
        .ok()
}

/// Reads a run's stdout file as it grows (with `pread`, so the offset the run writes at is
/// never moved), folding each whole line, until `done` says the run ended; then reads what is
/// left and stops. Blocking: runs on a thread of its own (the runtime's blocking pool), and
/// stops at once, folding nothing more, when `abandon` is set.
pub(super) fn follow_output(
    shared: &Shared,
    id: TaskId,
    file: &std::fs::File,
    mut done: tokio::sync::watch::Receiver<bool>,
    abandon: &std::sync::atomic::AtomicBool,
) {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; STDOUT_READ];
    let mut lines = LineSplitter::new(MAX_LINE);
    let (mut offset, mut punched) = (0u64, 0u64);
    let Some((runner, text)) = shared.with(id, |r| (r.runner, r.summary.text_buffer())) else {
        return;
    };
    loop {
        // A dropped sender means the attempt is over too.
        let ended = *done.borrow_and_update() || done.has_changed().is_err();
        loop {
            let n = match file.read_at(&mut buf, offset) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(task = id, "cannot read the run's output file: {e}");
                    finish_stdout(shared, id, &mut lines);
                    return;
                }
            };
            if abandon.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            offset += n as u64;
            if !fold_stdout(shared, id, (runner, &text), &mut lines, &buf[..n]) {
                return;
            }
            if offset - punched >= PUNCH_EVERY {
                punched = offset & !0xfff;
                punch_hole(file, punched);
            }
        }
        if ended {
            break;
        }
        if !done.has_changed().unwrap_or(true) {
            std::thread::sleep(FOLLOW_EVERY);
        }
    }
    finish_stdout(shared, id, &mut lines);
}

/// Frees the first `len` bytes of `file` on disk, keeping its size (a failure, e.g. on a file
/// system without holes, only costs disk space).
fn punch_hole(file: &std::fs::File, len: u64) {
    use nix::fcntl::{FallocateFlags, fallocate};
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    let _ = fallocate(file, flags, 0, i64::try_from(len).unwrap_or(i64::MAX));
}
