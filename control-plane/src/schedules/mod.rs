//! Schedules (issue 30, J5): an agent's prompt that starts a thread on a cron
//! expression in an IANA zone, or once at an instant (`/api/agents/{name}/schedules`).
//!
//! **Pure parts**: [`cron`] (parsing, the next firing in a zone, daylight saving) and
//! [`timing`] (the when, the missed-firing policy, the loop's step); tested with fixed
//! instants. **I/O**: the [`Scheduler`] here, over the store (`store::schedules`).
//!
//! **The loop** reads the earliest next firing of every active agent's unpaused
//! schedule and sleeps until it (at most [`RECHECK`], so a wall-clock jump is seen),
//! or until a schedule is created, changed, deleted or run ([`Scheduler::changed`]).
//! It never polls: with no schedule it sleeps until woken. At a due firing it stores
//! the next one first (a crash then loses at most that firing, never repeats it),
//! then starts the run. Times are stored in UTC (RFC 3339); the next firing is
//! computed with the schedule's zone each time.
//!
//! **Missed firings**: a firing due before this control plane started was missed
//! while Chorus was down; per schedule, `on_missed = "run_once"` (the default) runs
//! it once at start whatever number were missed, `"skip"` waits for the next future
//! one. A firing due after the start runs however late the loop wakes; the firings
//! between it and now are folded into it (never a burst).
//!
//! **A run** is a new thread of the agent whose principal is the scheduler
//! (`Principal::Scheduler`), with the schedule's prompt as its first message. It never
//! waits for a person: an `ask` resolves as the agent's `on_ask`, `prompt` as a deny
//! (the gate). At most one run per schedule goes at a time: a firing while the last
//! run goes is recorded `skipped`; "run now" is refused (409) instead. A run's end is
//! read from the thread's final status in the feed (and from the store at start and
//! when the feed lagged); its tokens are its thread's model calls'. A schedule whose
//! runs fail `[schedules] pause_after_failures` times in a row (default 3) is paused,
//! with a notification in the feed, which Discord posts in the agent's channel.

pub mod cron;
pub mod timing;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::config::ScheduleSettings;
use crate::feed::Notification;
use crate::principal::Principal;
use crate::runs::Runs;
use crate::store::{
    AgentRecord, GoingRun, NewSchedule, RunCause, ScheduleRecord, ScheduleRunRecord,
    ScheduleRunStatus, Store, StoreError, ThreadStatus, format_time,
};
pub use timing::{OnMissed, When};

/// The longest the loop sleeps before it reads the next firing again: a change of
/// the wall clock (the loop sleeps on the monotonic one) is seen within this.
pub const RECHECK: Duration = Duration::from_secs(600);

/// Runs listed by `GET …/schedules/{id}/runs`, newest first.
const RUNS_LISTED: u32 = 100;

/// What went wrong, for the front ends (HTTP: 400, 404, 409, or the store's).
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A new schedule (`POST`) or a change to one (`PATCH`: only what is sent changes).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRequest {
    pub prompt: Option<String>,
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub at: Option<String>,
    pub on_missed: Option<String>,
    pub paused: Option<bool>,
}

/// A schedule as the API shows it.
pub fn view(s: &ScheduleRecord) -> Value {
    json!({
        "id": s.id,
        "agent": s.agent_name,
        "prompt": s.prompt,
        "cron": s.cron,
        "timezone": s.timezone,
        "at": s.run_at,
        "on_missed": s.on_missed,
        "paused": s.paused,
        "failures": s.failures,
        "next_run_at": s.next_run_at,
        "created_by": s.created_by,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    })
}

fn when_of(s: &ScheduleRecord) -> Result<When, String> {
    When::from_request(
        s.cron.as_deref(),
        s.timezone.as_deref(),
        s.run_at.as_deref(),
    )
}

