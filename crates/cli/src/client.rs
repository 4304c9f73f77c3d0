//! The CLI's side of the management API: find the server and its token, send one request,
//! print the answer for a person (or as JSON).

use std::path::Path;

use anyhow::{bail, Context};
use serde_json::Value;

/// A request the CLI makes.
#[derive(Debug)]
pub enum Request {
    Create { name: String, size_bytes: u64 },
    List { json: bool },
    Info { name: String, json: bool },
    Resize { name: String, size_bytes: u64 },
    Delete { name: String },
    Stats { json: bool },
    Sync,
    Gc,
    Checkpoint,
}

/// Where the API is and how to authenticate.
#[derive(Debug)]
pub struct ApiClient {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl ApiClient {
    /// Flags and environment first, then the data dir of a running server.
    pub fn discover(
        data_dir: &Path,
        api: Option<&str>,
        token: Option<&str>,
    ) -> anyhow::Result<ApiClient> {
        let base = match api {
            Some(a) => a
                .trim_end_matches('/')
                .trim_end_matches("/api/v1")
                .to_string(),
            None => {
                let path = data_dir.join(weft_server::serve::SERVE_FILE);
                let text = std::fs::read_to_string(&path).with_context(|| {
                    format!(
                        "no running server found ({} is missing): start `weft serve` or pass --api",
                        path.display()
                    )
                })?;
                let v: Value = serde_json::from_str(&text)
                    .with_context(|| format!("reading {}", path.display()))?;
                v["api"]
                    .as_str()
                    .context("serve.json has no api address")?
                    .to_string()
            }
        };
        let token = match token {
            Some(t) => t.to_string(),
            None => {
                let path = data_dir.join(weft_server::serve::TOKEN_FILE);
                std::fs::read_to_string(&path)
                    .with_context(|| {
                        format!(
                            "no API token: pass --token or run beside the data dir ({} is missing)",
                            path.display()
                        )
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

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}/api/v1{path}", self.base);
        let auth = format!("Bearer {}", self.token);
        let response = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => self
                .agent
                .delete(&url)
                .header("Authorization", &auth)
                .call(),
            (_, Some(b)) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .send_json(b),
            (_, None) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .send_empty(),
        };
        let mut response = response
            .with_context(|| format!("cannot reach the management API at {}", self.base))?;
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
            bail!("{msg} (HTTP {})", status.as_u16());
        }
        Ok(value)
    }
}

pub fn run(client: &ApiClient, request: Request) -> anyhow::Result<()> {
    match request {
        Request::Create { name, size_bytes } => {
            let v = client.call(
                "POST",
                "/volumes",
                Some(serde_json::json!({ "name": name, "size_bytes": size_bytes })),
            )?;
            println!(
                "created {} ({}): {}",
                v["name"].as_str().unwrap_or(""),
                human(size_bytes),
                v["nbd_uri"].as_str().unwrap_or("")
            );
        }
        Request::List { json } => {
            let v = client.call("GET", "/volumes", None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{:<24} {:>10} {:>10}  NBD URI", "NAME", "SIZE", "MAPPED");
                for vol in v.as_array().into_iter().flatten() {
                    println!(
                        "{:<24} {:>10} {:>10}  {}",
                        vol["name"].as_str().unwrap_or(""),
                        human(vol["size_bytes"].as_u64().unwrap_or(0)),
                        human(vol["mapped_bytes"].as_u64().unwrap_or(0)),
                        vol["nbd_uri"].as_str().unwrap_or("")
                    );
                }
            }
        }
        Request::Info { name, json } => {
            let v = client.call("GET", &format!("/volumes/{name}"), None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for key in [
                    "name",
                    "size_bytes",
                    "mapped_bytes",
                    "zero_bytes",
                    "block_size_bytes",
                    "nbd_uri",
                ] {
                    println!("{key:<18} {}", v[key]);
                }
            }
        }
        Request::Resize { name, size_bytes } => {
            let v = client.call(
                "POST",
                &format!("/volumes/{name}/resize"),
                Some(serde_json::json!({ "size_bytes": size_bytes })),
            )?;
            println!(
                "resized {} to {}",
                name,
                human(v["size_bytes"].as_u64().unwrap_or(size_bytes))
            );
        }
        Request::Delete { name } => {
            client.call("DELETE", &format!("/volumes/{name}"), None)?;
            println!("deleted {name}");
        }
        Request::Stats { json } => {
            let v = client.call("GET", "/stats", None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let r = &v["reduction"];
                println!(
                    "logical           {}",
                    human(r["logical_bytes"].as_u64().unwrap_or(0))
                );
                println!(
                    "stored            {}",
                    human(r["stored_bytes"].as_u64().unwrap_or(0))
                );
                println!(
                    "reduction ratio   {}",
                    r["ratio"]
                        .as_f64()
                        .map_or("-".into(), |x| format!("{x:.2}:1"))
                );
                println!(
                    "  zero            {}",
                    human(r["zero_bytes"].as_u64().unwrap_or(0))
                );
                println!(
                    "  dedup saved     {}",
                    human(r["dedup_saved_bytes"].as_u64().unwrap_or(0))
                );
                println!(
                    "  compress saved  {}",
                    human(r["compression_saved_bytes"].as_u64().unwrap_or(0))
                );
                println!(
                    "used / capacity   {} / {}",
                    human(v["used_bytes"].as_u64().unwrap_or(0)),
                    v["capacity_bytes"]
                        .as_u64()
                        .map_or("unlimited".into(), human)
                );
                println!(
                    "write amplif.     {}",
                    v["write_amplification"]
                        .as_f64()
                        .map_or("-".into(), |x| format!("{x:.2}"))
                );
                println!(
                    "write buffer      {}",
                    human(v["buffer_bytes"].as_u64().unwrap_or(0))
                );
            }
        }
        Request::Sync => {
            client.call("POST", "/sync", None)?;
            println!("synced");
        }
        Request::Gc => {
            let v = client.call("POST", "/gc", None)?;
            println!(
                "gc: {} segments reclaimed, {} moved, {} freed",
                v["segments_reclaimed"],
                human(v["bytes_moved"].as_u64().unwrap_or(0)),
                human(v["bytes_reclaimed"].as_u64().unwrap_or(0))
            );
        }
        Request::Checkpoint => {
            client.call("POST", "/checkpoint", None)?;
            println!("checkpoint written");
        }
    }
    Ok(())
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
