//! Runs the real `chorus` binary (which starts real `chorus-worker` processes) in a
//! temporary data directory, and talks to its HTTP API.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The API token every test instance uses.
pub const TEST_TOKEN: &str = "test-token-0123456789";

/// Path of a binary built by this workspace (`chorus`, `chorus-worker`), found
/// beside the running test executable's `deps/` directory.
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    let mut dir = exe.parent().expect("deps dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} does not exist: build the binaries first (`cargo build --bins`, or run the \
         whole workspace's tests, which builds them)",
        path.display()
    );
    path
}

pub struct ChorusBuilder {
    env: Vec<(String, String)>,
    data_dir: Option<PathBuf>,
    api_token: Option<String>,
    config: Option<String>,
    /// Keep the store in SQLite even when the suite runs on Postgres (a test that
    /// looks at the database file itself).
    sqlite: bool,
    /// Appended to the Postgres `DATABASE_URL` chorus gets, as its query.
    database_options: Option<String>,
    /// Where workers dial (`--grpc-addr`); by default any free port.
    grpc_addr: Option<String>,
    /// The API's address (`--http-addr`); by default any free port.
    http_addr: Option<String>,
    /// The Postgres database to use instead of the data directory's own (two
    /// control planes on one database).
    database_url: Option<String>,
}

/// The Postgres server the suite runs against (`CHORUS_TEST_POSTGRES`, e.g.
/// `postgres://chorus@127.0.0.1:55432`), when it does; otherwise every chorus keeps
/// its store in SQLite in its data directory.
pub fn test_postgres() -> Option<String> {
    std::env::var("CHORUS_TEST_POSTGRES")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().trim_end_matches('/').to_string())
}

/// The URL of the Postgres database that belongs to `data_dir` on `server`, created
/// on first use: a chorus restarted on the same data directory finds its store again.
async fn database_for(server: &str, data_dir: &Path) -> anyhow::Result<String> {
    use sqlx::Connection;
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    data_dir.hash(&mut hasher);
    let name = format!("chorus_e2e_{:016x}", hasher.finish());
    let mut admin = sqlx::PgConnection::connect(&format!("{server}/postgres"))
        .await
        .with_context(|| format!("connect to the test Postgres server {server}"))?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_optional(&mut admin)
        .await?;
    if exists.is_none() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .with_context(|| format!("create database {name}"))?;
    }
    // The test server trusts loopback and ignores a password; one is given anyway so
    // tests can check it never shows (logs, tool results, agents' environments).
    let mut url = reqwest::Url::parse(&format!("{server}/{name}"))?;
    url.set_password(Some(TEST_DB_PASSWORD))
        .map_err(|_| anyhow::anyhow!("{server}: cannot carry a password"))?;
    Ok(url.to_string())
}

/// The password in the `DATABASE_URL` of every chorus on the test Postgres server.
pub const TEST_DB_PASSWORD: &str = "pg-password-e2e-0123";

pub struct Chorus {
    child: Child,
    pub http_url: String,
    pub grpc_url: String,
    pub data_dir: PathBuf,
    /// The Postgres database this chorus keeps its store in; `None`: SQLite in the
    /// data directory.
    pub database_url: Option<String>,
    client: reqwest::Client,
    token: Option<String>,
    /// Everything chorus (and its workers, which share its stderr) printed so far.
    output: std::sync::Arc<std::sync::Mutex<String>>,
    _temp: Option<tempfile::TempDir>,
}

