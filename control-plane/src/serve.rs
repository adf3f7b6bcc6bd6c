//! `chorus serve`: builds every part, binds the listeners, and tears it all down in
//! order on SIGINT/SIGTERM.
//!
//! Start-up binds both ports first, then takes the locks (`ownership`), and only then
//! creates anything in the data directory or opens the store: a start that fails on a
//! busy port or a held lock leaves no file behind.
//!
//! Shutdown, on SIGINT/SIGTERM, in this order:
//! 1. the drain (`Runs::drain`): `/readyz` answers 503 and no queued run is delivered any
//!    more (it stays queued in the store for the next start); a message that still
//!    arrives is stored;
//! 2. every agent's context saved (trigger `shutdown`, described by its first line: no
//!    model call, 10 s in all);
//! 3. the runs stop taking worker events;
//! 4. workers stopped (their runs stay open in the store and are resumed at the next
//!    start);
//! 5. listeners closed, then the database.

use chorus_proto::domain::TraceExport;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chorus_proto::domain::{Failure, FailureKind};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agents::AgentService;
use crate::config::LauncherKind;
use crate::config::{Database, Settings};
use crate::gate::{GateSettings, ToolGate};
use crate::grpc::{DialInService, LinkServices, WorkerLinkService};
use crate::http;
use crate::jobs::JobLog;
use crate::llm_relay::{self, RelayState};
use crate::ownership::{DataDirLock, Owner};
use crate::permissions::profiles::ProfileCache;
use crate::providers::catalog::Catalog;
use crate::questions::Questions;
use crate::runs::{RunSettings, Runs};
use crate::secrets::Secret;
use crate::secrets::{KnownSecrets, random_token};
use crate::services::Services;
use crate::sessions::Sessions;
use crate::store::{DatabaseLock, Store, Taken};
use crate::summaries::WorkerSummarizer;
use crate::workers::credentials::JoinCredentials;
use crate::workers::launcher::{Launcher, LocalLauncher};
use crate::workers::pool::Pool;
use crate::workers::procs::{ToolMarks, end_marked};
use crate::workers::registry::Registry;
use crate::workers::{WorkerLost, WorkerManager};

/// How long a shutdown spends saving the agents' contexts, in all.
const SHUTDOWN_SAVE_TIME: Duration = Duration::from_secs(10);

/// A started control plane.
pub struct Running {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    /// Whether the worker link speaks TLS (workers dial `https://`).
    pub grpc_tls: bool,
    pub data_dir: PathBuf,
    shutdown: CancellationToken,
    servers: Vec<JoinHandle<std::io::Result<()>>>,
    store: Store,
    runs: Arc<Runs>,
    workers: Arc<WorkerManager>,
    sessions: Arc<Sessions>,
    connections: TaskTracker,
    lost_forwarder: JoinHandle<()>,
    /// The Discord bot's connection, when `DISCORD_TOKEN` is set.
    discord: Option<JoinHandle<()>>,
    discovery: JoinHandle<()>,
    /// Held until the very end of `shut_down` (or death): this chorus owns the data
    /// directory, and the Postgres database when it uses one.
    dir_lock: DataDirLock,
    /// Keeps the Postgres database's lock (`ownership::keep_database_lock`) until
    /// `lock_keeper_stop`; then it lets go.
    database_lock: Option<JoinHandle<()>>,
    lock_keeper_stop: CancellationToken,
}

