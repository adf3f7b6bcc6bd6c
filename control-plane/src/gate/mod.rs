//! The tool gate (SPEC D1–D5, H8): the one authoritative check before any tool call.
//! A worker sends each call as the model made it; the gate derives its action
//! strings, decides with the agent's profile, asks a person when the profile says
//! ASK, audits the decision, executes the tools whose resource the control plane owns
//! (the agent's configuration), and answers the worker.
//!
//! Invariants: every call gets exactly one decision and one audit row; anything that
//! goes wrong (no profile, no answer, a restart) is a deny. When the profile asks and
//! the agent's `on_ask` is `allow`, the call is allowed without a person, which amounts
//! to granting the `open` preset (`switches::OnAsk`). A call of a tool granted to the
//! agent at run time (`agents::grants`) is allowed whatever the profile says, and
//! audited as an allow naming the grant.
//!
//! A CLI run's call that asks is held inside the CLI's tool call for
//! `cli_approval_hold` only (the CLI cuts a call at its own limit): then the thread's
//! actor is told (`Runs::defer`), the worker gets `ToolDeferred` (the model reads that
//! the call waits and ends its turn), and the gate keeps waiting for the person up
//! to `ask_timeout`. The answer is audited as any ask's, carried out here if the
//! control plane owns the resource, and goes to `Runs::resume_deferred` as a
//! `ResumedCall`: the thread's next run, not the worker that asked, gets it.
//!
//! A thread with a role in a task (`runs::roles`): a call of one of its role's tools
//! (`RoleHooks::owns`) is the role's finishing contract, not a permission: allowed
//! without the profile, audited as an allow saying so, and carried out by the task
//! engine (`RoleHooks::execute`). The same name called by a thread without that
//! role goes the normal way (an unknown tool, refused). Such a thread never waits
//! for a person: an ask its agent would put to one (`on_ask = prompt`) is a deny.
//!
//! Who may do what at a front end is [`policy`]: every front end checks a request's
//! role with [`policy::allowed`].

pub mod actions;
pub mod policy;
pub mod redact;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chorus_proto::domain::{ControlCommand, ResumedCall, ToolCall, ToolDecision, ToolResult};
use serde_json::json;

use crate::agents::AgentService;
use crate::feed::{Answer, ApprovalAnswered, ApprovalAsked, FeedEvent};
use crate::permissions::grants::Role;
use crate::permissions::profiles::{self, ProfileCache};
use crate::permissions::{Decision, Explanation, PermissionsSetting};
use crate::principal::{Frontend, Person, Principal, root_person};
use crate::questions::{Outcome, QuestionKind, Questions};
use crate::runs::Runs;
use crate::store::{
    AgentUpdate, AuditDecision, AuditEntry, NewApproval, Store, ThreadRole, format_time,
};
use crate::switches::OnAsk;
use crate::workers::registry::{Generation, Registry};
use actions::actions_for;
use opentelemetry::KeyValue;
use tracing::Instrument;

/// Settings of the gate.
#[derive(Debug, Clone)]
pub struct GateSettings {
    /// How long an ASK waits for a person before it is a deny.
    pub ask_timeout: Duration,
    /// How long a CLI run's call that asks waits inside the call; then it is
    /// deferred (see the module docs).
    pub cli_approval_hold: Duration,
    /// Roles by user id; `api` is whoever holds the API token.
    pub roles: HashMap<String, Role>,
    /// The role of users not listed.
    pub default_role: Role,
    /// Secrets to scrub from anything recorded (provider keys, the API token).
    pub known_secrets: crate::secrets::KnownSecrets,
    /// Roles a front end vouched for (Discord: from the member's roles).
    pub vouched: VouchedRoles,
}

/// Roles front ends learnt for their users as they acted (a Discord member's roles
/// when they wrote). Kept in memory: after a restart a user is vouched for again
/// at their next message, and until then has no more than a viewer's authority.
#[derive(Debug, Clone, Default)]
pub struct VouchedRoles(Arc<std::sync::RwLock<HashMap<String, Role>>>);

impl VouchedRoles {
    pub fn vouch(&self, user: &str, role: Role) {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(user.to_string(), role);
    }

    fn get(&self, user: &str) -> Option<Role> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(user)
            .copied()
    }
}

impl GateSettings {
    /// The role of `user`: `[roles]` first, then what a front end vouched for; a
    /// Discord user neither names is a viewer, anyone else has the default role.
    /// With no known user (a thread whose creator cannot be read), the lowest: an
    /// agent never acts with an authority nobody gave it.
    pub fn role_of(&self, user: Option<&str>) -> Role {
        self.role_of_person(user.map(Person::from_user_id).as_ref())
    }