impl ChorusBuilder {
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Reuses a data directory (to test restarts); by default each instance gets a
    /// fresh temporary one.
    /// Points the OpenAI provider at a fake (key `sk-openai-test`) and makes its
    /// `fake-model` the default model.
    pub fn openai_fake(self, model: &crate::FakeModel) -> Self {
        self.env("OPENAI_BASE_URL", &model.base_url())
            .env("OPENAI_API_KEY", "sk-openai-test")
            .env("CHORUS_DEFAULT_MODEL", "fake-model")
    }

    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_path_buf());
        self
    }

    /// Starts chorus with this `chorus.toml`.
    pub fn config(mut self, toml: &str) -> Self {
        self.config = Some(toml.to_string());
        self
    }

    /// Leaves CHORUS_API_TOKEN unset so chorus generates one into the data dir.
    /// The API token chorus is given (instead of the test default).
    pub fn api_token(mut self, token: &str) -> Self {
        self.api_token = Some(token.to_string());
        self
    }

    pub fn generated_token(mut self) -> Self {
        self.api_token = None;
        self
    }

    /// Listens for workers on `addr` (to restart on the same address workers dial).
    pub fn grpc_addr(mut self, addr: &str) -> Self {
        self.grpc_addr = Some(addr.to_string());
        self
    }

    /// Serves the API on `addr` (a busy port, to test a failed start).
    pub fn http_addr(mut self, addr: &str) -> Self {
        self.http_addr = Some(addr.to_string());
        self
    }

    /// Keeps the store in this Postgres database (another chorus's
    /// `database_url`) whatever the data directory; nothing on SQLite.
    pub fn database_url(mut self, url: &str) -> Self {
        self.database_url = Some(url.to_string());
        self
    }

    /// Connection options for Postgres (e.g. `sslmode=verify-full&sslrootcert=…`),
    /// appended to the `DATABASE_URL` chorus gets; nothing on SQLite.
    pub fn database_options(mut self, query: &str) -> Self {
        self.database_options = Some(query.to_string());
        self
    }

    /// Keeps this chorus on SQLite even when the suite runs on Postgres.
    pub fn sqlite(mut self) -> Self {
        self.sqlite = true;
        self
    }

    /// The `chorus serve` command this builder describes, for `data_dir`, and the
    /// Postgres database it gets (`None`: SQLite).
    async fn command(&self, data_dir: &Path) -> anyhow::Result<(Command, Option<String>)> {
        let mut command = Command::new(bin_path("chorus"));
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--http-addr")
            .arg(self.http_addr.as_deref().unwrap_or("127.0.0.1:0"))
            .arg("--grpc-addr")
            .arg(self.grpc_addr.as_deref().unwrap_or("127.0.0.1:0"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env(
                "HOME",
                std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()),
            )
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("CHORUS_WORKER_BIN", bin_path("chorus-worker"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(token) = &self.api_token {
            command.env("CHORUS_API_TOKEN", token);
        }
        let database_url = match test_postgres().filter(|_| !self.sqlite) {
            Some(_) if self.database_url.is_some() => self.database_url.clone(),
            Some(server) => Some(database_for(&server, data_dir).await?),
            None => None,
        };
        if let Some(url) = &database_url {
            match &self.database_options {
                Some(query) => command.env("DATABASE_URL", format!("{url}?{query}")),
                None => command.env("DATABASE_URL", url),
            };
        }
        if let Some(toml) = &self.config {
            let parent = data_dir.parent().unwrap_or(data_dir).to_path_buf();
            std::fs::create_dir_all(&parent)?;
            let path = parent.join("chorus.toml");
            std::fs::write(&path, toml)?;
            command.env("CHORUS_CONFIG", &path);
        }
        for (k, v) in &self.env {
            command.env(k, v);
        }
        Ok((command, database_url))
    }

    /// Runs a chorus that is expected to stop by itself (a refused start): its
    /// exit status and everything it printed, or an error if it still runs after
    /// `timeout` (it is killed then).
    pub async fn run_to_exit(
        self,
        data_dir: &Path,
        timeout: Duration,
    ) -> anyhow::Result<(std::process::ExitStatus, String)> {
        let (mut command, _) = self.command(data_dir).await?;
        let child = command.spawn().context("spawn chorus")?;
        let output = tokio::time::timeout(timeout, child.wait_with_output())
            .await
            .with_context(|| format!("chorus still ran after {timeout:?}"))??;
        let mut said = String::from_utf8_lossy(&output.stdout).into_owned();
        said.push_str(&String::from_utf8_lossy(&output.stderr));
        Ok((output.status, said))
    }

    pub async fn start(self) -> anyhow::Result<Chorus> {
        let (data_dir, temp) = match &self.data_dir {
            Some(dir) => (dir.clone(), None),
            None => {
                let temp = tempfile::tempdir()?;
                (temp.path().join("data"), Some(temp))
            }
        };
        let (mut command, database_url) = self.command(&data_dir).await?;
        let mut child = command.spawn().context("spawn chorus")?;
        let output = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        // The log is kept for tests to search, and passed on so a failing test shows it.
        let stderr = child.stderr.take().context("chorus stderr")?;
        let stderr_drained = tokio::spawn({
            let output = output.clone();
            async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    eprintln!("{line}");
                    let mut output = output
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    output.push_str(&line);
                    output.push('\n');
                }
            }
        });
        let stdout = child.stdout.take().context("chorus stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                output
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push_str(&format!("{line}\n"));
                if line.starts_with("chorus ready") {
                    return Ok::<_, std::io::Error>(Some(line));
                }
            }
            Ok(None)
        })
        .await
        .context("chorus did not report ready within 30 s")??;
        let Some(ready) = ready else {
            let status = child.wait().await?;
            // Its last words are the reason: read to the end of stderr first.
            let _ = tokio::time::timeout(Duration::from_secs(10), stderr_drained).await;
            let said = output
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            bail!("chorus exited before it was ready ({status}):\n{said}");
        };
        // Keep draining stdout so chorus never blocks on a full pipe.
        tokio::spawn({
            let output = output.clone();
            async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut output = output
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    output.push_str(&line);
                    output.push('\n');
                }
            }
        });
        let field = |name: &str| -> anyhow::Result<String> {
            ready
                .split_whitespace()
                .find_map(|part| part.strip_prefix(&format!("{name}=")))
                .map(str::to_string)
                .with_context(|| format!("no {name}= in {ready:?}"))
        };
        let token = match self.api_token {
            Some(token) => Some(token),
            None => std::fs::read_to_string(data_dir.join("api-token"))
                .ok()
                .map(|t| t.trim().to_string()),
        };
        Ok(Chorus {
            http_url: field("http")?,
            grpc_url: field("grpc")?,
            data_dir: PathBuf::from(field("data_dir")?),
            database_url,
            child,
            client: reqwest::Client::new(),
            token,
            output,
            _temp: temp,
        })
    }
}