/// Starts Chorus. `collector`: where traces go (see `telemetry`), when exported.
pub async fn start(
    settings: Settings,
    collector: Option<crate::telemetry::collector::Collector>,
) -> anyhow::Result<Running> {
    // The ports first, then the data directory's lock, then anything in it: a start
    // that fails on a busy port leaves nothing behind, and nothing is touched in a
    // directory (or database) another chorus owns (see `ownership`).
    let grpc_listener = TcpListener::bind(settings.grpc_addr)
        .await
        .with_context(|| {
            format!(
                "cannot listen for workers on {} (--grpc-addr)",
                settings.grpc_addr
            )
        })?;
    let http_listener = TcpListener::bind(settings.http_addr)
        .await
        .with_context(|| {
            format!(
                "cannot listen for HTTP on {} (--http-addr)",
                settings.http_addr
            )
        })?;
    let grpc_addr = grpc_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;
    // Read before anything starts, so a bad certificate stops chorus at once.
    let link_tls = match &settings.workers.tls {
        Some(files) => Some(
            crate::link_tls::acceptor(files)
                .map_err(|e| anyhow::anyhow!("TLS on the worker link: {e}"))?,
        ),
        None => None,
    };
    let owner = Owner::this_process(http_addr, grpc_addr);
    let (data_dir, created) = prepare_data_dir(&settings.data_dir)?;
    let dir_lock = DataDirLock::take(&data_dir, &owner)?;
    let database_lock = match &settings.database {
        Database::Sqlite => None,
        Database::Postgres(url) => match lock_database(url, &owner, &settings, &data_dir).await {
            Ok(lock) => Some(lock),
            Err(e) => {
                // A directory made by this start for nothing is taken back.
                if created {
                    drop(dir_lock);
                    let _ = std::fs::remove_file(data_dir.join(crate::ownership::LOCK_FILE));
                    let _ = std::fs::remove_dir(&data_dir);
                }
                return Err(e);
            }
        },
    };
    let lock_keeper_stop = CancellationToken::new();
    let database_lock = match (database_lock, &settings.database) {
        (Some(lock), Database::Postgres(url)) => {
            Some(tokio::spawn(crate::ownership::keep_database_lock(
                lock,
                url.clone(),
                owner.clone(),
                lock_keeper_stop.clone(),
            )))
        }
        _ => None,
    };
    let agents_root = data_dir.join("agents");
    crate::private::create_dir(&agents_root)
        .with_context(|| format!("cannot create {}", agents_root.display()))?;
    let store = open_store(&settings, &data_dir).await?;
    let api_token = api_token(&settings, &data_dir)?;

    let catalog = Arc::new(
        Catalog::new(
            settings.providers.clone(),
            data_dir.join("available_models.json"),
        )
        .with_limits(settings.model_limits.clone()),
    );
    // Discovery runs beside start-up; whoever needs the catalogue first waits for it.
    let discovery = {
        let catalog = catalog.clone();
        let settings = settings.clone();
        tokio::spawn(async move {
            let snapshot = catalog.refresh().await;
            // One block for whoever starts chorus: what is usable, what to set next.
            let mut diagnosis = crate::doctor::diagnosis_from(
                &settings,
                &snapshot,
                crate::doctor::discord_token_set(),
            );
            diagnosis.http_addr = http_addr;
            diagnosis.grpc_addr = grpc_addr;
            match settings.log_format {
                // The person who started chorus reads the status on the terminal.
                #[allow(clippy::print_stderr)]
                crate::telemetry::json_log::LogFormat::Text => eprint!("{}", diagnosis.render()),
                // A log pipeline gets it as one line like the others.
                crate::telemetry::json_log::LogFormat::Json => tracing::info!(
                    status = %diagnosis.render(),
                    next = %diagnosis.next_steps().join("; "),
                    "chorus status"
                ),
            }
        })
    };
    // Generations continue from the last one recorded: jobs are keyed by them.
    let registry = Arc::new(Registry::after_generation(
        store.last_job_generation().await?,
    ));
    let profiles = Arc::new(ProfileCache::default());
    let approvals = Arc::new(Questions::new(store.clone()));
    let known_secrets = KnownSecrets::new(
        settings
            .secrets()
            .into_iter()
            .chain([api_token.expose().to_string()]),
    );
    // Before any worker (and so any tool process) starts: no variable of ours shows
    // a secret in /proc/<pid>/environ, whatever its name (see `environ`).
    match crate::environ::blank_own_secrets(&known_secrets) {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            variables = n,
            "secret values blanked in our own environment block"
        ),
        Err(e) => tracing::warn!("cannot blank the secrets in our environment block: {e}"),
    }
    // Summaries (a session's description, a long continuation's start) are
    // written by the agent's own worker.
    let summaries = Arc::new(WorkerSummarizer::new(
        registry.clone(),
        catalog.clone(),
        settings.default_model.clone(),
        settings.retry,
    ));
    let runs = Arc::new(Runs::new(
        store.clone(),
        registry.clone(),
        catalog.clone(),
        profiles.clone(),
        approvals.clone(),
        summaries.clone(),
        RunSettings::from_settings(&settings),
    ));
    let run_traces = runs.traces().clone();
    let (lost_tx, mut lost_rx) = mpsc::unbounded_channel::<WorkerLost>();
    let lost_forwarder = {
        let runs = runs.clone();
        tokio::spawn(async move {
            while let Some(lost) = lost_rx.recv().await {
                runs.worker_lost(lost).await;
            }
        })
    };
    let tool_marks = ToolMarks::load(&data_dir).with_context(|| {
        format!(
            "cannot read or create the tool mark in {}",
            data_dir.display()
        )
    })?;
    // Before any worker starts: what the tool processes of a previous control plane
    // (killed, so its workers' tools could not be ended) left is ended now.
    let leftovers = {
        let prefix = tool_marks.any_start();
        tokio::task::spawn_blocking(move || end_marked(&|mark| mark.starts_with(&prefix))).await?
    };
    if leftovers > 0 {
        tracing::warn!(
            processes = leftovers,
            "ended tool processes a previous control plane left running"
        );
    }
    let sandbox = tokio::task::spawn_blocking(crate::sandbox_probe::describe).await?;
    if sandbox.starts_with("landlock") {
        tracing::info!(%sandbox, "agents' tool processes are sandboxed");
    } else {
        tracing::warn!(%sandbox, "agents' tool processes cannot be sandboxed: bash is refused unless [sandbox] when_unavailable = \"warn\" (default: only under the open preset)");
    }
    // What joining dial-in workers' volumes hold, checked once the agents are known.
    let (volumes_tx, mut volumes_rx) = tokio::sync::mpsc::channel(64);
    // Per-worker join credentials are managed through the API whichever the
    // launcher; only the remote one takes joins.
    let join_credentials = Arc::new(JoinCredentials::new(
        store.clone(),
        settings.workers.join_token.clone(),
    ));
    let (launcher, dial_in) = match settings.workers.launcher {
        LauncherKind::Remote => {
            let pool = Arc::new(Pool::new(crate::workers::pool::REJOIN_GRACE));
            let template =
                crate::agents::files::template_files(settings.template_dir.as_deref())
                    .context("cannot read the agents' template to send to dial-in workers")?;
            tracing::info!(
                shared_join_token = join_credentials.shared_token_set(),
                "workers dial in: start them with chorus-worker --control-plane <this address> --data-dir <their volume> and CHORUS_JOIN_TOKEN set to a worker credential (chorus worker token create <name>) or the shared join token"
            );
            (
                Launcher::Remote(pool.clone()),
                Some(DialInService {
                    pool,
                    credentials: join_credentials.clone(),
                    template: Arc::new(template),
                    volumes: volumes_tx,
                }),
            )
        }
        LauncherKind::Local => (
            Launcher::Local(LocalLauncher {
                worker_bin: {
                    let bin = worker_bin(&settings)?;
                    // What CLIs local workers can run, asked when first needed.
                    registry.backends().probe_local(
                        bin.clone(),
                        settings.backends.clone(),
                        crate::workers::launcher::inherited_env(),
                    );
                    bin
                },
                control_plane_url: format!("http://{}", dialable(grpc_addr)),
                data_dir: data_dir.clone(),
                bash_timeout: settings.workers.bash_timeout,
                file_lock_timeout: settings.workers.file_lock_timeout,
                tool_marks,
                json_logs: settings.log_format == crate::telemetry::json_log::LogFormat::Json,
                backends: settings.backends.clone(),
            }),
            None,
        ),
    };
    let workers = Arc::new(WorkerManager::new(
        registry.clone(),
        launcher,
        settings.workers.clone(),
        lost_tx,
        {
            let feed = runs.feed().clone();
            Arc::new(move |agent: &str, status| feed.publish_worker(agent, status))
        },
    ));
    let agents = Arc::new(
        AgentService::new(
            store.clone(),
            workers.clone(),
            runs.clone(),
            catalog.clone(),
            agents_root,
            settings.template_dir.clone(),
            settings.default_model.clone(),
        )
        .with_layout(match settings.workers.launcher {
            LauncherKind::Local => crate::agents::files::Layout::Full,
            LauncherKind::Remote => crate::agents::files::Layout::Records,
        })
        .with_memory_limit(settings.memory_limit_bytes),
    );

    tokio::spawn({
        let agents = agents.clone();
        async move {
            while let Some((volume, named)) = volumes_rx.recv().await {
                if let Err(e) = agents.tidy_volume(&volume, &named).await {
                    tracing::warn!(error = %e, "cannot check a dial-in worker's directories against the store");
                }
            }
        }
    });

    let cancelled = store.cancel_pending_approvals().await?;
    if cancelled > 0 {
        tracing::warn!(
            approvals = cancelled,
            "cancelled approval requests left by the last run"
        );
    }
    let gate = Arc::new(ToolGate::new(
        store.clone(),
        registry.clone(),
        runs.clone(),
        agents.clone(),
        approvals,
        profiles,
        GateSettings {
            ask_timeout: settings.ask_timeout,
            cli_approval_hold: settings.cli_approval_hold,
            roles: settings.roles.clone(),
            default_role: settings.default_role,
            known_secrets: known_secrets.clone(),
            vouched: Default::default(),
        },
    ));

    let job_log = Arc::new(JobLog::new(
        store.clone(),
        registry.clone(),
        runs.feed().clone(),
    ));
    let forgotten = job_log.forget_previous().await?;
    if forgotten > 0 {
        tracing::warn!(
            jobs = forgotten,
            "background jobs left running by the last run are marked lost"
        );
    }
    let shutdown = CancellationToken::new();
    // Long threads flush their older context into the agents' daily logs.
    runs.set_memory(agents.memory().clone());
    // Hand edits of identity and memory files reach live runs at their next model call.
    agents.memory().clone().watch(shutdown.clone());
    // The memory files are the truth: hand edits made while chorus was down reach the
    // search index before the first search (in the background; a search meanwhile
    // answers from the index as it was).
    {
        let (memory, store) = (agents.memory().clone(), store.clone());
        tokio::spawn(async move {
            for agent in store.active_agents().await.unwrap_or_default() {
                memory.index(&agent.name).await;
            }
        });
    }
    let sessions = Sessions::new(
        store.clone(),
        agents.agents_root().to_path_buf(),
        runs.feed().clone(),
        summaries.clone(),
        settings.context,
    );
    runs.set_idle_saver(sessions.clone());
    // The task board and its engine: the runs' role hooks, set before any run resumes.
    let board = Arc::new(crate::tasks::Board::new(
        store.clone(),
        runs.feed().clone(),
        settings.tasks.clone(),
        &data_dir,
    ));
    let engine = crate::tasks::engine::Engine::launch(
        store.clone(),
        board.clone(),
        runs.clone(),
        agents.clone(),
    );
    // Agents' schedules; started below, once the threads left going are settled.
    let schedules =
        crate::schedules::Scheduler::new(store.clone(), runs.clone(), settings.schedules);
    // Agents' heartbeats; started with the schedules.
    let heartbeats = crate::heartbeat::Heartbeats::new(
        store.clone(),
        runs.clone(),
        catalog.clone(),
        settings.heartbeat,
        agents.agents_root().to_path_buf(),
    );
    let connections = TaskTracker::new();
    let mut worker_routes = tonic::service::Routes::new(
        WorkerLinkService::new(
            LinkServices {
                registry: registry.clone(),
                runs: runs.clone(),
                gate: gate.clone(),
                jobs: job_log.clone(),
                summaries: summaries.clone(),
            },
            known_secrets.clone(),
            connections.clone(),
            &settings.workers,
        )
        .with_dial_in(dial_in)
        .with_trace_export(settings.trace_export.as_ref().map(|t| TraceExport {
            service_name: format!("{}-worker", t.service_name),
            resource_attributes: t.resource_attributes.clone(),
            record_content: settings.trace_content,
        }))
        .into_server(),
    );
    if let Some(collector) = &collector {
        // Workers' spans, forwarded to the collector with the control plane's own.
        worker_routes = worker_routes.add_service(crate::telemetry::relay::TraceRelay::server(
            registry.clone(),
            collector.clone(),
            known_secrets.clone(),
            run_traces.clone(),
        ));
    }
    let worker_router = worker_routes
        .into_axum_router()
        .merge(llm_relay::routes(RelayState::new(
            registry.clone(),
            settings.providers.clone(),
            known_secrets.clone(),
            run_traces.clone(),
        )?));
    let api_state = Services {
        store: store.clone(),
        agents: agents.clone(),
        runs: runs.clone(),
        workers: workers.clone(),
        catalog: catalog.clone(),
        gate,
        sessions: sessions.clone(),
        tasks: board,
        engine: engine.clone(),
        schedules: schedules.clone(),
        heartbeats: heartbeats.clone(),
        api_token,
        sandbox,
        thread_retention: settings.threads.retention,
        metrics_open: settings.metrics_open,
        worker_credentials: join_credentials,
        setup: Arc::new(crate::doctor::ServerSetup {
            settings: Settings {
                data_dir: data_dir.clone(),
                ..settings.clone()
            },
            http_addr,
            grpc_addr,
        }),
        discord_state: Arc::new(
            tokio::sync::watch::channel(crate::discord::connection::DiscordState::Connecting).0,
        ),
        web: Arc::default(),
    };
    // Discord is one more front end: if it cannot start, the HTTP API still runs.
    let discord = match settings.discord.clone() {
        Some(discord) => {
            match crate::discord::adapter::start(discord, api_state.clone(), settings.clone()).await
            {
                Ok(task) => Some(task),
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the Discord front end; the HTTP API runs without it");
                    None
                }
            }
        }
        None => None,
    };
    let api_router = crate::web::around(http::router(api_state.clone()), api_state);
    let grpc_tls = link_tls.is_some();
    let worker_server = match link_tls {
        Some(acceptor) => {
            let listener = crate::link_tls::TlsListener::new(grpc_listener, acceptor)?;
            let (shutdown, deadline) = (shutdown.clone(), settings.header_deadline);
            tokio::spawn(async move {
                crate::listener::serve(listener, worker_router, shutdown, deadline).await;
                Ok(())
            })
        }
        None => spawn_server(
            grpc_listener,
            worker_router,
            shutdown.clone(),
            settings.header_deadline,
        ),
    };
    let servers = vec![
        worker_server,
        spawn_server(
            http_listener,
            api_router,
            shutdown.clone(),
            settings.header_deadline,
        ),
    ];

    // Finish what a failed or interrupted destroy left, before any worker starts.
    agents.repair().await?;
    // Threads the last control plane left going go on (durable runs); those it left
    // going without a run (from before runs were recorded) cannot, and fail.
    let resumed = runs.resume_all().await?;
    match engine.recover().await {
        Ok(0) => {}
        Ok(told) => tracing::info!(
            turns = told,
            "applied task turns that ended while chorus was down"
        ),
        Err(e) => {
            tracing::error!(error = %e, "cannot check tasks' turns that ended while chorus was down")
        }
    }
    if resumed > 0 {
        tracing::warn!(
            threads = resumed,
            "resuming threads the last control plane left running"
        );
    }
    let interrupted = store
        .fail_threads_without_run(&Failure::new(
            FailureKind::Interrupted,
            "chorus stopped while this thread was running; send the message again to retry",
        ))
        .await?;
    if interrupted > 0 {
        tracing::warn!(
            threads = interrupted,
            "marked threads interrupted by the last shutdown as failed"
        );
    }
    schedules.start(shutdown.clone());
    heartbeats.start(shutdown.clone());
    let started = agents.start_all_workers().await?;
    tracing::info!(%http_addr, %grpc_addr, data_dir = %data_dir.display(), agents = started, "chorus is up");
    Ok(Running {
        http_addr,
        grpc_addr,
        grpc_tls,
        data_dir,
        shutdown,
        servers,
        store,
        runs,
        workers,
        sessions,
        connections,
        lost_forwarder,
        discord,
        discovery,
        dir_lock,
        database_lock,
        lock_keeper_stop,
    })
}