    /// The role of a person (see [`GateSettings::role_of`]); `None`, the lowest.
    pub fn role_of_person(&self, person: Option<&Person>) -> Role {
        let Some(person) = person else {
            return Role::Viewer;
        };
        let user = person.user_id();
        if let Some(role) = self.roles.get(&user) {
            return *role;
        }
        if let Some(role) = self.vouched.get(&user) {
            return role;
        }
        match person.frontend {
            Frontend::Discord => Role::Viewer,
            Frontend::Http => self.default_role,
        }
    }
}

pub struct ToolGate {
    store: Store,
    registry: Arc<Registry>,
    runs: Arc<Runs>,
    agents: Arc<AgentService>,
    approvals: Arc<Questions>,
    profiles: Arc<ProfileCache>,
    settings: GateSettings,
}

/// The thread an ask is for, as the run's actor knows it.
struct Asker {
    thread_id: u64,
    user: Option<Principal>,
    backend: chorus_proto::domain::Backend,
}

/// A CLI run's call whose wait for a person outlived the hold: its answer goes to
/// the thread's next run (`Runs::resume_deferred`), not to the worker that asked.
struct Deferral {
    thread_id: u64,
    approval_id: String,
    answered_by: String,
}

/// The worker's question, with who asked.
pub struct Check {
    pub agent: String,
    pub generation: Generation,
    pub request_id: u64,
    pub run_id: String,
    pub call: ToolCall,
    /// The worker's trace context where it asked: the check's span joins it.
    pub trace_context: std::collections::HashMap<String, String>,
}

impl ToolGate {
    pub fn new(
        store: Store,
        registry: Arc<Registry>,
        runs: Arc<Runs>,
        agents: Arc<AgentService>,
        approvals: Arc<Questions>,
        profiles: Arc<ProfileCache>,
        settings: GateSettings,
    ) -> Self {
        ToolGate {
            store,
            registry,
            runs,
            agents,
            approvals,
            profiles,
            settings,
        }
    }

    /// The compiled profiles, by stored setting.
    pub fn profiles(&self) -> &ProfileCache {
        &self.profiles
    }

    pub fn approvals(&self) -> &Arc<Questions> {
        &self.approvals
    }

    /// The role of a user, for what they may grant.
    pub fn role_of(&self, user: Option<&str>) -> Role {
        self.settings.role_of(user)
    }

    /// A front end tells what role one of its users has (see [`VouchedRoles`]).
    pub fn vouch(&self, user: &str, role: Role) {
        self.settings.vouched.vouch(user, role);
    }

    /// Decides one check and answers the worker. Returns at once: an ASK may wait
    /// for minutes, and other checks (other threads) must not wait behind it.
    pub fn handle(self: &Arc<Self>, check: Check, tasks: &tokio_util::task::TaskTracker) {
        let gate = self.clone();
        tasks.spawn(async move {
            let request_id = check.request_id;
            let agent = check.agent.clone();
            let generation = check.generation;
            // The permission check is a span of the worker's trace, where it asked.
            let span = tracing::info_span!(
                "permission",
                agent = %check.agent,
                tool = %check.call.name,
                decision = tracing::field::Empty,
            );
            // Only into a trace the worker may write to (one of its agent's runs').
            crate::telemetry::continue_trace(
                &span,
                &gate
                    .runs
                    .traces()
                    .admit_context(&check.agent, &check.trace_context),
            );
            crate::telemetry::label(
                &span,
                &check.agent,
                None,
                vec![
                    KeyValue::new("gen_ai.tool.name", check.call.name.clone()),
                    KeyValue::new("gen_ai.tool.call.id", check.call.id.clone()),
                ],
            );
            let mut deferral = None;
            let decision = gate
                .decide(&check, &mut deferral)
                .instrument(span.clone())
                .await;
            let outcome = if decision.allowed { "allow" } else { "deny" };
            span.record("decision", outcome);
            crate::metrics::permission_decision(outcome);
            match deferral {
                // The run that asked has ended its turn: the answer is its thread's
                // next run.
                Some(Deferral {
                    thread_id,
                    approval_id,
                    answered_by,
                }) => {
                    let resumed = ResumedCall {
                        call: check.call,
                        allowed: decision.allowed,
                        message: decision.message,
                        result: decision.result,
                        approval_id,
                        answered_by,
                    };
                    gate.runs.resume_deferred(&agent, thread_id, resumed).await;
                }
                None => {
                    let decision = ToolDecision {
                        request_id,
                        ..decision
                    };
                    gate.reply(&agent, generation, ControlCommand::ToolDecision(decision));
                }
            }
        });
    }

