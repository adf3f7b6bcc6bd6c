//! Compiled profiles: anchored matching, decisions and explanations.
//!
//! Every pattern is compiled as `^(?:pattern)$`, so it must match the whole action:
//! `tool:bash:git status` does not allow `tool:bash:git status; rm -rf /`. A pattern is
//! first compiled on its own, so one that is not a complete regex by itself (`a)|(.*`) is
//! refused instead of closing the anchoring group. Each list is one `RegexSet`, so a
//! decision is one pass per list whatever the number of rules (115–145 ns with 50 rules;
//! `cargo bench -p chorus-control-plane --bench permissions`). A profile that does not
//! load names the list, the index, the pattern and the offset.

use std::fmt;
use std::sync::{Arc, OnceLock};

use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};

use super::action::action_tool;
use super::presets;
use super::profile::{
    PermissionsSetting, ProfileError, ProfileSpec, RuleSpec, describe_regex_error,
};
use super::reach::{Reach, reach};

/// What may happen to one action. Ordered from least to most restrictive, so the most
/// restrictive of several is their maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which rule decided an action and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub action: String,
    pub decision: Decision,
    /// `"allow"` or `"ask"`; `None` for an implicit deny.
    pub list: Option<&'static str>,
    /// 0-based index of the deciding rule in its list.
    pub rule_index: Option<usize>,
    /// The deciding rule's whole pattern, as written.
    pub pattern: Option<String>,
    /// The deciding rule in words, when it has them (`RuleSpec::about`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
    /// One sentence for a person: the rule's words, else its pattern.
    pub reason: String,
}

/// A compiled permission profile. Cloning shares the compiled form.
#[derive(Clone)]
pub struct Profile {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    spec: ProfileSpec,
    allow: RuleList,
    ask: RuleList,
}

/// One list compiled into a set, which decides in one pass and also says which rules
/// matched. Each rule is compiled on its own too, but only to validate it and its examples.
struct RuleList {
    name: &'static str,
    set: RegexSet,
    rules: Vec<CompiledRule>,
}

struct CompiledRule {
    pattern: String,
    about: Option<String>,
    reach: Reach,
}

impl CompiledRule {
    /// How a sentence names the rule: its words, else its pattern as written.
    fn shown(&self) -> String {
        match &self.about {
            Some(about) => format!("({about})"),
            None => format!("`{}`", self.pattern),
        }
    }
}

impl fmt::Debug for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profile")
            .field("name", &self.inner.name)
            .field("allow", &self.inner.allow.rules.len())
            .field("ask", &self.inner.ask.rules.len())
            .finish()
    }
}

/// The regex a pattern is matched with: the whole action must match.
fn anchored(pattern: &str) -> String {
    format!("^(?:{pattern})$")
}

impl RuleList {
    fn compile(name: &'static str, rules: &[RuleSpec]) -> Result<RuleList, ProfileError> {
        let mut anchored_patterns = Vec::with_capacity(rules.len());
        let mut compiled = Vec::with_capacity(rules.len());
        for (index, rule) in rules.iter().enumerate() {
            let invalid = |position, message| ProfileError::InvalidPattern {
                list: name,
                index,
                pattern: rule.pattern.clone(),
                position,
                message,
            };
            // The pattern is compiled on its own first: error offsets then refer to what
            // its author wrote, and a pattern that is not a whole regex by itself (such as
            // `a)|(b`) cannot close the anchoring group and escape it.
            if let Err(e) = Regex::new(&rule.pattern) {
                let (position, message) = describe_regex_error(&rule.pattern, &e);
                return Err(invalid(position, message));
            }
            let full = anchored(&rule.pattern);
            // Only an `(?x)` comment running to the end can break this; it fails closed.
            let regex = Regex::new(&full).map_err(|e| {
                invalid(
                    None,
                    format!("cannot be anchored ({})", describe_regex_error(&full, &e).1),
                )
            })?;
            let example_error = |example: &String, should_match: bool| {
                let (list, index, pattern, example) =
                    (name, index, rule.pattern.clone(), example.clone());
                if should_match {
                    ProfileError::ExampleNotMatched {
                        list,
                        index,
                        pattern,
                        example,
                    }
                } else {
                    ProfileError::ExampleMatched {
                        list,
                        index,
                        pattern,
                        example,
                    }
                }
            };
            if let Some(ex) = rule.matches.iter().find(|ex| !regex.is_match(ex)) {
                return Err(example_error(ex, true));
            }
            if let Some(ex) = rule.rejects.iter().find(|ex| regex.is_match(ex)) {
                return Err(example_error(ex, false));
            }
            compiled.push(CompiledRule {
                pattern: rule.pattern.clone(),
                about: rule.about.clone(),
                reach: reach(&rule.pattern),
            });
            anchored_patterns.push(full);
        }
        let set = RegexSet::new(&anchored_patterns).map_err(|e| ProfileError::ListTooLarge {
            list: name,
            message: e.to_string(),
        })?;
        Ok(RuleList {
            name,
            set,
            rules: compiled,
        })
    }

