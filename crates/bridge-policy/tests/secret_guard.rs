//! Secret-guard figures over two corpora: `fixtures/secrets/` (built by `generate.py` there) and
//! the larger evaluation set `fixtures/secrets/eval/` (built by `eval/generate.py`: formats from
//! public scanners' rule sets in realistic frames, and hard negatives). Prints recall on fake
//! secrets and the false-positive rate on ordinary prompts, per format family, and asserts recall
//! >= 99 % and false positives <= 0.5 % on each corpus.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use bridge_policy::secrets::scan;

/// `(label, prompt)` pairs from a corpus file; `⏎` stands for a line break.
fn corpus(name: &str) -> Vec<(String, String)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/secrets")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (label, prompt) = l.split_once('\t').expect("label<TAB>prompt");
            (label.to_owned(), prompt.replace('\u{23ce}', "\n"))
        })
        .collect()
}

/// The family of a label: the part before `/` (the eval set), else the label itself.
fn family(label: &str) -> &str {
    label.split_once('/').map_or(label, |(f, _)| f)
}

struct Figures {
    recall: f64,
    fp_rate: f64,
}

fn measure(dir: &str, min_secrets: usize, min_formats: usize, min_ordinary: usize) -> Figures {
    let secrets = corpus(&format!("{dir}secrets.txt"));
    let ordinary = corpus(&format!("{dir}ordinary.txt"));
    let formats: BTreeSet<&str> = secrets.iter().map(|(l, _)| l.as_str()).collect();
    assert!(
        secrets.len() >= min_secrets,
        "{dir}: {} secrets",
        secrets.len()
    );
    assert!(
        formats.len() >= min_formats,
        "{dir}: {} formats",
        formats.len()
    );
    assert!(
        ordinary.len() >= min_ordinary,
        "{dir}: {} ordinary",
        ordinary.len()
    );

    // family -> (total, caught)
    let mut per_family: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut missed: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (label, prompt)) in secrets.iter().enumerate() {
        let entry = per_family.entry(family(label)).or_default();
        entry.0 += 1;
        match scan(prompt) {
            Some(finding) => {
                entry.1 += 1;
                let shown = finding.to_string();
                assert!(
                    !prompt
                        .lines()
                        .any(|l| l.len() > 12 && shown.contains(l.trim())),
                    "a finding must not echo the prompt: {shown}"
                );
            }
            None => {
                eprintln!("missed {dir}secrets.txt:{} ({label})", i + 1);
                *missed.entry(label).or_default() += 1;
            }
        }
    }
    let mut fp_family: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut false_positives = 0;
    for (i, (label, prompt)) in ordinary.iter().enumerate() {
        let entry = fp_family.entry(family(label)).or_default();
        entry.0 += 1;
        if let Some(f) = scan(prompt) {
            entry.1 += 1;
            false_positives += 1;
            eprintln!("false positive {dir}ordinary.txt:{} ({label}): {f}", i + 1);
        }
    }
    let caught = secrets.len() - missed.values().sum::<usize>();
    let recall = caught as f64 / secrets.len() as f64;
    let fp_rate = false_positives as f64 / ordinary.len() as f64;
    println!(
        "secret guard on fixtures/secrets/{dir}: recall {:.2}% ({caught}/{} fake secrets, {} formats), false positives {:.2}% ({false_positives}/{} ordinary prompts)",
        recall * 100.0,
        secrets.len(),
        formats.len(),
        fp_rate * 100.0,
        ordinary.len()
    );
    for (fam, (total, hit)) in &per_family {
        println!(
            "  recall {fam}: {:.2}% ({hit}/{total})",
            *hit as f64 * 100.0 / *total as f64
        );
    }
    for (fam, (total, hit)) in &fp_family {
        println!(
            "  false positives {fam}: {:.2}% ({hit}/{total})",
            *hit as f64 * 100.0 / *total as f64
        );
    }
    if !missed.is_empty() {
        println!("  missed per format: {missed:?}");
    }
    Figures { recall, fp_rate }
}

#[test]
fn secret_guard_figures() {
    let f = measure("", 300, 30, 1000);
    assert!(f.recall >= 0.99, "recall {:.4} below 0.99", f.recall);
    assert!(
        f.fp_rate <= 0.005,
        "false positives {:.4} above 0.005",
        f.fp_rate
    );
}