    fn reply(&self, agent: &str, generation: Generation, command: ControlCommand) {
        match self.registry.sender(agent) {
            Some((current, sender)) if current == generation => {
                let _ = sender.send(command);
            }
            // The worker that asked is gone; its run has failed already.
            _ => tracing::debug!(agent, generation, "tool decision for a worker that is gone"),
        }
    }

    async fn decide(&self, check: &Check, deferral: &mut Option<Deferral>) -> ToolDecision {
        let deny = |message: String| ToolDecision {
            request_id: check.request_id,
            allowed: false,
            message,
            result: None,
        };
        // The run's thread, who started it and its role, from the actor that owns
        // the run (no read of the store).
        let Some(crate::runs::RunContext {
            thread_id,
            started_by,
            role,
            backend,
        }) = self
            .runs
            .run_context(&check.agent, check.generation, &check.run_id)
            .await
        else {
            return deny("this run is not known to the control plane; the tool was not run".into());
        };
        let Ok(Some(record)) = self.store.agent_policy(&check.agent).await else {
            return deny("the agent is not active; the tool was not run".into());
        };
        crate::telemetry::label(
            &tracing::Span::current(),
            &check.agent,
            Some(thread_id),
            Vec::new(),
        );
        let call = &check.call;
        let actions = actions_for(&call.name, &call.arguments);
        let secrets = &self.settings.known_secrets;
        let detail = redact::redact_arguments(&call.arguments, secrets);
        // What people see of the actions (audit, approvals): the decision uses the
        // real ones, the record never holds a known secret.
        let shown_actions: Vec<String> = actions.iter().map(|a| secrets.scrubbed(a)).collect();
        // A dial-in worker asked: the audit row names its credential.
        let worker = self.registry.credential_of(&check.agent, check.generation);
        // `answered_by`: who answered an ask (the row's user is the thread's).
        let audit = |decision: AuditDecision,
                     explanations: Option<&[Explanation]>,
                     answered_by: Option<&str>| {
            let mut detail = match explanations {
                Some(explanations) => {
                    json!({"arguments": detail, "why": explanations.iter().map(|e| &e.reason).collect::<Vec<_>>()})
                }
                None => json!({"arguments": detail}),
            };
            if let Some(by) = answered_by {
                detail["answered_by"] = json!(by);
            }
            let mut detail = detail.to_string();
            secrets.scrub(&mut detail);
            let action = shown_actions.join("\n");
            let store = self.store.clone();
            let agent = check.agent.clone();
            let user = started_by.clone();
            let call_id = call.id.clone();
            let worker = worker.clone();
            async move {
                let entry = AuditEntry {
                    agent_name: &agent,
                    action: &action,
                    decision,
                    user_id: user.as_ref(),
                    detail: Some(detail),
                    thread_id: Some(thread_id),
                    call_id: Some(&call_id),
                    worker: worker.as_deref(),
                };
                if let Err(e) = store.audit(entry).await {
                    tracing::error!(%agent, error = %e, "cannot write audit entry");
                }
            }
        };

        // A role's finishing tool, called by a thread with that role: its contract,
        // not the profile's, says it may (and only the engine carries it out).
        if let (Some(role), Some(hooks)) = (role, self.runs.role_hooks())
            && hooks.owns(role, &call.name)
        {
            let contract = [role_explanation(
                &shown_actions.join(" "),
                Decision::Allow,
                format!("finishing contract of the {role} role"),
            )];
            audit(AuditDecision::Allow, Some(&contract), None).await;
            let result = hooks
                .execute(
                    &check.agent,
                    thread_id,
                    &check.run_id,
                    role,
                    &call.name,
                    &call.arguments,
                )
                .await;
            return ToolDecision {
                request_id: check.request_id,
                allowed: true,
                message: String::new(),
                result: Some(match result {
                    Ok(content) => ToolResult {
                        content,
                        is_error: false,
                    },
                    Err(content) => ToolResult {
                        content,
                        is_error: true,
                    },
                }),
            };
        }
        let profile = match self.profiles.get(&record.permissions) {
            Ok(profile) => profile,
            Err(e) => {
                audit(AuditDecision::Deny, None, None).await;
                return deny(format!(
                    "the agent's permission profile cannot be used ({e}); every tool call is denied until it is fixed"
                ));
            }
        };
        let (decision, explanations) = actions::decide_actions(&profile, &actions);
        // Every arm either audits an allow and falls through to execution, or audits
        // a deny and returns it.
        match decision {
            Decision::Allow => audit(AuditDecision::Allow, Some(&explanations), None).await,
            // A granted tool: every call is allowed, whatever the profile says
            // (`agents::grants`); the audit row says so and what the profile said.
            Decision::Ask | Decision::Deny if granted(&record.grants, &call.name) => {
                let explanations = by_grant(explanations);
                audit(AuditDecision::Allow, Some(&explanations), None).await
            }
            Decision::Deny => {
                audit(AuditDecision::Deny, Some(&explanations), None).await;
                return deny(denial(&profile_label(&record.permissions), &explanations));
            }
            Decision::Ask => match record.on_ask {
                OnAsk::Allow => {
                    audit(AuditDecision::AskAutoAllowed, Some(&explanations), None).await
                }
                OnAsk::Deny => {
                    audit(AuditDecision::AskAutoDenied, Some(&explanations), None).await;
                    return deny(format!(
                        "Permission denied: {} needs a person's approval and this agent does not ask (on_ask = deny)",
                        asked(&explanations)
                    ));
                }
                // A task's or a schedule's run never waits for a person on a
                // permission: its ask resolves as its agent's `on_ask`, `prompt` as a deny.
                OnAsk::Prompt if let Some(who) = unattended(role, started_by.as_ref()) => {
                    let mut why = explanations.clone();
                    why.push(role_explanation(
                        &asked(&explanations),
                        Decision::Deny,
                        format!("{who} never waits for a person: on_ask = prompt resolves as deny"),
                    ));
                    audit(AuditDecision::AskAutoDenied, Some(&why), None).await;
                    return deny(format!(
                        "Permission denied: {} needs a person's approval, and {who} does not wait for one \
                         (its agent's on_ask is prompt, which is a deny here); do without it, or finish with what you have",
                        asked(&explanations)
                    ));
                }
                OnAsk::Prompt => {
                    let answer = self
                        .ask(
                            check,
                            Asker {
                                thread_id,
                                user: started_by.clone(),
                                backend,
                            },
                            &shown_actions,
                            &detail,
                            &explanations,
                            deferral,
                        )
                        .await;
                    match answer {
                        Ok(Outcome::Answered(answer)) if answer.approved() => {
                            audit(
                                AuditDecision::AskApproved,
                                Some(&explanations),
                                Some(&answer.by.text()),
                            )
                            .await
                        }
                        Ok(Outcome::Answered(answer)) => {
                            audit(
                                AuditDecision::AskDenied,
                                Some(&explanations),
                                Some(&answer.by.text()),
                            )
                            .await;
                            return deny(format!(
                                "Permission denied by {}: {} was not approved",
                                answer.by,
                                asked(&explanations)
                            ));
                        }
                        Ok(Outcome::Expired) => {
                            audit(AuditDecision::AskExpired, Some(&explanations), None).await;
                            return deny(format!(
                                "Permission denied: nobody approved {} within {:.0?}",
                                asked(&explanations),
                                self.settings.ask_timeout
                            ));
                        }
                        Err(message) => {
                            audit(AuditDecision::Deny, Some(&explanations), None).await;
                            return deny(message);
                        }
                    }
                }
            },
        }
        ToolDecision {
            request_id: check.request_id,
            allowed: true,
            message: String::new(),
            result: self
                .execute_here(check, thread_id, started_by.as_ref())
                .await,
        }
    }

