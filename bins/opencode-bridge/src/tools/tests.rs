use super::schema::{model_pattern, valid_model};
use super::*;
use bridge_policy::{Mode, Tier};
use bridge_render::ArgProblem;
use run_supervisor::claude::{CLAUDE_ALIASES, capitalized};
use serde_json::{Map, Value, json};

/// A call, with a refusal worded for MCP.
fn call(tool: &str, args: Value) -> Result<Call, String> {
    parse_call(tool, args.as_object()).map_err(|e| e.mcp_text())
}

#[test]
fn misspelled_names_get_a_suggestion_and_enums_ignore_case() {
    let e = call("opencode_start", json!({"tier": "easy", "promt": "x"})).unwrap_err();
    assert!(
        e.starts_with("unknown argument `promt`; did you mean `prompt`?"),
        "{e}"
    );
    let e = call("opencode_sessions", json!({"title-prefix": "X/"})).unwrap_err();
    assert!(e.contains("did you mean `title_prefix`?"), "{e}");
    let e = call("opencode_sessions", json!({"zzzzzz": 1})).unwrap_err();
    assert!(!e.contains("did you mean"), "{e}");
    match call(
        "opencode_start",
        json!({"tier": "Easy", "prompt": "x", "mode": "SENSITIVE"}),
    ) {
        Ok(Call::Start(a)) => {
            assert_eq!(a.tier, Tier::Easy);
            assert_eq!(a.mode, Some(Mode::Sensitive));
        }
        other => panic!("{other:?}"),
    }
    assert!(call("opencode_start", json!({"tier": "eesy", "prompt": "x"})).is_err());
}

#[test]
fn apply_takes_the_protected_paths_it_may_write_by_name() {
    match call(
        "opencode_apply",
        json!({"id": "3", "allow_protected": [".mcp.json", ".vscode/"]}),
    ) {
        Ok(Call::Apply {
            allow_protected, ..
        }) => assert_eq!(allow_protected, [".mcp.json", ".vscode/"]),
        other => panic!("{other:?}"),
    }
    match call("opencode_apply", json!({"id": "3"})) {
        Ok(Call::Apply {
            allow_protected, ..
        }) => assert!(allow_protected.is_empty()),
        other => panic!("{other:?}"),
    }
    let e = call(
        "opencode_apply",
        json!({"id": "3", "allow_protected": ".mcp.json"}),
    )
    .unwrap_err();
    assert!(
        e.contains("allow_protected") && e.contains("an array of paths"),
        "{e}"
    );
    assert!(e.lines().count() == 1, "{e}");
    let e = call(
        "opencode_apply",
        json!({"id": "3", "allow_protected": [""]}),
    )
    .unwrap_err();
    assert!(e.contains("must not be empty"), "{e}");
    let many: Vec<String> = (0..=MAX_ALLOW_PROTECTED).map(|i| format!("p{i}")).collect();
    assert!(
        call(
            "opencode_apply",
            json!({"id": "3", "allow_protected": many})
        )
        .is_err()
    );
}

#[test]
fn start_needs_tier_and_prompt() {
    assert_eq!(
        call("opencode_start", json!({"prompt": "x"})).unwrap_err(),
        "missing required argument `tier`; use one of easy, medium, hard, unsure"
    );
    assert_eq!(
        call("opencode_start", json!({"tier": "easy"})).unwrap_err(),
        "missing required argument `prompt` (a string)"
    );
    let ok = call(
        "opencode_start",
        json!({"tier": "easy", "prompt": "do it", "mechanical": true, "timeout_minutes": 5}),
    )
    .unwrap();
    let Call::Start(args) = ok else { panic!() };
    assert!(args.mechanical);
    assert_eq!(args.timeout_minutes, Some(5));
}