#[test]
fn secret_guard_figures_on_the_round3_set() {
    let f = measure("round3/", 500, 100, 1500);
    assert!(f.recall >= 0.99, "round3 recall {:.4} below 0.99", f.recall);
    assert!(
        f.fp_rate <= 0.005,
        "round3 false positives {:.4} above 0.005",
        f.fp_rate
    );
}

#[test]
fn secret_guard_figures_on_the_eval_set() {
    let f = measure("eval/", 1500, 500, 1400);
    assert!(f.recall >= 0.99, "eval recall {:.4} below 0.99", f.recall);
    assert!(
        f.fp_rate <= 0.005,
        "eval false positives {:.4} above 0.005",
        f.fp_rate
    );
}

/// `(prompt, kind)` pairs: each prompt must be refused with that kind. Every value here was
/// typed for this test (random-looking, not a credential).
fn assert_found(cases: &[(&str, &str)]) {
    for (prompt, kind) in cases {
        let found = scan(prompt);
        assert_eq!(found.map(|f| f.kind), Some(*kind), "{prompt}");
        let shown = found.map(|f| f.to_string()).unwrap_or_default();
        for word in prompt.split(|c: char| c.is_whitespace() || "\"'`()".contains(c)) {
            assert!(
                word.len() < 12 || !shown.contains(word),
                "the finding echoes {word}"
            );
        }
    }
}

fn assert_clean(prompts: &[&str]) {
    for prompt in prompts {
        assert_eq!(scan(prompt), None, "{prompt}");
    }
}

/// Issue 25: webhook URLs beyond the canonical `https://hooks.slack.com/services/T…/B…/…`.
#[test]
fn webhook_urls_of_every_family() {
    assert_found(&[
        (
            "notify: hooks.slack.com/services/Q7WKD3LMX/ZP8RT2VNB4K/mC4vT9qLx2Rk7NpZ8sW3bY6d",
            "Slack webhook URL",
        ),
        (
            "post to http://hooks.slack.com/workflows/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",
            "Slack webhook URL",
        ),
        (
            "hook = 'https://canary.discord.com/api/v10/webhooks/918273645546372819/Xk2-Lp9Qm4Rt7Vw1Yz3Bc6Df8Gh0Jk5Mn2Pq4Rs6Tu8Vw0Xy2Za4Bc6De8Fg0Hi2Jk4Lm6No8'",
            "Discord webhook URL",
        ),
        (
            "TEAMS=https://outlook.office.com/webhook/5b1e2c3d-4f5a-6b7c-8d9e-0f1a2b3c4d5e@6c2f3d4e-5a6b-7c8d-9e0f-1a2b3c4d5e6f/IncomingWebhook/9f8e7d6c5b4a39281706f5e4d3c2b1a0/7d3e4f5a-6b7c-8d9e-0f1a-2b3c4d5e6f70",
            "Microsoft Teams webhook URL",
        ),
        (
            "url: chat.acme-corp.test/hooks/k3m9x7q2w8e4r6t1y5u0i3o7p2",
            "webhook URL",
        ),
        (
            "curl -X POST https://hooks.zapier.com/hooks/catch/4830192/b7x2k9q/",
            "Zapier webhook URL",
        ),
    ]);
    assert_clean(&[
        "webhook: https://hooks.slack.com/services/TXXXXXXXX/BXXXXXXXX/XXXXXXXXXXXXXXXXXXXXXXXX",
        "the handler lives at https://api.acme-corp.test/webhooks/deployment-notifications",
    ]);
}

