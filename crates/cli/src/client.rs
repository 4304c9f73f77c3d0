//! The CLI's side of the management API: find the server and its token, send one request,
//! print the answer for a person (see `print`) or as JSON. A refused request fails with the
//! server's message and HTTP status; `main` prints it as `error: ...` and exits non-zero.

use std::path::Path;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::print::{self, human};

/// A request the CLI makes.
#[derive(Debug)]
pub enum Request {
    Create {
        name: String,
        size_bytes: u64,
        pool: Option<String>,
        /// 512 or 4096 (checked by the parser); `None`: the server's default (512).
        logical_block_size: Option<u32>,
    },
    List {
        json: bool,
    },
    Info {
        name: String,
        json: bool,
    },
    Resize {
        name: String,
        size_bytes: u64,
    },
    Delete {
        name: String,
        with_snapshots: bool,
    },
    Refresh {
        volume: String,
        snapshot: String,
    },
    Rollback {
        volume: String,
        snapshot: String,
    },
    SnapshotCreate {
        volume: String,
        name: String,
    },
    SnapshotList {
        volume: Option<String>,
        json: bool,
    },
    SnapshotInfo {
        name: String,
        json: bool,
    },
    SnapshotDelete {
        name: String,
        keep_hidden: bool,
    },
    CloneCreate {
        snapshot: String,
        name: String,
    },
    Stats {
        json: bool,
    },
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

fn print_json(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub fn run(client: &ApiClient, request: Request) -> anyhow::Result<()> {
    match request {
        Request::Create {
            name,
            size_bytes,
            pool,
            logical_block_size,
        } => {
            let mut body = json!({ "name": name, "size_bytes": size_bytes });
            if let Some(pool) = pool {
                body["pool"] = pool.into();
            }
            if let Some(b) = logical_block_size {
                body["logical_block_size"] = b.into();
            }
            let v = client.call("POST", "/volumes", Some(body))?;
            println!(
                "created {} ({}, {}-byte blocks): {}",
                v["name"].as_str().unwrap_or(""),
                human(size_bytes),
                v["logical_block_size"].as_u64().unwrap_or(0),
                v["nbd_uri"].as_str().unwrap_or("")
            );
        }
        Request::List { json } => {
            let v = client.call("GET", "/volumes", None)?;
            if json {
                print_json(&v)?;
            } else {
                print::volume_table(&v);
            }
        }
        Request::Info { name, json } => {
            let v = client.call("GET", &format!("/volumes/{}", seg(&name)), None)?;
            if json {
                print_json(&v)?;
            } else {
                print::volume_details(&v);
            }
        }
        Request::Resize { name, size_bytes } => {
            let v = client.call(
                "POST",
                &format!("/volumes/{}/resize", seg(&name)),
                Some(json!({ "size_bytes": size_bytes })),
            )?;
            println!(
                "resized {} to {}",
                name,
                human(v["size_bytes"].as_u64().unwrap_or(size_bytes))
            );
        }
        Request::Delete {
            name,
            with_snapshots,
        } => {
            let query = if with_snapshots {
                "?with_snapshots=true"
            } else {
                ""
            };
            client.call("DELETE", &format!("/volumes/{}{query}", seg(&name)), None)?;
            if with_snapshots {
                println!("deleted {name} and its snapshots");
            } else {
                println!("deleted {name}");
            }
        }
        Request::Refresh { volume, snapshot } => {
            repoint(client, "refresh", "refreshed", &volume, &snapshot)?;
        }
        Request::Rollback { volume, snapshot } => {
            repoint(client, "rollback", "rolled back", &volume, &snapshot)?;
        }
        Request::SnapshotCreate { volume, name } => {
            let path = format!("/volumes/{}/snapshots", seg(&volume));
            let v = client.call("POST", &path, Some(json!({ "name": name })))?;
            println!(
                "created snapshot {} of {volume} (writes held {} us): {}",
                v["name"].as_str().unwrap_or(&name),
                v["barrier_micros"],
                v["nbd_uri"].as_str().unwrap_or("")
            );
        }
        Request::SnapshotList { volume, json } => {
            let query = volume.map_or(String::new(), |v| format!("?volume={}", seg(&v)));
            let v = client.call("GET", &format!("/snapshots{query}"), None)?;
            if json {
                print_json(&v)?;
            } else {
                print::snapshot_table(&v);
            }
        }
        Request::SnapshotInfo { name, json } => {
            let v = client.call("GET", &format!("/snapshots/{}", seg(&name)), None)?;
            if json {
                print_json(&v)?;
            } else {
                print::snapshot_details(&v);
            }
        }
        Request::SnapshotDelete { name, keep_hidden } => {
            let query = if keep_hidden { "?keep_hidden=true" } else { "" };
            client.call("DELETE", &format!("/snapshots/{}{query}", seg(&name)), None)?;
            println!("deleted snapshot {name}");
        }
        Request::CloneCreate { snapshot, name } => {
            let path = format!("/snapshots/{}/clones", seg(&snapshot));
            let v = client.call("POST", &path, Some(json!({ "name": name })))?;
            println!(
                "created clone {} of {snapshot} ({}): {}",
                v["name"].as_str().unwrap_or(&name),
                human(v["size_bytes"].as_u64().unwrap_or(0)),
                v["nbd_uri"].as_str().unwrap_or("")
            );
        }
        Request::Stats { json } => {
            let v = client.call("GET", "/stats", None)?;
            if json {
                print_json(&v)?;
            } else {
                print::stats(&v);
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

/// Refresh or rollback: the volume now reads as the snapshot (its new origin).
fn repoint(
    client: &ApiClient,
    action: &str,
    done: &str,
    volume: &str,
    snapshot: &str,
) -> anyhow::Result<()> {
    let path = format!("/volumes/{}/{action}", seg(volume));
    let v = client.call("POST", &path, Some(json!({ "snapshot": snapshot })))?;
    println!(
        "{done} {volume} to snapshot {} (origin now {}); connected clients were disconnected",
        snapshot,
        v["origin"].as_str().unwrap_or("-")
    );
    Ok(())
}
