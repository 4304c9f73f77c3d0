//! Headless Chromium driven over the DevTools protocol (a websocket to the page), for the web
//! UI's tests: start it in its own process group (killed on drop), open its tab, evaluate
//! expressions in the page, wait for one to hold, click and fill in elements, and take
//! screenshots that are checked to be PNGs of the viewport's size with something drawn on them.
//! The UI exposes its data for tests as `window.weft` (see ui/app.js).
#![allow(dead_code)]

use std::fs;
use std::io::ErrorKind;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

use crate::common::*;

/// Chromium's start, up to its DevTools port file.
pub const BROWSER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// One DevTools call (a screenshot of a tall page is the slowest).
pub const CDP_CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a page may take to show what the test waits for.
pub const PAGE_TIMEOUT: Duration = Duration::from_secs(15);
/// A screenshot with something drawn on it is larger: a blank 1400 x 1600 page compresses to
/// under 10 KiB, the emptiest page here (the login) is about 20 KiB.
pub const SCREENSHOT_BYTES_MIN: usize = 12 << 10;
/// The viewport of the screenshots.
pub const VIEW_WIDTH_PX: u32 = 1400;
pub const VIEW_HEIGHT_PX: u32 = 1000;

/// The Chromium binary; panics naming the package when it is not installed.
pub fn chromium() -> PathBuf {
    ["chromium", "chromium-browser"]
        .iter()
        .find_map(|t| which(t))
        .unwrap_or_else(|| {
            panic!(
                "required tool `chromium` is not installed (Debian package `chromium`); \
                 .ci/run installs it: apt-get install -y chromium"
            )
        })
}

/// Headless Chromium in its own process group; the group is SIGKILLed on drop.
pub struct Browser {
    process: Option<Bg>,
    port: u16,
    _profile: Scratch,
}

impl Browser {
    pub fn launch() -> Browser {
        let profile = Scratch::new("web-ui-chromium");
        let mut cmd = Command::new(chromium());
        cmd.args([
            "--headless",
            "--no-sandbox", // CI runs as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-background-timer-throttling",
            "--disable-renderer-backgrounding",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            &format!("--window-size={VIEW_WIDTH_PX},{VIEW_HEIGHT_PX}"),
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .process_group(0);
        let mut process = Bg::spawn(&mut cmd);
        let port_file = profile.join("DevToolsActivePort");
        let port = poll_until(
            BROWSER_START_TIMEOUT,
            "Chromium's DevToolsActivePort",
            || {
                if let Some(st) = process.try_wait() {
                    panic!("chromium exited ({st}):\n{}", process.all_so_far());
                }
                let text = fs::read_to_string(&port_file).ok()?;
                text.lines().next()?.trim().parse::<u16>().ok()
            },
        );
        eprintln!("chromium pid {} devtools port {port}", process.pid());
        Browser {
            process: Some(process),
            port,
            _profile: profile,
        }
    }

    /// The tab Chromium opened (about:blank), over its websocket.
    pub fn page(&self) -> Page {
        let list_url = format!("http://127.0.0.1:{}", self.port);
        let targets: Value = poll_until(PAGE_TIMEOUT, "a page target in /json/list", || {
            let (st, body) = try_api_request(&list_url, "GET", "/json/list", None, None).ok()?;
            let v: Value = serde_json::from_str(&body).ok()?;
            (st == 200 && v.as_array()?.iter().any(|t| t["type"] == "page")).then_some(v)
        });
        let ws_url = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .unwrap_or_else(|| panic!("no page websocket in {targets}"))
            .to_string();
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to devtools");
        stream.set_read_timeout(Some(CDP_CALL_TIMEOUT)).unwrap();
        let (ws, _) = tungstenite::client(ws_url.as_str(), stream)
            .unwrap_or_else(|e| panic!("websocket handshake with {ws_url}: {e}"));
        // Short reads from now on, so a call's deadline is checked while waiting.
        ws.get_ref()
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut page = Page { ws, next_id: 0 };
        page.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": VIEW_WIDTH_PX, "height": VIEW_HEIGHT_PX,
                   "deviceScaleFactor": 1, "mobile": false}),
        );
        page
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            // The browser's renderer and GPU processes are in its group (pgid = its pid).
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", p.pid())])
                .status();
            p.sigkill();
            let out = p.wait(Duration::from_secs(10));
            if std::thread::panicking() {
                eprintln!("chromium output:\n{}\n{}", out.stdout, out.stderr);
            }
        }
    }
}

/// One page over the DevTools protocol: calls answered in order of their ids, events ignored
/// (no domain is enabled, so there are few).
pub struct Page {
    ws: WebSocket<TcpStream>,
    next_id: u64,
}

