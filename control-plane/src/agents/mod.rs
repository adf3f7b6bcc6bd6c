//! Agent lifecycle: create from the template, configure, destroy (SPEC B1, B2).
//!
//! Invariant: an agent is active exactly when it has a directory, an active row and a
//! supervised worker. Create builds them in that order (the row is the commit point)
//! and removes a directory it made if anything before the row fails; destroy stops
//! the worker, marks the row destroyed, and only then deletes files, marking the row
//! until they are gone. Any failure in between leaves a state [`AgentService::repair`]
//! (run at every start) or the next create of the name completes.
//!
//! Destroy marks the row with `purge_files` unless files are kept; if marking fails, the
//! worker is started again and nothing else changed. At start, `repair` finishes
//! unfinished deletions and marks destroyed an active row whose directory is gone, saying
//! why in the log and the audit log. With dial-in workers, files on their volume are
//! deleted only by a worker, for one named incarnation, in the background (`deletion`).

mod deletion;
pub mod files;
mod grants;
pub mod name;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::feed::AgentChangeKind;
use crate::permissions::grants::{Role, granted, may_grant};
use crate::permissions::profiles::{setting_name, to_stored};
use crate::permissions::{PermissionsSetting, Profile};
use crate::principal::Principal;
use crate::providers::catalog::Catalog;
use crate::runs::Runs;
use crate::store::{AgentRecord, AgentUpdate, AuditEntry, NewAgent, Store, StoreError};
use crate::switches::{Network, OnAsk};
use crate::workers::{AgentFiles, WorkerManager};
use chorus_proto::domain::{AgentChange, AgentDirectory, Backend, Failure, FailureKind};
use files::{AgentDir, FilesError, Layout};
use name::NameError;

pub const DEFAULT_PERMISSIONS: &str = "standard";

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    InvalidName(#[from] NameError),
    #[error("{0}")]
    InvalidInput(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    /// The user may not do this (e.g. grant more than their role allows).
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(transparent)]
    Store(StoreError),
    /// The change happened, but a later part of it failed; the message says what
    /// is left and who finishes it.
    #[error("{0}")]
    Incomplete(String),
}

impl From<StoreError> for AgentError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(m) => AgentError::Conflict(m),
            StoreError::NotFound(m) => AgentError::NotFound(m),
            other => AgentError::Store(other),
        }
    }
}

/// What a caller may set when creating an agent; the rest comes from the template.
#[derive(Debug, Clone, Default)]
pub struct CreateAgent {
    pub name: String,
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    /// A preset name or a custom profile; the template's (`standard`) when absent.
    pub permissions: Option<PermissionsSetting>,
    /// `prompt`, `allow` or `deny`; `prompt` when absent.
    pub on_ask: Option<String>,
    /// `on` or `off`: may its tool processes use TCP; `on` when absent.
    pub network: Option<String>,
    /// `api`, `claude-code` or `opencode`: what runs its turns; `api` when absent.
    pub backend: Option<String>,
    /// Seconds without activity before its context is saved and cleared (0: never);
    /// the server's `[context] idle_timeout_secs` when absent.
    pub idle_timeout_secs: Option<u64>,
    /// The Discord channel to bind it to (an existing channel's id).
    pub discord_channel_id: Option<String>,
    /// Its MCP servers, checked (`crate::mcp`), as stored; none when absent.
    pub mcp_servers: Option<String>,
    /// Its heartbeat setting, checked (`crate::heartbeat`); none: off.
    pub heartbeat: Option<crate::store::InitialHeartbeat>,
}

/// What a create request gives; the rest comes from agent.json or the defaults.
struct Given {
    system_prompt: Option<String>,
    model: Option<String>,
    permissions: Option<PermissionsSetting>,
    on_ask: Option<OnAsk>,
    network: Option<Network>,
    backend: Option<Backend>,
    idle_timeout_secs: Option<u64>,
    discord_channel_id: Option<String>,
    mcp_servers: Option<String>,
    heartbeat: Option<crate::store::InitialHeartbeat>,
}

