//! What a slash command does (no serenity type here): each [`Invocation`] runs
//! against the same services the HTTP API uses, as the Discord user who ran it
//! (`discord:<id>`, with the Chorus role their Discord roles map to), and comes back
//! as a [`Reply`]: text for the person, and what the adapter does after answering.

use std::sync::Arc;

use super::access::{self, DiscordRoles};
use super::messages::FRONTEND;
use super::outbox::Outbox;
use super::slash::{Invocation, KillWhat};
use super::tasks::{self as task_text, Gathered, Pending};
use crate::agents::{CreateAgent, DEFAULT_PERMISSIONS};
use crate::config::Settings;
use crate::gate::policy::{Act, allowed};
use crate::permissions::PermissionsSetting;
use crate::permissions::grants::Role;
use crate::principal::Principal;
use crate::services::Services;
use crate::sessions::file::Trigger;
use crate::store::{AgentRecord, AgentUpdate};
use crate::switches::{Network, OnAsk};

/// Channels in the guild a command was run in (the adapter's serenity calls).
#[tonic::async_trait]
pub trait Guild: Send + Sync {
    /// Creates a text channel; returns its id.
    async fn create_text_channel(&self, name: &str, topic: &str) -> Result<u64, String>;
}

/// Who ran a command, and where.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user_id: u64,
    pub role_ids: Vec<String>,
    pub channel_id: u64,
}

/// What the person sees, and what follows the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    /// Seen only by the person who ran the command.
    pub private: bool,
    /// A channel to delete once the answer is given (a destroyed agent's).
    pub delete_channel: Option<u64>,
}

impl Reply {
    fn private(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            private: true,
            delete_channel: None,
        }
    }
}

/// Runs slash commands.
pub struct Actions {
    pub api: Services,
    pub settings: Settings,
    pub roles: DiscordRoles,
    pub outbox: Arc<Outbox>,
    /// `/task answer`'s answers until a task's round is whole (`tasks::Pending`).
    pub answers: std::sync::Mutex<Pending>,
}

/// Text for one line of a list: one line, at most `max` characters.
fn line(text: &str, max: usize) -> String {
    crate::cli::render::one_line(text, max)
}

/// Who may do `act`, in words.
fn who_may(act: Act) -> &'static str {
    match act.needs() {
        Role::Admin => "an admin",
        Role::Operator => "an operator or an admin",
        Role::Viewer => "anyone",
    }
}