#[test]
fn bad_values_name_the_field_and_the_accepted_values() {
    assert_eq!(
        call("opencode_start", json!({"tier": "trivial", "prompt": "x"})).unwrap_err(),
        "bad argument `tier`: \"trivial\" is not accepted; use one of easy, medium, hard, unsure"
    );
    assert_eq!(
        call("opencode_sessions", json!({"limit": 0})).unwrap_err(),
        "bad argument `limit`: 0 is not accepted; use a whole number from 1 to 500"
    );
    assert_eq!(
        call("opencode_processes", json!({"x": 1})).unwrap_err(),
        "unknown argument `x`; this tool takes no arguments"
    );
    assert_eq!(
        call("opencode_list", json!({"x": 1})).unwrap_err(),
        "unknown argument `x`; accepted arguments: label"
    );
    assert_eq!(
        call("opencode_wait", json!({"ids": ["3", "t4"]})).unwrap(),
        Call::Wait {
            ids: vec!["3".into(), "t4".into()],
            all: false,
            timeout_s: WAIT_DEFAULT_S
        }
    );
    assert!(
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "model": "gpt"})
        )
        .unwrap_err()
        .contains("provider/model")
    );
}

#[test]
fn null_counts_as_absent() {
    assert_eq!(
        call("opencode_policy", json!({"cwd": null})).unwrap(),
        Call::Policy {
            cwd: None,
            mode: None
        }
    );
}

/// The published schemas and the validator accept and refuse the same arguments.
#[test]
fn schemas_and_validator_agree() {
    let samples: Vec<(&str, Value)> = vec![
        ("opencode_start", json!({"tier": "easy", "prompt": "x"})),
        ("opencode_start", json!({"tier": "hard", "prompt": "x"})),
        ("opencode_start", json!({"tier": "trivial", "prompt": "x"})),
        ("opencode_start", json!({"prompt": "x"})),
        ("opencode_start", json!({"tier": "easy", "prompt": ""})),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "model": "a/b#c"}),
        ),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "model": "ab"}),
        ),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "timeout_minutes": 0}),
        ),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "timeout_minutes": 30, "mechanical": true, "mode": "sensitive", "lane": "L", "agent": "a", "title": "t", "cwd": "."}),
        ),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "mechanical": "yes"}),
        ),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "extra": 1}),
        ),
        ("opencode_status", json!({"id": "1"})),
        ("opencode_status", json!({})),
        ("opencode_result", json!({"id": "1", "head": 10, "tail": 5})),
        ("opencode_result", json!({"id": "1", "head": 0})),
        ("opencode_cancel", json!({"id": "1"})),
        ("opencode_list", json!({})),
        ("opencode_list", json!({"x": 1})),
        ("opencode_list", json!({"label": "night"})),
        ("opencode_list", json!({"label": ""})),
        (
            "opencode_wait",
            json!({"ids": ["1", "2"], "mode": "all", "timeout_s": 55}),
        ),
        ("opencode_wait", json!({"ids": ["1"]})),
        ("opencode_wait", json!({"ids": []})),
        ("opencode_wait", json!({"ids": [1]})),
        ("opencode_wait", json!({"ids": [""]})),
        ("opencode_wait", json!({"ids": ["1"], "timeout_s": 56})),
        ("opencode_wait", json!({"ids": ["1"], "mode": "some"})),
        ("opencode_wait", json!({})),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "session": "ses_1", "label": "b"}),
        ),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "session": ""}),
        ),
        (
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "label": "y".repeat(101)}),
        ),
        ("opencode_policy", json!({"cwd": "/x", "mode": "blueprint"})),
        ("opencode_policy", json!({"mode": "loose"})),
        (
            "opencode_sessions",
            json!({"state": "stale", "limit": 500, "children": "only", "since_minutes": 5}),
        ),
        ("opencode_sessions", json!({"limit": 501})),
        ("opencode_sessions", json!({"children": true})),
        (
            "opencode_session_output",
            json!({"id": "ses_1", "mode": "full", "messages": 3, "max_chars": 200}),
        ),
        (
            "opencode_session_output",
            json!({"id": "ses_1", "max_chars": 199}),
        ),
        (
            "opencode_session_rename",
            json!({"id": "ses_1", "title": "A/b: c d e"}),
        ),
        ("opencode_session_rename", json!({"id": "ses_1"})),
        ("opencode_processes", json!({})),
    ];
    for (tool, args) in samples {
        let def = definitions().into_iter().find(|d| d.name == tool).unwrap();
        let validator = jsonschema::validator_for(&def.schema).expect("a valid JSON Schema");
        let by_schema = validator.is_valid(&args);
        let by_us = parse_call(tool, args.as_object()).is_ok();
        assert_eq!(
            by_schema, by_us,
            "{tool} {args}: schema {by_schema}, validator {by_us}"
        );
    }
}

