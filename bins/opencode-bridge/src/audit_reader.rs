//! The post-run audit's view of a session: what opencode recorded (store, server or v2 API,
//! chosen as for every other session read) of the agent, model and tool calls of a task's runs.
//! Reading only; the comparison itself is `run_supervisor::audit`.

use opencode_client::backend::{ClientConfig, choose_backend_with};
use opencode_client::{ClientError, Liveness, SessionSource};
use run_supervisor::ToolCall;
use run_supervisor::audit::{SessionReader, Turn, Used};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Reads sessions through the bridge's client configuration.
#[derive(Debug)]
pub struct ClientSessionReader {
    client: ClientConfig,
}

impl ClientSessionReader {
    pub fn new(client: ClientConfig) -> ClientSessionReader {
        ClientSessionReader { client }
    }
}

fn open_store(path: &Path) -> Result<Box<dyn SessionSource>, ClientError> {
    Ok(Box::new(opencode_client::StoreSource::open(path)?))
}

/// A short title for a recorded tool call: the file or command it worked on, when its input
/// names one.
fn title_of(input: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(input).ok()?;
    ["filePath", "path", "command", "description"]
        .iter()
        .find_map(|k| v.get(k).and_then(|x| x.as_str()))
        .map(|s| s.chars().take(120).collect())
}

impl SessionReader for ClientSessionReader {
    fn read(&self, session_id: &str, since: SystemTime) -> Result<Used, String> {
        let unreadable = |e: ClientError| format!("session {session_id} cannot be read: {e}");
        let (source, _why) = choose_backend_with(&self.client, &open_store).map_err(unreadable)?;
        let ctx = self.client.scan_context(Liveness::default());
        let since_ms = since
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let usage =
            opencode_client::usage::session_usage(source.as_ref(), session_id, since_ms, &ctx)
                .map_err(unreadable)?;
        Ok(Used {
            turns: usage
                .turns
                .into_iter()
                .map(|t| Turn {
                    agent: t.agent,
                    model: t.model,
                })
                .collect(),
            tool_calls: usage
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    title: title_of(&c.input),
                    tool: c.tool,
                    status: c.status.as_str().to_owned(),
                    error: None,
                    ..Default::default()
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_call_is_titled_by_its_file_or_command() {
        assert_eq!(
            title_of(r#"{"filePath":"/p/a.txt","content":"x"}"#).as_deref(),
            Some("/p/a.txt")
        );
        assert_eq!(
            title_of(r#"{"command":"echo hi","description":"Say hi"}"#).as_deref(),
            Some("echo hi")
        );
        assert_eq!(title_of("{}"), None);
        assert_eq!(title_of("not json"), None);
    }
}
