//! The `opencode serve` processes the bridge starts of its own ([`ServeProcess`]): how one is
//! started ([`ServeStart`], its [`ChildEnv`]), confined, told its password (opencode 2's through
//! `service password`), waited on until it listens, explained when it ends first, and stopped.
//! Nothing here reads the environment or chooses a backend: the caller gives the program, the
//! environment and the fence.

use crate::error::ClientError;
use crate::http::{BasicAuth, HttpClient};
use bridge_proc::{CaptureLimits, GroupChild};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The environment of a child opencode: variables set over the inherited ones, and variables
/// removed from it.
#[derive(Debug, Clone, Default)]
pub struct ChildEnv {
    /// Set (after removal).
    pub set: Vec<(String, String)>,
    /// Removed from the inherited environment.
    pub remove: Vec<String>,
}

/// How to start an `opencode serve` of the bridge's own ([`ServeProcess::start`]).
#[derive(Debug)]
pub struct ServeStart<'a> {
    /// The binary.
    pub program: &'a Path,
    /// The binary as named to people (in errors).
    pub shown: &'a Path,
    /// Its working directory (also `PWD`).
    pub cwd: &'a Path,
    /// Its environment over the inherited one.
    pub env: &'a ChildEnv,
    /// How long it may take to listen.
    pub startup: Duration,
    /// Set to give up while it starts ([`ClientError::Cancelled`]).
    pub cancel: Option<&'a std::sync::atomic::AtomicBool>,
    /// What it is for, named when the start times out.
    pub purpose: &'a str,
    /// The per-call timeout of its [`HttpClient`].
    pub api_timeout: Duration,
    /// The reply-size cap of its [`HttpClient`].
    pub max_reply_bytes: u64,
    /// Where its stdout and stderr go, for a server that may outlive this process (a pipe to
    /// us would break when we end). `None`: pipes, drained while it runs.
    pub log: Option<&'a Path>,
    /// The contract the binary speaks. opencode 2 ignores `OPENCODE_SERVER_PASSWORD` and reads
    /// its password from `$XDG_STATE_HOME/opencode/password`: the bridge sets it there with
    /// `<program> service password <value>` first, only when `env` points `XDG_STATE_HOME` at a
    /// directory of the bridge's own (a world's).
    pub contract: crate::Contract,
}

/// An `opencode serve` the bridge started: on `127.0.0.1`, a port of its own choosing, a random
/// password, a private `TMPDIR`, inside the kernel fence the caller gave it, in its own process
/// group. Dropping it stops it (SIGTERM to the group, SIGKILL after 3 s), reaps it and removes
/// its `TMPDIR`.
pub struct ServeProcess {
    child: TempServer,
    http: HttpClient,
    confinement: String,
    password: String,
    tmp: ServerTmp,
}

impl fmt::Debug for ServeProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeProcess")
            .field("url", &self.http.base())
            .field("pid", &self.child.group().pid())
            .finish()
    }
}

