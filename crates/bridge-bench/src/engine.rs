//! The engines side by side (part 6): `opencode_start` (with `wait_s`, so the call returns
//! the result) of a trivial task to its final result, on `run` (an `opencode run` process per task)
//! and on `serve` (a session on the bridge's warm local `opencode serve`), with the real opencode
//! and the fake LLM answering at once. The first task of each engine is shown apart (it starts
//! the server, reads the roster); the median is of the ones after it. The bridge's own share is
//! its CPU time per task (utime + stime of the bridge process).

use std::path::Path;
use std::time::Instant;

use bridge_testkit::{FakeLlm, OpencodeSandbox};
use serde_json::json;

use crate::client::Bridge;
use crate::flood::Cpu;
use crate::table::{Row, median};

/// Figures of one engine: the first task's wall time, the later ones', the bridge's CPU per
/// later task.
struct Timed {
    first: f64,
    later: Vec<f64>,
    bridge_cpu: f64,
}

fn time_engine(
    bin: &Path,
    sb: &OpencodeSandbox,
    oc: &Path,
    engine: &str,
    runs: usize,
) -> Result<Timed, String> {
    let mut b = crate::flood::real_opencode_bridge(
        bin,
        sb,
        oc,
        &[
            ("OPENCODE_BRIDGE_ENGINE", engine.into()),
            ("OPENCODE_BRIDGE_MODEL", "fk/ok".into()),
        ],
    )?;
    let pid = b.pid();
    let cwd = sb.project_dir().display().to_string();
    let one = |b: &mut Bridge, n: usize| -> Result<f64, String> {
        let t = Instant::now();
        let text = b.call(
            "opencode_start",
            json!({"tier": "easy", "prompt": format!("Say hello ({engine} {n})."), "cwd": cwd, "wait_s": 55}),
        )?;
        let took = t.elapsed().as_secs_f64();
        if !text.contains("succeeded") {
            let head: String = text.lines().take(3).collect::<Vec<_>>().join(" / ");
            return Err(format!(
                "{engine}: the task did not succeed at once: {head}"
            ));
        }
        Ok(took)
    };
    let first = one(&mut b, 0)?;
    let before = Cpu::of(pid)?;
    let mut later = Vec::new();
    for n in 1..=runs {
        later.push(one(&mut b, n)?);
    }
    let bridge_cpu = Cpu::of(pid)?.since(before).own() / runs as f64;
    Ok(Timed {
        first,
        later,
        bridge_cpu,
    })
}

pub(crate) fn engines(bin: &Path, runs: usize) -> Result<Vec<Row>, String> {
    let Some(oc) = bridge_testkit::real_opencode() else {
        println!("engines: skipped (set OPENCODE_BRIDGE_TEST_OPENCODE to compare run and serve)");
        return Ok(vec![Row::info(
            "trivial task on run vs serve",
            "skipped: OPENCODE_BRIDGE_TEST_OPENCODE not set".into(),
        )]);
    };
    let llm = FakeLlm::start().map_err(|e| format!("fake LLM: {e}"))?;
    let sb = OpencodeSandbox::new(&llm.base_url()).map_err(|e| format!("sandbox: {e}"))?;
    let run = time_engine(bin, &sb, &oc, "run", runs)?;
    let serve = time_engine(bin, &sb, &oc, "serve", runs)?;
    let (r, s) = (median(&run.later), median(&serve.later));
    for (name, t) in [("run", &run), ("serve", &serve)] {
        println!(
            "engine {name}: first task {:.2} s; then median {:.3} s over {} (min {:.3}, max {:.3}); bridge CPU {:.1} ms per task ({:.1} % of the median)",
            t.first,
            median(&t.later),
            t.later.len(),
            t.later.iter().cloned().fold(f64::MAX, f64::min),
            t.later.iter().cloned().fold(0.0, f64::max),
            t.bridge_cpu * 1000.0,
            100.0 * t.bridge_cpu / median(&t.later).max(1e-9)
        );
    }
    println!(
        "engines: serve is {:.1}x faster than run for a trivial task",
        r / s.max(1e-9)
    );
    let (fresh, again) = world_prepare()?;
    println!(
        "worlds: preparing a fresh world {:.2} ms, an existing one {:.2} ms; the first task (a fresh world, the roster asked) {:.2} s on run, {:.2} s on serve",
        fresh * 1000.0,
        again * 1000.0,
        run.first,
        serve.first
    );
    Ok(vec![
        Row::info(
            "first task in a fresh world: run / serve",
            format!("{:.2} s / {:.2} s", run.first, serve.first),
        ),
        Row::info(
            "world prepare: fresh / existing",
            format!("{:.2} ms / {:.2} ms", fresh * 1000.0, again * 1000.0),
        ),
        Row::info(
            "trivial task, start to result: run (median)",
            format!("{r:.3} s"),
        ),
        Row::info(
            "trivial task, start to result: serve (median)",
            format!("{s:.3} s"),
        ),
        Row::ge(
            "serve vs run speed-up (trivial task)",
            10.0,
            r / s.max(1e-9),
            "x",
        ),
        Row::info(
            "bridge CPU per trivial task: run / serve",
            format!(
                "{:.1} ms / {:.1} ms",
                run.bridge_cpu * 1000.0,
                serve.bridge_cpu * 1000.0
            ),
        ),
    ])
}

/// How long `World::prepare` takes for a fresh world (directories, record, the login link, the
/// models list copied from a 1 MB file) and for one that exists (the check before each run).
fn world_prepare() -> Result<(f64, f64), String> {
    let d = tempfile::tempdir().map_err(|e| e.to_string())?;
    let user_data = d.path().join("user/data/opencode");
    let user_cache = d.path().join("user/cache/opencode");
    for p in [&user_data, &user_cache] {
        std::fs::create_dir_all(p).map_err(|e| e.to_string())?;
    }
    std::fs::write(user_data.join("auth.json"), "{}").map_err(|e| e.to_string())?;
    std::fs::write(user_cache.join("models.json"), vec![b' '; 1 << 20])
        .map_err(|e| e.to_string())?;
    let user = bridge_fence::UserDirs {
        opencode_data: Some(user_data),
        opencode_cache: Some(user_cache),
        claude_config: None,
        opencode_config: None,
    };
    let kind = bridge_fence::RunKind::Opencode;
    let (mut fresh, mut again) = (Vec::new(), Vec::new());
    for n in 0..20 {
        let w = bridge_fence::World::of(
            &d.path().join("state"),
            &d.path().join(format!("p{n}")),
            true,
        );
        let t = Instant::now();
        w.prepare(kind, &user)?;
        fresh.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        w.prepare(kind, &user)?;
        again.push(t.elapsed().as_secs_f64());
    }
    Ok((median(&fresh), median(&again)))
}