    /// Asks a person: records the request, tells the worker (a step) and the live
    /// feed, marks the thread waiting, and waits for the answer or the timeout.
    async fn ask(
        &self,
        check: &Check,
        Asker {
            thread_id,
            user,
            backend,
        }: Asker,
        actions: &[String],
        detail: &str,
        explanations: &[Explanation],
        deferral: &mut Option<Deferral>,
    ) -> Result<Outcome, String> {
        let id = uuid::Uuid::new_v4().to_string();
        let expires = chrono::Utc::now()
            + chrono::Duration::from_std(self.settings.ask_timeout)
                .unwrap_or(chrono::Duration::minutes(10));
        let request = NewApproval {
            id: id.clone(),
            kind: QuestionKind::Approval,
            agent_name: check.agent.clone(),
            thread_id,
            call_id: check.call.id.clone(),
            tool: check.call.name.clone(),
            actions: actions.to_vec(),
            detail: Some(detail.to_string()),
            requested_by: user,
            expires_at: format_time(expires),
        };
        // The thread is marked waiting before the request becomes visible, so whoever
        // sees an approval in the list also sees its thread waiting for it.
        self.runs.set_waiting(&check.agent, thread_id, true).await;
        let answer = match self.approvals.open(&request).await {
            Ok(answer) => answer,
            Err(e) => {
                self.runs.set_waiting(&check.agent, thread_id, false).await;
                return Err(format!(
                    "Permission denied: the approval request could not be recorded ({e})"
                ));
            }
        };
        let description = format!("Waiting for permission: {}", asked(explanations));
        self.reply(
            &check.agent,
            check.generation,
            ControlCommand::ToolPending {
                request_id: check.request_id,
                description: description.clone(),
                approval_id: id.clone(),
            },
        );
        tracing::info!(
            agent = %check.agent,
            thread_id,
            tool = %check.call.name,
            actions = %actions.join(", "),
            "approval {id} waiting: answer with chorus approve {id} (or chorus deny {id})"
        );
        self.runs.publish_approval(
            &check.agent,
            thread_id,
            ApprovalAsked {
                approval_id: id.clone(),
                tool: check.call.name.clone(),
                actions: actions.to_vec(),
                expires_at: request.expires_at.clone(),
                // Why it asks (the rules), for front ends that show the request.
                why: explanations
                    .iter()
                    .filter(|e| e.decision == Decision::Ask)
                    .map(|e| {
                        self.settings
                            .known_secrets
                            .scrubbed(&format!("{}: {}", e.action, e.reason))
                    })
                    .collect(),
            },
        );
        // The wait for a person is a span of its own, with how it ended.
        let wait_span = tracing::info_span!(
            "approval_wait",
            approval_id = %id,
            outcome = tracing::field::Empty,
            by = tracing::field::Empty,
        );
        crate::telemetry::label(&wait_span, &check.agent, Some(thread_id), Vec::new());
        let wait = self
            .approvals
            .wait(&id, answer, self.settings.ask_timeout)
            .instrument(wait_span.clone());
        tokio::pin!(wait);
        // A CLI cuts a tool call after its own limit: past the hold, the call is
        // answered "deferred", the run ends its turn, and the wait goes on here.
        let outcome = if backend.cli().is_some() {
            tokio::select! {
                outcome = &mut wait => outcome,
                () = tokio::time::sleep(self.settings.cli_approval_hold) => {
                    self.defer(check, thread_id, &id, explanations).await;
                    *deferral = Some(Deferral {
                        thread_id,
                        approval_id: id.clone(),
                        answered_by: String::new(),
                    });
                    wait.await
                }
            }
        } else {
            wait.await
        };
        if let (Some(deferral), Outcome::Answered(answer)) = (deferral.as_mut(), &outcome) {
            deferral.answered_by = answer.by.text();
        }
        match &outcome {
            Outcome::Answered(answer) => {
                wait_span.record(
                    "outcome",
                    if answer.approved() {
                        "approved"
                    } else {
                        "denied"
                    },
                );
                wait_span.record("by", answer.by.text().as_str());
            }
            Outcome::Expired => {
                wait_span.record("outcome", "expired");
            }
        }
        let answered = match &outcome {
            Outcome::Answered(answer) if answer.approved() => Answer::Approved {
                by: answer.by.text(),
            },
            Outcome::Answered(answer) => Answer::Denied {
                by: answer.by.text(),
            },
            Outcome::Expired => Answer::Expired,
        };
        tracing::info!(
            agent = %check.agent,
            thread_id,
            outcome = %answered.as_str(),
            by = answered.by().unwrap_or("-"),
            "approval {id} answered"
        );
        self.runs.publish(
            &check.agent,
            thread_id,
            FeedEvent::ApprovalAnswered(ApprovalAnswered {
                approval_id: id.clone(),
                answer: answered,
            }),
        );
        // A deferred call's thread has no run now: the answer starts its next one.
        if deferral.is_none() {
            self.runs.set_waiting(&check.agent, thread_id, false).await;
        }
        Ok(outcome)
    }

