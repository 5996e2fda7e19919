//! Unit tests of the secret guard's engine and checks (the figures over the fixture
//! corpora and the families are in `tests/secret_guard.rs`).

use super::*;

#[test]
fn finding_names_kind_and_line_without_the_secret() {
    let text = "line one\nline two\npassword = \"Zq8#rT2!vLp9\"\n";
    let hit = scan(text).unwrap();
    assert_eq!(hit.line, 3);
    assert_eq!(hit.kind, "password/API key/token assignment");
    assert!(!hit.to_string().contains("Zq8"));
}

#[test]
fn placeholders_and_code_pass() {
    for ok in [
        "api_key = os.environ[\"API_KEY\"]",
        "token = get_token()",
        "password: str",
        "Authorization: Bearer <TOKEN>",
        "Authorization: Bearer ${TOKEN}",
        "AKIAIOSFODNN7EXAMPLE is the documented example key",
        "postgres://user:password@localhost:5432/app",
        "postgres://app:${DB_PASSWORD}@db/app",
        "sk-xxx",
        "tokenizer.pad_token = tokenizer.eos_token",
        "max_tokens=4096",
        "password_regex = r'^(?=.*[A-Z])(?=.*\\d)(?=.*[!@#$%]).{12,64}$'",
        "TOKEN_URL = 'https://oauth2.googleapis.com/token'",
        "API_KEY_HEADER = 'X-Api-Key'",
        "auth: { username: 'admin', password: process.env.ADMIN_PW }",
        "kubectl get secret db-creds -o jsonpath='{.data.password}' | base64 -d",
        "token = jwt.encode({'sub': user.id}, key, algorithm='HS256')",
    ] {
        assert_eq!(scan(ok), None, "{ok}");
    }
}

#[test]
fn contextual_secrets_are_found() {
    for (text, kind) in [
        (
            "Host=db;Username=app;Password=Xk9#mP2$vL;",
            "password/API key/token assignment",
        ),
        (
            "secret: wJalrXUtnFEMI/K7MDENG/bPxRfiCYzK8T3q2Lw",
            "password/API key/token assignment",
        ),
        (
            "curl -u x -H 'Authorization: Bearer 4fG7hJ2kL9mN3pQ6rS8tV1wX5yZ0aB'",
            "Authorization header",
        ),
        (
            "mongodb+srv://etl:Qw7%23kLm2pZ@cluster0.ab1cd.mongodb.net/db",
            "connection string with a password",
        ),
        (
            "abstractKey = 'b7e1c2f09a4d4e6f8c3b2a1d0e9f8a7b6c5d4e3f2a1b0c9d'",
            "high-entropy value in a secret-named setting",
        ),
    ] {
        assert_eq!(scan(text).map(|f| f.kind), Some(kind), "{text}");
    }
}

#[test]
fn name_strength_reads_the_parts() {
    for strong in [
        "password",
        "DB_PASS",
        "JWT_SIGNING_KEY",
        "api_key",
        "x-api-key",
        "db.password",
        "client_secret",
        "setApiKey",
    ] {
        assert_eq!(strength(strong), Strength::Strong, "{strong}");
    }
    for weak in ["key", "auth", "STRIPE_KEY", "abstractKey", "sig"] {
        assert_eq!(strength(weak), Strength::Weak, "{weak}");
    }
    for plain in [
        "author_id",
        "primary_key",
        "cache_key",
        "signal_id",
        "keyboard",
        "idempotency_key",
        "max_tokens",
        "credentialsId",
        "dev.credentials.url",
        "password_hash",
        "publishableKey",
        "pad_token",
        "secretKeyRef",
    ] {
        assert_eq!(strength(plain), Strength::None, "{plain}");
    }
    assert_eq!(named_strength("cache", "key"), Strength::None);
    assert_eq!(named_strength("client", "secret"), Strength::Strong);
}

#[test]
fn allowlist_skips_only_the_allowed_value() {
    let text =
        "A=ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi\nB=ghp_9Zq1WtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gQq\n";
    let allow = Allowlist::parse("ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi\nre:[\n");
    assert_eq!(allow.len(), 1);
    assert_eq!(allow.problems().len(), 1);
    let f = scan_allowing(text, &allow).unwrap();
    assert_eq!(f.line, 2);
    assert_eq!(findings(text, &Allowlist::default()).len(), 2);
}

/// `unit` repeated past 100 KB, as the fuzz harness grows an input.
fn grown(unit: &str) -> String {
    unit.repeat(100 * 1024 / unit.len() + 1)
}

/// `text` with `insert` put in at byte `at` (a char boundary).
fn with_inserted(text: &str, at: usize, insert: &str) -> String {
    format!("{}{insert}{}", &text[..at], &text[at..])
}

