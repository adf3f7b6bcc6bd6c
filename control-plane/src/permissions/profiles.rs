//! An agent's permission profile, as stored and as compiled. The `permissions`
//! column holds a preset name or a custom profile's JSON; compiled profiles are
//! cached by that text, so a decision costs a lookup, not a compile.

use std::collections::HashMap;
use std::sync::Mutex;

use chorus_proto::domain::ToolSpec;
use chorus_proto::tools::{SchemaSettings, TOOLS, ToolDef};

use super::{PermissionsSetting, Profile, ProfileError};

/// The stored form of a setting.
pub fn to_stored(setting: &PermissionsSetting) -> String {
    match setting {
        PermissionsSetting::Preset(name) => name.clone(),
        PermissionsSetting::Custom(spec) => serde_json::to_string(spec).unwrap_or_default(),
    }
}

/// A stored or given setting that cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SettingError {
    #[error("the custom profile is not valid JSON for a profile: {0}")]
    Json(String),
    #[error(transparent)]
    Profile(#[from] ProfileError),
}

/// Reads the stored form back.
pub fn from_stored(text: &str) -> Result<PermissionsSetting, SettingError> {
    let trimmed = text.trim();
    if trimmed.starts_with('{') {
        serde_json::from_str(trimmed).map_err(|e| SettingError::Json(e.to_string()))
    } else {
        Ok(PermissionsSetting::Preset(trimmed.to_string()))
    }
}

/// The name a setting is shown and audited under: the preset, or `custom`.
pub fn setting_name(setting: &PermissionsSetting) -> Option<&str> {
    match setting {
        PermissionsSetting::Preset(name) => Some(name),
        PermissionsSetting::Custom(_) => None,
    }
}

/// The tools a profile may ever allow or ask for, and those granted (`grants`,
/// Chorus names): only these are offered to the model.
pub fn offered_tools(profile: &Profile, grants: &[String]) -> Vec<String> {
    offered(profile, grants)
        .map(|tool| tool.name.to_string())
        .collect()
}

/// [`offered_tools`], as the model is offered them.
pub fn offered_specs(
    profile: &Profile,
    grants: &[String],
    settings: &SchemaSettings,
) -> Vec<ToolSpec> {
    offered(profile, grants)
        .map(|tool| tool.spec(settings))
        .collect()
}

/// The definitions of the tools a profile may ever allow or ask for (under any of
/// their names), and of those granted, in the registry's order.
pub fn offered<'a>(
    profile: &'a Profile,
    grants: &'a [String],
) -> impl Iterator<Item = &'static ToolDef> + 'a {
    TOOLS.iter().filter(move |tool| {
        grants.iter().any(|granted| granted == tool.name)
            || std::iter::once(tool.action_name)
                .chain(tool.aliases.iter().copied())
                .any(|name| profile.may_use_tool(name))
    })
}

#[derive(Default)]
pub struct ProfileCache {
    compiled: Mutex<HashMap<String, Profile>>,
}

/// Stored settings differ little (three presets and a few custom ones); the cache
/// never needs to shrink in practice, but is bounded anyway.
const MAX_CACHED: usize = 256;

impl ProfileCache {
    pub fn get(&self, stored: &str) -> Result<Profile, SettingError> {
        if let Some(profile) = self
            .compiled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(stored)
        {
            return Ok(profile.clone());
        }
        let profile = Profile::from_setting(&from_stored(stored)?)?;
        let mut compiled = self
            .compiled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if compiled.len() >= MAX_CACHED {
            compiled.clear();
        }
        compiled.insert(stored.to_string(), profile.clone());
        Ok(profile)
    }
}