fn spawn_server(
    listener: TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
    header_deadline: Duration,
) -> JoinHandle<std::io::Result<()>> {
    use axum::serve::ListenerExt;
    // Without TCP_NODELAY a streamed answer's second small write waits for the
    // peer's delayed ACK (40 ms on Linux): every model call through the relay and
    // every gRPC message would stall that long.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
    });
    tokio::spawn(async move {
        crate::listener::serve(listener, router, shutdown, header_deadline).await;
        Ok(())
    })
}

impl Running {
    /// Runs until SIGINT or SIGTERM, then shuts down.
    pub async fn until_signal(self) -> anyhow::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
            _ = int.recv() => tracing::info!("SIGINT received; shutting down"),
        }
        self.shut_down().await
    }

    /// Saves every agent's context, stops workers, closes listeners and the
    /// database. Runs still going stay open in the store: the next start resumes them.
    pub async fn shut_down(self) -> anyhow::Result<()> {
        // First: `/readyz` answers 503 (a load balancer stops sending) and no
        // queued run starts.
        self.runs.drain();
        // While the workers still run, so a summarizer can still reach a model.
        let saved = self.sessions.save_all(SHUTDOWN_SAVE_TIME).await;
        if saved > 0 {
            tracing::info!(
                agents = saved,
                "saved the agents' contexts (trigger shutdown)"
            );
        }
        self.runs.stop_accepting();
        self.workers.stop_all().await;
        self.shutdown.cancel();
        self.connections.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.connections.wait()).await;
        for server in self.servers {
            match tokio::time::timeout(Duration::from_secs(5), server).await {
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "listener ended with an error"),
                Ok(_) => {}
                Err(_) => tracing::warn!("a listener did not close within 5 s"),
            }
        }
        self.lost_forwarder.abort();
        if let Some(discord) = self.discord {
            discord.abort();
        }
        self.discovery.abort();
        self.store.close().await;
        self.lock_keeper_stop.cancel();
        if let Some(keeper) = self.database_lock {
            let _ = keeper.await;
        }
        drop(self.dir_lock);
        tracing::info!("chorus stopped");
        Ok(())
    }
}