    /// Ends the wait inside a CLI run's call: the thread's actor is told first (so
    /// the run's end keeps the thread waiting), then the worker.
    async fn defer(&self, check: &Check, thread_id: u64, id: &str, explanations: &[Explanation]) {
        self.runs.defer(&check.agent, thread_id).await;
        tracing::info!(
            agent = %check.agent,
            thread_id,
            approval_id = id,
            "approval {id} not answered within the CLI hold; the call is deferred and the turn ends"
        );
        self.reply(
            &check.agent,
            check.generation,
            ControlCommand::ToolDeferred {
                request_id: check.request_id,
                message: format!(
                    "Waiting for a person's approval of {} (request {id}). The call has not run. \
                     End your turn now, without calling more tools: when the person answers, \
                     this conversation goes on with the call's result or its refusal.",
                    asked(explanations)
                ),
                approval_id: id.to_string(),
            },
        );
    }

    /// A self-edit through the same path as a person's configure (checked, stored,
    /// audited with old and new value, sent to the running runs).
    async fn configure(
        &self,
        agent: &str,
        update: AgentUpdate,
        (user, role): (&Principal, Role),
        done: String,
    ) -> Result<String, String> {
        self.agents
            .configure(agent, update, user, role)
            .await
            .map(|_| done)
            .map_err(|e| e.to_string())
    }