impl ServeProcess {
    /// Starts the server and waits (at most `start.startup`) until it listens. `fence` gets the
    /// server's private `TMPDIR` and returns the fence to start it in. A server that exits
    /// before it listens is [`ClientError::OpencodeRefused`] with opencode's own message when it
    /// printed one (e.g. `Configuration is invalid at …`), else [`ClientError::TempServer`].
    pub fn start(
        start: &ServeStart<'_>,
        fence: impl FnOnce(&Path) -> Result<bridge_fence::Fence, ClientError>,
    ) -> Result<ServeProcess, ClientError> {
        let password = random_password()?;
        let tmp = ServerTmp::create(&password[..16])?;
        let fence = fence(&tmp.0)?;
        let env = start.env;
        if start.contract == crate::Contract::V2 {
            set_v2_password(start, &password, &fence)?;
        }
        let mut cmd = Command::new(start.program);
        cmd.args(["serve", "--hostname", "127.0.0.1", "--port", "0"])
            .current_dir(start.cwd);
        for k in &env.remove {
            cmd.env_remove(k);
        }
        cmd.envs(env.set.iter().map(|(k, v)| (k, v)))
            .env("PWD", start.cwd)
            .env("OPENCODE_SERVER_PASSWORD", &password)
            .env("OPENCODE_SERVER_USERNAME", "opencode")
            .env("TMPDIR", &tmp.0)
            .env("TMP", &tmp.0)
            .env("TEMP", &tmp.0)
            .stdin(Stdio::null());
        match start.log {
            Some(log) => {
                use std::os::unix::fs::OpenOptionsExt;
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(log)
                    .and_then(|f| Ok((f.try_clone()?, f)))
                    .map_err(|e| ClientError::TempServer {
                        detail: format!(
                            "cannot open {} for the server's output: {e}",
                            log.display()
                        ),
                    })?;
                cmd.stdout(file.0).stderr(file.1);
            }
            None => {
                cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
        }
        fence.apply_to(&mut cmd);
        // Dropping `server` on any path below stops it (SIGTERM, then SIGKILL) and reaps it.
        let mut server = TempServer(Some(GroupChild::spawn(&mut cmd).map_err(|e| {
            ClientError::TempServer {
                detail: format!("cannot start `{} serve`: {e}", start.shown.display()),
            }
        })?));
        let (tx, rx) = mpsc::channel();
        // What the server printed besides its URL, to explain an early exit (bounded).
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let keep = |said: &std::sync::Arc<std::sync::Mutex<Vec<String>>>, line: &str| {
            let line = strip_ansi(line);
            if !line.trim().is_empty()
                && let Ok(mut v) = said.lock()
                && v.len() < 40
            {
                v.push(line.chars().take(400).collect());
            }
        };
        let said_out = said.clone();
        let url_of = move |line: &str, tx: &mpsc::Sender<String>| {
            if let Some(pos) = line.find("http://") {
                let _ = tx.send(line[pos..].trim().to_string());
            } else {
                keep(&said_out, line);
            }
        };
        let (out_thread, err_thread) = match start.log {
            // The log is read from its start until the URL is in it (or the server ended).
            Some(log) => {
                let (log, pid) = (log.to_path_buf(), server.group().pid() as i32);
                let reader = std::thread::spawn(move || {
                    let mut seen = 0;
                    loop {
                        let text = std::fs::read(&log).unwrap_or_default();
                        let lines: Vec<String> = String::from_utf8_lossy(&text)
                            .lines()
                            .map(str::to_owned)
                            .collect();
                        let whole = text.ends_with(b"\n");
                        let upto = if whole {
                            lines.len()
                        } else {
                            lines.len().saturating_sub(1)
                        };
                        for line in lines.iter().take(upto).skip(seen) {
                            url_of(line, &tx);
                            if line.contains("http://") {
                                return;
                            }
                        }
                        seen = seen.max(upto);
                        // Ended (a zombie or gone): what it printed is all there is.
                        let ended = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                            .map(|s| {
                                s.rsplit(')')
                                    .next()
                                    .is_some_and(|r| r.trim_start().starts_with('Z'))
                            })
                            .unwrap_or(true);
                        if ended {
                            for line in lines.iter().skip(seen) {
                                url_of(line, &tx);
                            }
                            return;
                        }
                        if tx.send(String::new()).is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                });
                (reader, std::thread::spawn(|| {}))
            }
            None => {
                let stdout = server
                    .group_mut()
                    .child_mut()
                    .stdout
                    .take()
                    .expect("stdout is piped");
                let stderr = server
                    .group_mut()
                    .child_mut()
                    .stderr
                    .take()
                    .expect("stderr is piped");
                // The readers keep draining the pipes for the server's whole life (a
                // long-lived server must never block on a full pipe); they end when it does.
                let out_thread = std::thread::spawn(move || {
                    for line in BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        url_of(&line, &tx);
                    }
                });
                let said_err = said.clone();
                let err_thread = std::thread::spawn(move || {
                    for line in BufReader::new(stderr).lines() {
                        let Ok(line) = line else { break };
                        keep(&said_err, &line);
                    }
                });
                (out_thread, err_thread)
            }
        };
        let deadline = bridge_proc::deadline::after(start.startup);
        let received = loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match rx.recv_timeout(slice) {
                // The log's reader says it is still looking.
                Ok(url) if url.is_empty() => {}
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    if start
                        .cancel
                        .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
                    {
                        return Err(ClientError::Cancelled);
                    }
                }
                other => break other,
            }
        };
        let url = match received {
            Ok(url) => url,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(ClientError::ServiceTimeout {
                    url: start.purpose.to_owned(),
                    timeout_ms: start.startup.as_millis() as u64,
                });
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // stdout closed: the server is ending; let both readers finish (bounded).
                server.group().wait_exit(Duration::from_secs(5));
                let _ = out_thread.join();
                if server.group().has_exited() {
                    let _ = err_thread.join();
                }
                let lines = said.lock().map(|v| v.clone()).unwrap_or_default();
                let error = opencode_error(&lines);
                // Only a configuration problem is opencode refusing to work here; anything else
                // (a store migration racing another start, a crash) is a failed start.
                if let Some(message) = error.as_ref().filter(|m| is_config_error(m)) {
                    return Err(ClientError::OpencodeRefused {
                        message: message.clone(),
                    });
                }
                let why = lines.last().cloned().unwrap_or_default();
                return Err(ClientError::TempServer {
                    detail: format!(
                        "`{} serve` ended before it listened{}",
                        start.shown.display(),
                        if why.is_empty() {
                            String::new()
                        } else {
                            format!(": {why}")
                        }
                    ),
                });
            }
        };
        let http = HttpClient::new(
            &url,
            Some(BasicAuth::new("opencode", password.clone())),
            start.api_timeout,
            start.max_reply_bytes,
        )?;
        Ok(ServeProcess {
            child: server,
            http,
            confinement: fence.confinement().to_string(),
            password,
            tmp,
        })
    }

    /// Its password (user `opencode`), for whoever adopts it later.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Its private `TMPDIR` (removed when it is stopped through this value).
    pub fn tmp(&self) -> &Path {
        &self.tmp.0
    }

    /// Lets the server go on without us (started with a [`ServeStart::log`], so nothing of it
    /// depends on this process): it is neither stopped nor reaped by this value again, and its
    /// `TMPDIR` stays. Whoever stops it later removes that ([`ServeProcess::tmp`]). Returns its
    /// pid.
    pub fn leave(self) -> u32 {
        let ServeProcess { child, tmp, .. } = self;
        std::mem::forget(tmp);
        let mut child = child;
        match child.0.take() {
            Some(group) => group.release(),
            None => 0,
        }
    }

    /// A client for it (its URL and password).
    pub fn http(&self) -> &HttpClient {
        &self.http
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.group().pid()
    }

    /// Whether it has exited.
    pub fn has_exited(&self) -> bool {
        self.child.group().has_exited()
    }

    /// How it is confined (`confined (Landlock ABI 7)`, `not confined: …`).
    pub fn confinement(&self) -> &str {
        &self.confinement
    }
}