/// Issue 25: credentials on command lines and in `Authorization:` headers of any scheme.
#[test]
fn command_line_credentials_in_every_quoting() {
    let cmd = "credentials in a command line";
    let auth = "Authorization header";
    assert_found(&[
        (
            "curl -s -u \"ops:Hk7#vR2qLw9x\" https://api.acme-corp.test",
            cmd,
        ),
        (
            "curl -u \":Zq8mT3vX7kLp!\" https://search.acme-corp.test:9200",
            cmd,
        ),
        (
            "curl -u \"Zq8mT3vX7kLp!:\" https://search.acme-corp.test:9200",
            cmd,
        ),
        (
            "curl --user \"{9c1d7e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f}\":\"{Wq4LzR8kT2vN6m}\" https://gw.acme-corp.test",
            cmd,
        ),
        (
            "curl --user ana:'pX7vK2mQ9tL4wR8z' -X PATCH https://api.acme-corp.test/me",
            cmd,
        ),
        (
            "curl -k https://cache.acme-corp.test/x \\\n  -d 'v' \\\n  -u builder:qHvTnKwPzLmRxYsB",
            cmd,
        ),
        (
            "mysql -h db.acme-corp.test -u root -p'Vr7#kQ2mLx9w' app",
            cmd,
        ),
        (
            "docker login -u deploy -p Tz8qLw3Xm7Kv2R registry.acme-corp.test",
            cmd,
        ),
        ("redis-cli -h cache -a 'Pm4#xQ8vLk2Z' ping", cmd),
        (
            "curl --header 'Authorization:  8e2f4a6c-1b3d-4e5f-9a7b-2c4d6e8f0a1b'",
            auth,
        ),
        (
            "curl -H \"Authorization: sha256~Qk3vT9mL@=-.a+/x2Rz7\"",
            auth,
        ),
        (
            "curl -H \"Authorization: Api-Token 5d8e2f7a9c1b3e6f0a4d8c2b7e5f9a1c3d6b8e0f\" https://x.acme-corp.test",
            auth,
        ),
        (
            "Authorization: SSWS 00Kx7vQ2mT9pL4wR8zN3bY6dF1gH5jC0sE2rU4i",
            auth,
        ),
        // `Basic` of a user alone: the key is the user
        (
            "curl -H 'Authorization: Basic cTdrMm14OXZ0Og==' https://x",
            auth,
        ),
    ]);
    assert_clean(&[
        "curl --user \"xxx:yyy\" https://api.acme-corp.test",
        "curl -u 'demo:demo' https://localhost:9200",
        "curl -u ccc:ddd https://localhost:9200",
        "curl -sL --user \"$1:$2\" \"$3\"",
        "curl -u \"${ci_user}:${ci_pass}\" https://x",
        "curl -u \"{{ .Values.user }}:{{ .Values.pass }}\" https://x",
        "curl -u \"$(cat user.txt):$(cat pass.txt)\" https://x",
        "curl -u ops:[SECRET] https://x",
        "curl -H \"Authorization: Bearer ZZZZZZZZZZZZZZZZ\" https://x",
        "curl -H \"Authorization: Token ************\" https://x",
        "curl -H \"Authorization: Basic {base64(login:secret)}\" https://x",
        "curl -H \"Authorization: Basic dXNlcjpwYXNzd29yZA==\" https://x",
        "docker run -d -p 8080:8080 -u 1000:1000 ci/runner:lts",
        "mysql -u root -p -h db.acme-corp.test app",
    ]);
}

/// Issue 25: a service's name (any name) right before a high-entropy token, the way the
/// public detectors pair a vendor keyword with a token shape; and passwords with brackets.
#[test]
fn service_names_next_to_random_tokens() {
    let pair = "high-entropy token next to a service name";
    assert_found(&[
        (
            "cloudflare: \"Rv7Kq2mXz9Lp4Tn8Wb3Yc6Hd1Fg5Js0AeQ2uI4o\"",
            pair,
        ),
        (
            "init_cloudflare(\"Tq9Lm3Xk8Pz2Wn7Bc4Rd6Fs1Gh5Jy0KaE3uV7i\")",
            pair,
        ),
        (
            "export ZORBLAT=9f3a7c1e5b8d2f4a6c0e3b9d7f1a5c8e2b4d6f0a",
            pair,
        ),
        ("# quexify\nmK4vT9qLx2Rk7NpZ8sW3bY6dH1jF5gC0", pair),
        (
            "set the nimbusly value to q8m2x7k4w9z3t6p1r5v0n8b2 in staging",
            pair,
        ),
        (
            "apikey = m{{h}o)p$3Kq9!vL2x",
            "password/API key/token assignment",
        ),
        (
            "db_pass: Xw4;r}+k2|q)Zp*",
            "password/API key/token assignment",
        ),
    ]);
    assert_clean(&[
        "git show 9f3a7c1e5b8d2f4a6c0e3b9d7f1a5c8e2b4d6f0a broke the build",
        "MaxKeyframeInterval, \"5b1e2c3d-4f5a-6b7c-8d9e-0f1a2b3c4d5e\"",
        "cloudflare zone_id: 9f3a7c1e5b8d2f4a6c0e3b9d7f1a5c8e",
        "zorblat image: ghcr.io/acme/zorblat@sha256:9f3a7c1e5b8d2f4a6c0e3b9d7f1a5c8e2b4d6f0a9f3a7c1e5b8d2f4a6c0e3b9d",
        "assert candidate(\"aB3dE5gH7jK9mN1pQ3sT5vX7\") == \"Ab3De5Gh7Jk9Mn1Pq3St5Vx7\"",
        "publicToken = \"Rv7Kq2mXz9Lp4Tn8Wb3Yc6Hd1Fg5Js0AeQ2uI4o\"",
        "password = get_secret(name);",
    ]);
}

