//! Service failures become one-line typed errors, never a panic or a hang: a stopped server,
//! a hung one, 401, 404, 500, a huge reply, malformed JSON; for the `server` backend over HTTP
//! and for the `api` backend through a fake `opencode api`.

use crate::service_support;

use opencode_client::api::{ApiCommand, ApiSource};
use opencode_client::http::{BasicAuth, HttpClient};
use opencode_client::server::ServerSource;
use opencode_client::{ClientError, Liveness, ScanContext, SessionFilter, SessionSource};
use service_support::{Reply, closed_port, serve};
use std::path::Path;
use std::time::{Duration, Instant};

const PASSWORD: &str = "pw-never-shown-7f3a";

fn ctx() -> ScanContext {
    ScanContext {
        deadline: Instant::now() + Duration::from_secs(30),
        now_ms: 1_800_000_000_000,
        liveness: Liveness::default(),
    }
}

fn server(url: &str, timeout_ms: u64, cap: u64) -> ServerSource {
    let http = HttpClient::new(
        url,
        Some(BasicAuth::new("opencode", PASSWORD)),
        Duration::from_millis(timeout_ms),
        cap,
    )
    .unwrap();
    ServerSource::new(http)
}

/// Every error the user sees is one line and never carries the password.
fn check_message(e: &ClientError) -> String {
    let m = e.to_string();
    assert!(!m.contains('\n'), "multi-line error: {m:?}");
    assert!(!m.contains(PASSWORD), "password leaked: {m}");
    assert!(
        !format!("{e:?}").contains(PASSWORD),
        "password leaked in Debug: {e:?}"
    );
    m
}

#[test]
fn stopped_server_is_service_down() {
    let src = server(
        &format!("http://127.0.0.1:{}", closed_port()),
        5_000,
        1 << 20,
    );
    let e = src.list(&SessionFilter::default(), &ctx()).unwrap_err();
    let m = check_message(&e);
    assert!(matches!(e, ClientError::ServiceDown { .. }), "{e:?}");
    assert!(m.contains("not reachable"), "{m}");
}