impl Chorus {
    pub fn builder() -> ChorusBuilder {
        ChorusBuilder {
            env: Vec::new(),
            data_dir: None,
            api_token: Some(TEST_TOKEN.to_string()),
            config: None,
            sqlite: false,
            database_options: None,
            grpc_addr: None,
            http_addr: None,
            database_url: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or_default()
    }

    /// Everything chorus prints, also after it is stopped (`stop` consumes it).
    pub fn output_handle(&self) -> std::sync::Arc<std::sync::Mutex<String>> {
        self.output.clone()
    }

    /// What chorus and its workers have printed so far (stdout and stderr).
    pub fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn token(&self) -> &str {
        self.token.as_deref().unwrap_or_default()
    }

    /// A request to the API, with the token.
    pub fn api(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{}", self.http_url, path))
            .bearer_auth(self.token())
    }

    /// The web page's origin, `http://127.0.0.1:<port>` (no trailing slash).
    pub fn origin(&self) -> String {
        self.http_url.trim_end_matches('/').to_string()
    }

    /// `method` on `path` with the token (and `body` as JSON): the status and the
    /// answer, as JSON or else as a string of its text.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self.api(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// [`Chorus::call`] that must succeed (a 2xx status): its answer.
    pub async fn ok(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let (status, answer) = self.call(method.clone(), path, body).await?;
        anyhow::ensure!(
            (200..300).contains(&status),
            "{method} {path}: {status} {answer:#}"
        );
        Ok(answer)
    }

    /// `GET /api/tasks/{id}`: the task as the API shows it.
    pub async fn task(&self, id: u64) -> anyhow::Result<Value> {
        self.ok(reqwest::Method::GET, &format!("/api/tasks/{id}"), None)
            .await
    }

    /// Creates a task (`POST /api/tasks` with `body`): its id and the answer.
    pub async fn create_task(&self, body: Value) -> anyhow::Result<(u64, Value)> {
        let created = self
            .ok(reqwest::Method::POST, "/api/tasks", Some(body))
            .await?;
        let id = created["id"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("a task without an id: {created:#}"))?;
        Ok((id, created))
    }

    /// Waits until task `id` is `status`: the task then. Fails at once when it
    /// ended in another status (completed or failed), else after `timeout`.
    pub async fn wait_task(
        &self,
        id: u64,
        status: &str,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let task = self.task(id).await?;
            if task["status"] == status {
                return Ok(task);
            }
            let ended =
                ["completed", "failed"].contains(&task["status"].as_str().unwrap_or_default());
            if ended || tokio::time::Instant::now() >= deadline {
                bail!("task {id} is not {status}: {task:#}\n{}", self.output());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A request without any token.
    pub fn anonymous(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{}", self.http_url, path))
    }

    /// Runs a read-only query on chorus's store, whichever database holds it, and
    /// gives the rows the way `sqlite3` prints them: columns joined by `|`, one row
    /// per line, NULL as empty, booleans as 0/1.
    pub async fn query_store(&self, sql: &str) -> anyhow::Result<String> {
        use sqlx::{Connection, Row};
        sqlx::any::install_default_drivers();
        let url = match &self.database_url {
            Some(url) => url.clone(),
            None => format!(
                "sqlite://{}?mode=ro",
                self.data_dir.join("chorus.db").display()
            ),
        };
        let mut conn = sqlx::AnyConnection::connect(&url).await?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_all(&mut conn)
            .await?;
        let mut out = String::new();
        for row in rows {
            let cells: Vec<String> = (0..row.columns().len())
                .map(|i| {
                    if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
                        v.map(|v| v.to_string()).unwrap_or_default()
                    } else if let Ok(v) = row.try_get::<Option<bool>, _>(i) {
                        v.map(|v| u8::from(v).to_string()).unwrap_or_default()
                    } else if let Ok(v) = row.try_get::<Option<f64>, _>(i) {
                        v.map(|v| v.to_string()).unwrap_or_default()
                    } else {
                        row.try_get::<Option<String>, _>(i)
                            .ok()
                            .flatten()
                            .unwrap_or_default()
                    }
                })
                .collect();
            out.push_str(&cells.join("|"));
            out.push('\n');
        }
        let _ = conn.close().await;
        Ok(out)
    }

    /// Runs one writing statement on the store of a *stopped* chorus (its data
    /// directory and `database_url`), e.g. to stand for time that passed while it was
    /// down.
    pub async fn write_store(
        data_dir: &Path,
        database_url: Option<&str>,
        sql: &str,
    ) -> anyhow::Result<u64> {
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let url = match database_url {
            Some(url) => url.to_string(),
            None => format!("sqlite://{}", data_dir.join("chorus.db").display()),
        };
        let mut conn = sqlx::AnyConnection::connect(&url).await?;
        let done = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut conn)
            .await?;
        let _ = conn.close().await;
        Ok(done.rows_affected())
    }

    pub fn agent_dir(&self, name: &str) -> PathBuf {
        self.data_dir.join("agents").join(name)
    }

    pub async fn create_agent(&self, name: &str) -> anyhow::Result<Value> {
        self.create_agent_with(json!({ "name": name })).await
    }

    /// `POST /api/agents` with `body` (name, permissions, on_ask, …); an error unless
    /// it answered 201.
    pub async fn create_agent_with(&self, body: Value) -> anyhow::Result<Value> {
        let response = self
            .api(reqwest::Method::POST, "/api/agents")
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        if status != reqwest::StatusCode::CREATED {
            bail!("create agent {body}: {status} {answer}");
        }
        Ok(answer)
    }

    pub async fn agent(&self, name: &str) -> anyhow::Result<Value> {
        Ok(self
            .api(reqwest::Method::GET, &format!("/api/agents/{name}"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Waits until the agent's worker is connected; returns its pid.
    pub async fn wait_worker_running(&self, name: &str, timeout: Duration) -> anyhow::Result<u32> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let agent = self.agent(name).await?;
            if let (true, Some(pid)) = (
                agent["worker"]["state"] == "running",
                agent["worker"]["pid"].as_u64(),
            ) {
                return Ok(pid as u32);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "worker of {name} not running after {timeout:?}: {}",
                    agent["worker"]
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Sends a message; returns the new thread's id.
    pub async fn send_message(&self, agent: &str, content: &str) -> anyhow::Result<u64> {
        let response = self
            .api(
                reqwest::Method::POST,
                &format!("/api/agents/{agent}/messages"),
            )
            .json(&json!({ "content": content }))
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        if status != reqwest::StatusCode::ACCEPTED {
            bail!("send message: {status} {body}");
        }
        body["thread_id"].as_u64().context("thread_id")
    }

    pub async fn thread(&self, agent: &str, id: u64) -> anyhow::Result<Value> {
        Ok(self
            .api(
                reqwest::Method::GET,
                &format!("/api/agents/{agent}/threads/{id}"),
            )
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Polls until the thread is completed or failed.
    pub async fn wait_thread_finished(
        &self,
        agent: &str,
        id: u64,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        self.wait_thread(agent, id, timeout, |t| {
            t["status"] == "completed" || t["status"] == "failed"
        })
        .await
    }

    /// Polls until `done` holds for the thread.
    pub async fn wait_thread(
        &self,
        agent: &str,
        id: u64,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let thread = self.thread(agent, id).await?;
            if done(&thread) {
                return Ok(thread);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("thread {agent}/{id} not done after {timeout:?}: {thread:#}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Reads a thread's live event stream until the server ends it; returns the
    /// (event, data) pairs.
    pub async fn thread_events(
        &self,
        agent: &str,
        id: u64,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(String, Value)>> {
        let mut stream = self.open_thread_events(agent, id).await?;
        tokio::time::timeout(timeout, stream.rest())
            .await
            .context("the event stream did not end")?
    }

    /// Opens a thread's live event stream. Once this returns, the server has
    /// subscribed: nothing that happens to the thread afterwards is missed.
    pub async fn open_thread_events(&self, agent: &str, id: u64) -> anyhow::Result<EventStream> {
        let response = self
            .api(
                reqwest::Method::GET,
                &format!("/api/agents/{agent}/threads/{id}/events"),
            )
            .send()
            .await?
            .error_for_status()?;
        anyhow::ensure!(
            response.headers()["content-type"]
                .to_str()?
                .starts_with("text/event-stream"),
            "not an event stream"
        );
        Ok(EventStream {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            last_id: None,
        })
    }

    /// Opens `GET /api/events` (`query` like `?agent=a`, or empty), resuming after
    /// `last_event_id` when given. Once this returns, the server has subscribed.
    pub async fn open_events(
        &self,
        query: &str,
        last_event_id: Option<&str>,
    ) -> anyhow::Result<EventStream> {
        let mut request = self.api(reqwest::Method::GET, &format!("/api/events{query}"));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await?.error_for_status()?;
        Ok(EventStream {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            last_id: None,
        })
    }

    /// SIGTERM and wait for a clean exit.
    pub async fn stop(self) -> anyhow::Result<std::process::ExitStatus> {
        self.stop_with(nix::sys::signal::Signal::SIGTERM).await
    }

    /// `signal` (SIGINT: Ctrl-C in its terminal) and wait for a clean exit.
    pub async fn stop_with(
        mut self,
        signal: nix::sys::signal::Signal,
    ) -> anyhow::Result<std::process::ExitStatus> {
        crate::process::signal(self.pid(), signal);
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .with_context(|| format!("chorus did not exit within 20 s of {signal}"))??;
        Ok(status)
    }

    /// SIGKILL, as a crash would.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }
}

/// A thread's server-sent events, read one at a time.
pub struct EventStream {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>,
    buffer: String,
    /// The `id:` of the last event read that had one.
    last_id: Option<String>,
}

impl EventStream {
    /// The next (event, data) pair; `None` when the server ended the stream.
    pub async fn next(&mut self) -> anyhow::Result<Option<(String, Value)>> {
        use futures::StreamExt;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut name = String::from("message");
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        self.last_id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if !data.is_empty() {
                    let value = serde_json::from_str(&data).unwrap_or(Value::String(data));
                    return Ok(Some((name, value)));
                }
            }
            match self.body.next().await {
                Some(chunk) => self.buffer.push_str(&String::from_utf8_lossy(&chunk?)),
                None => return Ok(None),
            }
        }
    }

    /// The id of the last event read that carried one.
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Every event until the server ends the stream.
    pub async fn rest(&mut self) -> anyhow::Result<Vec<(String, Value)>> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await? {
            events.push(event);
        }
        Ok(events)
    }
}

/// `(is_error, content)` of each tool result of a thread as `GET …/threads/{id}`
/// shows it, in order.
pub fn tool_results(thread: &Value) -> Vec<(bool, String)> {
    thread["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| {
                    (
                        m["is_error"].as_bool().unwrap_or(false),
                        m["content"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