/// opencode's own error message among the lines a failed start printed: from the line holding
/// `Error:` on, joined into one line (its `--- Errors ---` block included).
fn opencode_error(lines: &[String]) -> Option<String> {
    let at = lines.iter().position(|l| l.contains("Error:"))?;
    let text = lines[at..]
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.starts_with("---") && !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let text = text
        .split_once("Error:")
        .map(|(_, rest)| rest.trim())
        .unwrap_or(&text);
    Some(text.chars().take(600).collect())
}

/// Whether opencode's error is about its configuration (`Configuration is invalid at …`, a
/// config file that is not valid JSON(C), a bad `{file:}` or `{env:}` reference).
fn is_config_error(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("config") || m.contains("file reference") || m.contains("jsonc")
}

/// Removes ANSI escape sequences (`ESC [ … letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Sets an opencode 2 server's password before it starts: `<program> service password <value>`
/// in the server's environment and fence, which writes `$XDG_STATE_HOME/opencode/password` and
/// starts nothing (measured on the 2.0 preview). Refused unless the environment names the state
/// directory, a world's: the user's own service password is never changed.
fn set_v2_password(
    start: &ServeStart<'_>,
    password: &str,
    fence: &bridge_fence::Fence,
) -> Result<(), ClientError> {
    let state = start
        .env
        .set
        .iter()
        .rev()
        .find(|(k, _)| k == "XDG_STATE_HOME")
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute());
    if state.is_none() {
        return Err(ClientError::TempServer {
            detail: format!(
                "`{}` speaks opencode 2, whose server password the bridge sets only in a state directory of its own, and none was given",
                start.shown.display()
            ),
        });
    }
    let mut cmd = Command::new(start.program);
    cmd.args(["service", "password", password])
        .current_dir(start.cwd);
    for k in &start.env.remove {
        cmd.env_remove(k);
    }
    cmd.envs(start.env.set.iter().map(|(k, v)| (k, v)))
        .env("PWD", start.cwd)
        .stdin(Stdio::null());
    fence.apply_to(&mut cmd);
    let limits = CaptureLimits {
        stdout_bytes: 64 * 1024,
        stderr_bytes: 64 * 1024,
    };
    let c = bridge_proc::run_capture(&mut cmd, start.startup, limits).map_err(|e| {
        ClientError::TempServer {
            detail: format!(
                "cannot set the password of `{} serve`: {e:?}",
                start.shown.display()
            ),
        }
    })?;
    if c.status.is_some_and(|s| s.success()) {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&c.stderr);
    Err(ClientError::TempServer {
        detail: format!(
            "`{} service password` failed: {}",
            start.shown.display(),
            said.lines().next().unwrap_or("no message").trim()
        ),
    })
}