/// A Discord id: a snowflake, 1 to 20 digits.
fn check_discord_id(value: Option<String>) -> Result<Option<String>, AgentError> {
    match value {
        Some(id) => {
            let id = id.trim().to_string();
            if id.is_empty() || id.len() > 20 || !id.bytes().all(|b| b.is_ascii_digit()) {
                return Err(AgentError::InvalidInput(format!(
                    "discord_channel_id must be a Discord channel id (digits), not '{id}'"
                )));
            }
            Ok(Some(id))
        }
        None => Ok(None),
    }
}

/// The longest idle timeout an agent may set: a year.
pub const MAX_IDLE_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

fn check_idle_timeout(value: Option<u64>) -> Result<Option<u64>, AgentError> {
    match value {
        Some(v) if v > MAX_IDLE_TIMEOUT_SECS => Err(AgentError::InvalidInput(format!(
            "idle_timeout_secs must be at most {MAX_IDLE_TIMEOUT_SECS} (a year), not {v}; \
             0 switches the idle save off"
        ))),
        other => Ok(other),
    }
}

fn check_on_ask(value: Option<&str>) -> Result<Option<OnAsk>, AgentError> {
    value
        .map(OnAsk::parse)
        .transpose()
        .map_err(AgentError::InvalidInput)
}

/// An agent's stored permissions as a setting.
fn stored_setting(stored: &str) -> Result<PermissionsSetting, AgentError> {
    crate::permissions::profiles::from_stored(stored)
        .map_err(|e| AgentError::InvalidInput(format!("the agent's stored permissions: {e}")))
}

/// A backend name from the set; the error names the set.
pub fn check_backend(value: Option<&str>) -> Result<Option<Backend>, AgentError> {
    value
        .map(str::parse::<Backend>)
        .transpose()
        .map_err(|e| AgentError::InvalidInput(e.to_string()))
}

fn check_network(value: Option<&str>) -> Result<Option<Network>, AgentError> {
    value
        .map(Network::parse)
        .transpose()
        .map_err(AgentError::InvalidInput)
}

pub struct AgentService {
    store: Store,
    workers: Arc<WorkerManager>,
    runs: Arc<Runs>,
    catalog: Arc<Catalog>,
    agents_root: PathBuf,
    /// The agents' identity and memory files.
    memory: Arc<crate::memory::Memory>,
    template_dir: Option<PathBuf>,
    default_model: Option<String>,
    /// What our copy of each agent's directory holds (less with dial-in workers).
    layout: Layout,
    /// Names being created right now, so two creates of one name cannot interleave.
    creating: Mutex<HashSet<String>>,
    /// Destroyed agents' files being deleted on the dial-in workers' volume.
    deletions: deletion::Deletions,
}

/// How far a purge got.
enum Purged {
    Done,
    /// Our records are gone; a dial-in worker deletes the rest when one is free.
    OnWorkersVolume,
}

/// Removes a name from the in-progress set however the create ends.
struct CreatingGuard<'a> {
    set: &'a Mutex<HashSet<String>>,
    name: String,
}

impl Drop for CreatingGuard<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.name);
    }
}

/// A new agent incarnation: 128 random bits, hex.
fn new_incarnation() -> Result<String, AgentError> {
    let mut token = crate::secrets::random_token()
        .map_err(|e| AgentError::Incomplete(format!("the agent was not created: {e}")))?;
    token.truncate(32);
    Ok(token)
}

fn non_blank(field: &str, value: Option<String>) -> Result<Option<String>, AgentError> {
    match value {
        Some(v) if v.trim().is_empty() => Err(AgentError::InvalidInput(format!(
            "{field} must not be empty; leave it out to use the default"
        ))),
        other => Ok(other),
    }
}

impl AgentService {
    pub fn new(
        store: Store,
        workers: Arc<WorkerManager>,
        runs: Arc<Runs>,
        catalog: Arc<Catalog>,
        agents_root: PathBuf,
        template_dir: Option<PathBuf>,
        default_model: Option<String>,
    ) -> Self {
        let memory = Arc::new(crate::memory::Memory::new(
            store.clone(),
            runs.clone(),
            crate::memory::MemorySettings {
                agents_root: agents_root.clone(),
                limit_bytes: crate::memory::DEFAULT_LIMIT_BYTES,
            },
            catalog.clone(),
            default_model.clone(),
        ));
        AgentService {
            store,
            workers,
            runs,
            catalog,
            memory,
            agents_root,
            template_dir,
            default_model,
            layout: Layout::Full,
            creating: Mutex::new(HashSet::new()),
            deletions: deletion::Deletions::default(),
        }
    }