    /// The role an agent's self-edit is checked with: that of the person at the root
    /// of its thread's chain (an agent started by an agent acts for whoever started
    /// that one, and so on), so no agent grants more than the person it acts for.
    /// No person at the root (the scheduler, a thread that cannot be read): the
    /// lowest role.
    async fn authority(&self, started_by: Option<&Principal>) -> Role {
        authority(&self.store, &self.settings, started_by).await
    }

    /// The identity and memory tools (`crate::memory`), for the agent's own files.
    async fn execute_memory(
        &self,
        name: &str,
        check: &Check,
        thread_id: u64,
        by: &Principal,
    ) -> Result<String, String> {
        use chorus_proto::tools::{
            self as registry, MemoryGet, MemorySearch, MemoryText, Remember, parse_args,
        };
        let memory = self.agents.memory();
        let agent = check.agent.as_str();
        let source = crate::memory::Source::Call {
            thread_id,
            call_id: check.call.id.clone(),
        };
        let arguments = &check.call.arguments;
        let result = match name {
            registry::REMEMBER => match parse_args::<Remember>(arguments) {
                Ok(args) => {
                    memory
                        .remember(agent, &args.text, &args.replaces, source)
                        .await
                }
                Err(_) => return Err(format!("{name} needs {{\"text\": \"…\"}}")),
            },
            registry::LOG_NOTE => match parse_args::<MemoryText>(arguments) {
                Ok(args) => memory.log_note(agent, &args.text, source).await,
                Err(_) => return Err(format!("{name} needs {{\"text\": \"…\"}}")),
            },
            registry::MEMORY_GET => match parse_args::<MemoryGet>(arguments) {
                Ok(args) => memory.get(agent, &args.path, args.from, args.lines).await,
                Err(_) => {
                    return Err(format!(
                        "{name} needs {{\"path\": \"MEMORY.md\"}} (from and lines optional)"
                    ));
                }
            },
            registry::MEMORY_SEARCH => match parse_args::<MemorySearch>(arguments) {
                Ok(args) => {
                    let mut sources = Vec::new();
                    for s in &args.sources {
                        sources.push(crate::store::SearchSource::parse(s).ok_or_else(|| {
                            format!("'{s}' is not a source: use memory, session or message")
                        })?);
                    }
                    memory
                        .search(agent, &args.query, args.k, &sources)
                        .await
                        .map(|answer| crate::memory::search::hits_text(&answer.hits))
                }
                Err(_) => {
                    return Err(format!(
                        "{name} needs {{\"query\": \"…\"}} (k and sources optional)"
                    ));
                }
            },
            _ => {
                let edit = registry::parse_identity_edit(arguments)?;
                memory
                    .set_identity(agent, edit.file, &edit.content, by, Some(thread_id))
                    .await
            }
        };
        result.map_err(|e| e.to_string())
    }