/// Opens the store the settings name. An error names where the store is but never
/// the Postgres URL itself (it may hold a password).
async fn open_store(settings: &Settings, data_dir: &Path) -> anyhow::Result<Store> {
    let opened = match &settings.database {
        Database::Sqlite => {
            Store::open_with(&data_dir.join("chorus.db"), settings.durability).await
        }
        Database::Postgres(url) => Store::open_postgres(url.expose()).await,
    };
    opened.map_err(|e| database_error(settings, data_dir, e))
}

/// A failure to reach or open the database, naming where it is but never the URL
/// itself (it may hold a password).
fn database_error(
    settings: &Settings,
    data_dir: &Path,
    e: crate::store::StoreError,
) -> anyhow::Error {
    // A refused certificate is the one failure people cannot guess the fix of.
    let tls = matches!(settings.database, Database::Postgres(_)) && {
        let text = format!("{e:#}").to_ascii_lowercase();
        ["certificate", "tls", "ssl"]
            .iter()
            .any(|w| text.contains(w))
    };
    let hint = if tls {
        "; a TLS problem: with sslmode=verify-full (or verify-ca) name the CA that signed the server's certificate as sslrootcert=<file> in DATABASE_URL"
    } else {
        ""
    };
    anyhow::Error::new(e).context(format!(
        "cannot open the database ({}){hint}",
        settings.database.describe(data_dir)
    ))
}