impl Page {
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws
            .send(Message::text(request))
            .unwrap_or_else(|e| panic!("send {method}: {e}"));
        let deadline = Instant::now() + CDP_CALL_TIMEOUT;
        loop {
            match self.ws.read() {
                Ok(Message::Text(text)) => {
                    let v: Value = serde_json::from_str(text.as_str()).expect("devtools JSON");
                    if v["id"].as_u64() == Some(id) {
                        if let Some(err) = v.get("error") {
                            panic!("{method} failed: {err}");
                        }
                        return v["result"].clone();
                    }
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("devtools websocket, waiting for {method}: {e}"),
            }
            if Instant::now() > deadline {
                panic!("no answer to {method} within {CDP_CALL_TIMEOUT:?}");
            }
        }
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its value as JSON.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(ex) = r.get("exceptionDetails") {
            panic!("page threw evaluating `{expr}`: {ex}");
        }
        r["result"]["value"].clone()
    }

    /// Polls `expr` every 100 ms until it is truthy; returns its value.
    pub fn wait_for(&mut self, what: &str, expr: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        let guarded =
            format!("(() => {{ try {{ return ({expr}); }} catch (e) {{ return null; }} }})()");
        loop {
            let v = self.eval(&guarded);
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                let state = self.eval(
                    "JSON.stringify({href: location.href, page: window.weft && weft.page, \
                     errors: window.weft && weft.errors, \
                     text: document.body.innerText.slice(0, 1500)})",
                );
                panic!("timed out after {timeout:?} waiting for {what} (`{expr}`); page: {state}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url }));
    }

    /// Sets the route (`#/...`) inside the loaded app.
    pub fn go(&mut self, hash: &str) {
        self.eval(&format!("location.hash = {}", json!(hash)));
    }

    pub fn screenshot(&mut self, dir: &Path, name: &str, height_px: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": VIEW_WIDTH_PX, "height": height_px,
                   "deviceScaleFactor": 1, "mobile": false}),
        );
        // Let the page lay out and draw at the new size.
        std::thread::sleep(Duration::from_millis(300));
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot is base64");
        assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
        // The page drew: the viewport's size (IHDR) and more than an empty page compresses to.
        assert_eq!(&png[12..16], b"IHDR", "{name}: no IHDR first");
        let dim = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
        assert_eq!(
            (dim(16), dim(20)),
            (VIEW_WIDTH_PX, height_px),
            "{name}: size"
        );
        assert!(
            png.len() >= SCREENSHOT_BYTES_MIN,
            "{name}: {} bytes, a blank page?",
            png.len()
        );
        let path = dir.join(format!("{name}.png"));
        fs::write(&path, png).unwrap();
        eprintln!("screenshot {}", path.display());
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": VIEW_WIDTH_PX, "height": VIEW_HEIGHT_PX,
                   "deviceScaleFactor": 1, "mobile": false}),
        );
    }

    pub fn login(&mut self, token: &str) {
        self.eval(&format!(
            "document.getElementById('login-token').value = {}; \
             document.getElementById('login-submit').click()",
            json!(token)
        ));
    }

    /// Clicks a column header of the volume list until the list is sorted by `col` in that
    /// direction; returns the milliseconds the last click took to reorder the rows.
    pub fn sort_list(&mut self, col: &str, desc: bool) -> f64 {
        for _ in 0..3 {
            let ms = self.eval(&format!(
                "(async () => {{ const t = performance.now(); \
                   document.querySelector('#vl-table th[data-sort={col}]').click(); \
                   await new Promise((r) => requestAnimationFrame(() => r())); \
                   return performance.now() - t; }})()"
            ));
            let sort = self.eval("weft.volumes.sort()");
            if sort["col"] == col && sort["desc"] == desc {
                return ms.as_f64().unwrap();
            }
        }
        panic!("the list did not sort by {col} (desc {desc})");
    }
}

pub fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots");
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The page's own record of errors (uncaught exceptions, rejected promises, CSP violations).
pub fn assert_no_page_errors(page: &mut Page, when: &str) {
    let errors = page.eval("weft.errors");
    assert_eq!(errors, json!([]), "page errors {when}");
}

/// Clicks `id` in the page.
pub fn click(page: &mut Page, id: &str) {
    page.eval(&format!("document.getElementById({}).click()", json!(id)));
}

/// Sets the value of the input or select `id`.
pub fn set_value(page: &mut Page, id: &str, value: &str) {
    page.eval(&format!(
        "document.getElementById({}).value = {}",
        json!(id),
        json!(value)
    ));
}
