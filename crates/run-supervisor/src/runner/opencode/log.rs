//! opencode's own log, read for what an `opencode run` prints nowhere else: that a provider
//! refused its request and it waits to try again.
//!
//! opencode 1.18.33 appends its log to `opencode/log/opencode.log` under its data directory
//! (the run's world: every run and server of a (project, access) appends to the one file),
//! one `key=value` line each, a value with spaces quoted with `\` escapes (observed):
//!
//! ```text
//! timestamp=… level=INFO run=f7bdc7b4 message=created id=ses_… … title="my \"odd\" title"
//! timestamp=… level=ERROR run=f7bdc7b4 message="stream error" providerID=fake modelID=m session.id=ses_… error.error="AI_APICallError: Rate limit reached for requests"
//! ```
//!
//! A run can write that file, so what is read here only describes the run that may have
//! written it (its status, and the kind its own failure is given); the file is read without
//! following a link, only when it is a regular file, in bounded pieces.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where opencode logs under a data directory (`$XDG_DATA_HOME`).
pub(crate) fn log_file(data_home: &Path) -> PathBuf {
    data_home.join("opencode/log/opencode.log")
}

/// The lines of the log this module reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogLine {
    /// A session was created (its id and title).
    Created { session: String, title: String },
    /// A model call failed (the session, and the error as opencode names it).
    StreamError { session: String, error: String },
}

/// Reads one log line; `None` for any other line.
pub(crate) fn parse(line: &str) -> Option<LogLine> {
    let fields = fields(line);
    let get = |k: &str| {
        fields
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.as_str())
    };
    match get("message")? {
        "created" => Some(LogLine::Created {
            session: get("id")?.to_owned(),
            title: get("title")?.to_owned(),
        }),
        "stream error" => Some(LogLine::StreamError {
            session: get("session.id")?.to_owned(),
            error: get("error.error").unwrap_or("").to_owned(),
        }),
        _ => None,
    }
}

/// The `key=value` fields of a line, quoted values unescaped (`\"` and `\\`).
fn fields(line: &str) -> Vec<(&str, String)> {
    let mut out = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else { break };
        let key = &rest[..eq];
        if key.contains(' ') {
            // A word without a value: skip it.
            rest = rest[key.find(' ').map_or(rest.len(), |i| i + 1)..].trim_start();
            continue;
        }
        let after = &rest[eq + 1..];
        let (value, used) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, 1 + end)
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (after[..end].to_owned(), end)
        };
        out.push((key, value));
        rest = after[used.min(after.len())..].trim_start();
    }
    out
}

/// The end of the log a run appends to, read from where it stood when the attempt began.
#[derive(Debug)]
pub(crate) struct LogTail {
    path: PathBuf,
    offset: u64,
}

/// The most read in one go; a line longer than this is passed over.
const PIECE: u64 = 256 * 1024;

impl LogTail {
    /// A tail of `path` from its current end (from its start when it does not exist yet).
    pub(crate) fn from_end(path: PathBuf) -> LogTail {
        let offset = open(&path)
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len());
        LogTail { path, offset }
    }

    /// The whole lines appended since the last read (at most [`PIECE`] bytes of them). A file
    /// that shrank is read again from its start; a link, a FIFO or anything but a regular file
    /// gives nothing.
    pub(crate) fn read_new(&mut self) -> Vec<String> {
        let Some(mut file) = open(&self.path) else {
            return Vec::new();
        };
        let len = file.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            self.offset = 0;
        }
        if len == self.offset || file.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        if file
            .take((len - self.offset).min(PIECE))
            .read_to_end(&mut buf)
            .is_err()
        {
            return Vec::new();
        }
        let Some(last_newline) = buf.iter().rposition(|&b| b == b'\n') else {
            if buf.len() as u64 == PIECE {
                // One line longer than a piece: passed over.
                self.offset += PIECE;
            }
            return Vec::new();
        };
        self.offset += last_newline as u64 + 1;
        String::from_utf8_lossy(&buf[..last_newline])
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The log, opened for reading without following a link or blocking on a FIFO, only when it
/// is a regular file.
fn open(path: &Path) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATED: &str = r#"timestamp=2026-12-07T16:00:01.846Z level=INFO run=f7bdc7b4 message=created id=ses_daec438c9ffeT8eoOBVIhNh4aZ slug=playful-canyon version=1.18.33 projectID=global directory=/tmp/rl/proj path="" workspaceID=undefined parentID=undefined title="my \"odd\" title=x" agent=undefined model="#;
    const STREAM_ERROR: &str = r#"timestamp=2026-12-07T16:00:03.962Z level=ERROR run=f7bdc7b4 message="stream error" providerID=fake modelID=m session.id=ses_daec438c9ffeT8eoOBVIhNh4aZ small=false agent=build mode=primary error.error="AI_APICallError: Rate limit reached for requests""#;

    #[test]
    fn the_lines_opencode_logs_are_read() {
        assert_eq!(
            parse(CREATED),
            Some(LogLine::Created {
                session: "ses_daec438c9ffeT8eoOBVIhNh4aZ".into(),
                title: r#"my "odd" title=x"#.into()
            })
        );
        assert_eq!(
            parse(STREAM_ERROR),
            Some(LogLine::StreamError {
                session: "ses_daec438c9ffeT8eoOBVIhNh4aZ".into(),
                error: "AI_APICallError: Rate limit reached for requests".into()
            })
        );
        for other in [
            r#"timestamp=2026-12-07T15:18:41.430Z level=INFO run=702c033c message=loop session.id=ses_x step=0"#,
            "",
            "no fields at all",
            r#"message="stream error""#,
            r#"message="unterminated"#,
            "==== = =\"",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }

    #[test]
    fn the_tail_reads_whole_new_lines_once_and_starts_again_when_the_file_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_file(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "old line\n").unwrap();
        let mut tail = LogTail::from_end(path.clone());
        assert!(tail.read_new().is_empty());
        let append = |t: &str| {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(t.as_bytes()).unwrap();
        };
        append("a\nb\npart");
        assert_eq!(tail.read_new(), ["a", "b"]);
        assert!(tail.read_new().is_empty());
        append("ial\n");
        assert_eq!(tail.read_new(), ["partial"]);
        std::fs::write(&path, "new\n").unwrap();
        assert_eq!(tail.read_new(), ["new"]);
    }

    #[test]
    fn a_link_or_a_fifo_in_place_of_the_log_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "secret\n").unwrap();
        let link = dir.path().join("opencode.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut tail = LogTail {
            path: link,
            offset: 0,
        };
        assert!(tail.read_new().is_empty());
        let fifo = dir.path().join("fifo.log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut tail = LogTail::from_end(fifo);
        assert!(tail.read_new().is_empty());
    }
}
