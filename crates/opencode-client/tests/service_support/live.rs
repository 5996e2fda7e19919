//! A real `opencode serve` inside an [`OpencodeSandbox`], behind a password; stopped (its whole
//! process group) and reaped on drop.

use bridge_testkit::OpencodeSandbox;
use opencode_client::http::{BasicAuth, HttpClient};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const LIVE_PASSWORD: &str = "live-test-pw-5c1e";

pub struct RealServer {
    child: Child,
    pub url: String,
}

impl RealServer {
    pub fn start(oc: &Path, sb: &OpencodeSandbox) -> RealServer {
        let mut cmd = sb.command(oc, ["serve", "--hostname", "127.0.0.1", "--port", "0"]);
        cmd.env("OPENCODE_SERVER_PASSWORD", LIVE_PASSWORD)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let mut child = cmd.spawn().expect("start opencode serve");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(p) = line.find("http://") {
                    let _ = tx.send(line[p..].trim().to_string());
                }
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("opencode serve did not print its URL within 60 s");
            }
        };
        RealServer { child, url }
    }

    /// A client with the right password.
    pub fn client(&self) -> HttpClient {
        HttpClient::new(
            &self.url,
            Some(BasicAuth::new("opencode", LIVE_PASSWORD)),
            Duration::from_secs(60),
            32 << 20,
        )
        .unwrap()
    }
}

impl Drop for RealServer {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(pid, Signal::SIGTERM);
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = killpg(pid, Signal::SIGKILL);
                return;
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        let _ = killpg(pid, Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Processes whose environment names this sandbox's data dir (to check nothing was left
/// running).
pub fn processes_of(sb: &OpencodeSandbox) -> Vec<u32> {
    let needle = format!("XDG_DATA_HOME={}", sb.data_home().display());
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(env) = std::fs::read(e.path().join("environ"))
            && env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes())
        {
            // Zombies still show their environ until reaped; skip them.
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'));
            if !zombie {
                out.push(pid);
            }
        }
    }
    out
}
