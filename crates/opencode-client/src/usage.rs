//! What a session used: the agent and model of each assistant message and the tool calls, as
//! opencode recorded them (store, server or v2 API: whichever [`SessionSource`] is given).
//!
//! The bridge's post-run audit compares this with what a task asked for; only messages created
//! since a given moment count, so the earlier turns of a session a follow-up continued are
//! left out. Reading only: nothing is written anywhere.

use crate::error::ClientError;
use crate::model::{Part, Role, ToolStatus};
use crate::source::{ScanContext, SessionSource};

/// One assistant message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssistantTurn {
    /// Message id.
    pub id: String,
    /// `agent` of the message (`mode` when it has none).
    pub agent: Option<String>,
    /// `providerID/modelID`.
    pub model: Option<String>,
    /// When it was created (epoch ms).
    pub created_ms: i64,
}

/// One tool call of an assistant message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsedTool {
    /// Tool name (`read`, `write`, `bash`, `task`, ...).
    pub tool: String,
    /// Its state.
    pub status: ToolStatus,
    /// The tool input as compact JSON.
    pub input: String,
}

/// What a session used since a moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionUsage {
    /// Assistant messages created at or after the moment, oldest first.
    pub turns: Vec<AssistantTurn>,
    /// Their tool calls, oldest first.
    pub tool_calls: Vec<UsedTool>,
}

/// The assistant messages of session `id` created at or after `since_ms` (epoch ms), with
/// their agent, model and tool calls.
pub fn session_usage(
    source: &dyn SessionSource,
    id: &str,
    since_ms: i64,
    ctx: &ScanContext,
) -> Result<SessionUsage, ClientError> {
    let transcript = source.transcript(id, None, ctx)?;
    let mut usage = SessionUsage::default();
    for m in transcript.messages {
        if m.role != Role::Assistant || m.created_ms < since_ms {
            continue;
        }
        for p in &m.parts {
            if let Part::Tool {
                tool,
                status,
                input,
                ..
            } = p
            {
                usage.tool_calls.push(UsedTool {
                    tool: tool.clone(),
                    status: *status,
                    input: input.clone(),
                });
            }
        }
        usage.turns.push(AssistantTurn {
            id: m.id,
            agent: m.agent,
            model: m.model,
            created_ms: m.created_ms,
        });
    }
    Ok(usage)
}

/// One assistant message's tokens and cost, as opencode recorded them.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageCost {
    /// Message id.
    pub id: String,
    /// `providerID/modelID`.
    pub model: Option<String>,
    /// Its tokens (`input` excludes cache reads).
    pub tokens: crate::model::Tokens,
    /// The cost opencode recorded (0 for a model without a price in its config or cache).
    pub cost: f64,
}

/// The tokens and cost of every assistant message of session `id` created at or after
/// `since_ms`, oldest first: what a task's usage is filled from when it ran as a session (the
/// serve engine), and what a run's `step_finish` events add up to.
pub fn session_costs(
    source: &dyn SessionSource,
    id: &str,
    since_ms: i64,
    ctx: &ScanContext,
) -> Result<Vec<MessageCost>, ClientError> {
    let transcript = source.transcript(id, None, ctx)?;
    Ok(transcript
        .messages
        .into_iter()
        .filter(|m| m.role == Role::Assistant && m.created_ms >= since_ms)
        .map(|m| MessageCost {
            id: m.id,
            model: m.model,
            tokens: m.tokens,
            cost: m.cost,
        })
        .collect())
}