/// Issue 25: a token with an invisible character inside, and a known format base64-encoded,
/// are found; the title text replaces the whole token, the invisible character included.
#[test]
fn invisible_characters_and_base64_do_not_hide_a_secret() {
    let zw = "push with ghp_4Fq9ZtL2mXc7\u{200b}RbN1sV8kD3wJ0yHa6PeU5gTi today";
    assert_eq!(
        scan(zw).map(|f| (f.kind, f.line)),
        Some(("GitHub token", 1))
    );
    let redacted = bridge_policy::secrets::redact(zw);
    assert!(!redacted.contains("ghp_"), "{redacted}");
    assert!(!redacted.contains("RbN1"), "{redacted}");
    // "ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi", and an AWS key ID in an env line
    let b64 =
        "first line\necho Z2hwXzRGcTladEwybVhjN1JiTjFzVjhrRDN3SjB5SGE2UGVVNWdUaQ== | base64 -d";
    assert_eq!(
        scan(b64).map(|f| (f.kind, f.line)),
        Some(("GitHub token", 2))
    );
    assert!(scan("blob: QVdTX0FDQ0VTU19LRVlfSUQ9QUtJQVo3UTRNMktEOFhXM1BMNlQ=").is_some());
    // base64 of ordinary text stays ordinary
    assert_clean(&[
        "expected = \"dGhlIHF1aWNrIGJyb3duIGZveCBqdW1wcyBvdmVyIHRoZSBsYXp5IGRvZw==\"",
        "a\u{200b}b zero\u{200d}width joiners in prose are fine",
    ]);
}

/// Issue 25: placeholders in the shape of a real format, constant names that look random and
/// documentation snippets pass.
#[test]
fn placeholders_constants_and_docs_pass() {
    assert_clean(&[
        "use xoxb-12345-abcd234 in the docs",
        "SLACK_TOKEN=xoxb-1111111111-1111111111",
        "RUNNER_TOKEN=GR134894111111111111111111111",
        "RUNNER_TOKEN=GR13489411234567890123456789",
        "pub const SN_id_Magma3412_15_None_KeyWrap = \"id-Magma3412-15-None-KeyWrap\"",
        "RingKeySignatures = X448.RingKeySignatures",
        "cfg.Crypto.KeyLength = AesKeyLength.Key256Bit;",
        "keyVaultForSecrets: kv-prod-2291837465",
        "client_secret = \"00000000-0000-0000-0000-000000000000\"",
        "password: \"P@ssw0rd\" # the documentation example",
        "\"tokenAccessor\":\"9hmaeX3xA1Tvc0Nf\",",
        "notes = \"Maven - io.jsonwebtoken:jjwt-jackson-0.11.2\"",
        "keyUpEvent=Xk2Lp9Qm4Rt7Vw1Yz3Bc6Df8Gh0Jk5",
        "api_key = \"thisIsWhereYourKeyGoes\"",
    ]);
    // a placeholder word that random text happens to spell (`fAkE` inside a long key) is no
    // placeholder
    assert_found(&[(
        "OPENAI_ADMIN_KEY=sk-admin-q7R2vXk9LmT3pW8zN4bY6dHfAkEc1sJ0gU5rV2xT3BlbkFJm8Qw2Er5Ty7Ui9Op1As3Df",
        "OpenAI API key",
    )]);
}

/// Titles and labels are redacted loosely (any long random run), but a path is judged by its
/// parts: a random temporary directory's name is no secret, a long random part still is.
#[test]
fn redaction_judges_a_path_by_its_parts() {
    use bridge_policy::secrets::{redact, scan};
    for path in [
        "Look in ~/work/a1b2c3d4e5/proj for the notes",
        "cwd /tmp/.tmp2dD5vV9/elsewhere",
    ] {
        assert!(scan(path).is_none(), "{path}: {:?}", scan(path));
    }
    for kept in [
        "--add-dir=/tmp/.tmp2dD5vV/elsewhere",
        "/tmp/tmp8xK2pQzR9/out/file.txt",
        "cwd ~/work/a1b2c3d4e5/proj",
        "DOCS/librarian: notes in ./build-2024-11-03/out",
    ] {
        assert_eq!(redact(kept), kept);
    }
    let token = "q8Zt3vLm9XwR2pK7sJd4Fh6N";
    assert_eq!(redact(&format!("/srv/{token}/x")), "/srv/[secret]/x");
    assert!(!redact(&format!("use {token} now")).contains(token));
    assert!(!redact(&format!("--dir=/tmp/x --key={token}")).contains(token));
}

