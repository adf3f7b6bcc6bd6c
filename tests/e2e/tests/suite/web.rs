//! The web page through the real `chorus serve`: its headers (CSP and friends,
//! ETags, compression), the login session (cookie, CSRF, logout, revocation) over
//! plain HTTP, and the page itself in a real headless Chromium.

use std::time::Duration;

use chorus_test_support::browser::Browser;
use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeOpenAi};
use reqwest::{Method, StatusCode, header};
use serde_json::{Value, json};

/// A client that shows redirects instead of following them, and keeps no cookies.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client")
}

fn assert_page_headers(response: &reqwest::Response) {
    let h = response.headers();
    let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(h[header::REFERRER_POLICY], "no-referrer");
}

/// Logs in with `token` over HTTP: the session cookie (`name=value`) from the 303.
async fn log_in(chorus: &Chorus, token: &str) -> anyhow::Result<String> {
    let response = client()
        .post(format!("{}/login", chorus.http_url))
        .form(&[("token", token)])
        .send()
        .await?;
    anyhow::ensure!(
        response.status() == StatusCode::SEE_OTHER,
        "login: {response:?}"
    );
    let cookie = response.headers()[header::SET_COOKIE].to_str()?.to_string();
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    // The cookie is a session id, never the token.
    assert!(!cookie.contains(token), "{cookie}");
    Ok(cookie.split(';').next().unwrap_or_default().to_string())
}

fn with_cookie(
    chorus: &Chorus,
    cookie: &str,
    method: Method,
    path: &str,
) -> reqwest::RequestBuilder {
    client()
        .request(method, format!("{}{path}", chorus.http_url))
        .header(header::COOKIE, cookie)
}

