//! Profile specifications as users write them (JSON in `agent.json`, the API and
//! `chorus.toml`), and the errors a specification can have.

use std::fmt;

use serde::de::{self, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::PRESETS;

/// One rule: a regex plus optional examples, checked when the profile loads.
///
/// Serialized as a bare string when it has no examples, otherwise as
/// `{"pattern": "...", "matches": [...], "rejects": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSpec {
    /// A regex that must match the whole action string (it is anchored when compiled).
    pub pattern: String,
    /// Action strings this rule must match.
    pub matches: Vec<String>,
    /// Action strings this rule must not match.
    pub rejects: Vec<String>,
    /// What the rule accepts, in words: explanations show it instead of a pattern too
    /// long to read (the presets' are built from pieces and run to a thousand characters).
    pub about: Option<String>,
}

impl RuleSpec {
    pub fn new(pattern: impl Into<String>) -> Self {
        RuleSpec {
            pattern: pattern.into(),
            ..RuleSpec::default()
        }
    }

    /// A rule with examples it must match and examples it must not.
    pub fn with_examples(pattern: impl Into<String>, matches: &[&str], rejects: &[&str]) -> Self {
        RuleSpec {
            pattern: pattern.into(),
            matches: matches
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            rejects: rejects
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            about: None,
        }
    }

    /// The rule described in words (the `about` field).
    pub fn about(mut self, about: &str) -> Self {
        self.about = Some(about.to_string());
        self
    }
}

impl From<&str> for RuleSpec {
    fn from(pattern: &str) -> Self {
        RuleSpec::new(pattern)
    }
}

impl Serialize for RuleSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.matches.is_empty() && self.rejects.is_empty() && self.about.is_none() {
            return serializer.serialize_str(&self.pattern);
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("pattern", &self.pattern)?;
        map.serialize_entry("matches", &self.matches)?;
        map.serialize_entry("rejects", &self.rejects)?;
        if let Some(about) = &self.about {
            map.serialize_entry("about", about)?;
        }
        map.end()
    }
}

/// The object form of a rule; unknown fields are refused so a misspelt `"match"` is an
/// error rather than an example silently never checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpecObject {
    pattern: String,
    #[serde(default)]
    matches: Vec<String>,
    #[serde(default)]
    rejects: Vec<String>,
    #[serde(default)]
    about: Option<String>,
}

impl<'de> Deserialize<'de> for RuleSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RuleVisitor;
        impl<'de> Visitor<'de> for RuleVisitor {
            type Value = RuleSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a regex string or {\"pattern\", \"matches\", \"rejects\", \"about\"}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RuleSpec, E> {
                Ok(RuleSpec::new(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RuleSpec, A::Error> {
                let o = RuleSpecObject::deserialize(MapAccessDeserializer::new(map))?;
                Ok(RuleSpec {
                    pattern: o.pattern,
                    matches: o.matches,
                    rejects: o.rejects,
                    about: o.about,
                })
            }
        }
        deserializer.deserialize_any(RuleVisitor)
    }
}

/// A permission profile as written: ordered allow and ask rules. Whatever no rule
/// matches is denied, so there is no deny list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    #[serde(default)]
    pub allow: Vec<RuleSpec>,
    #[serde(default)]
    pub ask: Vec<RuleSpec>,
}

/// What an agent's `permissions` setting holds: a preset name or a custom profile.
///
/// Serialized untagged: `"standard"` or `{"allow": [...], "ask": [...]}`. Deserialization
/// is written by hand (not `#[serde(untagged)]`) so that an error inside a custom profile
/// (an unknown field, a wrong type) is reported as such instead of "did not match any
/// variant".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionsSetting {
    Preset(String),
    Custom(ProfileSpec),
}