    /// Dial-in workers keep the agents' workspaces and docs: our copy holds only
    /// the records.
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Where the agent's workspace is, for people: a path on this machine, or for
    /// dial-in workers the path under their `--data-dir`.
    pub fn workspace_shown(&self, name: &str) -> String {
        match self.layout {
            Layout::Full => self.dir(name).workspace().to_string_lossy().into_owned(),
            Layout::Records => {
                format!("agents/{name}/workspace (under the dial-in workers' --data-dir)")
            }
        }
    }

    /// `[memory] limit_bytes`.
    pub fn with_memory_limit(mut self, limit_bytes: usize) -> Self {
        self.memory = Arc::new(crate::memory::Memory::new(
            self.store.clone(),
            self.runs.clone(),
            crate::memory::MemorySettings {
                agents_root: self.agents_root.clone(),
                limit_bytes,
            },
            self.catalog.clone(),
            self.default_model.clone(),
        ));
        self
    }

    /// The agents' identity and memory files.
    pub fn memory(&self) -> &Arc<crate::memory::Memory> {
        &self.memory
    }

    pub fn agents_root(&self) -> &Path {
        &self.agents_root
    }

    pub fn dir(&self, name: &str) -> AgentDir {
        AgentDir::new(&self.agents_root, name).with_layout(self.layout)
    }

    /// Starts the workers of every active agent (control plane start-up).
    pub async fn start_all_workers(&self) -> Result<usize, StoreError> {
        let agents = self.store.active_agents().await?;
        for agent in &agents {
            self.workers
                .start(&agent.name, &agent.incarnation, AgentFiles::MayExist);
        }
        Ok(agents.len())
    }

    pub async fn create(
        &self,
        request: CreateAgent,
        user: &Principal,
        role: Role,
    ) -> Result<AgentRecord, AgentError> {
        name::validate(&request.name)?;
        let system_prompt = non_blank("system_prompt", request.system_prompt)?;
        let model = non_blank("model", request.model)?;
        let on_ask = check_on_ask(request.on_ask.as_deref())?;
        let network = check_network(request.network.as_deref())?;
        let backend = check_backend(request.backend.as_deref())?;
        let idle_timeout_secs = check_idle_timeout(request.idle_timeout_secs)?;
        let discord_channel_id = check_discord_id(request.discord_channel_id)?;
        if let Some(channel) = &discord_channel_id
            && let Some(owner) = self.store.agent_by_discord_channel(channel).await?
        {
            return Err(AgentError::Conflict(format!(
                "Discord channel {channel} already belongs to agent '{}'",
                owner.name
            )));
        }
        // What the request names is checked here, before anything is made; what the
        // agent ends up with (kept files, the template) once it is known, in register.
        let default = PermissionsSetting::Preset(DEFAULT_PERMISSIONS.into());
        self.check_grant(
            request.permissions.as_ref().unwrap_or(&default),
            on_ask.unwrap_or_default(),
            role,
            user,
        )?;
        let permissions = request.permissions;
        match &model {
            Some(model) => self.check_model(model, "model").await?,
            None => {
                if let Some(default) = &self.default_model {
                    self.check_model(default, "the default model (CHORUS_DEFAULT_MODEL)")
                        .await?;
                }
            }
        }
        let _guard = self.claim_name(&request.name)?;
        if self.store.active_agent(&request.name).await?.is_some() {
            return Err(AgentError::Conflict(format!(
                "an agent named '{}' already exists",
                request.name
            )));
        }

        let dir = self.dir(&request.name);
        self.finish_purge(&request.name).await?;
        let reused = dir.exists();
        // Files first, the row last: the row is the commit point. Whatever fails
        // before it leaves no row, and a directory this create made is removed; a
        // crash before it leaves at most a directory, which a later create reuses
        // like kept files. So there is never an active row without its directory.
        let created = async {
            if !reused {
                dir.create_from_template(self.template_dir.as_deref())
                    .await?;
            }
            self.register(
                &dir,
                &request.name,
                Given {
                    system_prompt,
                    model,
                    permissions,
                    on_ask,
                    network,
                    backend,
                    idle_timeout_secs,
                    discord_channel_id,
                    mcp_servers: request.mcp_servers,
                    heartbeat: request.heartbeat,
                },
                reused,
                (role, user),
            )
            .await
        }
        .await;
        let record = match created {
            Ok(record) => record,
            Err(e) => {
                if !reused && let Err(cleanup) = dir.remove().await {
                    tracing::error!(agent = %request.name, error = %cleanup, "cannot remove the directory of a failed create");
                }
                return Err(e);
            }
        };
        self.audit(
            &record.name,
            "agent:create",
            user,
            Some(format!(
                "model={:?} permissions={} backend={} reused_files={reused}",
                record.model, record.permissions, record.backend
            )),
        )
        .await;
        self.changed(&record.name, AgentChangeKind::Created, user);
        let files = match reused {
            true => AgentFiles::MayExist,
            false => AgentFiles::New,
        };
        self.workers.start(&record.name, &record.incarnation, files);
        tracing::info!(agent = %record.name, reused, "agent created");
        Ok(record)
    }

