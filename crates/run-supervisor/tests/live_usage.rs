//! What tasks cost, with the real opencode 1.18.33 and the fake LLM whose models have a price in
//! opencode's config: the cost the supervisor reports is what opencode stored for the session
//! (read back from the store as the serve engine would), a model opencode prices at 0 is
//! estimated from the bridge's price, the ledger and the tasks' usage survive a restart, a day
//! budget the first two tasks used up refuses the third, and `max_cost_usd` stops a run in the
//! middle of a long tool call. Then the reservations: five bridges starting at once under a
//! budget that fits one start exactly one task, a run whose one and last step passed its cap
//! fails with kind `budget` and keeps its answer, and a run that spends the day's budget is
//! stopped (kind `budget`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use opencode_client::StoreSource;
use run_supervisor::usage::budget::Budgets;
use run_supervisor::usage::{CostBasis, MessageUsage, Price, Prices, Pricing, Usage, ledger};
use run_supervisor::{
    FailureKind, StartError, Supervisor, SupervisorConfig, TaskSpec, TaskState, TokenUsage,
};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);

/// The price of the fake's priced models, in opencode's config and in the bridge's.
const PRICE: Price = Price {
    input: 1000.0,
    output: 2000.0,
    cache_read: Some(100.0),
    cache_write: None,
};

fn spec(cwd: &Path, model: &str, prompt: &str) -> TaskSpec {
    let mut s = TaskSpec::new(prompt, cwd, "worker", format!("COST/worker: {model}"));
    s.model = Some(format!("fk/{model}"));
    s
}

/// What the store of the run's world (under the supervisor's state directory) recorded.
fn store_costs(state: &Path, session: &str) -> Vec<opencode_client::usage::MessageCost> {
    let ctx = crate::common::store_scan_context();
    crate::common::world_stores(state)
        .into_iter()
        .find_map(|db| {
            let store = StoreSource::open(db).unwrap();
            opencode_client::usage::session_costs(&store, session, 0, &ctx)
                .ok()
                .filter(|c| !c.is_empty())
        })
        .unwrap_or_else(|| panic!("no world's store holds {session}"))
}

