//! The thirteen tools: names, descriptions, input schemas, annotations, and the validation that turns
//! a `tools/call` argument object into typed arguments before anything runs.
//!
//! The schemas are written by hand, on purpose: optional parameters are plain optional
//! properties (never `["type","null"]`), every object rejects unknown properties, and the
//! validator accepts exactly what the schema describes (a test checks both agree).
//!
//! - `limits`: tool names, closed sets, defaults and the longest value of every argument;
//! - `schema`: the definitions `tools/list` returns and the shapes of a model argument;
//! - `args`: one call's argument object read field by field against its schema;
//! - `call`: the typed [`Call`] each tool's arguments become (`parse_call`).

mod args;
mod call;
mod limits;
pub(crate) mod schema;

pub use call::{Call, OutputArgs, SessionsArgs, StartArgs, is_tool, parse_call};
pub use limits::*;
pub use schema::{ToolDef, definitions};

#[cfg(test)]
mod tests;