    /// A permissions setting that compiles and that `role` may grant together with
    /// `on_ask` (see [`granted`]); its stored form.
    fn check_grant(
        &self,
        setting: &PermissionsSetting,
        on_ask: OnAsk,
        role: Role,
        user: &Principal,
    ) -> Result<String, AgentError> {
        let refused = |what: String| {
            AgentError::Forbidden(format!(
                "{user} (role {}) may not grant {what}; an admin can",
                role.as_str()
            ))
        };
        // The role first: a refused grant says so, whatever else is wrong with it.
        let name = setting_name(setting);
        if !may_grant(role, name) {
            return Err(refused(match name {
                Some(name) => format!("the '{name}' preset"),
                None => "a custom profile".to_string(),
            }));
        }
        let profile = Profile::from_setting(setting)
            .map_err(|e| AgentError::InvalidInput(format!("permissions: {e}")))?;
        let asks = !profile.spec().ask.is_empty();
        if !may_grant(role, granted(name, on_ask, asks)) {
            return Err(refused(format!(
                "on_ask = \"allow\" with the '{}' preset (every ask answered without a \
                 person: what the 'open' preset grants)",
                name.unwrap_or("custom")
            )));
        }
        Ok(to_stored(setting))
    }

    /// Whether `role` may change agent `name`'s `permissions` and `on_ask` (either
    /// may be absent: unchanged) as [`Self::set_permissions`] and
    /// [`Self::configure`] will check them one by one; checked before a change that
    /// sets both, so that a refused one changes nothing. A new profile is granted
    /// together with the `on_ask` it will have; `on_ask = "allow"` grants `open`.
    pub async fn check_change(
        &self,
        name: &str,
        permissions: Option<&PermissionsSetting>,
        on_ask: Option<OnAsk>,
        role: Role,
        user: &Principal,
    ) -> Result<(), AgentError> {
        if permissions.is_none() && on_ask != Some(OnAsk::Allow) {
            return Ok(());
        }
        let before = self
            .store
            .active_agent(name)
            .await?
            .ok_or_else(|| AgentError::NotFound(format!("no agent named '{name}'")))?;
        let current = stored_setting(&before.permissions)?;
        let setting = permissions.unwrap_or(&current);
        self.check_grant(setting, on_ask.unwrap_or(before.on_ask), role, user)?;
        Ok(())
    }