    fn first_match(&self, action: &str) -> Option<usize> {
        // `RegexSet::matches` looks for every matching rule, which costs more than
        // `is_match`; most lists do not match at all, so ask the cheap question first.
        if !self.set.is_match(action) {
            return None;
        }
        self.set.matches(action).iter().next()
    }
}

impl Profile {
    /// A built-in profile: `open`, `standard` or `locked` (see [`super::PRESETS`]).
    /// Compiled once per process; later calls share it.
    pub fn preset(name: &str) -> Option<Profile> {
        static OPEN: OnceLock<Option<Profile>> = OnceLock::new();
        static STANDARD: OnceLock<Option<Profile>> = OnceLock::new();
        static LOCKED: OnceLock<Option<Profile>> = OnceLock::new();
        let cell = match name {
            "open" => &OPEN,
            "standard" => &STANDARD,
            "locked" => &LOCKED,
            _ => return None,
        };
        // Presets are compiled with their examples by a unit test, so this cannot fail
        // in a shipped build; if it ever did, the preset is unavailable, not permissive.
        cell.get_or_init(|| presets::spec(name).and_then(|spec| Profile::compile(name, &spec).ok()))
            .clone()
    }

    /// The profile an agent's `permissions` setting names; a custom one is called
    /// `custom`.
    pub fn from_setting(setting: &PermissionsSetting) -> Result<Profile, ProfileError> {
        match setting {
            PermissionsSetting::Preset(name) => Profile::preset(name)
                .ok_or_else(|| ProfileError::UnknownPreset { name: name.clone() }),
            PermissionsSetting::Custom(spec) => Profile::compile("custom", spec),
        }
    }