#[tokio::test]
async fn live_costs_budgets_and_max_cost() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let cost = json!({"input": PRICE.input, "output": PRICE.output, "cache_read": 100});
    // `ok` and `script` are priced in opencode's config; `toolbash` is not (opencode records
    // 0), but the bridge's config gives it the same price.
    sb.price_models(&[("ok", cost.clone()), ("script", cost)])
        .unwrap();
    let pricing = Pricing::new(
        Prices::load(None, &[("fk/toolbash".into(), PRICE)]),
        run_supervisor::usage::DEFAULT_COMPARE_MODEL,
    );
    let state = tempfile::tempdir().unwrap();
    let config = |day_usd: Option<f64>| SupervisorConfig {
        opencode_bin: Some(oc.clone()),
        // These are `opencode run`'s own tests (processes, stdout); live_serve.rs is the server's.
        engine: run_supervisor::Engine::Run,
        root: sb.root().to_path_buf(),
        env: sb.env(),
        max_parallel: 3,
        kill_grace: Duration::from_secs(3),
        quiet_after: Duration::from_secs(600),
        state_dir: Some(state.path().to_path_buf()),
        pricing: pricing.clone(),
        budgets: Budgets {
            day_usd,
            month_usd: None,
        },
        ..SupervisorConfig::default()
    };
    let proj = sb.project_dir().to_path_buf();

    // Two tasks: 0.0142 (reported) and 0.0502 (estimated) USD, run without a budget (each
    // would reserve $0.05, the default, and together not fit one of 0.05).
    let sup = Supervisor::new(config(None));
    let ok = sup.start(spec(&proj, "ok", "Say hello.")).unwrap();
    let bash = sup.start(spec(&proj, "toolbash", "Run echo.")).unwrap();
    for id in [ok, bash] {
        let s = tokio::time::timeout(LIMIT, sup.wait(id))
            .await
            .expect("finished in time")
            .unwrap();
        assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    }

    let s_ok = sup.status(ok).unwrap();
    let u_ok = s_ok.usage.clone().expect("usage recorded");
    assert_eq!(u_ok.basis, CostBasis::Reported, "{u_ok:?}");
    assert!(u_ok.cost > 0.0, "{u_ok:?}");
    // Exactly what opencode stored for the session, message by message.
    let stored = store_costs(state.path(), s_ok.session_id.as_deref().unwrap());
    let stored_sum: f64 = stored.iter().map(|m| m.cost).sum();
    assert!(
        (u_ok.cost - stored_sum).abs() < 1e-12,
        "{u_ok:?} {stored:?}"
    );
    assert_eq!(
        u_ok.tokens.input,
        stored.iter().map(|m| m.tokens.input).sum::<u64>()
    );
    assert_eq!(
        u_ok.tokens.output,
        stored.iter().map(|m| m.tokens.output).sum::<u64>()
    );
    // The same usage, filled from the session's messages instead of the run's events.
    let messages: Vec<MessageUsage> = stored
        .iter()
        .map(|m| MessageUsage {
            model: m.model.clone(),
            tokens: TokenUsage {
                input: m.tokens.input,
                output: m.tokens.output,
                reasoning: m.tokens.reasoning,
                cache_read: m.tokens.cache_read,
                cache_write: m.tokens.cache_write,
            },
            cost: m.cost,
        })
        .collect();
    let from_store = Usage::from_messages(&messages, pricing.prices(), pricing.compare_price());
    assert_eq!(from_store.tokens, u_ok.tokens);
    assert!((from_store.cost - u_ok.cost).abs() < 1e-12);
    assert!(u_ok.claude_equivalent.unwrap() > 0.0, "{u_ok:?}");

    // opencode stored 0 for the unpriced model: the bridge estimates it, and says so.
    let s_bash = sup.status(bash).unwrap();
    let u_bash = s_bash.usage.clone().unwrap();
    let stored = store_costs(state.path(), s_bash.session_id.as_deref().unwrap());
    assert!(stored.iter().all(|m| m.cost == 0.0), "{stored:?}");
    assert_eq!(u_bash.basis, CostBasis::Estimated, "{u_bash:?}");
    assert!((u_bash.cost - PRICE.cost(&u_bash.tokens)).abs() < 1e-12);
    assert!(u_bash.cost > 0.0);

    // The two used a day budget of 0.05 up: a third start (by a bridge that has that budget)
    // is refused, naming spend, budget, its variable and the reset.
    let spent = u_ok.cost + u_bash.cost;
    assert!(spent >= 0.05, "{spent}");
    let limited = Supervisor::new(config(Some(0.05)));
    match limited.start(spec(&proj, "ok", "Say hello again.")) {
        Err(e @ StartError::OverBudget(_)) => {
            let msg = e.to_string();
            assert!(msg.contains("the day budget is spent"), "{msg}");
            assert!(msg.contains(&format!("${spent:.2} of $0.05")), "{msg}");
            assert!(msg.contains("resets at"), "{msg}");
            assert!(msg.contains("OPENCODE_BRIDGE_BUDGET_DAY_USD"), "{msg}");
        }
        other => panic!("the third start was not refused: {other:?}"),
    }
    drop(limited);
    sup.shutdown().await;
    drop(sup);

    // A new supervisor on the same state directory: the ledger and the usage are still there.
    let sup = Supervisor::new(config(None));
    let l = ledger::read(state.path()).unwrap();
    let s = ledger::summarize(&l, None, pricing.compare_price());
    assert_eq!((s.totals.tasks, s.totals.attempts), (2, 2), "{l:?}");
    assert!((s.totals.cost_usd - spent).abs() < 1e-12);
    assert!((s.totals.estimated_usd - u_bash.cost).abs() < 1e-12);
    assert_eq!(s.by_lane[0].key, "COST");
    let again = sup.status(ok).unwrap();
    assert_eq!(again.usage.as_ref(), Some(&u_ok));

    // max_cost_usd: the first step (a quick tool call) costs 0.036, known once opencode ends
    // the step (after the tool ran); the run is stopped before or while the second step's
    // 30-second command runs, and fails with kind budget.
    let mut s = spec(
        &proj,
        "script",
        "CALL bash {\"command\": \"echo first\", \"description\": \"quick\"}\nCALL bash {\"command\": \"sleep 30 && touch after-sleep\", \"description\": \"wait\"}",
    );
    s.max_cost_usd = Some(0.01);
    let started = Instant::now();
    let id = sup.start(s).unwrap();
    let end = tokio::time::timeout(LIMIT, sup.wait(id))
        .await
        .expect("stopped in time")
        .unwrap();
    assert_eq!(end.state, TaskState::Failed, "{end:?}");
    let f = end.failure.clone().unwrap();
    assert_eq!(f.kind, FailureKind::Budget, "{f:?}");
    assert!(f.message.contains("max_cost_usd of $0.0100"), "{f:?}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "stopped mid-run"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !proj.join("after-sleep").exists(),
        "the command was stopped"
    );
    assert!(end.usage.unwrap().cost > 0.01);
    sup.shutdown().await;
}