#[test]
fn the_argument_check_and_the_runner_agree_on_claude_models() {
    // One alias list with one case rule: a bare model the check accepts runs through
    // Claude Code, and one the check refuses would not have (before, `OPUS` was refused
    // here but chosen as a Claude model by the supervisor; `Default` the other way).
    use run_supervisor::Runner;
    let mut cases: Vec<String> = CLAUDE_ALIASES
        .iter()
        .flat_map(|a| {
            [
                a.to_string(),
                capitalized(a),
                a.to_ascii_uppercase(),
                format!("{a}[1m]"),
                format!("{a}#high"),
            ]
        })
        .collect();
    cases.extend(["claude-x", "Claude-x", "CLAUDE-x", "sonnets", "gpt-5"].map(String::from));
    for m in &cases {
        let claude = Runner::for_model(Some(m)) == Runner::Claude;
        assert_eq!(valid_model(m), claude, "{m}: check vs runner");
    }
    let re = regex::Regex::new(&model_pattern()).unwrap();
    for m in &cases {
        assert_eq!(
            re.is_match(m),
            valid_model(m),
            "{m}: schema pattern vs check"
        );
    }
}

#[test]
fn claude_models_and_wait_s_are_accepted() {
    for m in [
        "sonnet",
        "opus#high",
        "haiku",
        "sonnet[1m]",
        "claude-haiku-4-5",
        "Claude-opus-4-1",
        "claude/opus",
    ] {
        assert!(valid_model(m), "{m}");
    }
    for m in ["gpt4", "claude-", "sonnet x", "opus#", "sonnets"] {
        assert!(!valid_model(m), "{m}");
    }
    let Call::Start(args) = call(
        "opencode_start",
        json!({"tier": "easy", "prompt": "x", "model": "sonnet", "wait_s": 30}),
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(args.wait_s, Some(30));
    assert_eq!(args.model.as_deref(), Some("sonnet"));
    assert!(
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "wait_s": 56})
        )
        .unwrap_err()
        .contains("wait_s")
    );
}

/// A valid value for a property of a tool's schema (the base of the calls below).
fn valid_value(p: &Value) -> Value {
    if let Some(e) = p["enum"].as_array() {
        return e[0].clone();
    }
    match p["type"].as_str() {
        Some("integer") => json!(p["minimum"].as_u64().unwrap_or(1)),
        Some("boolean") => json!(true),
        Some("array") => json!(["1"]),
        _ => json!("x"),
    }
}

