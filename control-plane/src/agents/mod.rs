//! Agent lifecycle: create from the template, configure, destroy (SPEC B1, B2).
//!
//! Invariant: an agent is active exactly when it has a directory, an active row and a
//! supervised worker. Create builds them in that order and undoes the directory if
//! registration fails; destroy stops the worker before it touches any file.

pub mod files;
pub mod name;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::providers::catalog::Catalog;
use crate::runs::Runs;
use crate::store::{AgentRecord, AgentUpdate, AuditEntry, NewAgent, Store, StoreError};
use crate::workers::WorkerManager;
use files::{AgentDir, FilesError};
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
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(transparent)]
    Store(StoreError),
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
}

pub struct AgentService {
    store: Store,
    workers: Arc<WorkerManager>,
    runs: Arc<Runs>,
    catalog: Arc<Catalog>,
    agents_root: PathBuf,
    template_dir: Option<PathBuf>,
    default_model: Option<String>,
    /// Names being created right now, so two creates of one name cannot interleave.
    creating: Mutex<HashSet<String>>,
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
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.name);
    }
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
        AgentService {
            store,
            workers,
            runs,
            catalog,
            agents_root,
            template_dir,
            default_model,
            creating: Mutex::new(HashSet::new()),
        }
    }

    pub fn agents_root(&self) -> &Path {
        &self.agents_root
    }

    pub fn dir(&self, name: &str) -> AgentDir {
        AgentDir::new(&self.agents_root, name)
    }

    /// Starts the workers of every active agent (control plane start-up).
    pub async fn start_all_workers(&self) -> Result<usize, StoreError> {
        let agents = self.store.active_agents().await?;
        for agent in &agents {
            self.workers.start(&agent.name);
        }
        Ok(agents.len())
    }

    pub async fn create(
        &self,
        request: CreateAgent,
        user: &str,
    ) -> Result<AgentRecord, AgentError> {
        name::validate(&request.name)?;
        let system_prompt = non_blank("system_prompt", request.system_prompt)?;
        let model = non_blank("model", request.model)?;
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
        let reused = dir.exists();
        if !reused {
            dir.create_from_template(self.template_dir.as_deref())
                .await?;
        }
        let created = self
            .register(&dir, &request.name, system_prompt, model, reused)
            .await;
        let record = match created {
            Ok(record) => record,
            Err(e) => {
                if !reused {
                    let _ = dir.remove().await;
                }
                return Err(e);
            }
        };
        self.audit(
            &record.name,
            "agent:create",
            user,
            Some(format!(
                "model={:?} permissions={} reused_files={reused}",
                record.model, record.permissions
            )),
        )
        .await;
        self.workers.start(&record.name);
        tracing::info!(agent = %record.name, reused, "agent created");
        Ok(record)
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
        let mut creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
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
        system_prompt: Option<String>,
        model: Option<String>,
        reused: bool,
    ) -> Result<AgentRecord, AgentError> {
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
        let permissions =
            text(&config, "permissions").unwrap_or_else(|| DEFAULT_PERMISSIONS.into());

        let record = self
            .store
            .register_agent(&NewAgent {
                name: name.to_string(),
                model: model.clone(),
                system_prompt: system_prompt.clone(),
                permissions: permissions.clone(),
            })
            .await?;
        config.insert("name".into(), Value::from(name));
        config.insert("system_prompt".into(), Value::from(system_prompt));
        config.insert(
            "model".into(),
            model.map(Value::from).unwrap_or(Value::Null),
        );
        config.insert("permissions".into(), Value::from(permissions));
        if !reused || !config.get("created_at").is_some_and(Value::is_string) {
            config.insert("created_at".into(), Value::from(record.created_at.clone()));
        }
        dir.write_config(&config).await?;
        Ok(record)
    }

    pub async fn configure(
        &self,
        name: &str,
        update: AgentUpdate,
        user: &str,
    ) -> Result<AgentRecord, AgentError> {
        let update = AgentUpdate {
            model: non_blank("model", update.model)?,
            system_prompt: non_blank("system_prompt", update.system_prompt)?,
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
        dir.write_config(&config).await?;
        if let (Some(route), Some(model), true) =
            (new_route, &after.model, before.model != after.model)
        {
            // Runs in progress switch at their next model call.
            self.runs.model_changed(name, model, &route);
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
        Ok(after)
    }

    /// Stops the agent's worker, fails its runs, marks it destroyed and deletes its
    /// files unless `keep_files`.
    pub async fn destroy(
        &self,
        name: &str,
        keep_files: bool,
        user: &str,
    ) -> Result<(), AgentError> {
        if self.store.active_agent(name).await?.is_none() {
            return Err(AgentError::NotFound(format!("no agent named '{name}'")));
        }
        self.workers.stop(name).await;
        self.runs
            .fail_agent_runs(
                name,
                "the agent was destroyed while this thread was running",
            )
            .await;
        self.store.mark_agent_destroyed(name).await?;
        if !keep_files {
            self.dir(name).remove().await?;
        }
        self.audit(
            name,
            "agent:destroy",
            user,
            Some(format!("keep_files={keep_files}")),
        )
        .await;
        tracing::info!(agent = name, keep_files, "agent destroyed");
        Ok(())
    }

    async fn audit(&self, agent: &str, action: &str, user: &str, detail: Option<String>) {
        let entry = AuditEntry {
            agent_name: agent,
            action,
            decision: "done",
            user_id: Some(user),
            detail,
        };
        if let Err(e) = self.store.audit(entry).await {
            tracing::error!(agent, action, error = %e, "cannot write audit entry");
        }
    }
}