#[test]
fn hung_server_times_out_within_the_configured_time() {
    let s = serve(|_| Reply::Hang);
    let src = server(&s.url(), 400, 1 << 20);
    let start = Instant::now();
    let e = src.get("ses_abc", &ctx()).unwrap_err();
    let waited = start.elapsed();
    let m = check_message(&e);
    assert!(
        matches!(
            e,
            ClientError::ServiceTimeout {
                timeout_ms: 400,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(m.contains("400 ms"), "{m}");
    // A guard against hanging, not a speed target: the call must come back at all.
    assert!(waited < Duration::from_secs(20), "took {waited:?}");
}

#[test]
fn wrong_password_is_unauthorized_and_the_header_carries_basic_auth() {
    let s = serve(|_| {
        Reply::Full(
            401,
            vec![(
                "WWW-Authenticate".into(),
                "Basic realm=\"Secure Area\"".into(),
            )],
            vec![],
        )
    });
    let src = server(&s.url(), 5_000, 1 << 20);
    let e = src.list(&SessionFilter::default(), &ctx()).unwrap_err();
    let m = check_message(&e);
    assert!(matches!(e, ClientError::Unauthorized { .. }), "{e:?}");
    assert!(m.contains("OPENCODE_SERVER_PASSWORD"), "{m}");
    let seen = s.seen();
    // base64("opencode:pw-never-shown-7f3a")
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some("Basic b3BlbmNvZGU6cHctbmV2ZXItc2hvd24tN2YzYQ==")
    );
}

#[test]
fn missing_session_is_not_found() {
    let s = serve(|_| {
        Reply::json(
            404,
            r#"{"name":"NotFoundError","data":{"message":"Session not found: ses_gone"}}"#,
        )
    });
    let src = server(&s.url(), 5_000, 1 << 20);
    let e = src.get("ses_gone", &ctx()).unwrap_err();
    check_message(&e);
    assert!(
        matches!(&e, ClientError::NotFound { id } if id == "ses_gone"),
        "{e:?}"
    );
}

#[test]
fn server_error_is_a_service_error_with_the_status_and_message() {
    let s = serve(|_| {
        Reply::json(
            500,
            "{\"name\":\"UnknownError\",\"data\":{\"message\":\"database is\\nlocked\"}}",
        )
    });
    let src = server(&s.url(), 5_000, 1 << 20);
    let e = src.list(&SessionFilter::default(), &ctx()).unwrap_err();
    let m = check_message(&e);
    assert!(
        matches!(e, ClientError::ServiceError { status: 500, .. }),
        "{e:?}"
    );
    assert!(m.contains("UnknownError: database is locked"), "{m}");
}

#[test]
fn huge_reply_is_refused_with_or_without_a_length() {
    for chunked in [false, true] {
        let s = serve(move |_| Reply::Huge {
            bytes: 3 * 1024 * 1024,
            chunked,
        });
        let src = server(&s.url(), 10_000, 1024 * 1024);
        let e = src.list(&SessionFilter::default(), &ctx()).unwrap_err();
        let m = check_message(&e);
        assert!(
            matches!(
                e,
                ClientError::ReplyTooLarge {
                    limit_bytes: 1_048_576,
                    ..
                }
            ),
            "chunked={chunked}: {e:?}"
        );
        assert!(m.contains("1048576 bytes"), "{m}");
    }
}

#[test]
fn malformed_json_is_malformed_reply() {
    let s = serve(|_| Reply::json(200, "[{\"id\": \"ses_1\", "));
    let src = server(&s.url(), 5_000, 1 << 20);
    let e = src.list(&SessionFilter::default(), &ctx()).unwrap_err();
    let m = check_message(&e);
    assert!(matches!(e, ClientError::MalformedReply { .. }), "{e:?}");
    assert!(m.contains("malformed JSON"), "{m}");
    // An HTML page where JSON was expected (what opencode serves for unknown routes).
    let s = serve(|_| Reply::json(200, "<!doctype html><html></html>"));
    let e = server(&s.url(), 5_000, 1 << 20)
        .get("ses_1", &ctx())
        .unwrap_err();
    check_message(&e);
    assert!(matches!(e, ClientError::MalformedReply { .. }), "{e:?}");
}

#[test]
fn bad_session_ids_never_reach_the_server() {
    let s = serve(|_| Reply::json(200, "{}"));
    let src = server(&s.url(), 5_000, 1 << 20);
    let e = src.get("../../etc/passwd", &ctx()).unwrap_err();
    check_message(&e);
    assert!(
        matches!(e, ClientError::InvalidArgument { field: "id", .. }),
        "{e:?}"
    );
    assert!(s.seen().is_empty());
}

// ---- api backend: the same faults through `opencode api` -------------------------------------

fn api_with_fixtures(
    files: &[(&str, &str)],
    timeout_ms: u64,
    cap: u64,
) -> (ApiSource, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in files {
        std::fs::write(dir.path().join(name), body).unwrap();
    }
    let bin = bridge_testkit::bins::fake_opencode_v2();
    let cmd = ApiCommand::new(
        wrapper(&bin, dir.path()),
        Duration::from_millis(timeout_ms),
        cap,
    );
    (ApiSource::new(cmd), dir)
}

/// A tiny shell wrapper that sets FAKE_OPENCODE_V2_FIXTURES for the fake (the backend gets the
/// binary path only, as it would get `OPENCODE_BIN`).
fn wrapper(bin: &Path, fixtures: &Path) -> std::path::PathBuf {
    let path = fixtures.join("opencode");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nFAKE_OPENCODE_V2_FIXTURES='{}' exec '{}' \"$@\"\n",
            fixtures.display(),
            bin.display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    path
}

#[test]
fn api_missing_binary_is_an_api_command_error() {
    let cmd = ApiCommand::new("/nonexistent/opencode", Duration::from_secs(5), 1 << 20);
    let e = ApiSource::new(cmd)
        .list(&SessionFilter::default(), &ctx())
        .unwrap_err();
    let m = check_message(&e);
    assert!(matches!(e, ClientError::ApiCommand { .. }), "{e:?}");
    assert!(m.contains("/nonexistent/opencode"), "{m}");
}

#[test]
fn api_unauthorized_not_found_and_server_error() {
    let (src, _d) = api_with_fixtures(
        &[
            (
                "get_api_session.err",
                "401\n{\"_tag\":\"UnauthorizedError\",\"message\":\"Authentication required\"}",
            ),
            (
                "get_api_session_ses_x.err",
                "500\n{\"_tag\":\"UnknownError\",\"message\":\"boom\"}",
            ),
        ],
        10_000,
        1 << 20,
    );
    let e = src.list(&SessionFilter::default(), &ctx()).unwrap_err();
    check_message(&e);
    assert!(matches!(e, ClientError::Unauthorized { .. }), "{e:?}");
    let e = src.get("ses_gone", &ctx()).unwrap_err();
    check_message(&e);
    assert!(
        matches!(&e, ClientError::NotFound { id } if id == "ses_gone"),
        "{e:?}"
    );
    let e = src.get("ses_x", &ctx()).unwrap_err();
    let m = check_message(&e);
    assert!(
        matches!(e, ClientError::ServiceError { status: 500, .. }),
        "{e:?}"
    );
    assert!(m.contains("UnknownError: boom"), "{m}");
}

#[test]
fn api_hung_command_is_killed_at_the_timeout() {
    let (src, _d) = api_with_fixtures(&[("get_api_session.hang", "")], 700, 1 << 20);
    let start = Instant::now();
    let e = src.list(&SessionFilter::default(), &ctx()).unwrap_err();
    let waited = start.elapsed();
    check_message(&e);
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
    assert!(waited < Duration::from_secs(20), "took {waited:?}");
}

#[test]
fn api_huge_and_malformed_replies() {
    let (src, _d) = api_with_fixtures(
        &[
            ("get_api_session.big", "3000000"),
            ("get_api_session_ses_bad.json", "{\"data\": {\"id\": "),
        ],
        10_000,
        1024 * 1024,
    );
    let e = src.list(&SessionFilter::default(), &ctx()).unwrap_err();
    check_message(&e);
    assert!(matches!(e, ClientError::ReplyTooLarge { .. }), "{e:?}");
    let e = src.get("ses_bad", &ctx()).unwrap_err();
    check_message(&e);
    assert!(matches!(e, ClientError::MalformedReply { .. }), "{e:?}");
}
