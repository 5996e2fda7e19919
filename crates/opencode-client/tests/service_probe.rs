//! A server is never asked about a directory outside the bridge's root: named in `?directory=`,
//! a directory gets an opencode instance of its own, which loads its plugins and MCP servers.

use crate::service_support;

use opencode_client::http::HttpClient;
use opencode_client::server::ServerSource;
use opencode_client::{Liveness, ScanContext, SessionFilter, SessionSource};
use service_support::{Reply, serve};
use std::time::{Duration, Instant};

#[test]
fn status_is_asked_only_for_directories_inside_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let inside = root.join("app");
    let outside = tmp.path().join("downloads/evil");
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    let session = |id: &str, dir: &std::path::Path| {
        format!(
            r#"{{"id":"{id}","title":"T","directory":"{}","projectID":"p","time":{{"created":1,"updated":2}}}}"#,
            dir.display()
        )
    };
    let list = format!(
        "[{},{},{}]",
        session("ses_in", &inside),
        session("ses_out", &outside),
        session("ses_link", &root.join("link"))
    );
    let srv = serve(move |seen| {
        if seen.path.starts_with("/experimental/session") {
            Reply::json(200, &list)
        } else if seen.path.starts_with("/session/status") {
            Reply::json(200, r#"{"ses_in":{"type":"busy"}}"#)
        } else {
            Reply::json(200, "[]")
        }
    });
    let http = HttpClient::new(&srv.url(), None, Duration::from_secs(10), 1 << 20).unwrap();
    let ctx = ScanContext {
        deadline: Instant::now() + Duration::from_secs(30),
        now_ms: 1_800_000_000_000,
        liveness: Liveness::default(),
    };
    let src = ServerSource::new(http).within(Some(&root));
    let got = src.list(&SessionFilter::default(), &ctx).unwrap();
    assert_eq!(got.sessions.len(), 3);
    let asked: Vec<String> = srv
        .seen()
        .into_iter()
        .filter(|s| s.path.contains("directory="))
        .map(|s| s.path)
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("app"), "{asked:?}");
    // The busy answer still counts for the session inside.
    let state = |id: &str| got.sessions.iter().find(|s| s.id == id).unwrap().state;
    assert_eq!(state("ses_in"), opencode_client::SessionState::Running);

    // Without a root every directory is asked about (the client's own default).
    let http = HttpClient::new(&srv.url(), None, Duration::from_secs(10), 1 << 20).unwrap();
    let before = srv.seen().len();
    ServerSource::new(http)
        .list(&SessionFilter::default(), &ctx)
        .unwrap();
    let all = srv.seen()[before..]
        .iter()
        .filter(|s| s.path.contains("directory="))
        .count();
    assert_eq!(all, 3);
}
