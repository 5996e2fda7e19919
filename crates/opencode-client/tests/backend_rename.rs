//! Rename with only the store at hand: a temporary `opencode serve` (here a script standing in
//! for it) is started, asked to PATCH the title with a fresh random password, and stopped.

use crate::service_support;

use opencode_client::ClientError;
use opencode_client::backend::{ClientConfig, rename_with_ephemeral_server};
use service_support::{Reply, serve};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn script(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("opencode");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn cfg(bin: PathBuf, timeout_ms: u64) -> ClientConfig {
    let mut c = ClientConfig::from_lookup(|_| None).unwrap();
    c.opencode_bin = bin;
    c.api_timeout = Duration::from_millis(timeout_ms);
    // The fake servers write their pids and requests beside the test, outside any project.
    c.sandbox = bridge_fence::Sandbox::Off;
    c
}

/// Whether a process with this pid still runs `sleep` (it was ours until stopped).
fn still_sleeping(pid_file: &Path) -> bool {
    let pid = std::fs::read_to_string(pid_file).unwrap();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
    String::from_utf8_lossy(&cmdline).contains("sleep")
}

#[test]
fn the_temporary_server_gets_a_random_password_and_is_stopped() {
    let srv = serve(|_| {
        Reply::json(
            200,
            r#"{"id":"ses_abc","title":"ALPHA/build: new","time":{"created":1,"updated":2}}"#,
        )
    });
    let tmp = tempfile::tempdir().unwrap();
    let pid_file = tmp.path().join("pid");
    let env_file = tmp.path().join("env");
    let bin = script(
        tmp.path(),
        &format!(
            "echo $$ > '{}'\necho \"$OPENCODE_SERVER_USERNAME $PWD $*\" > '{}'\necho 'opencode server listening on {}'\nexec sleep 300",
            pid_file.display(),
            env_file.display(),
            srv.url()
        ),
    );
    let proj = tmp.path().join("proj");
    std::fs::create_dir(&proj).unwrap();
    let dir = proj.display().to_string();
    rename_with_ephemeral_server(&cfg(bin, 10_000), &dir, "ses_abc", "ALPHA/build: new", None)
        .unwrap();

    let seen = srv.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].method, "PATCH");
    assert_eq!(
        seen[0].path,
        format!(
            "/session/ses_abc?directory={}",
            opencode_client::http::encode_component(&dir)
        )
    );
    assert_eq!(seen[0].body, r#"{"title":"ALPHA/build: new"}"#);
    // Basic base64("opencode:<48 hex chars>") is 6 + 76 characters.
    let auth = seen[0].authorization.clone().unwrap();
    assert!(auth.starts_with("Basic ") && auth.len() == 6 + 76, "{auth}");
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert_eq!(
        env.trim(),
        format!("opencode {dir} serve --hostname 127.0.0.1 --port 0")
    );
    assert!(
        !still_sleeping(&pid_file),
        "the temporary server was left running"
    );
}

#[test]
fn a_server_that_never_listens_times_out_and_is_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let pid_file = tmp.path().join("pid");
    let bin = script(
        tmp.path(),
        &format!("echo $$ > '{}'\nexec sleep 300", pid_file.display()),
    );
    let e = rename_with_ephemeral_server(&cfg(bin, 700), "/tmp", "ses_abc", "X/y: z", None)
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::ServiceTimeout {
                timeout_ms: 700,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!still_sleeping(&pid_file));
}

#[test]
fn a_server_that_exits_at_once_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = script(tmp.path(), "echo 'Error: database is locked' >&2\nexit 1");
    let e = rename_with_ephemeral_server(&cfg(bin, 10_000), "/tmp", "ses_abc", "X/y: z", None)
        .unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, ClientError::TempServer { .. }), "{e:?}");
    assert!(
        m.contains("ended before it listened: Error: database is locked"),
        "{m}"
    );
}

#[test]
fn a_refusing_server_is_reported_and_still_stopped() {
    let srv = serve(|_| {
        Reply::json(
            404,
            r#"{"name":"NotFoundError","data":{"message":"Session not found: ses_gone"}}"#,
        )
    });
    let tmp = tempfile::tempdir().unwrap();
    let pid_file = tmp.path().join("pid");
    let bin = script(
        tmp.path(),
        &format!(
            "echo $$ > '{}'\necho 'opencode server listening on {}'\nexec sleep 300",
            pid_file.display(),
            srv.url()
        ),
    );
    let e = rename_with_ephemeral_server(&cfg(bin, 10_000), "/tmp", "ses_gone", "X/y: z", None)
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::NotFound { id } if id == "ses_gone"),
        "{e:?}"
    );
    assert!(!still_sleeping(&pid_file));
}