impl Actions {
    pub async fn run(&self, invocation: Invocation, caller: &Caller, guild: &dyn Guild) -> Reply {
        let role = self.roles.role_of(&caller.role_ids);
        let user = access::user_id(caller.user_id);
        let by = Principal::person(&user);
        let act = invocation.act();
        if !allowed(role, act) {
            return Reply::private(format!(
                "Only {} may {}; your Discord roles make you a {}. \
                 An admin maps Discord roles to Chorus roles in `[discord.roles]`.",
                who_may(act),
                act.describe(),
                role.as_str()
            ));
        }
        let agent = if invocation.needs_channel_agent() {
            match self
                .api
                .store
                .agent_by_discord_channel(&caller.channel_id.to_string())
                .await
            {
                Ok(Some(agent)) => Some(agent),
                Ok(None) => {
                    return Reply::private(
                        "This channel belongs to no agent: run it in an agent's channel \
                         (`/agent list` shows them).",
                    );
                }
                Err(e) => {
                    return Reply::private(format!("Cannot look up this channel's agent: {e}"));
                }
            }
        } else {
            None
        };
        let private = invocation.private_answer();
        let result = match (invocation, agent) {
            (
                Invocation::AgentInit {
                    name,
                    system_prompt,
                    model,
                    permissions,
                },
                _,
            ) => {
                self.init(name, system_prompt, model, permissions, &by, role, guild)
                    .await
            }
            (Invocation::AgentDestroy { name, keep_files }, _) => {
                return self.destroy(&name, keep_files, &by).await;
            }
            (Invocation::AgentList, _) => self.list().await,
            (Invocation::AgentConfigure { name, key, value }, _) => {
                self.configure(&name, &key, &value, &by, role).await
            }
            (Invocation::ThreadList, Some(agent)) => self.threads(&agent).await,
            (Invocation::ThreadKill(what), Some(agent)) => self.kill(&agent, what, &user).await,
            (Invocation::ThreadHistory(id), Some(agent)) => self.history(&agent, id).await,
            (Invocation::ContextSave { description }, Some(agent)) => self
                .api
                .sessions
                .save(&agent, description, Trigger::ManualSave)
                .await
                .map(|s| {
                    format!(
                        "Saved session `{}`: {} ({} messages). The context is kept.",
                        s.id, s.description, s.message_count
                    )
                })
                .map_err(|e| e.to_string()),
            (Invocation::ContextClear, Some(agent)) => self.clear(&agent).await,
            (Invocation::ContextRestore { session }, Some(agent)) => {
                self.restore(&agent, &session, &user, caller.channel_id)
                    .await
            }
            (Invocation::ContextHistory, Some(agent)) => self.sessions(&agent).await,
            (Invocation::Status, _) => self.status().await,
            (Invocation::Jobs, Some(agent)) => self.jobs(&agent).await,
            (Invocation::Settings, _) => Ok(self.settings_text().await),
            (
                Invocation::TaskCreate {
                    title,
                    description,
                    review,
                },
                _,
            ) => self.task_create(title, description, review, &by).await,
            (Invocation::TaskList { status, agent }, _) => self.task_list(status, agent).await,
            (Invocation::TaskShow(id), _) => self
                .api
                .engine
                .view(id)
                .await
                .map(|task| task_text::show(&task))
                .map_err(|e| e.to_string()),
            (
                Invocation::TaskAnswer {
                    id,
                    question,
                    answer,
                },
                _,
            ) => self.task_answer(id, question, &answer, &by).await,
            (Invocation::TaskStart(id), _) => self.task_start(id, &by).await,
            (
                invocation @ (Invocation::ScheduleAdd { .. }
                | Invocation::ScheduleList
                | Invocation::ScheduleRuns(_)
                | Invocation::ScheduleRemove(_)
                | Invocation::ScheduleRun(_)),
                Some(agent),
            ) => self.schedule(&agent, invocation, &by).await,
            (Invocation::MemoryShow, Some(agent)) => self.memory(&agent.name).await,
            (Invocation::MemorySearch(query), Some(agent)) => {
                self.memory_search(&agent.name, &query).await
            }
            (Invocation::MemoryForget(id), Some(agent)) => self
                .api
                .agents
                .memory()
                .forget(&agent.name, &id, &by)
                .await
                .map(|file| format!("**{}**: forgot `{id}` (from memory/{file}).", agent.name))
                .map_err(|e| e.to_string()),
            (_, None) => Err("this command needs the channel's agent".into()),
        };
        match result {
            Ok(text) => Reply {
                text,
                private,
                delete_channel: None,
            },
            // A refusal is for the person who asked, not the channel.
            Err(why) => Reply::private(format!("Could not do that: {why}")),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn init(
        &self,
        name: String,
        system_prompt: String,
        model: Option<String>,
        permissions: Option<String>,
        user: &Principal,
        role: Role,
        guild: &dyn Guild,
    ) -> Result<String, String> {
        let agents = &self.api.agents;
        let created = agents
            .create(
                CreateAgent {
                    name: name.clone(),
                    system_prompt: Some(system_prompt.clone()),
                    model,
                    permissions: permissions.map(PermissionsSetting::Preset),
                    ..CreateAgent::default()
                },
                user,
                role,
            )
            .await
            .map_err(|e| e.to_string())?;
        let topic = line(system_prompt.lines().next().unwrap_or(""), 1000);
        let channel = match guild.create_text_channel(&created.name, &topic).await {
            Ok(channel) => channel,
            Err(why) => {
                // No agent without its channel: take the half-made agent back.
                let undone = agents.destroy(&created.name, false, user).await;
                return Err(format!(
                    "cannot create the channel '{}' ({why}); the agent was {}",
                    created.name,
                    if undone.is_ok() {
                        "not kept"
                    } else {
                        "created but not bound"
                    }
                ));
            }
        };
        let bound = agents
            .configure(
                &created.name,
                AgentUpdate {
                    discord_channel_id: Some(Some(channel.to_string())),
                    ..AgentUpdate::default()
                },
                user,
                role,
            )
            .await
            .map_err(|e| format!("the channel <#{channel}> was created but not bound: {e}"))?;
        self.api.runs.idle_configured(&bound.name).await;
        let welcome = welcome(&bound, &system_prompt);
        if let Err(e) = self.outbox.post(channel, 0, &welcome, None).await {
            tracing::warn!(agent = %bound.name, error = %e, "cannot post the welcome message");
        }
        Ok(format!("Created agent **{}** in <#{channel}>.", bound.name))
    }

    async fn destroy(&self, name: &str, keep_files: bool, user: &Principal) -> Reply {
        let channel = match self.api.store.active_agent(name).await {
            Ok(Some(agent)) => agent.discord_channel_id.and_then(|c| c.parse::<u64>().ok()),
            Ok(None) => {
                return Reply::private(format!("Could not do that: no agent named '{name}'"));
            }
            Err(e) => return Reply::private(format!("Could not do that: {e}")),
        };
        match self.api.agents.destroy(name, keep_files, user).await {
            Ok(()) => Reply {
                text: format!(
                    "Destroyed agent **{name}**{}{}.",
                    if keep_files {
                        "; its files are kept"
                    } else {
                        ""
                    },
                    if channel.is_some() {
                        "; its channel is deleted"
                    } else {
                        ""
                    }
                ),
                private: false,
                delete_channel: channel,
            },
            Err(e) => Reply::private(format!("Could not do that: {e}")),
        }
    }

    async fn list(&self) -> Result<String, String> {
        let agents = self
            .api
            .store
            .active_agents()
            .await
            .map_err(|e| e.to_string())?;
        if agents.is_empty() {
            return Ok("No agents yet: `/agent init <name> <system_prompt>` creates one.".into());
        }
        let mut out = format!("{} agents:\n", agents.len());
        for agent in agents {
            let going = self.api.runs.active_threads(&agent.name).await.len();
            out.push_str(&format!(
                "- **{}** {} · {} · {}{}\n",
                agent.name,
                agent
                    .discord_channel_id
                    .as_ref()
                    .map_or("(no channel)".to_string(), |c| format!("<#{c}>")),
                agent.model.as_deref().unwrap_or("default model"),
                agent.permissions,
                if going > 0 {
                    format!(" · {going} running")
                } else {
                    String::new()
                },
            ));
        }
        Ok(out)
    }

    async fn configure(
        &self,
        name: &str,
        key: &str,
        value: &str,
        user: &Principal,
        role: Role,
    ) -> Result<String, String> {
        let agents = &self.api.agents;
        // soul, user, heartbeat: the agent's identity files.
        if let Some(file) = chorus_proto::tools::IdentityFile::parse(key) {
            return agents
                .memory()
                .set_identity(name, file, value, user, None)
                .await
                .map(|_| {
                    format!(
                        "**{name}**: {} set; it applies from the next model call.",
                        file.file_name()
                    )
                })
                .map_err(|e| e.to_string());
        }
        let mut update = AgentUpdate::default();
        match key {
            "permissions" => {
                let name = agents
                    .set_permissions(name, PermissionsSetting::Preset(value.to_string()), role, user)
                    .await
                    .map_err(|e| e.to_string())?;
                return Ok(format!("Permissions set to {name}; they apply from the next tool call."));
            }
            "model" => update.model = Some(value.to_string()),
            "system_prompt" => update.system_prompt = Some(value.to_string()),
            "on_ask" => update.on_ask = Some(OnAsk::parse(value)?),
            "network" => update.network = Some(Network::parse(value)?),
            "backend" => {
                update.backend = Some(value.parse().map_err(|e: chorus_proto::backend::UnknownBackend| e.to_string())?)
            }
            "idle_timeout_secs" => {
                update.idle_timeout_secs = Some(match value {
                    "default" => None,
                    v => Some(v.parse::<u64>().map_err(|_| {
                        format!("idle_timeout_secs is a number of seconds (0: never) or `default`, not '{v}'")
                    })?),
                })
            }
            "discord_channel_id" => {
                update.discord_channel_id = Some(match value {
                    "none" => None,
                    v => Some(v.to_string()),
                })
            }
            other => {
                return Err(format!(
                    "'{other}' is not a setting; use model, system_prompt, permissions, on_ask, \
                     network, backend, idle_timeout_secs, discord_channel_id, soul, user or heartbeat"
                ));
            }
        }
        let agent = agents
            .configure(name, update, user, role)
            .await
            .map_err(|e| e.to_string())?;
        self.api.runs.idle_configured(&agent.name).await;
        Ok(format!("**{}**: {key} set.", agent.name))
    }

    /// `/memory show`: the size and limit, and the newest entries with their ids
    /// and where they came from (`chorus memory show` lists them all).
    /// `/memory search`: the best hits, one a line, within a Discord message.
    async fn memory_search(&self, agent: &str, query: &str) -> Result<String, String> {
        const MAX_CHARS: usize = 1800;
        let hits = self
            .api
            .agents
            .memory()
            .search(agent, query, None, &[])
            .await
            .map_err(|e| e.to_string())?
            .hits;
        if hits.is_empty() {
            return Ok(format!("**{agent}**: nothing found for \"{query}\"."));
        }
        let mut out = format!("**{agent}**: {} hits for \"{query}\"\n", hits.len());
        for hit in &hits {
            let line = format!("{}\n", crate::memory::search::hit_line(hit));
            if out.chars().count() + line.chars().count() > MAX_CHARS {
                out.push_str("(more: `chorus memory search`)");
                break;
            }
            out.push_str(&line);
        }
        Ok(out)
    }

    async fn memory(&self, agent: &str) -> Result<String, String> {
        const SHOWN: usize = 20;
        let listing = self
            .api
            .agents
            .memory()
            .list(agent)
            .await
            .map_err(|e| e.to_string())?;
        let mut out = format!(
            "**{agent}**'s long-term memory: {} of {}.\n",
            crate::memory::prompt::human(listing.size),
            crate::memory::prompt::human(listing.limit)
        );
        if listing.entries.is_empty() {
            out.push_str("No entries yet.");
            return Ok(out);
        }
        let skipped = listing.entries.len().saturating_sub(SHOWN);
        if skipped > 0 {
            out.push_str(&format!("({skipped} older entries not shown)\n"));
        }
        for (file, entry) in listing.entries.iter().skip(skipped) {
            let p = entry.provenance.clone().unwrap_or_default();
            let id = if p.id.is_empty() {
                "--------".to_string()
            } else {
                p.id.clone()
            };
            let from = match (p.thread_id, &p.by) {
                (Some(thread), _) => format!("thread {thread}"),
                (None, Some(by)) => by.clone(),
                (None, None) => "by hand".into(),
            };
            let text: String = entry.text.chars().take(200).collect();
            out.push_str(&format!("`{id}` {text} _({file}, {from})_\n"));
        }
        Ok(out)
    }

    async fn threads(&self, agent: &AgentRecord) -> Result<String, String> {
        let store = &self.api.store;
        let threads = store
            .threads(&agent.name)
            .await
            .map_err(|e| e.to_string())?;
        let retention = chrono::Duration::from_std(self.api.thread_retention).unwrap_or_default();
        let since = chrono::Utc::now() - retention;
        let shown: Vec<_> = threads
            .into_iter()
            .filter(|t| {
                t.ended_at
                    .as_deref()
                    .and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok())
                    .is_none_or(|ended| ended >= since)
            })
            .collect();
        if shown.is_empty() {
            return Ok(format!("**{}** has no recent threads.", agent.name));
        }
        let mut out = format!("Threads of **{}**:\n", agent.name);
        for t in shown {
            let title = match &t.summary {
                Some(summary) => summary.clone(),
                None => store
                    .thread_messages(&agent.name, t.id)
                    .await
                    .ok()
                    .and_then(|m| m.first().map(|m| m.message.content.clone()))
                    .unwrap_or_default(),
            };
            out.push_str(&format!(
                "- `#{}` {} · {}\n",
                t.id,
                t.status.as_str(),
                line(&title, 80)
            ));
        }
        Ok(out)
    }

    async fn kill(
        &self,
        agent: &AgentRecord,
        what: KillWhat,
        user: &str,
    ) -> Result<String, String> {
        let runs = &self.api.runs;
        let ids = match what {
            KillWhat::All => runs.active_threads(&agent.name).await,
            KillWhat::One(id) => vec![id],
        };
        let mut killed = Vec::new();
        for id in &ids {
            if runs
                .kill_thread(&agent.name, *id, user)
                .await
                .map_err(|e| e.to_string())?
            {
                killed.push(format!("#{id}"));
            }
        }
        Ok(match (what, killed.is_empty()) {
            (KillWhat::All, true) => format!("**{}** has no running thread.", agent.name),
            (KillWhat::One(id), true) => format!("Thread #{id} is not running; nothing to kill."),
            (_, false) => format!("Killed {}.", killed.join(", ")),
        })
    }

    async fn history(&self, agent: &AgentRecord, id: u64) -> Result<String, String> {
        let store = &self.api.store;
        let Some(thread) = store
            .thread(&agent.name, id)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Err(format!("**{}** has no thread #{id}", agent.name));
        };
        let messages = store
            .thread_messages(&agent.name, id)
            .await
            .map_err(|e| e.to_string())?;
        let mut out = format!("Thread #{id} ({}):\n", thread.status.as_str());
        for m in messages {
            let role = format!("{:?}", m.message.role).to_lowercase();
            let content = m.message.content.trim();
            if content.is_empty() {
                continue;
            }
            out.push_str(&format!("**{role}**: {}\n", line(content, 400)));
        }
        Ok(out)
    }