    /// Compiles and validates a profile: every pattern must be a valid regex and every
    /// rule's examples must come out as stated.
    pub fn compile(name: &str, spec: &ProfileSpec) -> Result<Profile, ProfileError> {
        Ok(Profile {
            inner: Arc::new(Inner {
                name: name.to_string(),
                spec: spec.clone(),
                allow: RuleList::compile("allow", &spec.allow)?,
                ask: RuleList::compile("ask", &spec.ask)?,
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The specification this profile was compiled from.
    pub fn spec(&self) -> &ProfileSpec {
        &self.inner.spec
    }

    /// Allow if any allow rule matches the whole action, else ask if any ask rule does,
    /// else deny.
    pub fn decide(&self, action: &str) -> Decision {
        if self.inner.allow.set.is_match(action) {
            Decision::Allow
        } else if self.inner.ask.set.is_match(action) {
            Decision::Ask
        } else {
            Decision::Deny
        }
    }

    /// The decision for `action`, with the first rule (in list order) that decided it.
    pub fn explain(&self, action: &str) -> Explanation {
        for list in [&self.inner.allow, &self.inner.ask] {
            let Some(index) = list.first_match(action) else {
                continue;
            };
            let rule = &list.rules[index];
            let shown = rule.shown();
            let (decision, reason) = if list.name == "allow" {
                (
                    Decision::Allow,
                    format!("allowed by allow[{index}] {shown}"),
                )
            } else {
                (
                    Decision::Ask,
                    format!("no allow rule matches; ask[{index}] {shown} requires approval"),
                )
            };
            return Explanation {
                action: action.to_string(),
                decision,
                list: Some(list.name),
                rule_index: Some(index),
                pattern: Some(rule.pattern.clone()),
                about: rule.about.clone(),
                reason,
            };
        }
        Explanation {
            action: action.to_string(),
            decision: Decision::Deny,
            list: None,
            rule_index: None,
            pattern: None,
            about: None,
            reason: self.deny_reason(action),
        }
    }

    fn deny_reason(&self, action: &str) -> String {
        let name = self.name();
        match action_tool(action) {
            None => format!(
                "denied: `{action}` is not an action string of the form tool:<name>:<detail>, \
                 and profile `{name}` has no rule that matches it"
            ),
            Some(tool) if !self.may_use_tool(tool) => format!(
                "denied: profile `{name}` has no allow or ask rule for the tool `{tool}` at all"
            ),
            Some(_) => format!(
                "denied: no allow or ask rule of profile `{name}` matches the whole of `{action}`, \
                 and what no rule matches is denied"
            ),
        }
    }

    /// The decision for several actions that must all pass (the parts of one bash
    /// command): the most restrictive wins. No actions at all is a deny, so a caller that
    /// built nothing to check cannot get an allow.
    pub fn decide_all(&self, actions: &[String]) -> (Decision, Vec<Explanation>) {
        let explanations: Vec<Explanation> = actions.iter().map(|a| self.explain(a)).collect();
        let decision = explanations
            .iter()
            .map(|e| e.decision)
            .max()
            .unwrap_or(Decision::Deny);
        (decision, explanations)
    }

    /// Whether some rule of the allow list (`ask`: of the ask list) may match an
    /// action of `tool`; errs on the side of true like [`Profile::may_use_tool`].
    pub fn list_reaches_tool(&self, ask: bool, tool: &str) -> bool {
        let list = if ask {
            &self.inner.ask
        } else {
            &self.inner.allow
        };
        list.rules.iter().any(|rule| rule.reach.reaches_tool(tool))
    }

    /// What MCP tools (`mcp__<server>__<tool>`) the allow and ask rules can ever
    /// match, for the worker, which learns their names only from the servers: the
    /// prefixes that could start such an action (`tool:mcp__…`, or shorter open ones),
    /// or `Any` when a rule's start cannot be read.
    pub fn mcp_reach(&self) -> chorus_proto::mcp::McpReach {
        let mut kept = Vec::new();
        for rule in [&self.inner.allow, &self.inner.ask]
            .iter()
            .flat_map(|list| list.rules.iter())
        {
            let Some(prefixes) = rule.reach.prefixes() else {
                return chorus_proto::mcp::McpReach::Any;
            };
            kept.extend(prefixes.into_iter().filter(|(text, open)| {
                text.starts_with("tool:mcp__") || (*open && "tool:mcp__".starts_with(text.as_str()))
            }));
        }
        chorus_proto::mcp::McpReach::Prefixes(kept)
    }

    /// False when no allow or ask rule can ever match an action of `tool`, so the tool can
    /// be left out of the tool list sent to the model. Errs on the side of true: a rule
    /// whose start cannot be read (see `reach`) counts as reaching every tool.
    pub fn may_use_tool(&self, tool: &str) -> bool {
        [&self.inner.allow, &self.inner.ask]
            .iter()
            .flat_map(|list| list.rules.iter())
            .any(|rule| rule.reach.reaches_tool(tool))
    }
}