/// Issue 36: Slack webhooks on GovSlack, JSON-escaped and URL-encoded, and Slack's legacy,
/// workspace, client and cookie tokens.
#[test]
fn slack_webhooks_and_tokens_in_every_current_form() {
    assert_found(&[
        (
            "url: https://hooks.slack-gov.com/services/T4QZ8MK2LP/B7XW3RN9TD/Vq8mZ2pLw7xR4tN9sB3kJ6yH",
            "Slack webhook URL",
        ),
        (
            r#"{"hook":"https:\/\/hooks.slack.com\/triggers\/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"}"#,
            "Slack webhook URL",
        ),
        (
            "GET /relay?to=https%3A%2F%2Fhooks.slack.com%2Fworkflows%2F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",
            "Slack webhook URL",
        ),
        ("SLACK_TOKEN=xoxa-Vq8mZ2pLw7xR4tN9sB3k", "Slack token"),
        ("refresh: xoxr-2-q8mZ2pLw7xR4tN9sB3kJ6yH", "Slack token"),
        (
            "xoxc-518273645091-518273645092-5182736450913-9f2c7a1e4b8d3f6a0c5e9b2d7f1a4c8e9f2c7a1e4b8d3f6a0c5e9b2d7f1a4c8e",
            "Slack token",
        ),
        (
            "cookie d=xoxd-Vq8mZ2pLw7xR4tN9sB3kJ6yH%2Bc5Df1Gh0Jk4Lm7Np2Qr5St8Uv1Wx3Yz6%2F%3D%3D",
            "Slack token",
        ),
    ]);
    assert_clean(&[
        "export TOKEN=xoxp-518273645091-518273645092-518273645093-####################",
        "see https://github.com/xoxa-nyc/xoxa-nyc.github.io for the logo",
    ]);
}

/// Issue 36: vendor formats the second round missed.
#[test]
fn vendor_formats_of_the_third_round() {
    assert_found(&[
        (
            "spring.datasource.url=jdbc:oracle:thin:scott/Tq8#mZ2pLw7@db.internal:1521:ORCL",
            "connection string with a password",
        ),
        (
            "CLOUDINARY_URL=cloudinary://518273645091827:Vq8mZ2pLw7xR4tN9sB3kJ6yHc5D@acme",
            "Cloudinary URL",
        ),
        (
            "BUNDLE_ENTERPRISE__CONTRIBSYS__COM=9f2c7a1e:4b8d3f6a",
            "Sidekiq credentials",
        ),
        (
            "source \"https://9f2c7a1e:4b8d3f6a@gems.contribsys.com/\"",
            "Sidekiq credentials",
        ),
        (
            "dbx = dropbox.Dropbox(\"Vq8mZ2pLw7xAAAAAAAAAAR4tN9sB3kJ6yHc5Df1Gh0Jk4Lm7Np2Qr5St8Uv1Wx3Y\")",
            "Dropbox token",
        ),
        ("Airtable(base, 'keyVq8mZ2pLw7xR4t')", "Airtable API key"),
        (
            "requests.get(url, auth=('ops@acme.io', 'zp9abi66pc6432z8i06g03ac'))  # jira",
            "credentials in code",
        ),
    ]);
    assert_clean(&[
        "CLOUDINARY_URL=cloudinary://<api_key>:<api_secret>@<cloud_name>",
        "jdbc:oracle:thin:scott/${DB_PASSWORD}@db.internal:1521:ORCL",
        "BUNDLE_ENTERPRISE__CONTRIBSYS__COM=username:password",
    ]);
}