    async fn clear(&self, agent: &AgentRecord) -> Result<String, String> {
        let outcome = self
            .api
            .sessions
            .clear(agent)
            .await
            .map_err(|e| e.to_string())?;
        Ok(match outcome.saved {
            Some(s) => format!(
                "Saved as session `{}` ({}), then cleared.",
                s.id, s.description
            ),
            None => "Nothing to save; the context is clear.".into(),
        })
    }

    async fn restore(
        &self,
        agent: &AgentRecord,
        session: &str,
        user: &str,
        channel: u64,
    ) -> Result<String, String> {
        let restored = self
            .api
            .sessions
            .restore(agent, session.trim(), user)
            .await
            .map_err(|e| e.to_string())?;
        self.api.runs.touch(&agent.name).await;
        // A message the restored thread owns, so a reply continues it.
        let text = format!(
            "Restored session `{}`: {} ({} messages). Reply to this message to continue it.",
            restored.session.id, restored.session.description, restored.session.message_count
        );
        let posted = self
            .outbox
            .post(channel, restored.thread_id, &text, None)
            .await
            .map_err(|e| e.to_string())?;
        if let Err(e) = self
            .api
            .store
            .record_message_ref(
                FRONTEND,
                &posted.to_string(),
                &agent.name,
                restored.thread_id,
                u64::try_from(restored.message_id).ok(),
            )
            .await
        {
            tracing::warn!(agent = %agent.name, error = %e, "cannot record the restore message");
        }
        Ok(format!(
            "Restored into thread #{}{}.",
            restored.thread_id,
            restored
                .saved_before
                .map(|s| format!("; the context before it is saved as `{}`", s.id))
                .unwrap_or_default()
        ))
    }