impl Serialize for PermissionsSetting {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            PermissionsSetting::Preset(name) => serializer.serialize_str(name),
            PermissionsSetting::Custom(spec) => spec.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for PermissionsSetting {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SettingVisitor;
        impl<'de> Visitor<'de> for SettingVisitor {
            type Value = PermissionsSetting;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a preset name ({}) or a profile {{\"allow\": [...], \"ask\": [...]}}",
                    PRESETS.join(", ")
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PermissionsSetting, E> {
                Ok(PermissionsSetting::Preset(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PermissionsSetting, A::Error> {
                ProfileSpec::deserialize(MapAccessDeserializer::new(map))
                    .map(PermissionsSetting::Custom)
            }
        }
        deserializer.deserialize_any(SettingVisitor)
    }
}

/// Why a profile could not be loaded, phrased for the person who wrote it. Rules are
/// named `allow[2]`: the list and the 0-based index into it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("{list}[{index}]: `{pattern}` is not a valid regex{}: {message}", at_offset(*.position))]
    InvalidPattern {
        list: &'static str,
        index: usize,
        pattern: String,
        /// 0-based character offset into the pattern, when the regex crate gives one.
        position: Option<usize>,
        message: String,
    },
    #[error(
        "{list}[{index}]: `{pattern}` should match its example `{example}` but does not \
         (a pattern must match the whole action string)"
    )]
    ExampleNotMatched {
        list: &'static str,
        index: usize,
        pattern: String,
        example: String,
    },
    #[error("{list}[{index}]: `{pattern}` should not match its example `{example}` but does")]
    ExampleMatched {
        list: &'static str,
        index: usize,
        pattern: String,
        example: String,
    },
    #[error("the {list} list cannot be compiled: {message}")]
    ListTooLarge { list: &'static str, message: String },
    #[error("unknown permission preset `{name}`; known presets: {}", PRESETS.join(", "))]
    UnknownPreset { name: String },
}

fn at_offset(position: Option<usize>) -> String {
    position.map_or_else(String::new, |p| format!(" at offset {p}"))
}

/// Turns a regex crate error into (offset, short message).
///
/// A syntax error reads
/// ```text
/// regex parse error:
///     tool:bash:(git
///               ^
/// error: unclosed group
/// ```
/// The offset is where the caret is, relative to the pattern line above it; it is only
/// read for one-line patterns, where that layout is certain.
pub(super) fn describe_regex_error(pattern: &str, err: &regex::Error) -> (Option<usize>, String) {
    let regex::Error::Syntax(text) = err else {
        return (None, err.to_string());
    };
    let message = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or(text)
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    let position = if pattern.contains('\n') {
        None
    } else {
        lines.windows(2).find_map(|pair| {
            let (shown, caret) = (pair[0], pair[1]);
            let trimmed = caret.trim_start();
            let indent = shown.len() - shown.trim_start().len();
            let is_caret =
                trimmed.starts_with('^') && trimmed.chars().all(|c| c == '^' || c == '-');
            (is_caret && shown.trim_start() == pattern)
                .then(|| (caret.len() - trimmed.len()).checked_sub(indent))
                .flatten()
        })
    };
    (position, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_as_strings_or_objects() {
        let spec: ProfileSpec = serde_json::from_str(
            r#"{"allow": ["tool:view:.*", {"pattern": "tool:bash:ls", "matches": ["tool:bash:ls"]}]}"#,
        )
        .unwrap();
        assert_eq!(spec.allow[0], RuleSpec::new("tool:view:.*"));
        assert_eq!(
            spec.allow[1],
            RuleSpec::with_examples("tool:bash:ls", &["tool:bash:ls"], &[])
        );
        assert!(spec.ask.is_empty());
        // Round trip keeps the short form for rules without examples.
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["allow"][0], "tool:view:.*");
        assert_eq!(json["allow"][1]["pattern"], "tool:bash:ls");
        assert_eq!(serde_json::from_value::<ProfileSpec>(json).unwrap(), spec);
    }

    #[test]
    fn settings_are_a_preset_name_or_a_profile() {
        let preset: PermissionsSetting = serde_json::from_str(r#""locked""#).unwrap();
        assert_eq!(preset, PermissionsSetting::Preset("locked".into()));
        let custom: PermissionsSetting =
            serde_json::from_str(r#"{"allow": ["tool:view:.*"]}"#).unwrap();
        assert!(matches!(custom, PermissionsSetting::Custom(ref s) if s.allow.len() == 1));
        assert_eq!(serde_json::to_string(&preset).unwrap(), r#""locked""#);
    }

    #[test]
    fn unknown_fields_are_refused_with_their_name() {
        for json in [
            r#"{"allow": [], "deny": ["tool:bash:.*"]}"#,
            r#"{"allow": [{"pattern": "x", "match": ["x"]}]}"#,
        ] {
            let err = serde_json::from_str::<PermissionsSetting>(json).unwrap_err();
            assert!(err.to_string().contains("unknown field"), "{json}: {err}");
            let err = serde_json::from_str::<ProfileSpec>(json).unwrap_err();
            assert!(err.to_string().contains("unknown field"), "{json}: {err}");
        }
        let err = serde_json::from_str::<PermissionsSetting>("42").unwrap_err();
        assert!(err.to_string().contains("preset name"), "{err}");
    }

    #[test]
    fn regex_errors_give_offset_and_message() {
        let pattern = "tool:bash:(git";
        let err = regex::Regex::new(pattern).unwrap_err();
        let (position, message) = describe_regex_error(pattern, &err);
        assert_eq!(position, Some(10));
        assert_eq!(message, "unclosed group");
    }
}
