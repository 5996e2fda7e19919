//! The inherited environment a child opencode must not see.
//!
//! opencode marks its own process tree with variables (its pid, its client, its server's
//! credentials, its workspace). A run, a `serve` or an `api` call started by the bridge is a
//! separate instance: inheriting them ties it to the instance the bridge itself runs under (an
//! inherited server password or run id makes opencode 1.x fail with "Session not found").

/// Variables removed from every child opencode's environment (runs, temporary servers, the
/// roster's server, `claude -p` runs, version probes). One list for every place that starts
/// opencode; why each is here:
///
/// | variable | what it is (opencode 1.18.33 unless said) | why it is dropped |
/// |---|---|---|
/// | `OPENCODE_SERVER_PASSWORD` | the Basic-auth password `opencode serve` and its clients use | another server's password: a child would protect itself with it or present it to the wrong server. A temporary server sets its own after removal. |
/// | `OPENCODE_SERVER_USERNAME` | the user name that goes with it | the same. |
/// | `OPENCODE_PID` | set by every opencode at start-up, for its children | names the parent instance, not the child. |
/// | `OPENCODE_RUN_ID` | a run's id (opencode 1.x before 1.18; not in 1.18.33) | an inherited run id made 1.x fail with "Session not found". |
/// | `OPENCODE_SESSION_ID` | the parent's session (earlier versions; not in 1.18.33) | the child has its own session. |
/// | `OPENCODE_WORKSPACE_ID` | set for workspace servers; a server with it routes requests into that workspace | the child would serve the parent's workspace. |
/// | `OPENCODE_CLIENT` | the front end (`acp`, the desktop app), used in the user agent | the child is not that client. |
/// | `OPENCODE_ROUTE` | the TUI's initial route (JSON) | would open the child on the parent's screen. |
/// | `OPENCODE_CALLER` | who called the parent (earlier versions; not in 1.18.33) | the caller is the bridge, not the parent's. |
/// | `OPENCODE_EDITOR_SSE_PORT` | the editor integration's event port (as `CLAUDE_CODE_SSE_PORT`) | a child would talk to the parent's editor. |
/// | `OPENCODE` | `"1"`, set by every opencode at start-up for its children | "running inside opencode": the child is not. |
///
/// Entries a version no longer sets cost nothing and keep older versions right.
///
/// The rename and roster servers of `opencode-client` used to drop only `OPENCODE_PID` and
/// `OPENCODE_RUN_ID`; they are opencode instances like a run, so they drop the same list.
pub const DROPPED_ENV: &[&str] = &[
    "OPENCODE_SERVER_PASSWORD",
    "OPENCODE_SERVER_USERNAME",
    "OPENCODE_PID",
    "OPENCODE_RUN_ID",
    "OPENCODE_SESSION_ID",
    "OPENCODE_WORKSPACE_ID",
    "OPENCODE_CLIENT",
    "OPENCODE_ROUTE",
    "OPENCODE_CALLER",
    "OPENCODE_EDITOR_SSE_PORT",
    "OPENCODE",
];

/// Inherited variables every child keeps by name: how to find programs and the home directory,
/// who the user is, the locale and terminal, proxies and CA bundles, the XDG configuration
/// directories (the data, state and cache homes are the run's world's), and the variables that
/// locate the user's toolchains. Everything else of the bridge's environment is dropped unless
/// the run's provider needs it ([`child_env`]) or the user names it
/// (`OPENCODE_BRIDGE_PASS_ENV`): cloud and registry credentials, tokens, agent sockets
/// (`SSH_AUTH_SOCK`, `GPG_AGENT_INFO`), the user's D-Bus and runtime directory
/// (`DBUS_SESSION_BUS_ADDRESS`, `XDG_RUNTIME_DIR`), `DOCKER_HOST`, `NODE_OPTIONS`, `LD_PRELOAD`.
pub const KEPT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "FORCE_COLOR",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TZDIR",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "npm_config_registry",
    "NPM_CONFIG_REGISTRY",
    "XDG_CONFIG_HOME",
    "XDG_CONFIG_DIRS",
    "XDG_DATA_DIRS",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOROOT",
    "JAVA_HOME",
    "NVM_DIR",
    "NVM_BIN",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
    "BUN_INSTALL",
    "DENO_DIR",
    "VOLTA_HOME",
    "ASDF_DIR",
    "ASDF_DATA_DIR",
    "SDKMAN_DIR",
    "PNPM_HOME",
];

/// Name prefixes every child keeps: the locale (`LC_*`) and opencode's own settings
/// (`OPENCODE_*`, but never [`DROPPED_ENV`] nor the bridge's own `OPENCODE_BRIDGE_*`).
pub const KEPT_PREFIXES: &[&str] = &["LC_", "OPENCODE_"];

/// Name prefixes a `claude -p` run keeps besides [`KEPT_ENV`]: Claude Code's own settings and
/// its provider's (`ANTHROPIC_*`, `CLAUDE_CODE_*`, `DISABLE_*` switches).
pub const CLAUDE_KEPT_PREFIXES: &[&str] = &["ANTHROPIC_", "CLAUDE_CODE_", "DISABLE_"];