#[tokio::test]
async fn web_pages_carry_the_csp_etags_and_compression() -> anyhow::Result<()> {
    let chorus = Chorus::builder().start().await?;
    let http = client();
    // Logged out, `/` sends the browser to the login page; both carry the headers.
    let root = http.get(format!("{}/", chorus.http_url)).send().await?;
    assert_eq!(root.status(), StatusCode::SEE_OTHER);
    assert_eq!(root.headers()[header::LOCATION], "/login");
    assert_page_headers(&root);
    let login = http
        .get(format!("{}/login", chorus.http_url))
        .send()
        .await?;
    assert_eq!(login.status(), StatusCode::OK);
    assert_page_headers(&login);
    let tag = login.headers()[header::ETAG].to_str()?.to_string();
    // Strong (no W/) and the content's SHA-256.
    assert!(tag.starts_with('"') && tag.len() == 66, "{tag}");
    assert!(login.text().await?.contains("name=\"token\""));

    for path in ["/login", "/assets/app.js", "/assets/style.css"] {
        let first = http
            .get(format!("{}{path}", chorus.http_url))
            .send()
            .await?;
        assert_eq!(first.status(), StatusCode::OK, "{path}");
        let tag = first.headers()[header::ETAG].to_str()?.to_string();
        let again = http
            .get(format!("{}{path}", chorus.http_url))
            .header(header::IF_NONE_MATCH, &tag)
            .send()
            .await?;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
        assert_eq!(again.headers()[header::ETAG], tag.as_str());
        assert!(again.bytes().await?.is_empty());
        // Positive control: another tag gets the file.
        let other = http
            .get(format!("{}{path}", chorus.http_url))
            .header(header::IF_NONE_MATCH, "\"not-it\"")
            .send()
            .await?;
        assert_eq!(other.status(), StatusCode::OK, "{path}");
    }

    let plain = http
        .get(format!("{}/assets/app.js", chorus.http_url))
        .send()
        .await?;
    assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
    let plain_tag = plain.headers()[header::ETAG].to_str()?.to_string();
    for encoding in ["gzip", "br"] {
        let js = http
            .get(format!("{}/assets/app.js", chorus.http_url))
            .header(header::ACCEPT_ENCODING, encoding)
            .send()
            .await?;
        assert_eq!(js.headers()[header::CONTENT_ENCODING], encoding);
        assert!(
            js.headers()[header::CONTENT_TYPE]
                .to_str()?
                .starts_with("text/javascript")
        );
        // Another representation, another strong tag; it gets a 304 all the same.
        let tag = js.headers()[header::ETAG].to_str()?.to_string();
        assert_eq!(
            tag,
            format!("{}-{encoding}\"", plain_tag.trim_end_matches('"'))
        );
        let again = http
            .get(format!("{}/assets/app.js", chorus.http_url))
            .header(header::ACCEPT_ENCODING, encoding)
            .header(header::IF_NONE_MATCH, &tag)
            .send()
            .await?;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{encoding}");
        assert_eq!(again.headers()[header::ETAG], tag.as_str());
    }
    // The HTML pages are not served as assets, and nothing else is.
    for path in [
        "/assets/index.html",
        "/assets/nothing.js",
        "/assets/..%2Fsrc%2Flib.rs",
    ] {
        let response = http
            .get(format!("{}{path}", chorus.http_url))
            .send()
            .await?;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
    Ok(())
}

#[tokio::test]
async fn web_session_cookie_needs_csrf_to_change_and_ends_at_logout() -> anyhow::Result<()> {
    let chorus = Chorus::builder()
        .config("[roles]\nvera = \"viewer\"\n")
        .start()
        .await?;
    // A wrong token: the login page again, with the reason.
    let wrong = client()
        .post(format!("{}/login", chorus.http_url))
        .form(&[("token", "chorus_not-a-token")])
        .send()
        .await?;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(header::SET_COOKIE).is_none());
    assert_page_headers(&wrong);
    assert!(wrong.text().await?.contains("That token is not valid"));

    let cookie = log_in(&chorus, chorus.token()).await?;
    let session: Value = with_cookie(&chorus, &cookie, Method::GET, "/api/session")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(session["user"], "api");
    // The closed sets the page's forms offer come from the server's own definitions.
    assert_eq!(
        session["backends"],
        json!(["api", "claude-code", "opencode"])
    );
    assert_eq!(session["presets"], json!(["open", "standard", "locked"]));
    let csrf = session["csrf_token"]
        .as_str()
        .expect("a CSRF token")
        .to_string();
    // Reading needs only the cookie, the live feed included.
    let events = with_cookie(&chorus, &cookie, Method::GET, "/api/events")
        .send()
        .await?;
    assert_eq!(events.status(), StatusCode::OK);
    assert!(
        events.headers()[header::CONTENT_TYPE]
            .to_str()?
            .starts_with("text/event-stream")
    );
    drop(events);
    // Changing needs the CSRF token too: refused, and nothing was made.
    let refused = with_cookie(&chorus, &cookie, Method::POST, "/api/agents")
        .json(&json!({"name": "forged"}))
        .send()
        .await?;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(refused.json::<Value>().await?["error"]["code"], "csrf");
    let wrong_csrf = with_cookie(&chorus, &cookie, Method::POST, "/api/agents")
        .header("X-CSRF-Token", "0".repeat(64))
        .json(&json!({"name": "forged"}))
        .send()
        .await?;
    assert_eq!(wrong_csrf.status(), StatusCode::FORBIDDEN);
    let missing = chorus.api(Method::GET, "/api/agents/forged").send().await?;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    // Positive control: with it, the same request goes through.
    let made = with_cookie(&chorus, &cookie, Method::POST, "/api/agents")
        .header("X-CSRF-Token", &csrf)
        .json(&json!({"name": "forged"}))
        .send()
        .await?;
    assert_eq!(made.status(), StatusCode::CREATED);
    // The bearer header needs no CSRF token.
    let bearer: Value = chorus
        .api(Method::GET, "/api/session")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(bearer["csrf_token"], Value::Null);
    // The admin may do everything; the feed's position is an event id of it.
    let may = bearer["may"].as_array().expect("may");
    assert!(
        may.len() >= 12 && may.contains(&json!("manage_tokens")),
        "{may:?}"
    );
    let position = bearer["event_id"].as_str().expect("event_id");
    assert!(position.split_once('.').is_some(), "{position}");

    // Logout: refused without the CSRF token, then the session is gone.
    let no_csrf = with_cookie(&chorus, &cookie, Method::POST, "/logout")
        .send()
        .await?;
    assert_eq!(no_csrf.status(), StatusCode::FORBIDDEN);
    let out = with_cookie(&chorus, &cookie, Method::POST, "/logout")
        .header("X-CSRF-Token", &csrf)
        .send()
        .await?;
    assert_eq!(out.status(), StatusCode::NO_CONTENT);
    assert!(
        out.headers()[header::SET_COOKIE]
            .to_str()?
            .contains("Max-Age=0")
    );
    let after = with_cookie(&chorus, &cookie, Method::GET, "/api/agents")
        .send()
        .await?;
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED);
    let root = with_cookie(&chorus, &cookie, Method::GET, "/")
        .send()
        .await?;
    assert_eq!(root.status(), StatusCode::SEE_OTHER);

    // A person's own token: their role applies, and revoking it ends the session.
    let issued: Value = chorus
        .api(Method::POST, "/api/users/vera/tokens")
        .json(&json!({"label": "browser"}))
        .send()
        .await?
        .json()
        .await?;
    let token = issued["token"].as_str().expect("the token");
    let cookie = log_in(&chorus, token).await?;
    let session: Value = with_cookie(&chorus, &cookie, Method::GET, "/api/session")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        (session["user"].as_str(), session["role"].as_str()),
        (Some("vera"), Some("viewer"))
    );
    // What the page may show her: looking and talking, no other control.
    assert_eq!(session["may"], json!(["look", "talk"]));
    let csrf = session["csrf_token"]
        .as_str()
        .expect("a CSRF token")
        .to_string();
    let viewer = with_cookie(&chorus, &cookie, Method::DELETE, "/api/agents/forged")
        .header("X-CSRF-Token", &csrf)
        .send()
        .await?;
    assert_eq!(viewer.status(), StatusCode::FORBIDDEN);
    assert_eq!(viewer.json::<Value>().await?["error"]["code"], "forbidden");
    let id = issued["id"].as_str().expect("the token's id");
    let revoked = chorus
        .api(Method::DELETE, &format!("/api/users/vera/tokens/{id}"))
        .send()
        .await?;
    assert!(revoked.status().is_success(), "{revoked:?}");
    let after = with_cookie(&chorus, &cookie, Method::GET, "/api/agents")
        .send()
        .await?;
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED);

    // A login form posted from another site is refused, as the browser tells.
    for (name, value) in [
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let cross = client()
            .post(format!("{}/login", chorus.http_url))
            .header(name, value)
            .form(&[("token", chorus.token())])
            .send()
            .await?;
        assert_eq!(cross.status(), StatusCode::FORBIDDEN, "{name}");
        assert!(cross.headers().get(header::SET_COOKIE).is_none());
    }
    Ok(())
}