    async fn sessions(&self, agent: &AgentRecord) -> Result<String, String> {
        let list = self
            .api
            .sessions
            .history(&agent.name, None, 25)
            .await
            .map_err(|e| e.to_string())?;
        if list.is_empty() {
            return Ok(format!("**{}** has no saved sessions.", agent.name));
        }
        let mut out = format!("Saved sessions of **{}**, newest first:\n", agent.name);
        for s in list {
            out.push_str(&format!(
                "- `{}` {} · {} · {} messages · {}\n",
                s.id,
                s.saved_at,
                s.trigger,
                s.message_count,
                line(&s.description, 80)
            ));
        }
        Ok(out)
    }

    async fn status(&self) -> Result<String, String> {
        let diagnosis = crate::doctor::diagnose(&self.settings, &self.api.catalog, true).await;
        let agents = self
            .api
            .store
            .active_agents()
            .await
            .map_err(|e| e.to_string())?;
        let mut running = 0;
        for agent in &agents {
            running += self.api.runs.active_threads(&agent.name).await.len();
        }
        let pending = self
            .api
            .store
            .pending_approvals(None)
            .await
            .map(|p| p.len())
            .unwrap_or(0);
        // The block ends with what to do next.
        Ok(format!(
            "```\n{}```\n{} agents, {running} running threads, {pending} approvals waiting.",
            diagnosis.render(),
            agents.len(),
        ))
    }

