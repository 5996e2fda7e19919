//! Where a task runs, decided at `start` without any opencode: a named server of the config,
//! its `max_parallel`, the mistakes refused before anything is accepted, and a server that does
//! not answer failing the task with kind `server` within the call timeout.

use std::time::Duration;

use run_supervisor::{
    FailureKind, Isolation, StartError, Supervisor, SupervisorConfig, TaskSpec, TaskState,
};

fn server(name: &str, url: &str, max_parallel: Option<u32>) -> bridge_config::Server {
    bridge_config::Server {
        name: name.into(),
        url: url.into(),
        password_env: None,
        username: "opencode".into(),
        root: "/srv/work".into(),
        max_parallel,
    }
}

fn spec(dir: &std::path::Path, server: Option<&str>) -> TaskSpec {
    let mut s = TaskSpec::new("Say hello.", dir, "build", "T/build: hello");
    s.model = Some("fk/ok".into());
    s.server = server.map(str::to_owned);
    s
}

#[tokio::test]
async fn placement_is_checked_at_start_and_a_silent_server_fails_the_task_as_server() {
    let hung = bridge_testkit::http::hung_server().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let sup = Supervisor::new(SupervisorConfig {
        root: root.clone(),
        // No opencode here: a remote task needs none.
        opencode_bin: Some("/nonexistent/opencode".into()),
        servers: vec![server(
            "slowbox",
            &format!("http://127.0.0.1:{}", hung.port()),
            Some(1),
        )],
        api_timeout: Duration::from_secs(2),
        ..SupervisorConfig::default()
    });

    for (s, says) in [
        (spec(&root, Some("nope")), "no server is named \"nope\""),
        (
            {
                let mut s = spec(&root, Some("slowbox"));
                s.isolation = Isolation::Worktree;
                s
            },
            "isolation",
        ),
        (
            {
                let mut s = spec(&root, Some("slowbox"));
                s.model = Some("sonnet".into());
                s
            },
            "Claude model",
        ),
    ] {
        let e = sup.start(s).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
    }

    let first = sup.start(spec(&root, Some("slowbox"))).unwrap();
    assert_eq!(sup.status(first).unwrap().engine, "serve:slowbox");
    match sup.start(spec(&root, Some("slowbox"))) {
        Err(StartError::ServerBusy { server, limit, .. }) => {
            assert_eq!((server.as_str(), limit), ("slowbox", 1));
        }
        other => panic!("not refused as busy: {other:?}"),
    }
    let s = tokio::time::timeout(Duration::from_secs(30), sup.wait(first))
        .await
        .expect("the task ended within the call timeout")
        .unwrap();
    assert_eq!(s.state, TaskState::Failed, "{s:?}");
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Server, "{f:?}");
    assert!(f.message.contains("server slowbox"), "{f:?}");
    assert!(f.advice.contains("slowbox"), "{f:?}");
}
