//! A real headless Chromium for the web page's tests, driven over W3C WebDriver by
//! `chromedriver` on a free loopback port. The client is these few commands over
//! reqwest (already in the tree): a WebDriver crate would bring second copies of
//! `http`, `cookie` and the ICU crates into the build.
//!
//! [`Browser::start`] returns `None`, after printing why, only when Chromium or
//! chromedriver is not installed and `CHORUS_CI` is unset; CI sets it (and installs
//! both), so there a missing browser fails the test instead of skipping it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// `s` as a JavaScript string literal, for checks built with `format!`.
pub fn js(s: &str) -> String {
    serde_json::to_string(s).expect("a string is JSON")
}

/// The key W3C WebDriver names an element reference by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: tokio::process::Child,
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>/session/<id>`
    session: String,
    _profile: tempfile::TempDir,
}

/// An element of the page.
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

fn on_path(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

impl Browser {
    /// A headless Chromium at a 1280×900 window, or `None` (see the module doc).
    pub async fn start() -> anyhow::Result<Option<Browser>> {
        let chromium = on_path("chromium");
        let driver = on_path("chromedriver");
        let (Some(chromium), Some(driver_path)) = (chromium, driver) else {
            let why = "chromium and chromedriver must be on PATH (Debian: apt-get install chromium chromium-driver)";
            if std::env::var_os("CHORUS_CI").is_some() {
                bail!("CHORUS_CI is set and {why}");
            }
            eprintln!("skipped: {why}");
            return Ok(None);
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut command = tokio::process::Command::new(driver_path);
        command
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            // Its own group, so dropping the browser ends Chromium's processes too.
            .process_group(0);
        let driver = command.spawn().context("spawn chromedriver")?;
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = http.get(format!("{base}/status")).send().await;
            if let Ok(r) = ready
                && r.json::<Value>()
                    .await
                    .ok()
                    .and_then(|v| v["value"]["ready"].as_bool())
                    == Some(true)
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("chromedriver did not answer on port {port} within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir()?;
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await?
            .json()
            .await?;
        let Some(id) = created["value"]["sessionId"].as_str() else {
            bail!("chromedriver would not open a session: {created}");
        };
        Ok(Some(Browser {
            session: format!("{base}/session/{id}"),
            driver,
            http,
            _profile: profile,
        }))
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await?.json().await?;
        if let Some(error) = answer["value"]["error"].as_str() {
            bail!(
                "WebDriver {method} {path}: {error}: {}",
                answer["value"]["message"]
            );
        }
        Ok(answer["value"].clone())
    }

    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await?;
        Ok(())
    }

    pub async fn url(&self) -> anyhow::Result<String> {
        Ok(self
            .call(reqwest::Method::GET, "/url", None)
            .await?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// The element `css` selects, waiting up to 30 s for it to exist.
    pub async fn find(&self, css: &str) -> anyhow::Result<Element<'_>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self
                .call(
                    reqwest::Method::POST,
                    "/element",
                    Some(json!({"using": "css selector", "value": css})),
                )
                .await
            {
                Ok(found) => {
                    let Some(id) = found[ELEMENT].as_str() else {
                        bail!("not an element reference: {found}");
                    };
                    return Ok(Element {
                        browser: self,
                        id: id.to_string(),
                    });
                }
                Err(e) if Instant::now() > deadline => {
                    return Err(e.context(format!("no '{css}' within 30 s")));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Waits up to 30 s for `check` (a JavaScript expression) to be true in the page.
    pub async fn wait_for(&self, check: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // A navigation in progress may refuse the script: try again.
            if let Ok(Value::Bool(true)) =
                self.execute(&format!("return !!({check});"), vec![]).await
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "'{check}' was not true within 30 s (at {})",
                    self.url().await.unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Logs in at `origin`'s login page with `token` and waits for the shell.
    pub async fn log_in(&self, origin: &str, token: &str) -> anyhow::Result<()> {
        self.goto(&format!("{origin}/login")).await?;
        self.find("#token").await?.type_text(token).await?;
        self.find("button[type=submit]").await?.click().await?;
        self.wait_for(
            "location.pathname === '/' && document.getElementById('who-name').textContent !== ''",
        )
        .await
    }

    /// Every address the page has requested since it was loaded (the document, its
    /// files, its fetches and its event stream), from the browser's own record.
    pub async fn requested(&self) -> anyhow::Result<Vec<String>> {
        let urls = self
            .execute(
                "return performance.getEntriesByType('navigation')\
                 .concat(performance.getEntriesByType('resource')).map(e => e.name);",
                vec![],
            )
            .await?;
        Ok(serde_json::from_value(urls)?)
    }

    /// Asserts that the page asked something, and only of `origin` (no CDN, no font
    /// service): every address in the browser's own record of requests.
    pub async fn assert_only_origin(&self, origin: &str) -> anyhow::Result<()> {
        let requested = self.requested().await?;
        anyhow::ensure!(!requested.is_empty(), "the page requested nothing");
        let prefix = format!("{origin}/");
        let strays: Vec<&String> = requested
            .iter()
            .filter(|url| !url.starts_with(&prefix))
            .collect();
        anyhow::ensure!(strays.is_empty(), "requests not of {origin}: {strays:?}");
        Ok(())
    }

    /// How many elements `css` selects in the page.
    pub async fn count(&self, css: &str) -> anyhow::Result<u64> {
        let n = self
            .execute(
                "return document.querySelectorAll(arguments[0]).length;",
                vec![json!(css)],
            )
            .await?;
        Ok(n.as_u64().unwrap_or_default())
    }

    /// The text of everything `css` selects, joined by `|`, as the page has it.
    pub async fn text_of(&self, css: &str) -> anyhow::Result<String> {
        let text = self
            .execute(
                "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent).join('|');",
                vec![json!(css)],
            )
            .await?;
        Ok(text.as_str().unwrap_or_default().to_string())
    }

    /// Reloads the page (its address keeps the view) and waits for the new shell.
    pub async fn reload(&self) -> anyhow::Result<()> {
        self.execute("window.before_reload = true; location.reload();", vec![])
            .await?;
        self.wait_for(
            "!window.before_reload && document.getElementById('who-name').textContent !== ''",
        )
        .await
    }

    /// Sets the window's size in CSS pixels (390 wide is a phone).
    pub async fn resize(&self, width: u32, height: u32) -> anyhow::Result<()> {
        self.call(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await?;
        Ok(())
    }

    /// A PNG of what the window shows, written to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) -> anyhow::Result<()> {
        use base64::Engine as _;
        let png = self.call(reqwest::Method::GET, "/screenshot", None).await?;
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap_or_default())?;
        std::fs::write(path, bytes)?;
        Ok(())
    }

    /// Ends the session (and Chromium), then chromedriver.
    pub async fn close(self) -> anyhow::Result<()> {
        self.http.delete(&self.session).send().await?;
        // Dropping ends chromedriver's process group.
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A failing test may not reach `close`: end the whole group.
        if let Some(pid) = self.driver.id() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Element<'_> {
    fn path(&self, tail: &str) -> String {
        format!("/element/{}{tail}", self.id)
    }

    pub async fn text(&self) -> anyhow::Result<String> {
        let text = self
            .browser
            .call(reqwest::Method::GET, &self.path("/text"), None)
            .await?;
        Ok(text.as_str().unwrap_or_default().to_string())
    }

    pub async fn type_text(&self, text: &str) -> anyhow::Result<()> {
        self.browser
            .call(
                reqwest::Method::POST,
                &self.path("/value"),
                Some(json!({"text": text})),
            )
            .await?;
        Ok(())
    }

    pub async fn click(&self) -> anyhow::Result<()> {
        self.browser
            .call(reqwest::Method::POST, &self.path("/click"), Some(json!({})))
            .await?;
        Ok(())
    }
}