    async fn jobs(&self, agent: &AgentRecord) -> Result<String, String> {
        let jobs = self
            .api
            .store
            .jobs(&agent.name, 50)
            .await
            .map_err(|e| e.to_string())?;
        if jobs.is_empty() {
            return Ok(format!("**{}** has no background jobs.", agent.name));
        }
        let mut out = format!("Background jobs of **{}**:\n", agent.name);
        for t in jobs {
            out.push_str(&format!(
                "- job {} · {}{} · `{}` · since {}\n",
                t.id,
                t.status,
                t.exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default(),
                line(&t.command, 80),
                t.started_at
            ));
        }
        Ok(out)
    }

    async fn task_create(
        &self,
        title: String,
        description: String,
        review: bool,
        by: &Principal,
    ) -> Result<String, String> {
        let board = &self.api.tasks;
        let task = board
            .create(
                crate::tasks::CreateTask {
                    title,
                    description,
                    review,
                    ..crate::tasks::CreateTask::default()
                },
                by,
            )
            .await
            .map_err(|e| e.to_string())?;
        board.created(task.id);
        let follow = match &board.settings().discord_channel {
            Some(channel) => format!("its questions and its end are posted in <#{channel}>"),
            None => format!("`/task show id:{}` follows it", task.id),
        };
        Ok(format!(
            "Created task **#{}** {}: the planner plans it (or asks first); {follow}.",
            task.id,
            line(&task.title, 200)
        ))
    }