/// Five bridges (supervisors on one state directory) start a task each at the same moment,
/// under a day budget of $0.05, each reserving $0.03 (its `max_cost_usd`): exactly one is
/// accepted. Its reservation is released when it ends. Then a run whose one step cost more
/// than its cap fails with kind `budget`, its answer kept; and a run without a cap that spends
/// the rest of a day's budget is stopped while its long command runs.
#[tokio::test]
async fn live_reservations_hold_under_concurrency() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let cost = json!({"input": PRICE.input, "output": PRICE.output, "cache_read": 100});
    sb.price_models(&[("ok", cost.clone()), ("script", cost)])
        .unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = |day_usd: f64| SupervisorConfig {
        opencode_bin: Some(oc.clone()),
        engine: run_supervisor::Engine::Run,
        root: sb.root().to_path_buf(),
        env: sb.env(),
        max_parallel: 3,
        kill_grace: Duration::from_secs(3),
        quiet_after: Duration::from_secs(600),
        state_dir: Some(state.path().to_path_buf()),
        budgets: Budgets {
            day_usd: Some(day_usd),
            month_usd: None,
        },
        ..SupervisorConfig::default()
    };
    let proj = sb.project_dir().to_path_buf();
    let bridges: Vec<Supervisor> = (0..5).map(|_| Supervisor::new(config(0.05))).collect();
    let barrier = Arc::new(std::sync::Barrier::new(5));
    let starts: Vec<_> = bridges
        .iter()
        .enumerate()
        .map(|(i, sup)| {
            let (sup, barrier, proj) = (sup.clone(), Arc::clone(&barrier), proj.clone());
            tokio::task::spawn_blocking(move || {
                let mut s = spec(&proj, "ok", &format!("Say hello, bridge {i}."));
                s.max_cost_usd = Some(0.03);
                barrier.wait();
                sup.start(s)
            })
        })
        .collect();
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for (i, h) in starts.into_iter().enumerate() {
        match h.await.unwrap() {
            Ok(id) => accepted.push((i, id)),
            Err(e @ StartError::OverBudget(_)) => refused.push(e.to_string()),
            Err(e) => panic!("refused for another reason: {e}"),
        }
    }
    assert_eq!(accepted.len(), 1, "exactly one start fits: {refused:?}");
    assert_eq!(refused.len(), 4);
    for msg in &refused {
        assert!(msg.contains("the day budget would be passed"), "{msg}");
        assert!(msg.contains("$0.03 more held by running tasks"), "{msg}");
        assert!(
            msg.contains("this start reserves $0.03 (its max_cost_usd)"),
            "{msg}"
        );
        assert!(msg.contains("OPENCODE_BRIDGE_BUDGET_DAY_USD"), "{msg}");
        assert!(msg.contains("resets at"), "{msg}");
    }
    let file = run_supervisor::usage::reserve::path(state.path());
    let (i, id) = accepted[0];
    let end = tokio::time::timeout(LIMIT, bridges[i].wait(id))
        .await
        .expect("finished in time")
        .unwrap();
    assert_eq!(end.state, TaskState::Succeeded, "{end:?}");
    assert!(
        run_supervisor::usage::reserve::read(state.path())
            .unwrap()
            .is_empty(),
        "released at its end: {}",
        std::fs::read_to_string(&file).unwrap_or_default()
    );
    let first = end.usage.unwrap().cost;
    assert!(first > 0.01 && first < 0.03, "{first}");

    // Its one and last step passed a cap of 0.01: failed, kind budget, the answer kept.
    let sup = &bridges[0];
    let mut s = spec(&proj, "ok", "Say hello once more.");
    s.max_cost_usd = Some(0.01);
    let id = sup
        .start(s)
        .expect("0.0142 spent + 0.01 reserved fits 0.05");
    let end = tokio::time::timeout(LIMIT, sup.wait(id))
        .await
        .expect("finished in time")
        .unwrap();
    assert_eq!(end.state, TaskState::Failed, "{end:?}");
    let f = end.failure.clone().unwrap();
    assert_eq!(f.kind, FailureKind::Budget, "{f:?}");
    assert!(f.message.contains("max_cost_usd of $0.0100"), "{f:?}");
    // Either it ended before a tick saw the cost (the usual case: the step was its last), or a
    // tick caught it between its last step and its exit and stopped it; failed either way.
    assert!(
        f.message.contains("its answer is kept") || f.message.starts_with("stopped after"),
        "{f:?}"
    );
    let out = sup.result(id, None, None).unwrap();
    assert!(
        out.final_text.contains(bridge_testkit::fake_llm::OK_TEXT),
        "{out:?}"
    );
    for b in &bridges {
        b.shutdown().await;
    }
    drop(bridges);

    // A day budget of 0.12 with about 0.03 spent: a run without a cap reserves the default
    // ($0.05: the costliest recent task was cheaper) and is accepted; its quick steps spend the
    // rest of the window, and it is stopped while its long command runs.
    let sup = Supervisor::new(config(0.12));
    let quick = "CALL bash {\"command\": \"echo step\", \"description\": \"quick\"}\n";
    let prompt = format!(
        "{}CALL bash {{\"command\": \"sleep 40 && touch after-sleep\", \"description\": \"wait\"}}",
        quick.repeat(4)
    );
    let id = sup.start(spec(&proj, "script", &prompt)).unwrap();
    let end = tokio::time::timeout(LIMIT, sup.wait(id))
        .await
        .expect("stopped in time")
        .unwrap();
    assert_eq!(end.state, TaskState::Failed, "{end:?}");
    let f = end.failure.clone().unwrap();
    assert_eq!(f.kind, FailureKind::Budget, "{f:?}");
    assert!(
        f.message
            .contains("stopped because the day budget is spent"),
        "{f:?}"
    );
    assert!(f.message.contains("resets at"), "{f:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !proj.join("after-sleep").exists(),
        "the command was stopped"
    );
    sup.shutdown().await;
}
