//! The permission engine (SPEC D1): decides whether an agent may perform an action.
//!
//! Pure code: no I/O, no clock, no async. The control plane calls it before every tool
//! execution and when it builds the tool list for a model call.
//!
//! - **Actions** are strings `tool:<name>:<detail>` ([`tool_action`]): `tool:view:README.md`,
//!   `tool:self_edit:permissions:open`. A bash command line becomes one action per simple
//!   command ([`bash_actions`]), so `git status; rm -rf /` is checked as two actions and
//!   the second cannot ride on the first.
//! - **Profiles** are ordered allow and ask lists of regexes ([`ProfileSpec`]), decided
//!   allow → ask → implicit deny. Every pattern is anchored: it must match the whole action
//!   string. Each list is compiled into one [`regex::RegexSet`], so a decision is one pass
//!   per list whatever the number of rules.
//! - **Examples**: a rule may carry actions it must match and actions it must not; they
//!   are checked when the profile is compiled, and a profile whose examples fail does not
//!   load ([`ProfileError`]).
//! - **Several actions** (the parts of one bash command) pass only together: the most
//!   restrictive decision wins ([`Profile::decide_all`]).
//! - **Presets** `open`, `standard` and `locked` ([`PRESETS`], `presets.rs`) are ordinary
//!   profiles with examples.
//! - [`Profile::explain`] names the rule that decided, and [`Profile::may_use_tool`] tells
//!   which tools can be left out of the model's tool list because they would always be
//!   denied.
//! - The policy around the engine is here too and depends on nothing but it: how a
//!   setting is stored and compiled once (`profiles`), and who may grant what (`grants`).
//!   The gate, the agent service and the front ends use them; this module uses none of them.

mod action;
mod bash;
mod engine;
pub mod grants;
mod presets;
mod profile;
pub mod profiles;
mod reach;

#[cfg(test)]
mod bash_tests;
#[cfg(test)]
mod engine_tests;

pub use action::{action_tool, bash_actions, tool_action};
pub use engine::{Decision, Explanation, Profile};
pub use profile::{PermissionsSetting, ProfileError, ProfileSpec, RuleSpec};

/// The names of the built-in profiles, for [`Profile::preset`].
pub const PRESETS: &[&str] = &["open", "standard", "locked"];