#[tokio::test]
async fn web_login_refuses_for_a_moment_after_many_wrong_tokens() -> anyhow::Result<()> {
    let chorus = Chorus::builder().start().await?;
    let post = |token: String| {
        client()
            .post(format!("{}/login", chorus.http_url))
            .form(&[("token", token)])
            .send()
    };
    // Positive control: the right token is let in before the wrong ones.
    assert_eq!(
        post(chorus.token().to_string()).await?.status(),
        StatusCode::SEE_OTHER
    );
    // The bucket holds 10 and refills one a second: a run of wrong tokens empties
    // it, after which even the right token is refused until it refills. (A wrong
    // token just before each try: a refill between two requests cannot hide it.)
    let mut statuses = Vec::new();
    for i in 0..12 {
        statuses.push(post(format!("chorus_wrong{i}")).await?.status().as_u16());
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(statuses[..10].iter().all(|s| *s == 401), "{statuses:?}");
    let mut limited = None;
    for i in 0..10 {
        post(format!("chorus_again{i}")).await?;
        let right = post(chorus.token().to_string()).await?;
        if right.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(right);
            break;
        }
    }
    let limited = limited.expect("the right token refused while the bucket is empty");
    assert!(limited.headers().get(header::SET_COOKIE).is_none());
    assert!(limited.text().await?.contains("Too many wrong tokens"));
    // Meanwhile another address (127.0.0.2, also loopback) is let in: one client's
    // wrong tokens lock no one else out.
    let elsewhere = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address("127.0.0.2".parse::<std::net::IpAddr>()?)
        .timeout(Duration::from_secs(30))
        .build()?
        .post(format!("{}/login", chorus.http_url))
        .form(&[("token", chorus.token())])
        .send()
        .await?;
    assert_eq!(elsewhere.status(), StatusCode::SEE_OTHER);
    // It refills: within a few seconds the right token is let in again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if post(chorus.token().to_string()).await?.status() == StatusCode::SEE_OTHER {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still refused after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

#[tokio::test]
async fn web_login_fleet_and_logout_in_chromium() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let chorus = Chorus::builder().start().await?;
    chorus.create_agent("scout").await?;
    let origin = chorus.origin();

    // Logged out: `/` goes to the login page.
    browser.goto(&format!("{origin}/")).await?;
    browser.wait_for("location.pathname === '/login'").await?;
    // A wrong token is refused with the message.
    browser
        .find("#token")
        .await?
        .type_text("chorus_wrong")
        .await?;
    browser.find("button[type=submit]").await?.click().await?;
    let message = browser.find("#login-error").await?.text().await?;
    assert!(message.contains("That token is not valid"), "{message}");

    // The right one: the shell, with the navigation, who is logged in, and the fleet.
    browser
        .find("#token")
        .await?
        .type_text(chorus.token())
        .await?;
    browser.find("button[type=submit]").await?.click().await?;
    browser.wait_for("location.pathname === '/'").await?;
    browser
        .wait_for("document.querySelector('#agents tr[data-agent=\"scout\"]')")
        .await?;
    let header = browser.find("header").await?.text().await?;
    for word in ["Fleet", "Board", "Log out", "api", "admin"] {
        assert!(header.contains(word), "{word} in {header:?}");
    }
    let row = browser
        .find("#agents tr[data-agent=\"scout\"]")
        .await?
        .text()
        .await?;
    assert!(row.contains("scout") && row.contains("api"), "{row}");
    let viewport = browser
        .execute(
            "return document.querySelector('meta[name=viewport]').content;",
            vec![],
        )
        .await?;
    assert!(
        viewport
            .as_str()
            .unwrap_or_default()
            .contains("width=device-width")
    );

    // Every request the page made went to this origin (no CDN, no font service).
    browser.assert_only_origin(&origin).await?;
    let requested = browser.requested().await?;
    assert!(
        requested.iter().any(|u| u.ends_with("/api/agents")),
        "{requested:?}"
    );
    assert!(
        requested.iter().any(|u| u.ends_with("/assets/app.js")),
        "{requested:?}"
    );

    // The browser sends the cookie, but a change without the CSRF token is refused;
    // with the token the page reads from GET /api/session, it goes through.
    let create = "const [name, withToken] = arguments; \
                  const headers = {'Content-Type': 'application/json'}; \
                  if (withToken) headers['X-CSRF-Token'] = \
                      (await (await fetch('/api/session')).json()).csrf_token; \
                  const r = await fetch('/api/agents', {method: 'POST', headers, \
                      body: JSON.stringify({name})}); \
                  return r.status;";
    let refused = browser
        .execute(create, vec![json!("forged"), json!(false)])
        .await?;
    assert_eq!(refused, json!(403));
    let missing = chorus.api(Method::GET, "/api/agents/forged").send().await?;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let made = browser
        .execute(create, vec![json!("invited"), json!(true)])
        .await?;
    assert_eq!(made, json!(201));

    // The CSP holds in the browser: an inline script added to the page does not run
    // (positive control below: the same script runs on a page without the policy).
    let inline = "const s = document.createElement('script'); \
                  s.textContent = 'window.inlineRan = true;'; \
                  document.body.appendChild(s); return window.inlineRan === true;";
    assert_eq!(browser.execute(inline, vec![]).await?, Value::Bool(false));

    // Log out: back at the login page, and `/` sends there again.
    browser.find("#logout").await?.click().await?;
    browser.wait_for("location.pathname === '/login'").await?;
    browser.goto(&format!("{origin}/")).await?;
    browser.wait_for("location.pathname === '/login'").await?;
    browser.goto("about:blank").await?;
    assert_eq!(browser.execute(inline, vec![]).await?, Value::Bool(true));
    browser.close().await?;
    Ok(())
}