/// Every string argument of every tool (array items included) is an enum or has a
/// `maxLength`, and the validator refuses one character more with a line naming the field
/// and the limit, before anything else looks at the value: no tool echoes a long input.
#[test]
fn every_string_argument_has_a_limit_that_is_enforced() {
    let mut checked = 0;
    for def in definitions() {
        let props = def.schema["properties"].as_object().unwrap();
        let required: Vec<&str> = def.schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let base: Map<String, Value> = required
            .iter()
            .map(|r| (r.to_string(), valid_value(&props[*r])))
            .collect();
        let validator = jsonschema::validator_for(&def.schema).unwrap();
        for (name, p) in props {
            let (string, array) = match p["type"].as_str() {
                Some("string") => (p, false),
                Some("array") => (&p["items"], true),
                _ => continue,
            };
            if string["enum"].is_array() {
                continue;
            }
            let max = string["maxLength"]
                .as_u64()
                .unwrap_or_else(|| panic!("{} `{name}` has no maxLength", def.name))
                as usize;
            let long = "a".repeat(max + 1);
            let mut args = base.clone();
            args.insert(
                name.clone(),
                if array { json!([long]) } else { json!(long) },
            );
            let e = parse_call(def.name, Some(&args)).unwrap_err();
            assert_eq!(
                e.mcp_text(),
                format!("bad argument `{name}`: longer than {max} characters"),
                "{} {name}",
                def.name
            );
            assert!(!validator.is_valid(&Value::Object(args.clone())));
            let fits = "a".repeat(max);
            args.insert(
                name.clone(),
                if array { json!([fits]) } else { json!(fits) },
            );
            if let Err(e) = parse_call(def.name, Some(&args)) {
                assert!(
                    !matches!(e.problem, ArgProblem::TooLong { .. }),
                    "{} {name}: {e}",
                    def.name
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} string arguments checked");
}

/// What each string argument of `opencode_start` does with values that look like options:
/// refused where they can only be mistakes, accepted (and passed as values, never as
/// options: `run_supervisor::argv`) elsewhere. A new string argument fails here until it
/// is placed in one list, and the accepted ones are each run through both runners with such
/// values by the live test `live_argv`.
#[test]
fn option_like_values_are_refused_where_they_can_only_be_mistakes() {
    const INJECTIONS: [&str; 8] = run_supervisor::argv::INJECTION_SAMPLES;
    const REFUSED: [&str; 4] = ["model", "agent", "session", "server"];
    const CLOSED_SETS: [&str; 3] = ["tier", "mode", "isolation"];
    // `request_id` never reaches a command line (only the registry); `verify` only as the
    // script of `sh -c`, never as an option.
    const ACCEPTED: [&str; 7] = [
        "prompt",
        "cwd",
        "lane",
        "title",
        "label",
        "request_id",
        "verify",
    ];
    let start = definitions().into_iter().next().unwrap();
    assert_eq!(start.name, "opencode_start");
    let validator = jsonschema::validator_for(&start.schema).unwrap();
    for (name, p) in start.schema["properties"].as_object().unwrap() {
        if p["type"] != "string" {
            continue;
        }
        for v in INJECTIONS {
            let mut args = json!({"tier": "easy", "prompt": "x"});
            args[name.as_str()] = json!(v);
            let got = parse_call("opencode_start", args.as_object());
            assert_eq!(got.is_ok(), validator.is_valid(&args), "{name}={v}");
            if REFUSED.contains(&name.as_str()) {
                let e = got.unwrap_err();
                assert!(
                    matches!(e.problem, ArgProblem::OptionLike { .. }),
                    "{name}={v}: {e}"
                );
                assert!(e.mcp_text().contains("starts with `-`"), "{e}");
            } else if CLOSED_SETS.contains(&name.as_str()) {
                assert!(got.is_err(), "{name}={v}");
            } else {
                assert!(ACCEPTED.contains(&name.as_str()), "`{name}` is in no list");
                assert!(got.is_ok(), "{name}={v}: {got:?}");
            }
        }
    }
    for m in ["fk/--auto", "fk/ok#--variant=x", "claude/-p", "sonnet#-x"] {
        let e = call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "model": m}),
        )
        .unwrap_err();
        assert!(
            e.contains("starts with `-`, which no model does"),
            "{m}: {e}"
        );
    }
    for (tool, args) in [
        ("opencode_session_output", json!({"id": "--session=x"})),
        (
            "opencode_session_rename",
            json!({"id": "--session=x", "title": "t"}),
        ),
    ] {
        let e = call(tool, args).unwrap_err();
        assert!(
            e.starts_with(
                "bad argument `id`: \"--session=x\" starts with `-`, which no session id does"
            ),
            "{e}"
        );
    }
}

#[test]
fn model_shapes() {
    assert!(valid_model("anthropic/claude-sonnet"));
    assert!(valid_model("openrouter/qwen/qwen3#high"));
    assert!(!valid_model("noslash"));
    assert!(!valid_model("a/b#"));
    assert!(!valid_model("/b"));
}
