//! The CLI's side of the management API: find the server and its token, send one request,
//! print the answer as JSON or through the printer a command gives. It knows no command
//! (those live in `volume_cmd`, `host_cmd`, ...), so every command module may use it and it
//! uses none. A refused request fails with a [`Failure`] carrying the server's message and
//! HTTP status, an unreachable server with [`Failure::Unreachable`]; `main` prints it as
//! `error: ...` and exits with the code `exit_code` gives it.

use std::path::Path;

use serde_json::Value;

use crate::exit_code::Failure;

/// Where the API is and how to authenticate.
#[derive(Debug)]
pub struct ApiClient {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl ApiClient {
    /// Flags and environment first, then the data dir of a running server. Finding no
    /// server is a [`Failure::Unreachable`].
    pub fn discover(
        data_dir: &Path,
        api: Option<&str>,
        token: Option<&str>,
    ) -> anyhow::Result<ApiClient> {
        let no_server = |m: String| anyhow::Error::new(Failure::Unreachable(m));
        let base = match api {
            Some(a) => a
                .trim_end_matches('/')
                .trim_end_matches("/api/v1")
                .to_string(),
            None => {
                let path = data_dir.join(weft_server::serve::SERVE_FILE);
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    no_server(format!(
                        "no running server found ({}: {e}): start `weft serve` or pass --api",
                        path.display()
                    ))
                })?;
                let v: Value = serde_json::from_str(&text).map_err(|e| {
                    no_server(format!("no running server found ({}: {e})", path.display()))
                })?;
                v["api"]
                    .as_str()
                    .ok_or_else(|| no_server(format!("{} has no api address", path.display())))?
                    .to_string()
            }
        };
        let token = match token {
            Some(t) => t.to_string(),
            None => {
                let path = data_dir.join(weft_server::serve::TOKEN_FILE);
                std::fs::read_to_string(&path)
                    .map_err(|e| {
                        no_server(format!(
                            "no API token: pass --token or run beside the data dir ({}: {e})",
                            path.display()
                        ))
                    })?
                    .trim()
                    .to_string()
            }
        };
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(ApiClient { base, token, agent })
    }

    /// The API's base URL, e.g. `http://127.0.0.1:10810`.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}/api/v1{path}", self.base);
        let auth = format!("Bearer {}", self.token);
        let response = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => self
                .agent
                .delete(&url)
                .header("Authorization", &auth)
                .call(),
            ("PUT", Some(b)) => self
                .agent
                .put(&url)
                .header("Authorization", &auth)
                .send_json(b),
            ("POST", Some(b)) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .send_json(b),
            ("POST", None) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .send_empty(),
            (other, _) => anyhow::bail!("the CLI does not send {other} requests"),
        };
        let mut response = response.map_err(|e| {
            Failure::Unreachable(format!(
                "cannot reach the management API at {}: {e}",
                self.base
            ))
        })?;
        let status = response.status();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let value: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            let msg = value["error"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            return Err(Failure::Api {
                status: status.as_u16(),
                message: msg,
            }
            .into());
        }
        Ok(value)
    }
}

/// A name as one URL path segment or query value: anything but `[A-Za-z0-9._~-]` is
/// percent-encoded, so a bad name reaches the server (and its clear error) intact.
pub fn seg(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'~' | b'-' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn print_json(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Print an answer: as JSON with `--json`, else as `human` says.
pub fn show(json: bool, v: &Value, human: impl FnOnce(&Value)) -> anyhow::Result<()> {
    if json {
        print_json(v)
    } else {
        human(v);
        Ok(())
    }
}