    async fn task_list(
        &self,
        status: Option<String>,
        agent: Option<String>,
    ) -> Result<String, String> {
        /// Past this many the list says how many more (`/task list status:…` narrows it).
        const SHOWN: usize = 25;
        let status = match status {
            Some(s) => Some(crate::tasks::TaskStatus::parse(&s).ok_or_else(|| {
                format!(
                    "'{s}' is not a task status; use one of {}",
                    crate::tasks::status::words(&crate::tasks::TaskStatus::ALL)
                )
            })?),
            None => None,
        };
        let filter = crate::store::TaskFilter {
            status,
            agent,
            text: None,
        };
        let tasks = self
            .api
            .engine
            .list(&filter)
            .await
            .map_err(|e| e.to_string())?;
        if tasks.is_empty() {
            return Ok("No tasks there: `/task create title:…` creates one.".into());
        }
        let mut out = format!("{} tasks, newest first:\n", tasks.len());
        for task in tasks.iter().take(SHOWN) {
            out.push_str(&task_text::list_line(task));
        }
        if tasks.len() > SHOWN {
            out.push_str(&format!(
                "… and {} more (narrow it with `status:` or `agent:`).\n",
                tasks.len() - SHOWN
            ));
        }
        Ok(out)
    }

    async fn task_answer(
        &self,
        id: u64,
        question: Option<String>,
        answer: &str,
        by: &Principal,
    ) -> Result<String, String> {
        let task = self.api.engine.view(id).await.map_err(|e| e.to_string())?;
        let open = task.open_questions();
        let round = open.first().map_or(0, |q| q.round);
        let gathered = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .add(id, &open, question.as_deref(), answer)?;
        let all = match gathered {
            Gathered::Missing { noted, missing } => {
                return Ok(format!(
                    "Noted the answer to `{noted}` of task #{id}. Still open: {}; \
                     they go on together once all are answered ({}).",
                    missing.join(", "),
                    task_text::how_to_answer(id, &missing[0])
                ));
            }
            Gathered::All(all) => all,
        };
        match self.api.engine.answer(id, &all, by).await {
            Ok(task) => Ok(format!(
                "Answered {} of task **#{id}**; it is {} now.",
                all.keys()
                    .map(|q| format!("`{q}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                task.status
            )),
            Err(e) => {
                // Kept, so answering again needs only what was wrong.
                self.answers
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .restore(id, round, all);
                Err(e.to_string())
            }
        }
    }

    async fn task_start(&self, id: u64, by: &Principal) -> Result<String, String> {
        let task = self
            .api
            .engine
            .start(id, by)
            .await
            .map_err(|e| e.to_string())?;
        Ok(format!(
            "Started task **#{id}** {}: **{}** works on it.",
            line(&task.title, 200),
            task.assignee.as_deref().unwrap_or("its agent")
        ))
    }

    async fn settings_text(&self) -> String {
        let s = &self.settings;
        let diagnosis = crate::doctor::diagnose(s, &self.api.catalog, true).await;
        let providers = diagnosis
            .providers
            .iter()
            .map(|(kind, state)| {
                format!(
                    "{:<11} {}",
                    kind.name(),
                    crate::doctor::describe_state(*kind, state)
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        format!(
            "Default model: {}\nDefault permissions for new agents: {DEFAULT_PERMISSIONS}\n\
             Idle timeout: {}\nContext window: {} h\nApprovals expire after: {} s\n\
             Provider keys (checked now):\n```\n{providers}\n```",
            s.default_model
                .as_deref()
                .unwrap_or("none (set CHORUS_DEFAULT_MODEL)"),
            s.context
                .idle_timeout
                .map_or("never".to_string(), |d| format!("{} s", d.as_secs())),
            s.context.window.as_secs() / 3600,
            s.ask_timeout.as_secs(),
        )
    }
}

/// The first message in a new agent's channel.
pub fn welcome(agent: &AgentRecord, system_prompt: &str) -> String {
    format!(
        "**{}** is ready.\n**Prompt:** {}\n**Model:** {}\n**Permissions:** {}\n\
         Write here to give it work; reply to one of its answers to continue that thread.",
        agent.name,
        line(system_prompt, 1200),
        agent.model.as_deref().unwrap_or("the default model"),
        agent.permissions,
    )
}