/// Issue 36: the keyword forms of detect-secrets' keyword plugin.
#[test]
fn keyword_forms_of_detect_secrets() {
    let strong = "password/API key/token assignment";
    assert_found(&[
        ("servicekey = \"Vq8mZ2pLw7xR4tN9\"", strong),
        ("dbkey: 'Vq8mZ2pLw7xR4tN9'", strong),
        ("theapikey := \"Vq8mZ2pLw7xR4tN9\"", strong),
        ("contraseña = \"Tq8#mZ2pLw7\"", strong),
        ("secreto: \"Tq8#mZ2pLw7\"", strong),
        ("keypass=Tq8#mZ2pLw7", strong),
        ("privkey \"Vq8mZ2pLw7xR4tN9\";", strong),
        ("apikey = @\"Vq8mZ2pLw7xR4tN9\"", strong),
        ("apikey[] = \"Vq8mZ2pLw7xR4tN9\";", strong),
        ("if password == \"Tq8#mZ2pLw7\":", strong),
        ("\"Tq8#mZ2pLw7\" === db_password", strong),
        ("clientkey := \"Mywiz7T4O&4915\"", strong),
    ]);
    assert_clean(&[
        "if password == other_password:",
        "\"created_at\" == sort_key",
        "the password accepted, the user logs in",
        "my_password = foo(hey)you",
    ]);
}

/// Issue 36: a secret cut across two lines, or URL-encoded, is read joined and decoded.
#[test]
fn split_and_url_encoded_secrets_are_read_whole() {
    assert_found(&[
        (
            "export GITHUB_TOKEN=ghp_4Fq9ZtL2mXc7Rb\\\nN1sV8kD3wJ0yHa6PeU5gTi",
            "GitHub token",
        ),
        (
            "token = (\"ghp_4Fq9ZtL2mXc7Rb\"\n         \"N1sV8kD3wJ0yHa6PeU5gTi\")",
            "GitHub token",
        ),
        (
            "const key = \"sk_live_4Fq9ZtL2mXc\" +\n  \"7RbN1sV8kD3wJ\";",
            "Stripe secret key",
        ),
        (
            "here it is: ghp_4Fq9ZtL2mXc7Rb\nN1sV8kD3wJ0yHa6PeU5gTi",
            "GitHub token",
        ),
        (
            "GET /cb?code=ghp%5F4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi",
            "GitHub token",
        ),
        (
            "body: STRIPE_KEY%3Dsk%5Flive%5F4Fq9ZtL2mXc7RbN1sV8kD3wJ",
            "Stripe secret key",
        ),
    ]);
    assert_clean(&[
        "docker run \\\n  --rm \\\n  -v $PWD:/src rust:1.90 cargo build",
        "msg = (\"The quick brown fox \"\n       \"jumps over the lazy dog\")",
        "redirect_uri=https%3A%2F%2Fapp.acme.io%2Fcallback%3Fnext%3D%252Fhome",
        "Cherry-pick 8baddc29e4940e8a207b37d9e4906c171fa3f083 onto release/2.4\n12f34d7 api key header",
    ]);
    // a finding in a joined line is reported on the line where the token starts
    let f = scan("a\nexport K=ghp_4Fq9ZtL2mXc7Rb\\\nN1sV8kD3wJ0yHa6PeU5gTi\n").expect("found");
    assert_eq!(f.line, 2);
}

/// Issue 36: ids that are random by design next to a service's name, and placeholders in a
/// format's shape, are not secrets.
#[test]
fn random_ids_and_placeholders_pass() {
    assert_clean(&[
        "The Postgres row 01H5XXK100346Q3D25VT4F5V37 is missing after the migration",
        "Look up user_01h5xxk100346q3d25vt4f5v37 in Stripe",
        "Kafka event 0qjBBoM7jhQXIvzcmgNryJzsmPg retried 3 times",
        "MongoDB: 5f5e100036b3216fdaeeb975",
        "Sentry issue ckqij1kowe3p3e2z8iq9y7jzb was merged",
        "Redis.get(\"q7W2_zK9mTpL4xR8-vBn3\")",
        "Firebase: 5117b6c9-9721-4bca-9fdd-408a511da923",
        "GitLab: 3e39186bb92d4baa61b992a14c68dfc0753d05fb",
        "{\"sessionID\":\"ses_0c3a91d24ffeQz7LmR2vXk9PbW\",\"tokens\":{\"input\":12}}",
        "integrity sha256-Vq3mZ8pLw0x7Tn2Rb5Kc9Hd4Fg6Js1Ya8Ue3Wi0Po2M= for the Vercel bundle",
        "--token sk_live_ThisIsNotARealStripeKey",
        "SLACK_TOKEN=ghp_ThisIsNotARealGitHubTokenValue00",
        "api_key = 'ohlO-####-####-####'",
        "| `xoxp-518273645091-518273645092-518273645093-####################` | the shape |",
    ]);
}