    /// Changes an agent's permissions, never beyond what `role` may grant. Runs in
    /// progress get the new tool list at their next model call; every check after
    /// this uses the new profile. Returns the profile's name.
    pub async fn set_permissions(
        &self,
        name: &str,
        setting: PermissionsSetting,
        role: Role,
        user: &Principal,
    ) -> Result<String, AgentError> {
        let before = self
            .store
            .active_agent(name)
            .await?
            .ok_or_else(|| AgentError::NotFound(format!("no agent named '{name}'")))?;
        let stored = self.check_grant(&setting, before.on_ask, role, user)?;
        let profile = Profile::from_setting(&setting)
            .map_err(|e| AgentError::InvalidInput(format!("permissions: {e}")))?;
        self.store
            .update_agent(
                name,
                &AgentUpdate {
                    permissions: Some(stored.clone()),
                    ..AgentUpdate::default()
                },
            )
            .await?;
        let dir = self.dir(name);
        let mut config = dir.read_config().await?;
        config.insert(
            "permissions".into(),
            serde_json::to_value(&setting).unwrap_or(Value::Null),
        );
        dir.write_config(&config).await?;
        self.audit(
            name,
            "agent:configure:permissions",
            user,
            Some(format!("old={} new={}", before.permissions, stored)),
        )
        .await;
        self.offer_tools(name, &profile).await;
        self.changed(name, AgentChangeKind::Changed, user);
        Ok(setting_name(&setting)
            .unwrap_or("a custom profile")
            .to_string())
    }

    /// A model must be one a configured provider offers (SPEC C3).
    async fn check_model(&self, model: &str, what: &str) -> Result<(), AgentError> {
        self.catalog
            .resolve(model)
            .await
            .map(|_| ())
            .map_err(|e| AgentError::InvalidInput(format!("{what}: {e}")))
    }