/// A temporary server's private `TMPDIR`, removed with it.
struct ServerTmp(PathBuf);

impl ServerTmp {
    fn create(name: &str) -> Result<ServerTmp, ClientError> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(format!("opencode-bridge-serve-{name}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map(|_| ServerTmp(dir.clone()))
            .map_err(|e| ClientError::TempServer {
                detail: format!("cannot create {}: {e}", dir.display()),
            })
    }
}

impl Drop for ServerTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The temporary server; stopped and reaped when dropped. `None` once let go
/// ([`ServeProcess::leave`]).
struct TempServer(Option<GroupChild>);

impl TempServer {
    fn group(&self) -> &GroupChild {
        self.0.as_ref().expect("a server let go is not used")
    }

    fn group_mut(&mut self) -> &mut GroupChild {
        self.0.as_mut().expect("a server let go is not used")
    }
}

impl Drop for TempServer {
    fn drop(&mut self) {
        if let Some(g) = &mut self.0 {
            g.stop(Duration::from_secs(3));
        }
    }
}

fn random_password() -> Result<String, ClientError> {
    let mut buf = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| ClientError::ApiCommand {
            detail: format!("cannot read /dev/urandom for a temporary server password: {e}"),
        })?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opencode_errors_are_read_from_what_a_failed_start_printed() {
        let lines: Vec<String> = [
            "Warning: OPENCODE_SERVER_PASSWORD is not set; server is unsecured.",
            &strip_ansi("\u{1b}[91m\u{1b}[1mError: \u{1b}[0mConfiguration is invalid at /c/opencode.json: bad file reference"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            opencode_error(&lines).unwrap(),
            "Configuration is invalid at /c/opencode.json: bad file reference"
        );
        let json: Vec<String> = [
            "Error: Config file at /p/opencode.json is not valid JSON(C):",
            "--- Errors ---",
            "CloseBraceExpected at line 2, column 1",
            "--- End ---",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            opencode_error(&json).unwrap(),
            "Config file at /p/opencode.json is not valid JSON(C): CloseBraceExpected at line 2, column 1"
        );
        assert_eq!(opencode_error(&["listening".to_string()]), None);
        assert!(!is_config_error(
            "Unexpected error Failed query: CREATE TABLE `workspace` ( `id` text PRIMARY KEY"
        ));
        assert!(is_config_error(
            "Configuration is invalid at /c/opencode.json: bad file reference"
        ));
    }
}