    /// Executes the tools whose resource the control plane owns. `None`: the worker
    /// runs the tool itself.
    async fn execute_here(
        &self,
        check: &Check,
        thread_id: u64,
        started_by: Option<&Principal>,
    ) -> Option<ToolResult> {
        use chorus_proto::tools::{
            self as registry, NewModel, NewProfile, NewPrompt, RunsIn, parse_args,
        };
        let tool = registry::find(&check.call.name)?;
        if tool.runs_in != RunsIn::ControlPlane {
            return None;
        }
        let arguments = &check.call.arguments;
        // What may be granted follows the person at the root of the thread's chain
        // (none: the lowest role; a person's thread costs no read of the store); the
        // principal below only attributes the change in the audit log.
        let role = self.authority(started_by).await;
        let by = started_by
            .cloned()
            .unwrap_or_else(|| Principal::agent(&check.agent, thread_id));
        let user = &by;
        let result = match tool.name {
            registry::SELF_EDIT_SYSTEM_PROMPT => match parse_args::<NewPrompt>(arguments) {
                Ok(NewPrompt { new_prompt: prompt }) => {
                    let done = format!(
                        "System prompt updated ({} characters); it applies from your next step.",
                        prompt.chars().count()
                    );
                    let update = AgentUpdate {
                        system_prompt: Some(prompt),
                        ..AgentUpdate::default()
                    };
                    self.configure(&check.agent, update, (user, role), done)
                        .await
                }
                Err(_) => Err(format!("{} needs {{\"new_prompt\": \"…\"}}", tool.name)),
            },
            registry::SELF_EDIT_MODEL => match parse_args::<NewModel>(arguments) {
                Ok(NewModel { new_model: model }) => {
                    let done =
                        format!("Model switched to {model}; it answers from your next step.");
                    let update = AgentUpdate {
                        model: Some(model),
                        ..AgentUpdate::default()
                    };
                    self.configure(&check.agent, update, (user, role), done)
                        .await
                }
                Err(_) => Err(format!("{} needs {{\"new_model\": \"…\"}}", tool.name)),
            },
            registry::SELF_EDIT_PERMISSIONS => match parse_args::<NewProfile>(arguments) {
                Ok(NewProfile { new_profile }) => match serde_json::from_value::<PermissionsSetting>(
                    new_profile,
                ) {
                    Ok(setting) => self
                        .agents
                        .set_permissions(&check.agent, setting, role, user)
                        .await
                        .map(|name| {
                            format!(
                                "Permissions set to {name}; they apply from your next tool call."
                            )
                        })
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(format!(
                        "new_profile is not a preset name or a profile: {e}"
                    )),
                },
                Err(_) => Err(format!(
                    "{} needs {{\"new_profile\": \"standard\"}} or a profile object",
                    tool.name
                )),
            },
            registry::REMEMBER
            | registry::LOG_NOTE
            | registry::MEMORY_GET
            | registry::MEMORY_SEARCH
            | registry::SELF_EDIT_IDENTITY => {
                self.execute_memory(tool.name, check, thread_id, user).await
            }
            other => Err(format!(
                "the control plane has no executor for {other}; the call was not run"
            )),
        };
        Some(match result {
            Ok(content) => ToolResult {
                content,
                is_error: false,
            },
            Err(content) => ToolResult {
                content,
                is_error: true,
            },
        })
    }
}

/// See [`ToolGate::authority`]: who started each thread along the chain is read from
/// the store (`threads.created_by`).
async fn authority(store: &Store, settings: &GateSettings, started_by: Option<&Principal>) -> Role {
    let root = root_person(started_by.cloned(), |agent, thread| async move {
        match store.thread(&agent, thread).await {
            Ok(Some(record)) => record.created_by,
            _ => None,
        }
    })
    .await;
    settings.role_of_person(root.as_ref())
}

/// Whether the tool called `name` (any of its names) is granted to the agent.
fn granted(grants: &[String], name: &str) -> bool {
    chorus_proto::tools::find(name).is_some_and(|tool| grants.iter().any(|g| g == tool.name))
}

/// The explanations of a call allowed by a grant: each action allowed, saying what
/// the profile would have done.
fn by_grant(explanations: Vec<Explanation>) -> Vec<Explanation> {
    explanations
        .into_iter()
        .map(|e| Explanation {
            reason: format!(
                "allowed: the tool is granted to this agent (the profile: {})",
                e.reason
            ),
            decision: Decision::Allow,
            list: None,
            rule_index: None,
            pattern: None,
            about: None,
            action: e.action,
        })
        .collect()
}

/// Who no person waits behind: a thread with a task's role, or one the scheduler
/// started (`schedules`); `None` for a thread a person (or their agent) started.
fn unattended(role: Option<ThreadRole>, started_by: Option<&Principal>) -> Option<String> {
    match (role, started_by) {
        (Some(role), _) => Some(format!("a thread with the {role} role")),
        (None, Some(Principal::Scheduler)) => Some("a scheduled thread".into()),
        _ => None,
    }
}

/// A decision the profile did not make (a role's contract), as the audit row's
/// explanation.
fn role_explanation(action: &str, decision: Decision, reason: String) -> Explanation {
    Explanation {
        action: action.to_string(),
        decision,
        list: None,
        rule_index: None,
        pattern: None,
        about: None,
        reason,
    }
}

/// How a profile is named in messages.
fn profile_label(stored: &str) -> String {
    match profiles::from_stored(stored) {
        Ok(PermissionsSetting::Preset(name)) => format!("'{name}'"),
        _ => "the agent's custom profile".into(),
    }
}

/// The actions that need approval, for messages.
fn asked(explanations: &[Explanation]) -> String {
    let asked: Vec<&str> = explanations
        .iter()
        .filter(|e| e.decision == Decision::Ask)
        .map(|e| e.action.as_str())
        .collect();
    asked.join(", ")
}