pub(crate) fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The wait of a timing loop (this one's and the heartbeats'): until `next` (as the
/// store read it), at most [`RECHECK`] so a wall-clock jump is seen, or until `wake`
/// is notified. True when the time came; false when woken (read `next` again). A store
/// error is logged, naming `what`, and tried again in 30 s.
pub(crate) async fn wait_for_next(
    next: Result<Option<String>, crate::store::StoreError>,
    wake: &Notify,
    what: &str,
) -> bool {
    let next = match next {
        Ok(next) => next.as_deref().and_then(parse_time),
        Err(e) => {
            tracing::error!(error = %e, "{what}: cannot read the next time; trying again soon");
            Some(Utc::now() + chrono::Duration::seconds(30))
        }
    };
    let sleep = match next {
        Some(next) => (next - Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO)
            .min(RECHECK),
        None => RECHECK,
    };
    tokio::select! {
        _ = wake.notified() => false,
        _ = tokio::time::sleep(sleep) => true,
    }
}

fn check_prompt(prompt: &str) -> Result<String, ScheduleError> {
    if prompt.trim().is_empty() {
        return Err(ScheduleError::BadRequest(
            "prompt is empty; send the message the agent gets at each firing".into(),
        ));
    }
    Ok(prompt.to_string())
}

/// The next firing of a schedule set or changed now: a one-shot's `at` must still
/// be ahead, a cron must fire some time.
fn first_firing(when: &When, now: DateTime<Utc>) -> Result<DateTime<Utc>, ScheduleError> {
    match (when, when.next_after(now)) {
        (_, Some(next)) => Ok(next),
        (When::At(at), None) => Err(ScheduleError::BadRequest(format!(
            "at {} has passed; send a time in the future (RFC 3339, like {})",
            format_time(*at),
            format_time(now + chrono::Duration::hours(1))
        ))),
        (When::Cron { text, .. }, None) => Err(ScheduleError::BadRequest(format!(
            "the cron expression '{text}' never fires (no matching date in five years); send one that does"
        ))),
    }
}

pub struct Scheduler {
    store: Store,
    runs: Arc<Runs>,
    settings: ScheduleSettings,
    /// When this control plane started: firings due before it were missed.
    boot: DateTime<Utc>,
    wake: Notify,
    /// One firing at a time: "is a run going?" and recording the new run are one step.
    firing: tokio::sync::Mutex<()>,
    /// Going runs by their agent and thread, for the feed's final statuses.
    going: Mutex<HashMap<(String, u64), GoingRun>>,
}

impl Scheduler {
    pub fn new(store: Store, runs: Arc<Runs>, settings: ScheduleSettings) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            store,
            runs,
            settings,
            boot: Utc::now(),
            wake: Notify::new(),
            firing: tokio::sync::Mutex::new(()),
            going: Mutex::new(HashMap::new()),
        })
    }

    /// Starts the loop and the watcher of runs' ends; both stop with `shutdown`.
    /// Called once the threads the last control plane left going were resumed or
    /// failed, so the going runs it reads first are what they are.
    pub fn start(self: &Arc<Self>, shutdown: CancellationToken) {
        // Subscribed before the going runs are read: no end falls between the two.
        let ends = self.runs.feed().subscribe();
        let watcher = self.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            watcher.reconcile().await;
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = watcher.watch_ends(ends) => {}
            }
        });
        let looper = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = looper.run_loop() => {}
            }
        });
    }

    /// A schedule was created, changed or deleted: the loop reads the next firing again.
    pub fn changed(&self) {
        self.wake.notify_one();
    }

    async fn run_loop(&self) {
        loop {
            let next = self.store.next_schedule_firing().await;
            if !wait_for_next(next, &self.wake, "schedules").await {
                continue;
            }
            if self.runs.draining() {
                // Shutting down: no run would start. What is due stays due, and the
                // next start takes it as missed; the loop ends with the shutdown.
                std::future::pending::<()>().await;
            }
            if !self.fire_due().await {
                // The store failed: what is due stays due; not again at once.
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }

    /// Takes the loop's step for every firing due now; false when the store failed
    /// to move one past it.
    async fn fire_due(&self) -> bool {
        let now = Utc::now();
        let due = match self.store.due_schedules(&format_time(now)).await {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "schedules: cannot read the due firings");
                return false;
            }
        };
        let mut moved = true;
        for schedule in due {
            let Some(due_at) = schedule.next_run_at.as_deref().and_then(parse_time) else {
                continue;
            };
            let when = match when_of(&schedule) {
                Ok(when) => when,
                Err(e) => {
                    tracing::error!(schedule = schedule.id, error = %e, "schedules: a stored schedule cannot be read; it will not fire");
                    moved &= self.store.set_next_firing(schedule.id, None).await.is_ok();
                    continue;
                }
            };
            let step = timing::advance(&when, due_at, self.boot, now, schedule.on_missed);
            // The next firing first: a crash now loses this firing, never repeats it.
            if let Err(e) = self
                .store
                .set_next_firing(schedule.id, step.next.map(format_time))
                .await
            {
                tracing::error!(schedule = schedule.id, error = %e, "schedules: cannot store the next firing; not firing");
                moved = false;
                continue;
            }
            let cause = if due_at >= self.boot {
                RunCause::Schedule
            } else {
                RunCause::Missed
            };
            if step.run {
                if let Err(e) = self.fire(&schedule, cause).await {
                    tracing::error!(schedule = schedule.id, error = %e, "schedules: cannot record a firing");
                }
            } else {
                tracing::info!(schedule = schedule.id, agent = %schedule.agent_name, "schedules: a firing missed while chorus was down is skipped (on_missed = skip)");
            }
        }
        moved
    }

    /// Starts a run of `schedule` (or records it skipped while the last one goes).
    async fn fire(
        &self,
        schedule: &ScheduleRecord,
        cause: RunCause,
    ) -> Result<ScheduleRunRecord, ScheduleError> {
        let _one = self.firing.lock().await;
        if self.store.schedule_run_going(schedule.id).await? {
            if cause == RunCause::Manual {
                return Err(ScheduleError::Conflict(format!(
                    "schedule {} has a run going; wait for it to end (GET …/schedules/{}/runs) and run it again",
                    schedule.id, schedule.id
                )));
            }
            let run = self
                .store
                .start_schedule_run(
                    schedule.id,
                    cause,
                    ScheduleRunStatus::Skipped,
                    Some(
                        "the schedule's last run was still going; at most one runs at a time"
                            .into(),
                    ),
                )
                .await?;
            return self.run_record(schedule.id, run).await;
        }
        let run = self
            .store
            .start_schedule_run(schedule.id, cause, ScheduleRunStatus::Running, None)
            .await?;
        let agent = self.store.active_agent(&schedule.agent_name).await?;
        let started = match &agent {
            Some(agent) => self.start_thread(agent, &schedule.prompt).await,
            None => Err(format!("the agent '{}' is not active", schedule.agent_name)),
        };
        match started {
            Ok(thread) => {
                self.store.set_schedule_run_thread(run, thread).await?;
                let going = GoingRun {
                    run_id: run,
                    schedule_id: schedule.id,
                    agent_name: schedule.agent_name.clone(),
                    thread_id: Some(thread),
                };
                self.track(going.clone());
                // It may have ended before it was tracked.
                self.finish_if_ended(&going).await;
            }
            Err(error) => {
                let error = format!("the run could not start: {error}");
                if self
                    .store
                    .end_schedule_run(run, ScheduleRunStatus::Failed, Some(error), 0)
                    .await?
                {
                    self.count(schedule.id, &schedule.agent_name, true).await;
                }
            }
        }
        self.run_record(schedule.id, run).await
    }

    async fn start_thread(&self, agent: &AgentRecord, prompt: &str) -> Result<u64, String> {
        self.runs
            .start_thread(agent, prompt, &Principal::Scheduler)
            .await
            .map_err(|e| e.to_string())
    }

    async fn run_record(
        &self,
        schedule: u64,
        run: u64,
    ) -> Result<ScheduleRunRecord, ScheduleError> {
        self.store
            .schedule_runs(schedule, RUNS_LISTED)
            .await?
            .into_iter()
            .find(|r| r.id == run)
            .ok_or_else(|| {
                ScheduleError::NotFound(format!("run {run} of schedule {schedule} is gone"))
            })
    }

    fn track(&self, run: GoingRun) {
        if let (Some(thread), Ok(mut going)) = (run.thread_id, self.going.lock()) {
            going.insert((run.agent_name.clone(), thread), run);
        }
    }

    fn untrack(&self, agent: &str, thread: u64) -> Option<GoingRun> {
        self.going
            .lock()
            .ok()
            .and_then(|mut going| going.remove(&(agent.to_string(), thread)))
    }

    /// At start (and after the feed lagged): every going run's thread, read from the store.
    async fn reconcile(&self) {
        // A firing going now records its run before its thread starts: not taken
        // for one left without.
        let _one = self.firing.lock().await;
        let runs = match self.store.going_schedule_runs().await {
            Ok(runs) => runs,
            Err(e) => {
                tracing::error!(error = %e, "schedules: cannot read the going runs");
                return;
            }
        };
        for run in runs {
            match run.thread_id {
                Some(_) => {
                    self.track(run.clone());
                    self.finish_if_ended(&run).await;
                }
                None => {
                    let ended = self
                        .store
                        .end_schedule_run(
                            run.run_id,
                            ScheduleRunStatus::Failed,
                            Some("chorus stopped before the run's thread started".into()),
                            0,
                        )
                        .await;
                    if matches!(ended, Ok(true)) {
                        self.count(run.schedule_id, &run.agent_name, true).await;
                    }
                }
            }
        }
    }

    async fn watch_ends(
        &self,
        mut ends: tokio::sync::broadcast::Receiver<Arc<crate::feed::ThreadEvent>>,
    ) {
        loop {
            match ends.recv().await {
                Ok(event) if event.is_final() => {
                    let Some(thread) = event.thread_id else {
                        continue;
                    };
                    let run = self
                        .going
                        .lock()
                        .ok()
                        .and_then(|going| going.get(&(event.agent.clone(), thread)).cloned());
                    if let Some(run) = run {
                        self.finish_if_ended(&run).await;
                    }
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => self.reconcile().await,
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Records the run's end when its thread has ended (once, whoever sees it first).
    async fn finish_if_ended(&self, run: &GoingRun) {
        let Some(thread_id) = run.thread_id else {
            return;
        };
        let thread = match self.store.thread(&run.agent_name, thread_id).await {
            Ok(Some(thread)) => thread,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(error = %e, "schedules: cannot read a run's thread");
                return;
            }
        };
        let status = match thread.status {
            ThreadStatus::Completed => ScheduleRunStatus::Completed,
            ThreadStatus::Failed => ScheduleRunStatus::Failed,
            ThreadStatus::Killed => ScheduleRunStatus::Killed,
            ThreadStatus::Running | ThreadStatus::WaitingForPermission | ThreadStatus::Idle => {
                return;
            }
        };
        let tokens = self
            .store
            .thread_usage(&run.agent_name, thread_id)
            .await
            .map(|u| u.input_tokens + u.output_tokens)
            .unwrap_or(0);
        match self
            .store
            .end_schedule_run(run.run_id, status, thread.error.clone(), tokens)
            .await
        {
            Ok(true) => {
                self.untrack(&run.agent_name, thread_id);
                // A person killing a run says nothing about the schedule: not counted.
                if status != ScheduleRunStatus::Killed {
                    self.count(
                        run.schedule_id,
                        &run.agent_name,
                        status == ScheduleRunStatus::Failed,
                    )
                    .await;
                }
            }
            Ok(false) => {
                self.untrack(&run.agent_name, thread_id);
            }
            Err(e) => tracing::error!(error = %e, "schedules: cannot record a run's end"),
        }
    }

    /// Counts a run's end; the failure that pauses the schedule is notified.
    async fn count(&self, schedule: u64, agent: &str, failed: bool) {
        let limit = self.settings.pause_after_failures;
        match self.store.count_schedule_run(schedule, failed, limit).await {
            Ok(true) => {
                let times = if limit == 1 { "time" } else { "times" };
                let text = format!(
                    "Schedule {schedule} of {agent} failed {limit} {times} in a row and is paused. \
                     Read its runs (chorus schedule runs {agent} {schedule}), fix the cause, and resume it \
                     with PATCH …/schedules/{schedule} {{\"paused\": false}}."
                );
                tracing::warn!(
                    schedule,
                    agent,
                    failures = limit,
                    "schedules: paused after failures in a row"
                );
                self.runs.feed().publish_agent(
                    agent,
                    Notification::SchedulePaused {
                        schedule_id: schedule,
                        failures: limit,
                        text,
                    },
                );
                self.changed();
            }
            Ok(false) => {}
            Err(e) => tracing::error!(schedule, error = %e, "schedules: cannot count a run's end"),
        }
    }

    // --- What the front ends call. ---

    pub async fn list(&self, agent: &AgentRecord) -> Result<Vec<ScheduleRecord>, ScheduleError> {
        Ok(self.store.schedules(&agent.name).await?)
    }

    pub async fn get(&self, agent: &AgentRecord, id: u64) -> Result<ScheduleRecord, ScheduleError> {
        self.store.schedule(&agent.name, id).await?.ok_or_else(|| {
            ScheduleError::NotFound(format!(
                "'{}' has no schedule {id}; list them with GET /api/agents/{}/schedules",
                agent.name, agent.name
            ))
        })
    }

    pub async fn create(
        &self,
        agent: &AgentRecord,
        request: ScheduleRequest,
        by: &Principal,
    ) -> Result<ScheduleRecord, ScheduleError> {
        let prompt = check_prompt(request.prompt.as_deref().unwrap_or(""))?;
        let when = When::from_request(
            request.cron.as_deref(),
            request.timezone.as_deref(),
            request.at.as_deref(),
        )
        .map_err(ScheduleError::BadRequest)?;
        let on_missed = match request.on_missed.as_deref() {
            Some(text) => OnMissed::parse(text).map_err(ScheduleError::BadRequest)?,
            None => OnMissed::default(),
        };
        let next = first_firing(&when, Utc::now())?;
        let paused = request.paused.unwrap_or(false);
        let (cron, timezone, at) = when.parts();
        let created = self
            .store
            .create_schedule(NewSchedule {
                agent_name: agent.name.clone(),
                incarnation: agent.incarnation.clone(),
                prompt,
                cron,
                timezone,
                run_at: at.map(format_time),
                on_missed,
                paused,
                next_run_at: (!paused).then(|| format_time(next)),
                created_by: by.text(),
            })
            .await?;
        self.changed();
        Ok(created)
    }

    pub async fn update(
        &self,
        agent: &AgentRecord,
        id: u64,
        request: ScheduleRequest,
    ) -> Result<ScheduleRecord, ScheduleError> {
        let mut schedule = self.get(agent, id).await?;
        if let Some(prompt) = &request.prompt {
            schedule.prompt = check_prompt(prompt)?;
        }
        if let Some(text) = &request.on_missed {
            schedule.on_missed = OnMissed::parse(text).map_err(ScheduleError::BadRequest)?;
        }
        let now = Utc::now();
        let retimed = request.cron.is_some() || request.at.is_some() || request.timezone.is_some();
        let when = if retimed {
            let zone = request.timezone.as_deref();
            let when = match (request.cron.as_deref(), request.at.as_deref()) {
                (Some(cron), None) => {
                    When::from_request(Some(cron), zone.or(schedule.timezone.as_deref()), None)
                }
                (None, None) => match schedule.cron.as_deref() {
                    Some(cron) => When::from_request(Some(cron), zone, None),
                    None => Err(
                        "this schedule is a one-shot: a timezone goes with cron; send at to move it, or cron with timezone to make it repeat"
                            .into(),
                    ),
                },
                // Both (refused, saying so), or a new one-shot.
                (cron, at) => When::from_request(cron, zone, at),
            }
            .map_err(ScheduleError::BadRequest)?;
            // A changed when must fire some time from now.
            first_firing(&when, now)?;
            let (cron, timezone, at) = when.parts();
            schedule.cron = cron;
            schedule.timezone = timezone;
            schedule.run_at = at.map(format_time);
            when
        } else {
            when_of(&schedule).map_err(|e| {
                ScheduleError::Store(StoreError::Corrupt {
                    column: "schedules.cron",
                    value: e,
                })
            })?
        };
        if let Some(paused) = request.paused {
            if !paused && schedule.paused {
                // Resumed: counted afresh.
                schedule.failures = 0;
            }
            schedule.paused = paused;
        }
        // The next firing from now (firings while it was paused are not made up for).
        schedule.next_run_at = if schedule.paused {
            None
        } else if retimed || request.paused == Some(false) {
            when.next_after(now).map(format_time)
        } else {
            schedule.next_run_at
        };
        self.store.save_schedule(&schedule).await?;
        self.changed();
        self.get(agent, id).await
    }

    pub async fn delete(&self, agent: &AgentRecord, id: u64) -> Result<(), ScheduleError> {
        if !self.store.delete_schedule(&agent.name, id).await? {
            return Err(ScheduleError::NotFound(format!(
                "'{}' has no schedule {id}; list them with GET /api/agents/{}/schedules",
                agent.name, agent.name
            )));
        }
        self.changed();
        Ok(())
    }

    /// "Run now": one run at once, whatever its next firing (which stays as it was).
    pub async fn run_now(
        &self,
        agent: &AgentRecord,
        id: u64,
    ) -> Result<ScheduleRunRecord, ScheduleError> {
        let schedule = self.get(agent, id).await?;
        self.fire(&schedule, RunCause::Manual).await
    }

    pub async fn runs_of(
        &self,
        agent: &AgentRecord,
        id: u64,
    ) -> Result<Vec<ScheduleRunRecord>, ScheduleError> {
        let schedule = self.get(agent, id).await?;
        Ok(self.store.schedule_runs(schedule.id, RUNS_LISTED).await?)
    }
}