/// An address a local worker can dial: a wildcard bind is reached over loopback.
fn dialable(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        let loopback = match addr {
            SocketAddr::V4(_) => std::net::IpAddr::from([127, 0, 0, 1]),
            SocketAddr::V6(_) => std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        };
        SocketAddr::new(loopback, addr.port())
    } else {
        addr
    }
}

/// The data directory, resolved, and whether this call created it.
fn prepare_data_dir(dir: &Path) -> anyhow::Result<(PathBuf, bool)> {
    let created = !dir.exists();
    if created {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    }
    let dir = dir
        .canonicalize()
        .with_context(|| format!("cannot resolve the data directory {}", dir.display()))?;
    Ok((dir, created))
}

/// The database's lock (see `store::owner_lock`), or an error naming the chorus
/// that holds it. Taken before the store opens, so a refused chorus runs no
/// migration and writes nothing.
async fn lock_database(
    url: &Secret,
    owner: &Owner,
    settings: &Settings,
    data_dir: &Path,
) -> anyhow::Result<DatabaseLock> {
    let database = settings.database.describe(data_dir);
    match DatabaseLock::take(url.expose(), owner).await {
        Ok(Taken::Held(lock)) => Ok(lock),
        Ok(Taken::Busy(holder)) => anyhow::bail!(
            "another chorus ({holder}) is using this database ({database}); stop it first, or point this one at another database (DATABASE_URL). A database has one control plane at a time: see README, *Postgres*"
        ),
        Err(e) => Err(database_error(settings, data_dir, e)),
    }
}