/// Fuzz input `slow-secret-word-runs-on-one-line` (fuzz/corpus/secret_scan/): 340 long
/// names holding `secret`, each followed by `=`, on one 100 KB line. Once quadratic (each
/// rejected name re-read the rest of the line as its value); the names are not secret
/// names, and a real assignment in the middle of that line is still found. (Its time is
/// measured by the bench, `--only secrets`, not asserted here.)
#[test]
fn one_line_of_secret_word_names_is_read_right() {
    let unit = format!("{}secret{}=", "a".repeat(47), "a".repeat(247));
    assert_eq!(unit.len(), 301);
    let big = grown(&unit);
    assert_eq!(findings(&big, &Allowlist::default()), []);
    let real = with_inserted(&big, unit.len() * 170, " client_secret = \"Zq8#rT2!vLp9\" ");
    let found = findings(&real, &Allowlist::default());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind, found[0].line), (KIND_STRONG, 1));
    // the same shape with `token` and with a URL query (the query rule re-read the same way)
    assert_eq!(
        scan(&grown(&format!(
            "{}token{}=",
            "a".repeat(47),
            "a".repeat(247)
        ))),
        None
    );
    let query = grown("?x=");
    assert_eq!(scan(&query), None);
    let real = with_inserted(&query, 3 * 5000, "&access_token=Zq8rT2vLp9Xk3mN7 ");
    assert_eq!(
        scan(&real).map(|f| (f.kind, f.line)),
        Some((KIND_STRONG, 1))
    );
}

/// Fuzz input `slow-long-nonascii-line` (fuzz/corpus/secret_scan/): a secret word, a long
/// hex-and-`u` token and two U+FFFD, repeated to one 100 KB line. The non-ASCII characters
/// kept the regex engine's DFAs off the Unicode `\b` of the rules; with ASCII boundaries the
/// verdict is the same: the token is a placeholder (a run of one letter), and a random token
/// in its place is found on that line.
#[test]
fn long_non_ascii_line_is_read_right() {
    let unit = "Set up the CI secret. The va\u{fffd}ue is 44021uuuuuuuuuuuuuuuuuuuuu84ee6af8b2901466f5c5c5aaefbd0467fb8 and it should be exposed as enc\u{fffd}ryptionKey.";
    let big = grown(unit);
    assert_eq!(findings(&big, &Allowlist::default()), []);
    let real = big.replacen(
        "44021uuuuuuuuuuuuuuuuuuuuu84ee6af8b2901466f5c5c5aaefbd0467fb8",
        "q9XzL2mT7vB4nK8sW3pR6yH1",
        1,
    );
    let found = findings(&real, &Allowlist::default());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind, found[0].line), (KIND_NEAR, 1));
    // a vendor format on such a line: the word boundary beside non-ASCII text still holds
    let vendor = with_inserted(
        &big,
        unit.len() * 300,
        "é ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi é",
    );
    assert_eq!(
        scan(&vendor).map(|f| (f.kind, f.line)),
        Some(("GitHub token", 1))
    );
}

/// The vendor rules that run only on the lines holding a [`Run`] still find their shapes,
/// on any line, in every written form (`%7C` for `|`; Unicode digits, which `\d` matches).
#[test]
fn run_gated_rules_find_their_shapes() {
    let arabic: String = "٨٣٠٦١٥٩٢٧٤٦٣٠٥١".into();
    for (value, kind) in [
        (
            "8306159274630518274-q9XzL2mT7vB4nK8sW3pR6yH1Lp".to_owned(),
            "Twitter access token",
        ),
        (
            "830615927463051|q9XzL2mT7vB4nK8sW3pR6yH1LpQw".to_owned(),
            "Facebook app access token",
        ),
        (
            "830615927463051%7Cq9XzL2mT7vB4nK8sW3pR6yH1LpQw".to_owned(),
            "Facebook app access token",
        ),
        (
            format!("x{arabic}|q9XzL2mT7vB4nK8sW3pR6yH1LpQw"),
            "Facebook app access token",
        ),
        (
            "1/8306159274630518/2746305182748301:9f2c4e7a1b3d5f60718293a4b5c6d7e8".to_owned(),
            "Asana token",
        ),
        (
            "9f2c4e7a1b3d5f60718293a4b5c6d7e8-4a1b3d5f-60718293".to_owned(),
            "Mailgun signing key",
        ),
        (
            "aB38Q~q9XzL2mT7vB4nK8sW3pR6yH1LpQwErT".to_owned(),
            "Azure client secret",
        ),
    ] {
        let text = format!("first line\nthe value we use is {value} here\nlast line");
        assert_eq!(
            scan(&text).map(|f| (f.kind, f.line)),
            Some((kind, 2)),
            "{value}"
        );
    }
}

/// A secret word on a line without any token still makes the next line's token count
/// (the near-word rule skips reading a word only when neither line has a token); without
/// it the token would count only as a token under a label (the pairing rule's kind).
#[test]
fn a_secret_word_counts_for_the_next_line() {
    let text = "intro\nthe api secret, on the next line:\n  q9XzL2mT7vB4nK8sW3pR6yH1\n";
    assert_eq!(scan(text).map(|f| (f.kind, f.line)), Some((KIND_NEAR, 3)));
}

#[test]
fn base64_roundtrip() {
    assert_eq!(base64_decode("dXNlcjpwYXNz").unwrap(), b"user:pass");
    assert!(base64_decode("not base64!").is_none());
}
