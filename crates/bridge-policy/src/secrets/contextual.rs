//! The contextual rules, as data: credentials in context (`Authorization:` headers, connection
//! strings, command lines, credentials in code) and values given to a secret-ish name in every
//! syntax. Each entry is `(kind, pattern, check, scope)`: the pattern's named groups are what
//! its [`Check`] reads, and the [`Scope`] says where the engine runs it (over the whole text,
//! only over a text holding an anchor word, or only on the lines holding one). The engine is
//! `engine.rs`.

use regex::Regex;

use super::*;

/// Command-line tools that take a password through a flag: where [`CMD_PASSWORD`] looks (every
/// match holds one of these; the two-letter ones with the blank after them).
pub(super) const CMD_TOOLS: &str = r"(?i:mysql|mariadb|docker|podman|nerdctl|helm|sshpass|redis-cli|mongo|wget|psql|pg_dump|sqlcmd|rabbitmqctl|keytool|jarsigner|openssl|ldap|zip|7z|rar|gpg|az |oc |cf )";
/// A password flag on the line of such a tool (`-p`, `-a`, `--password`, `-storepass` …).
pub(super) const CMD_PASSWORD: &str = r#"(?i:\b(?:mysql|mysqldump|mysqladmin|mariadb|docker|podman|nerdctl|helm|sshpass|redis-cli|mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport|wget|psql|pg_dump|sqlcmd|rabbitmqctl|keytool|jarsigner|openssl|ldapsearch|ldapadd|ldapmodify|ldapdelete|ldapwhoami|zip|unzip|7z|7za|rar|unrar|gpg)\b|(?:az|oc|cf) )[^\n]*?[ \t](?-i:-p|-a|-P|-w|--password|--pass|--passwd|--passphrase|--storepass|--keypass|-storepass|-keypass|-srcstorepass|-deststorepass|-passin|-passout|--auth)(?:=|[ \t]+)?(?P<v>'[^'\n]+'|"[^"\n]+"|[^\s'"]+)"#;

/// The kind of a strongly secret-named value (password, secret, token, API key …).
pub(super) const KIND_STRONG: &str = "password/API key/token assignment";
/// The kind of a random value given to a loosely secret-ish name (`*Key`, `auth`, `sig` …).
pub(super) const KIND_WEAK: &str = "high-entropy value in a secret-named setting";
/// The kind of a random token on a line that mentions a secret word.
pub(super) const KIND_NEAR: &str = "high-entropy token next to a secret word";
/// The kind of a password-like word on a line that mentions a password.
pub(super) const KIND_NEAR_PASSWORD: &str = "password next to a password word";
/// The kind of a random token right after a name that is not a secret word (a service's name).
pub(super) const KIND_PAIR: &str = "high-entropy token next to a service name";

/// The name characters of an assignment: must hold a secret-ish word somewhere.
pub(super) const NAME: &str = r"[A-Za-z0-9_.-]*(?i:pass|pwd|secret|token|key|cred|auth|sig|hmac|webhook|bearer|jwt|cookie|session|salt|private|license|contrase)[A-Za-z0-9_.\x{F1}-]*";
/// The secret words of [`NAME`]: one of them is in every name it matches.
pub(super) const NAME_WORDS: &str = r"(?i:pass|pwd|secret|token|key|cred|auth|sig|hmac|webhook|bearer|jwt|cookie|session|salt|private|license|contrase)";
/// The head of an assignment to a name (`name` matching `name`; `pre`, the word before; `q`, a
/// quote before the name; `sep`), up to where the value starts.
pub(super) fn assignment_head(name: &str) -> String {
    format!(
        r#"(?:(?P<pre>[A-Za-z][A-Za-z0-9_-]*)[ \t])?(?P<q>["'`])?(?P<name>{name})["'`]?(?:\[\]|\])?[ \t]*(?P<sep>=>|:=|===?|!==?|=|::?|->|[ \t]-[ \t]|[ \t](?:is|was|are)[ \t]|,|\()[ \t]*"#
    )
}
/// The head of a URL query parameter, up to where its value starts.
pub(super) const QUERY_HEAD: &str = r#"[?&;](?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,40})="#;

/// The regex that reads the groups of an assignment-head match ([`QUERY_HEAD`] needs none: its
/// name is all but the first and last byte): the rule's head with any
/// name allowed (the rule already required the secret word), anchored at both ends of the
/// match. Anchored, it takes the parse the rule's own regex took: the rule's regex prefers a
/// `pre` word and drops it only when the name then lacks a secret word, and a name without
/// `pre` cannot cover the same span as `pre`, a blank and a name (names hold no blanks).
pub(super) fn head_groups() -> Regex {
    let head = assignment_head("[A-Za-z0-9_.\\x{F1}-]+");
    Regex::new(&format!("^(?:{head})$")).expect("head groups pattern")
}
/// A value: double, single or back-quoted, or bare up to a delimiter ([`ValueSyntax::Any`] reads
/// the same by code).
pub(super) const VALUE: &str =
    r#"(?:"(?P<dq>[^"\n]*)"|'(?P<sq>[^'\n]*)'|`(?P<bq>[^`\n]*)`|(?P<bare>[^\s"'`,;()\[\]{}<>]+))"#;

/// The secret words of the near-word rule's [`WORD`]: one of them is in every word it matches.
pub(super) const WORD_WORDS: &str = r"(?i:pass|pwd|secret|token|key|cred|auth|bearer|sig)";