/// The API token: from settings, else from `<data-dir>/api-token`, created (mode
/// 0600) on first start. The token itself is never logged, only where it is.
fn api_token(settings: &Settings, data_dir: &Path) -> anyhow::Result<Secret> {
    if let Some(token) = &settings.api_token {
        return Ok(token.clone());
    }
    let path = data_dir.join("api-token");
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => {
            tracing::info!(path = %path.display(), "API token read from file");
            return Ok(Secret::new(text.trim()));
        }
        Ok(_) => anyhow::bail!(
            "{} is empty; delete it to have a new token generated",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    let token = random_token()?;
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        writeln!(file, "{token}").with_context(|| format!("cannot write {}", path.display()))?;
    }
    tracing::info!(path = %path.display(), "generated an API token; send it as 'Authorization: Bearer <token>'");
    Ok(Secret::new(token))
}

fn worker_bin(settings: &Settings) -> anyhow::Result<PathBuf> {
    if let Some(path) = &settings.worker_bin {
        return Ok(path.clone());
    }
    let exe = std::env::current_exe().context("cannot locate the chorus binary")?;
    let beside = exe.with_file_name("chorus-worker");
    if beside.exists() {
        return Ok(beside);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chorus-worker"))
            .find(|candidate| candidate.is_file())
    });
    match on_path {
        Some(path) => Ok(path),
        None => {
            tracing::warn!(
                path = %beside.display(),
                "chorus-worker is neither beside chorus nor on PATH; agents cannot run until it is \
                 (build it with `cargo build --bins`, or set CHORUS_WORKER_BIN)"
            );
            Ok(beside)
        }
    }
}
