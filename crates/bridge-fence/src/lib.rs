//! The kernel fence around every delegated run, in one place.
//!
//! **Invariant: every process the bridge starts for an agent (a run, the roster's temporary
//! `opencode serve`) is confined before exec, or not started unless the caller allowed that.**
//! A [`Plan`] lists what a run's process tree may touch: paths it may read (and execute), paths
//! it may write, the few devices it may open. [`Fence::prepare`] turns a plan into a Linux
//! Landlock ruleset in the bridge (opening the paths, negotiating the kernel's ABI with the
//! `landlock` crate), and [`Fence::apply_to`] makes the child restrict itself with it between
//! fork and exec: everything the run starts (plugins, MCP servers, custom tools, shells,
//! subagents) inherits the restriction, which cannot be lifted, and the bridge itself stays
//! unconfined. Signals to processes outside the run's domain are denied too (ABI 6 and later).
//!
//! What a run needs is decided by [`plan::for_run`] from the run's world ([`RunWorld`]): the
//! system directories, the runner's binary, the runner's own data, state, cache and temp
//! directories, the project (read-only agents: read; editing agents: read and write), and
//! nothing else of the home directory.
//!
//! [`Sandbox`] is the user's choice (`OPENCODE_BRIDGE_SANDBOX`): `auto` confines where the
//! kernel can and says why not elsewhere, `required` refuses to start a run it cannot confine,
//! `off` starts runs unconfined. [`Confinement`] is what a run got, shown in every status.
//!
//! Every path a plan names is resolved by the fence itself (`resolve`): a symlink where any run
//! may write, or one of another user, refuses the run, and so does any reason the ruleset
//! cannot be built other than a kernel without Landlock, even under `auto`.
//!
//! The one module of this crate with `unsafe` code is [`apply`]: two system calls in the forked
//! child.

#![deny(missing_docs)]

mod apply;
mod fence;
pub mod layers;
pub mod plan;
pub mod protected;
mod resolve;
mod seccomp;
pub mod world;

pub use fence::*;
pub use layers::{Mechanisms, Namespaces, Protection, mechanisms};
pub use plan::{OwnWorktree, Plan, Project, Rights, RunKind, RunWorld, for_run, project_of};
pub use world::{UserDirs, World};