/// The contextual rules, in order (after the vendor formats: a vendor's kind names a line first).
pub(super) fn contextual() -> Vec<(&'static str, String, Check, Scope)> {
    vec![
        ("JSON Web Token", r"\b(?:eyJ|ewog)[A-Za-z0-9_-]{8,}={0,2}\.(?:eyJ|ewo)[A-Za-z0-9_-]{8,}={0,2}\.[A-Za-z0-9_-]{16,}".into(), Check::Jwt, Scope::Text),
        ("Authorization header", r"(?i)\b(?:proxy-)?authorization[\x22']?[ \t]*[:=][ \t]*[\x22'`]?[ \t]*(?:(?P<scheme>[A-Za-z][A-Za-z0-9_-]{1,30})[ \t]+)?(?P<v>[A-Za-z0-9._~+/=@:-]{8,300})".into(), Check::AuthHeader, Scope::LinesAnchor("(?i:authorization)")),
        ("Authorization header", r"(?i)\b(?:bearer|token)\s+([A-Za-z0-9._~+/-]{20,}=*)".into(), Check::Auth, Scope::Text),
        ("connection string with a password", r"\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|redis|rediss|amqps?|mssql|sqlserver|oracle|clickhouse|cockroachdb|nats|kafka|ldaps?|smtps?|ftps?|sftp|https?|git|ssh|jdbc:[a-z]+)://(?P<user>[^\s:/@'\x22]{1,64}):(?P<pass>[^\s'\x22]{1,300})@[A-Za-z0-9.\-\[\]]+".into(), Check::Connection, Scope::Text),
        ("credentials in a command line", r#"(?:^|\s)(?:-u|--user)(?:=|[ \t]+)(?P<v>"[^"\n]{0,200}"(?::"[^"\n]{0,200}"|:'[^'\n]{0,200}')?|'[^'\n]{0,200}'|[^\s"']{1,200}(?:'[^'\n]{0,200}'|"[^"\n]{0,200}")?)"#.into(), Check::UserPass, Scope::TextAnchor("(?:-u|--user)")),
        ("credentials in a command line", CMD_PASSWORD.into(), Check::CmdPassword, Scope::LinesAnchor(CMD_TOOLS)),
        ("credentials in a command line", r#"\bhtpasswd[ \t]+-[A-Za-z]*b[A-Za-z]*[ \t]+(?:-\S+[ \t]+)*[^\s-]\S*[ \t]+\S+[ \t]+(?P<v>'[^'\n]+'|"[^"\n]+"|[^\s'"]+)"#.into(), Check::CmdPassword, Scope::Text),
        ("credentials in a command line", r#"(?:^|\s)-U[ \t]+[^\s%'"]+%(?P<v>[^\s'"]+)"#.into(), Check::CmdPassword, Scope::TextAnchor("-U")),
        ("credentials in a command line", r#"\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n]*?\s-p(?P<pass>[^\s'"-][^\s'"]{5,})"#.into(), Check::Connection, Scope::Text),
        ("connection string with a password", r#"\bjdbc:oracle:[a-z0-9]+:(?P<user>[^\s/@:'"]{1,64})/(?P<pass>[^\s@'"]{1,128})@"#.into(), Check::Connection, Scope::Text),
        ("credentials in code", r#"(?i)\b(?:auth|basic_?auth|http_?auth|httpbasicauth|digestauth|credentials|login)[ \t]*(?:=[ \t]*\(?|\()[ \t]*["'](?P<user>[^"'\s]{1,80})["'][ \t]*,[ \t]*["'](?P<pass>[^"'\n]{4,200})["']"#.into(), Check::Connection, Scope::LinesAnchor("(?i:auth|credentials|login)")),
        (KIND_STRONG, assignment_head(NAME), Check::NamedHead(ValueSyntax::Any), Scope::LinesAnchor(NAME_WORDS)),
        (KIND_STRONG, r#"(?:"(?P<dq>[^"\n]{8,200})"|'(?P<sq>[^'\n]{8,200})')[ \t]*[!=]==?[ \t]*(?P<name>[A-Za-z_$][A-Za-z0-9_.$]{0,60})"#.into(), Check::Named, Scope::TextAnchor("(?:==|!=)")),
        (KIND_STRONG, format!(r#"(?P<name>{NAME})[ \t]+(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)');"#), Check::Named, Scope::LinesAnchor(r#"["'];"#)),
        (KIND_STRONG, r#"(?i)\b(?P<pre>[a-z0-9]+)[ \t](?P<name>key|token|secret|password)[ \t]+(?P<bare>[A-Za-z0-9_+/=-]{16,})"#.into(), Check::Named, Scope::LinesAnchor("(?i:key|token|secret|password)")),
        (KIND_STRONG, r#"<(?P<name>[A-Za-z_][\w.:-]{0,60})(?:\s[^<>\n]*)?>(?P<dq>[^<\n]{1,300})</"#.into(), Check::Named, Scope::Text),
        (KIND_STRONG, r#"\b(?:key|name)[ \t]*=[ \t]*"(?P<name>[^"\n]{1,80})"[ \t]+value[ \t]*=[ \t]*"(?P<dq>[^"\n]*)""#.into(), Check::Named, Scope::Text),
        (KIND_STRONG, QUERY_HEAD.into(), Check::NamedHead(ValueSyntax::Query), Scope::Text),
        (KIND_STRONG, r#"(?i)(?:^|[\s(])--?(?P<name>password|passwd|pass|token|api-key|apikey|secret|client-secret|auth-token|access-token)[= ]"#.to_owned() + VALUE, Check::Named, Scope::TextAnchor("(?i:pass|token|api-key|apikey|secret)")),
        (KIND_STRONG, r#"(?i)\b(?P<name>password|passwd|passphrase)[ \t]+(?P<bare>[^\s"']{8,})"#.into(), Check::Named, Scope::Text),
    ]
}