/// Every main view at a desktop's width and a phone's (390 px): nothing is wider
/// than the screen, and every control can be reached with the keyboard. With
/// `CHORUS_SCREENSHOTS=<dir>` each is also saved as `<view>-<width>.png` there (how
/// `docs/screenshots/` is made).
#[tokio::test]
async fn web_every_view_fits_a_phone_and_a_desktop() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    // Something to show: a thread with a tool step and an answer, and a task.
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "notes.md", "content": "# Notes\n"}),
    ));
    model.push(text("I wrote notes.md with a heading."));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus
        .create_agent_with(json!({"name": "scout", "permissions": "standard"}))
        .await?;
    let thread = chorus
        .send_message("scout", "Start a notes file, please.")
        .await?;
    chorus
        .wait_thread_finished("scout", thread, Duration::from_secs(60))
        .await?;
    // The planner plans it for scout; anything after is a plain answer.
    model.push(tool_call(
        "p1",
        "submit_plan",
        json!({"summary": "Release notes for 0.2", "requirements": ["every change listed"],
               "acceptance_criteria": ["notes.md has a 0.2 section"],
               "steps": ["read the log", "write the section"], "assignee": "scout"}),
    ));
    model.set_fallback(|_| text("Done."));
    let task = chorus
        .api(Method::POST, "/api/tasks")
        .json(&json!({"title": "Write the release notes", "description": "For 0.2."}))
        .send()
        .await?;
    assert_eq!(task.status(), StatusCode::CREATED);
    let origin = chorus.origin();
    browser.log_in(&origin, chorus.token()).await?;
    let chat = format!("#chat/scout/{thread}");
    let shots = std::env::var_os("CHORUS_SCREENSHOTS").map(std::path::PathBuf::from);
    for (width, height) in [(1280, 900), (390, 844)] {
        browser.resize(width, height).await?;
        for (view, hash) in [
            ("fleet", "#fleet"),
            ("chat", chat.as_str()),
            ("board", "#board"),
            ("agents", "#agents/scout"),
        ] {
            browser.goto(&format!("{origin}/{hash}")).await?;
            browser
                .wait_for(&format!(
                    "!document.getElementById('view-{view}').hidden && \
                     document.getElementById('live').dataset.state === 'live'"
                ))
                .await?;
            let fits = browser
                .execute(
                    "return [document.documentElement.scrollWidth, window.innerWidth];",
                    vec![],
                )
                .await?;
            let [wide, screen] = [fits[0].as_u64(), fits[1].as_u64()];
            assert!(wide <= screen, "{view} at {width} px is {wide:?} wide");
            // Every control on show is a real control the keyboard reaches.
            let unreachable = browser
                .execute(
                    "return [...document.querySelectorAll('button, a, input, select, textarea, summary')]\
                       .filter(e => e.offsetParent !== null && e.tabIndex < 0)\
                       .map(e => e.outerHTML.slice(0, 80));",
                    vec![],
                )
                .await?;
            assert_eq!(unreachable, json!([]), "{view} at {width} px");
            if let Some(dir) = &shots {
                std::fs::create_dir_all(dir)?;
                browser
                    .screenshot(&dir.join(format!("{view}-{width}.png")))
                    .await?;
            }
        }
    }
    browser.assert_only_origin(&origin).await?;
    browser.close().await?;
    Ok(())
}