/// Whether `name` matches one of `patterns`: a name, or a prefix ending in `*` (`FAKE_*`).
pub fn matches_any(name: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => !prefix.is_empty() && name.starts_with(prefix),
        None => p == name,
    })
}

/// Whether the inherited variable `name` reaches a child: never one of [`DROPPED_ENV`] or the
/// bridge's own (`OPENCODE_BRIDGE_*`); else [`KEPT_ENV`], [`KEPT_PREFIXES`], `extra_prefixes`
/// (a runner's own, such as [`CLAUDE_KEPT_PREFIXES`]) and `pass` (provider keys and what the
/// user named, exact names or `PREFIX*`).
pub fn kept(name: &str, extra_prefixes: &[&str], pass: &[String]) -> bool {
    if DROPPED_ENV.contains(&name) || name.starts_with("OPENCODE_BRIDGE_") {
        return false;
    }
    KEPT_ENV.contains(&name)
        || KEPT_PREFIXES
            .iter()
            .chain(extra_prefixes)
            .any(|p| name.starts_with(p))
        || matches_any(name, pass)
}

/// The names of `inherited` variables that do not reach a child (see [`kept`]), sorted: what a
/// spawn removes from the environment it inherits, and what `doctor` lists as dropped.
pub fn dropped_names<I>(inherited: I, extra_prefixes: &[&str], pass: &[String]) -> Vec<String>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut out: Vec<String> = inherited
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| !kept(k, extra_prefixes, pass))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The variables a provider's API key is read from, for a model id's provider part
/// (`anthropic/claude-…` → `ANTHROPIC_API_KEY`): the conventional `<PROVIDER>_API_KEY` and the
/// other names opencode's bundled providers read. A run gets these, and only these, of the
/// user's provider keys.
pub fn provider_key_names(provider: &str) -> Vec<String> {
    let upper: String = provider
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    let mut names = vec![format!("{upper}_API_KEY")];
    let more: &[&str] = match provider {
        "google" | "google-vertex" => &[
            "GOOGLE_GENERATIVE_AI_API_KEY",
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GOOGLE_CLOUD_PROJECT",
            "GOOGLE_VERTEX_PROJECT",
            "GOOGLE_VERTEX_LOCATION",
        ],
        "amazon-bedrock" => &[
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_REGION",
            "AWS_PROFILE",
            "AWS_BEARER_TOKEN_BEDROCK",
        ],
        "azure" => &["AZURE_RESOURCE_NAME", "AZURE_API_KEY"],
        "github-copilot" | "github-models" => &["GITHUB_TOKEN"],
        "anthropic" => &["ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"],
        "openai" => &["OPENAI_BASE_URL", "OPENAI_ORG_ID"],
        "cloudflare-workers-ai" | "cloudflare-ai-gateway" => {
            &["CLOUDFLARE_ACCOUNT_ID", "CLOUDFLARE_API_TOKEN"]
        }
        "vercel" => &["AI_GATEWAY_API_KEY"],
        _ => &[],
    };
    names.extend(more.iter().map(|s| s.to_string()));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_sockets_and_the_bridges_own_variables_do_not_reach_a_child() {
        let pass = vec!["MY_TOOL_HOME".to_owned(), "FAKE_*".to_owned()];
        for gone in [
            "SSH_AUTH_SOCK",
            "DBUS_SESSION_BUS_ADDRESS",
            "XDG_RUNTIME_DIR",
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "NPM_TOKEN",
            "NODE_OPTIONS",
            "LD_PRELOAD",
            "DOCKER_HOST",
            "OPENCODE_SERVER_PASSWORD",
            "OPENCODE_BRIDGE_STATE_DIR",
            "ANTHROPIC_API_KEY",
            "XDG_DATA_HOME",
        ] {
            assert!(!kept(gone, &[], &pass), "{gone} must be dropped");
        }
        for stays in [
            "PATH",
            "HOME",
            "LC_ALL",
            "HTTPS_PROXY",
            "OPENCODE_CONFIG_DIR",
            "MY_TOOL_HOME",
            "FAKE_OPENCODE_SCENARIO",
        ] {
            assert!(kept(stays, &[], &pass), "{stays} must be kept");
        }
        assert!(kept("ANTHROPIC_API_KEY", CLAUDE_KEPT_PREFIXES, &[]));
        assert!(
            !matches_any("X", &["*".to_owned()]),
            "a bare * names nothing"
        );
    }

    #[test]
    fn a_provider_gets_its_own_key_names_only() {
        let fk = provider_key_names("fk");
        assert_eq!(fk, vec!["FK_API_KEY".to_owned()]);
        let or = provider_key_names("openrouter");
        assert!(or.contains(&"OPENROUTER_API_KEY".to_owned()));
        assert!(!or.iter().any(|n| n.starts_with("AWS_")));
        assert!(provider_key_names("amazon-bedrock").contains(&"AWS_ACCESS_KEY_ID".to_owned()));
        assert_eq!(provider_key_names("my.prov-1")[0], "MY_PROV_1_API_KEY");
    }
}