/// The model-facing message of a deny: which action, and why.
fn denial(profile: &str, explanations: &[Explanation]) -> String {
    let denied: Vec<String> = explanations
        .iter()
        .filter(|e| e.decision == Decision::Deny)
        .map(|e| format!("{} ({})", e.action, e.reason))
        .collect();
    format!(
        "Permission denied by profile {profile}: {}. Do not retry this; find another way or ask the user.",
        denied.join("; ")
    )
}

impl std::fmt::Debug for ToolGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolGate")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_known_user_the_role_is_the_lowest_whatever_the_settings_say() {
        let settings = GateSettings {
            ask_timeout: Duration::from_secs(1),
            cli_approval_hold: Duration::from_secs(1),
            // Even a user id that happens to be the audit log's placeholder.
            roles: HashMap::from([("agent".to_string(), Role::Admin)]),
            default_role: Role::Operator,
            known_secrets: Default::default(),
            vouched: Default::default(),
        };
        assert_eq!(settings.role_of(None), Role::Viewer);
        assert_eq!(settings.role_of(Some("someone")), Role::Operator);
        assert_eq!(settings.role_of(Some("agent")), Role::Admin);
    }

    #[test]
    fn a_discord_user_has_the_role_vouched_for_and_is_a_viewer_until_then() {
        let settings = GateSettings {
            ask_timeout: Duration::from_secs(1),
            cli_approval_hold: Duration::from_secs(1),
            roles: HashMap::from([("discord:1".to_string(), Role::Admin)]),
            default_role: Role::Operator,
            known_secrets: Default::default(),
            vouched: Default::default(),
        };
        assert_eq!(settings.role_of(Some("discord:2")), Role::Viewer);
        settings.vouched.vouch("discord:2", Role::Operator);
        assert_eq!(settings.role_of(Some("discord:2")), Role::Operator);
        // [roles] names a user for good; a vouch does not override it.
        settings.vouched.vouch("discord:1", Role::Viewer);
        assert_eq!(settings.role_of(Some("discord:1")), Role::Admin);
    }

    /// An agent principal (a thread an agent started, as delegation will) may grant
    /// no more than the person at the root of its chain, whatever `[roles]` says
    /// about the agent's own name.
    #[tokio::test]
    async fn an_agent_grants_no_more_than_the_person_at_the_root_of_its_chain() {
        use crate::permissions::grants::may_grant;
        use chorus_proto::domain::ChatMessage;
        let (store, _dir) = crate::store::test_store_with_agent().await;
        let start = |by: String| {
            let store = store.clone();
            async move {
                store
                    .start_thread("a", &ChatMessage::user("x"), &by, None)
                    .await
                    .unwrap()
                    .0
            }
        };
        let by_olga = start("olga".into()).await;
        let by_agent = start(Principal::agent("a", by_olga).text()).await;
        let by_agent_of_agent = start(Principal::agent("a", by_agent).text()).await;
        let by_scheduler = start(Principal::Scheduler.text()).await;
        let settings = GateSettings {
            ask_timeout: Duration::from_secs(1),
            cli_approval_hold: Duration::from_secs(1),
            roles: HashMap::from([
                ("olga".to_string(), Role::Operator),
                // Names an admin could give by mistake (or an attacker might pick):
                // the agent's own text form, and the scheduler's.
                (Principal::agent("a", by_agent).text(), Role::Admin),
                (Principal::Scheduler.text(), Role::Admin),
            ]),
            default_role: Role::Admin,
            known_secrets: Default::default(),
            vouched: Default::default(),
        };
        let role = |p: Principal| {
            let (store, settings) = (store.clone(), settings.clone());
            async move { authority(&store, &settings, Some(&p)).await }
        };
        // Positive control: looked up by its own name, the agent would be an admin.
        assert_eq!(
            settings.role_of(Some(&Principal::agent("a", by_agent).text())),
            Role::Admin
        );
        for thread in [by_agent, by_agent_of_agent] {
            let agent = Principal::agent("a", thread);
            assert_eq!(role(agent.clone()).await, Role::Operator, "{agent}");
            assert!(!may_grant(role(agent.clone()).await, Some("open")));
            assert!(may_grant(role(agent).await, Some("standard")));
        }
        assert_eq!(role(Principal::person("olga")).await, Role::Operator);
        // No person at the root: the scheduler, a thread that does not exist.
        assert_eq!(
            role(Principal::agent("a", by_scheduler)).await,
            Role::Viewer
        );
        assert_eq!(role(Principal::agent("a", 9999)).await, Role::Viewer);
        assert_eq!(
            role(Principal::agent("nobody", by_olga)).await,
            Role::Viewer
        );
        assert_eq!(authority(&store, &settings, None).await, Role::Viewer);
    }
}
