//! opencode-bridge's config file: one TOML file, read once at start, every section typed and
//! checked here so that a mistake is one line naming the file, the place and what to write.
//!
//! The file is the one [`bridge_env::CONFIG`] names (it must then exist), else
//! `$XDG_CONFIG_HOME/opencode-bridge/config.toml` (`~/.config/opencode-bridge/config.toml`),
//! which may be missing: no file is an empty config. Environment variables keep doing what they
//! do; the file holds what a variable cannot say well (a list of servers, per-project values).
//!
//! Secrets are never in the file: a server names the variable that holds its password
//! ([`Server::password_env`]).
//!
//! ```
//! let cfg = bridge_config::Config::parse(r#"
//! [[server]]
//! name = "devbox"
//! url = "http://10.1.2.3:4096"
//! password_env = "DEVBOX_OPENCODE_PASSWORD"
//! root = "/srv/work"
//! max_parallel = 8
//! "#, "config.toml".as_ref()).unwrap();
//! assert_eq!(cfg.servers[0].name, "devbox");
//! assert_eq!(cfg.servers[0].username, "opencode");
//! ```

mod config;

pub use config::*;
