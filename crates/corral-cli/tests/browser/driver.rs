//! Headless Chromium under chromedriver, with blocking helpers for the tests: go to a
//! page, wait until a script says something is shown, click, type, take a screenshot.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use libtest_mimic::Failed;
use serde_json::{Value, json};

/// How long a page gets to show what a test waits for.
pub const PATIENCE: Duration = Duration::from_secs(30);

fn chromium() -> PathBuf {
    std::env::var_os("CORRAL_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

fn chromedriver() -> PathBuf {
    std::env::var_os("CORRAL_CHROMEDRIVER")
        .map_or_else(|| PathBuf::from("/usr/bin/chromedriver"), PathBuf::from)
}

/// Whether chromium and chromedriver are there; under `CI=true` their absence fails.
pub fn available() -> bool {
    let present = chromium().is_file() && chromedriver().is_file();
    crate::common::prerequisite(
        present,
        "chromium and chromedriver (apt-get install chromium chromium-driver)",
    )
}

/// Where screenshots go: under the target directory, never committed.
pub fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots")
}

pub struct Browser {
    rt: tokio::runtime::Runtime,
    client: Option<Client>,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn start() -> Result<Browser, Failed> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", chromedriver().display()))?;
        let profile = tempfile::tempdir()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut browser = Browser {
            rt,
            client: None,
            driver,
            _profile: profile,
        };
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chromium(),
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-dev-shm-usage",
                    format!("--user-data-dir={}", browser._profile.path().display()),
                    "--window-size=1400,1000",
                ],
            }
        });
        let caps = match caps {
            Value::Object(m) => m,
            _ => return Err("capabilities are an object".into()),
        };
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = browser.rt.block_on(async {
            loop {
                let connector = hyper_util::client::legacy::connect::HttpConnector::new();
                match ClientBuilder::new(connector)
                    .capabilities(caps.clone())
                    .connect(&url)
                    .await
                {
                    Ok(c) => return Ok(c),
                    Err(e) if Instant::now() > deadline => {
                        return Err(format!("cannot start a Chromium session: {e}"));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        })?;
        browser.client = Some(client);
        Ok(browser)
    }

    fn client(&self) -> Result<&Client, Failed> {
        self.client
            .as_ref()
            .ok_or_else(|| "no browser session".into())
    }

    pub fn goto(&self, url: &str) -> Result<(), Failed> {
        let c = self.client()?;
        self.rt
            .block_on(c.goto(url))
            .map_err(|e| format!("goto {url}: {e}"))?;
        Ok(())
    }

    /// Runs `script` (a function body that returns a value) in the page.
    pub fn js(&self, script: &str) -> Result<Value, Failed> {
        let c = self.client()?;
        Ok(self
            .rt
            .block_on(c.execute(script, vec![]))
            .map_err(|e| format!("script failed: {e}\n{script}"))?)
    }

    /// Runs `script` asynchronously: it calls its last argument with the result.
    pub fn js_async(&self, script: &str) -> Result<Value, Failed> {
        let c = self.client()?;
        Ok(self
            .rt
            .block_on(c.execute_async(script, vec![]))
            .map_err(|e| format!("script failed: {e}\n{script}"))?)
    }

    /// Waits until `script` returns something truthy (not null, false, 0 or ""), and
    /// returns it; after [`PATIENCE`], fails naming `what` and what the page shows.
    pub fn wait(&self, what: &str, script: &str) -> Result<Value, Failed> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let v = self.js(script)?;
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                let shown = self.text().unwrap_or_default();
                let _ = self.screenshot("failure");
                return Err(format!(
                    "the page did not show {what} within {PATIENCE:?}; it shows:\n{shown}"
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What the page shows, as text.
    pub fn text(&self) -> Result<String, Failed> {
        Ok(self
            .js("return document.body.innerText")?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Clicks the element `css` selects. A live page may render it again between a wait
    /// that found it and the click (the element then is gone or stale for a moment): the
    /// click is tried again until it lands, up to [`PATIENCE`].
    pub fn click(&self, css: &str) -> Result<(), Failed> {
        let c = self.client()?;
        let deadline = Instant::now() + PATIENCE;
        loop {
            let clicked = self
                .rt
                .block_on(async { c.find(Locator::Css(css)).await?.click().await });
            match clicked {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("click {css}: {e}").into());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    pub fn type_into(&self, css: &str, text: &str) -> Result<(), Failed> {
        let c = self.client()?;
        self.rt
            .block_on(async { c.find(Locator::Css(css)).await?.send_keys(text).await })
            .map_err(|e| format!("type into {css}: {e}"))?;
        Ok(())
    }

    /// Saves a PNG of the window as `<screenshot_dir>/<name>.png`.
    pub fn screenshot(&self, name: &str) -> Result<PathBuf, Failed> {
        let c = self.client()?;
        let png = self
            .rt
            .block_on(c.screenshot())
            .map_err(|e| format!("screenshot: {e}"))?;
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png)?;
        Ok(path)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = self.rt.block_on(c.close());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