    fn claim_name(&self, name: &str) -> Result<CreatingGuard<'_>, AgentError> {
        let mut creating = self
            .creating
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !creating.insert(name.to_string()) {
            return Err(AgentError::Conflict(format!(
                "an agent named '{name}' is being created right now"
            )));
        }
        Ok(CreatingGuard {
            set: &self.creating,
            name: name.to_string(),
        })
    }

    /// Fills in agent.json (merging over kept files), prepares the layout and registers.
    async fn register(
        &self,
        dir: &AgentDir,
        name: &str,
        given: Given,
        reused: bool,
        (role, user): (Role, &Principal),
    ) -> Result<AgentRecord, AgentError> {
        let Given {
            system_prompt,
            model,
            permissions,
            on_ask,
            network,
            backend,
            idle_timeout_secs,
            discord_channel_id,
            mcp_servers,
            heartbeat,
        } = given;
        dir.ensure_layout().await?;
        let mut config = dir.read_config().await?;
        let text = |config: &serde_json::Map<String, Value>, key: &str| {
            config.get(key).and_then(Value::as_str).map(str::to_string)
        };
        let system_prompt = system_prompt
            .or_else(|| text(&config, "system_prompt"))
            .unwrap_or_default();
        let model = model
            .or_else(|| text(&config, "model"))
            .or_else(|| self.default_model.clone());
        // The request's permissions win; else what agent.json says (a kept or custom
        // template), else the default.
        let permissions = match permissions {
            Some(setting) => setting,
            None => match config.get("permissions") {
                Some(value) => serde_json::from_value::<PermissionsSetting>(value.clone())
                    .map_err(|e| {
                        AgentError::InvalidInput(format!("agent.json permissions: {e}"))
                    })?,
                None => PermissionsSetting::Preset(DEFAULT_PERMISSIONS.into()),
            },
        };
        Profile::from_setting(&permissions)
            .map_err(|e| AgentError::InvalidInput(format!("permissions: {e}")))?;
        let on_ask = match on_ask {
            Some(on_ask) => on_ask,
            None => check_on_ask(text(&config, "on_ask").as_deref())?.unwrap_or_default(),
        };
        let network = match network {
            Some(network) => network,
            None => check_network(text(&config, "network").as_deref())?.unwrap_or_default(),
        };
        let backend = match backend {
            Some(backend) => backend,
            None => check_backend(text(&config, "backend").as_deref())
                .map_err(|e| AgentError::InvalidInput(format!("agent.json {e}")))?
                .unwrap_or_default(),
        };
        // The creator grants what the agent starts with, from wherever it came (kept
        // files of a destroyed agent, a template), not only what the request named.
        self.check_grant(&permissions, on_ask, role, user)
            .map_err(|e| match e {
                AgentError::Forbidden(m) => AgentError::Forbidden(format!(
                    "{m} (the agent would start with it{}; name \"permissions\" and \"on_ask\" \
                     in the request to start it with less)",
                    if reused { ", from its kept files" } else { "" }
                )),
                other => other,
            })?;
        let idle_timeout_secs = check_idle_timeout(
            idle_timeout_secs.or_else(|| config.get("idle_timeout_secs").and_then(Value::as_u64)),
        )?;

        let at = crate::store::now();
        config.insert("name".into(), Value::from(name));
        config.insert("system_prompt".into(), Value::from(system_prompt.clone()));
        config.insert(
            "model".into(),
            model.clone().map(Value::from).unwrap_or(Value::Null),
        );
        config.insert(
            "permissions".into(),
            serde_json::to_value(&permissions).unwrap_or(Value::Null),
        );
        config.insert("on_ask".into(), Value::from(on_ask.as_str()));
        config.insert("network".into(), Value::from(network.as_str()));
        config.insert("backend".into(), Value::from(backend.as_str()));
        config.insert("idle_timeout_secs".into(), Value::from(idle_timeout_secs));
        if !reused || !config.get("created_at").is_some_and(Value::is_string) {
            config.insert("created_at".into(), Value::from(at.clone()));
        }
        dir.write_config(&config).await?;
        // Kept files stay the destroyed agent's incarnation, so dial-in workers keep
        // them too; anything else is a new one.
        let kept = match reused {
            true => self.store.agent(name).await?.map(|old| old.incarnation),
            false => None,
        };
        let incarnation = match kept.filter(|kept| !kept.is_empty()) {
            Some(kept) => kept,
            None => new_incarnation()?,
        };
        Ok(self
            .store
            .register_agent_at(
                &NewAgent {
                    name: name.to_string(),
                    model,
                    system_prompt,
                    permissions: to_stored(&permissions),
                    on_ask,
                    network,
                    backend,
                    idle_timeout_secs,
                    discord_channel_id,
                    incarnation,
                    mcp_servers,
                    heartbeat,
                },
                &at,
            )
            .await?)
    }

    pub async fn configure(
        &self,
        name: &str,
        update: AgentUpdate,
        user: &Principal,
        role: Role,
    ) -> Result<AgentRecord, AgentError> {
        let update = AgentUpdate {
            model: non_blank("model", update.model)?,
            system_prompt: non_blank("system_prompt", update.system_prompt)?,
            permissions: None, // set_permissions, which checks the user's role
            on_ask: update.on_ask,
            network: update.network,
            backend: update.backend,
            idle_timeout_secs: match update.idle_timeout_secs {
                Some(value) => Some(check_idle_timeout(value)?),
                None => None,
            },
            discord_channel_id: match update.discord_channel_id {
                Some(value) => Some(check_discord_id(value)?),
                None => None,
            },
        };
        let new_route = match &update.model {
            Some(model) => Some(
                self.catalog
                    .resolve(model)
                    .await
                    .map_err(|e| AgentError::InvalidInput(format!("model: {e}")))?,
            ),
            None => None,
        };
        let before = self
            .store
            .active_agent(name)
            .await?
            .ok_or_else(|| AgentError::NotFound(format!("no agent named '{name}'")))?;
        // Answering every ask unasked grants `open`; any other on_ask grants nothing.
        if update.on_ask == Some(OnAsk::Allow) {
            self.check_grant(
                &stored_setting(&before.permissions)?,
                OnAsk::Allow,
                role,
                user,
            )?;
        }
        let after = self.store.update_agent(name, &update).await?;
        let dir = self.dir(name);
        let mut config = dir.read_config().await?;
        config.insert(
            "system_prompt".into(),
            Value::from(after.system_prompt.clone()),
        );
        config.insert(
            "model".into(),
            after.model.clone().map(Value::from).unwrap_or(Value::Null),
        );
        config.insert("on_ask".into(), Value::from(after.on_ask.as_str()));
        config.insert("network".into(), Value::from(after.network.as_str()));
        config.insert("backend".into(), Value::from(after.backend.as_str()));
        config.insert(
            "idle_timeout_secs".into(),
            Value::from(after.idle_timeout_secs),
        );
        dir.write_config(&config).await?;
        // Runs in progress use the changes from their next model call.
        let change = AgentChange {
            model: match (new_route, &after.model) {
                (Some(route), Some(model)) if before.model != after.model => {
                    Some((model.clone(), route))
                }
                _ => None,
            },
            system_prompt: (before.system_prompt != after.system_prompt)
                .then(|| after.system_prompt.clone()),
            tools: None,
            offered: None,
            ..AgentChange::default()
        };
        if change != AgentChange::default() {
            self.runs.agent_changed(name, change).await;
        }
        if before.network != after.network {
            // Tool processes started from the next run on are confined accordingly.
            self.audit(
                name,
                "agent:configure:network",
                user,
                Some(format!("old={:?} new={:?}", before.network, after.network)),
            )
            .await;
        }
        if before.backend != after.backend {
            // The thread's next run goes to the new backend (a CLI session of the old
            // one is not resumed by another). What this host's CLIs are is asked again.
            if after.backend.cli().is_some() {
                self.workers.backends().reprobe();
            }
            self.audit(
                name,
                "agent:configure:backend",
                user,
                Some(format!("old={} new={}", before.backend, after.backend)),
            )
            .await;
        }
        if before.idle_timeout_secs != after.idle_timeout_secs {
            self.audit(
                name,
                "agent:configure:idle_timeout",
                user,
                Some(format!(
                    "old={:?} new={:?}",
                    before.idle_timeout_secs, after.idle_timeout_secs
                )),
            )
            .await;
        }
        if before.on_ask != after.on_ask {
            self.audit(
                name,
                "agent:configure:on_ask",
                user,
                Some(format!("old={:?} new={:?}", before.on_ask, after.on_ask)),
            )
            .await;
        }
        if before.model != after.model {
            self.audit(
                name,
                "agent:configure:model",
                user,
                Some(format!("old={:?} new={:?}", before.model, after.model)),
            )
            .await;
        }
        if before.system_prompt != after.system_prompt {
            self.audit(
                name,
                "agent:configure:system_prompt",
                user,
                Some(format!(
                    "old={:?} new={:?}",
                    before.system_prompt, after.system_prompt
                )),
            )
            .await;
        }
        self.changed(name, AgentChangeKind::Changed, user);
        Ok(after)
    }

    /// Stops the agent's worker, fails its runs, marks it destroyed and deletes its
    /// files unless `keep_files`.
    ///
    /// The row is marked first, in one statement: that is the moment the agent is
    /// gone. If marking fails, the worker is started again and nothing else changed.
    /// Files are deleted only after it, with `purge_files` set on the row until they
    /// are gone, so a failure or a crash in between leaves a destroyed agent whose
    /// deletion the next start (or a re-create of the name) finishes; never files
    /// deleted under an active row.
    pub async fn destroy(
        &self,
        name: &str,
        keep_files: bool,
        user: &Principal,
    ) -> Result<(), AgentError> {
        let Some(record) = self.store.active_agent(name).await? else {
            return Err(AgentError::NotFound(format!("no agent named '{name}'")));
        };
        self.workers.stop(name).await;
        self.runs
            .fail_agent_runs(
                name,
                &Failure::new(
                    FailureKind::Killed,
                    "the agent was destroyed while this thread was running",
                ),
            )
            .await;
        self.runs.traces().forget(name);
        if let Err(e) = self.store.mark_agent_destroyed(name, !keep_files).await {
            // Still active: give it its worker back.
            self.workers
                .start(name, &record.incarnation, AgentFiles::MayExist);
            return Err(e.into());
        }
        self.audit(
            name,
            "agent:destroy",
            user,
            Some(format!("keep_files={keep_files}")),
        )
        .await;
        self.changed(name, AgentChangeKind::Destroyed, user);
        tracing::info!(agent = name, keep_files, "agent destroyed");
        if !keep_files {
            self.purge(name).await.map(drop).map_err(|e| {
                AgentError::Incomplete(format!(
                    "agent '{name}' is destroyed, but deleting its files failed ({e}); \
                     chorus finishes deleting them at its next start"
                ))
            })?;
        }
        Ok(())
    }

    /// Deletes a destroyed agent's files and clears its `purge_files` mark. With
    /// dial-in workers our copy (the records) goes now, and the workspace and docs
    /// on the workers' volume in the background (see [`deletion`]); the mark stays
    /// until a worker has deleted them.
    async fn purge(&self, name: &str) -> Result<Purged, AgentError> {
        self.dir(name).remove().await?;
        match self.layout {
            Layout::Full => {
                self.store.files_purged(name).await?;
                Ok(Purged::Done)
            }
            Layout::Records => {
                self.deletions.start(
                    self.store.clone(),
                    self.workers.clone(),
                    name,
                    deletion::Target::Destroyed,
                );
                Ok(Purged::OnWorkersVolume)
            }
        }
    }

    /// A dial-in worker joined naming the agents' directories on its volume: those no
    /// agent can use again (an older creation of a name, a copy of an agent destroyed
    /// without its files kept) are deleted there, in the background.
    pub async fn tidy_volume(
        &self,
        volume: &str,
        named: &[AgentDirectory],
    ) -> Result<(), StoreError> {
        if named.is_empty() {
            return Ok(());
        }
        let known = self.store.agent_incarnations().await?;
        for leftover in deletion::leftovers(&known, named) {
            tracing::info!(agent = %leftover.agent, incarnation = %leftover.incarnation, "a dial-in worker holds a directory no agent can use again; deleting it");
            self.deletions.start(
                self.store.clone(),
                self.workers.clone(),
                &leftover.agent,
                deletion::Target::Leftover {
                    incarnation: leftover.incarnation,
                    volume: volume.to_string(),
                },
            );
        }
        Ok(())
    }

    /// Finishes deleting the files of a destroyed agent whose deletion did not finish,
    /// before its name is used again.
    async fn finish_purge(&self, name: &str) -> Result<(), AgentError> {
        match self.store.agent(name).await? {
            Some(agent) if agent.purge_files => self.purge(name).await.map(drop),
            _ => Ok(()),
        }
    }

    /// Start-up repair, before any worker starts: finishes the deletions of destroyed
    /// agents that did not finish, and marks destroyed each active agent whose
    /// directory is gone (its worker would run with no workspace), saying why in the
    /// log and the audit log. Returns what it did, one line per agent.
    pub async fn repair(&self) -> Result<Vec<String>, StoreError> {
        let mut done = Vec::new();
        for name in self.store.agents_to_purge().await? {
            match self.purge(&name).await {
                Ok(Purged::Done) => done.push(format!(
                    "{name}: finished deleting the files of the destroyed agent"
                )),
                Ok(Purged::OnWorkersVolume) => done.push(format!(
                    "{name}: deleting the files of the destroyed agent on the dial-in workers' volume (once a worker is free)"
                )),
                Err(e) => {
                    tracing::error!(agent = %name, error = %e, "cannot delete the files of a destroyed agent; trying again at the next start")
                }
            }
        }
        for agent in self.store.active_agents().await? {
            let dir = self.dir(&agent.name);
            if dir.exists() {
                continue;
            }
            let reason = format!(
                "its directory {} was missing at start-up; create the agent again to get a new one",
                dir.root.display()
            );
            self.store.mark_agent_destroyed(&agent.name, false).await?;
            self.audit(
                &agent.name,
                "agent:destroy",
                &Principal::Scheduler,
                Some(reason.clone()),
            )
            .await;
            done.push(format!("{}: marked destroyed: {reason}", agent.name));
        }
        for line in &done {
            tracing::warn!("start-up repair: {line}");
        }
        Ok(done)
    }

    /// Tells the feed that agent `name` was created, changed or destroyed (the
    /// `agent` event): the one place each is told, after it is done.
    pub fn changed(&self, name: &str, change: AgentChangeKind, user: &Principal) {
        self.runs
            .feed()
            .publish_agent_change(name, change, &user.to_string());
    }

    async fn audit(&self, agent: &str, action: &str, user: &Principal, detail: Option<String>) {
        let entry = AuditEntry {
            agent_name: agent,
            action,
            decision: crate::store::AuditDecision::Done,
            user_id: Some(user),
            detail,
            thread_id: None,
            call_id: None,
            worker: None,
        };
        if let Err(e) = self.store.audit(entry).await {
            tracing::error!(agent, action, error = %e, "cannot write audit entry");
        }
    }
}
