//! `weft volume`, `weft snapshot` (but schedules, `schedule_cmd`), `weft clone` and the engine maintenance commands (`stats`,
//! `sync`, `gc`, `checkpoint`): one [`Request`] each, sent through [`ApiClient`], destructive
//! ones confirmed first (see `confirm`).

use serde_json::json;

use crate::client::{seg, show, ApiClient};
use crate::confirm;
use crate::exit_code::Failure;
use crate::print::{self, human};

/// A request the CLI makes. Whether the answer is printed as JSON is the global `--json`,
/// passed to [`run`]; destructive requests carry their `--yes`.
#[derive(Debug)]
pub enum Request {
    Create {
        name: String,
        size_bytes: u64,
        pool: Option<String>,
        /// 512 or 4096 (checked by the parser); `None`: the server's default (512).
        logical_block_size: Option<u32>,
        /// `None`: the shard of the c.node asked.
        shard: Option<u16>,
        /// QoS settings from the start (`qos_cmd`); `None`: none.
        qos: Option<serde_json::Value>,
    },
    List,
    Info {
        name: String,
    },
    Sessions {
        name: String,
    },
    Resize {
        name: String,
        size_bytes: u64,
    },
    Rename {
        name: String,
        new_name: String,
        force: bool,
    },
    Delete {
        name: String,
        with_snapshots: bool,
        yes: bool,
        force: bool,
    },
    Refresh {
        volume: String,
        snapshot: String,
        yes: bool,
        force: bool,
    },
    Rollback {
        volume: String,
        snapshot: String,
        yes: bool,
        force: bool,
    },
    SnapshotCreate {
        /// The volume, or `VOLUME@SNAPSHOT` when `name` is `None`.
        volume: String,
        name: Option<String>,
    },
    SnapshotList {
        volume: Option<String>,
    },
    SnapshotInfo {
        name: String,
    },
    SnapshotDelete {
        name: String,
        keep_hidden: bool,
        yes: bool,
    },
    CloneCreate {
        snapshot: String,
        name: String,
    },
    Stats,
    Sync,
    Gc,
    Checkpoint,
}

pub fn run(client: &ApiClient, request: Request, json: bool) -> anyhow::Result<()> {
    match request {
        Request::Create {
            name,
            size_bytes,
            pool,
            logical_block_size,
            shard,
            qos,
        } => {
            let mut body = json!({ "name": name, "size_bytes": size_bytes });
            if let Some(qos) = qos {
                body["qos"] = qos;
            }
            if let Some(pool) = pool {
                body["pool"] = pool.into();
            }
            if let Some(b) = logical_block_size {
                body["logical_block_size"] = b.into();
            }
            let path = match shard {
                Some(shard) => format!("/volumes?shard={shard}"),
                None => "/volumes".to_string(),
            };
            let v = client.call("POST", &path, Some(body))?;
            show(json, &v, |v| {
                println!(
                    "created {} ({}, {}-byte blocks): {}",
                    v["name"].as_str().unwrap_or(""),
                    human(size_bytes),
                    v["logical_block_size"].as_u64().unwrap_or(0),
                    v["nbd_uri"].as_str().unwrap_or("")
                );
            })?;
        }
        Request::List => {
            let v = client.call("GET", "/volumes", None)?;
            show(json, &v, print::volume_table)?;
        }
        Request::Info { name } => {
            let v = client.call("GET", &format!("/volumes/{}", seg(&name)), None)?;
            show(json, &v, print::volume_details)?;
        }
        Request::Sessions { name } => {
            // A snapshot's full name has an `@`; anything else names a volume.
            let kind = if name.contains('@') {
                "snapshots"
            } else {
                "volumes"
            };
            let v = client.call("GET", &format!("/{kind}/{}/sessions", seg(&name)), None)?;
            show(json, &v, |v| print::session_table(&name, v))?;
        }
        Request::Resize { name, size_bytes } => {
            let v = client.call(
                "POST",
                &format!("/volumes/{}/resize", seg(&name)),
                Some(json!({ "size_bytes": size_bytes })),
            )?;
            show(json, &v, |v| {
                println!(
                    "resized {} to {}",
                    name,
                    human(v["size_bytes"].as_u64().unwrap_or(size_bytes))
                );
            })?;
        }
        Request::Rename {
            name,
            new_name,
            force,
        } => {
            let mut body = json!({ "name": new_name });
            if force {
                body["force"] = true.into();
            }
            let v = client.call(
                "POST",
                &format!("/volumes/{}/rename", seg(&name)),
                Some(body),
            )?;
            show(json, &v, |v| {
                let snapshots = v["snapshots"].as_array().map_or(0, Vec::len);
                let cut = if force {
                    "; clients that had it open were disconnected"
                } else {
                    ""
                };
                println!(
                    "renamed {name} to {new_name} (with {snapshots} snapshot{}){cut}",
                    if snapshots == 1 { "" } else { "s" }
                );
            })?;
        }
        Request::Delete {
            name,
            with_snapshots,
            yes,
            force,
        } => {
            confirm::confirm(yes, &format!("delete volume {name}"), || {
                confirm::volume_delete(client, &name, with_snapshots, force)
            })?;
            let query: Vec<&str> = [
                with_snapshots.then_some("with_snapshots=true"),
                force.then_some("force=true"),
            ]
            .into_iter()
            .flatten()
            .collect();
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            client.call("DELETE", &format!("/volumes/{}{query}", seg(&name)), None)?;
            let v = json!({ "deleted": "volume", "name": name, "with_snapshots": with_snapshots });
            show(json, &v, |_| {
                if with_snapshots {
                    println!("deleted {name} and its snapshots");
                } else {
                    println!("deleted {name}");
                }
            })?;
        }
        Request::Refresh {
            volume,
            snapshot,
            yes,
            force,
        } => {
            confirm::confirm(yes, &format!("refresh volume {volume}"), || {
                confirm::volume_refresh(client, &volume, &snapshot, force)
            })?;
            let to = Repoint {
                action: "refresh",
                done: "refreshed",
                snapshot: &snapshot,
                force,
            };
            repoint(client, &to, &volume, json)?;
        }
        Request::Rollback {
            volume,
            snapshot,
            yes,
            force,
        } => {
            confirm::confirm(yes, &format!("roll back volume {volume}"), || {
                confirm::volume_rollback(client, &volume, &snapshot, force)
            })?;
            let to = Repoint {
                action: "rollback",
                done: "rolled back",
                snapshot: &snapshot,
                force,
            };
            repoint(client, &to, &volume, json)?;
        }
        Request::SnapshotCreate { volume, name } => {
            let (volume, name) = snapshot_names(volume, name)?;
            let path = format!("/volumes/{}/snapshots", seg(&volume));
            let v = client.call("POST", &path, Some(json!({ "name": name })))?;
            show(json, &v, |v| {
                println!(
                    "created snapshot {} of {volume} (writes held {} us): {}",
                    v["name"].as_str().unwrap_or(&name),
                    v["barrier_micros"],
                    v["nbd_uri"].as_str().unwrap_or("")
                );
            })?;
        }
        Request::SnapshotList { volume } => {
            let query = volume.map_or(String::new(), |v| format!("?volume={}", seg(&v)));
            let v = client.call("GET", &format!("/snapshots{query}"), None)?;
            show(json, &v, print::snapshot_table)?;
        }
        Request::SnapshotInfo { name } => {
            let v = client.call("GET", &format!("/snapshots/{}", seg(&name)), None)?;
            show(json, &v, print::snapshot_details)?;
        }
        Request::SnapshotDelete {
            name,
            keep_hidden,
            yes,
        } => {
            confirm::confirm(yes, &format!("delete snapshot {name}"), || {
                confirm::snapshot_delete(client, &name, keep_hidden)
            })?;
            let query = if keep_hidden { "?keep_hidden=true" } else { "" };
            client.call("DELETE", &format!("/snapshots/{}{query}", seg(&name)), None)?;
            let v = json!({ "deleted": "snapshot", "name": name, "keep_hidden": keep_hidden });
            show(json, &v, |_| println!("deleted snapshot {name}"))?;
        }
        Request::CloneCreate { snapshot, name } => {
            let path = format!("/snapshots/{}/clones", seg(&snapshot));
            let v = client.call("POST", &path, Some(json!({ "name": name })))?;
            show(json, &v, |v| {
                println!(
                    "created clone {} of {snapshot} ({}): {}",
                    v["name"].as_str().unwrap_or(&name),
                    human(v["size_bytes"].as_u64().unwrap_or(0)),
                    v["nbd_uri"].as_str().unwrap_or("")
                );
            })?;
        }
        Request::Stats => {
            let v = client.call("GET", "/stats", None)?;
            // Optional: a server from before the capacity report answers 404.
            let capacity = (!json)
                .then(|| client.call("GET", "/capacity", None).ok())
                .flatten();
            // Optional too: stored bytes per tier (a server from before tiers answers 404).
            let tiers = (!json)
                .then(|| client.call("GET", "/tiers", None).ok())
                .flatten();
            show(json, &v, |v| print::stats(v, capacity.as_ref()))?;
            if let Some(t) = tiers {
                crate::tier_cmd::print_stored_by_tier(&t);
            }
        }
        Request::Sync => {
            let v = client.call("POST", "/sync", None)?;
            show(json, &v, |_| println!("synced"))?;
        }
        Request::Gc => {
            let v = client.call("POST", "/gc", None)?;
            show(json, &v, |v| {
                println!(
                    "gc: {} reclaimed, {} moved, {} freed",
                    print::plural(print::count_of(&v["segments_reclaimed"]), "segment"),
                    human(v["bytes_moved"].as_u64().unwrap_or(0)),
                    human(v["bytes_reclaimed"].as_u64().unwrap_or(0))
                );
            })?;
        }
        Request::Checkpoint => {
            let v = client.call("POST", "/checkpoint", None)?;
            show(json, &v, |_| println!("checkpoint written"))?;
        }
    }
    Ok(())
}

/// `pgdata monday` or `pgdata@monday` (one argument, as zfs and rbd take it): the volume and
/// the snapshot's name. Both forms at once, or neither, is a usage error.
pub fn snapshot_names(volume: String, name: Option<String>) -> anyhow::Result<(String, String)> {
    let usage = |m: String| anyhow::Error::new(Failure::Usage(m));
    match (volume.split_once('@'), name) {
        (None, Some(name)) => Ok((volume, name)),
        (Some((v, s)), None) if !v.is_empty() && !s.is_empty() => {
            Ok((v.to_string(), s.to_string()))
        }
        (Some(_), Some(name)) => Err(usage(format!(
            "{volume:?} already names the snapshot: give VOLUME@SNAPSHOT or VOLUME {name}, not both"
        ))),
        _ => Err(usage(format!(
            "which snapshot? weft snapshot create {volume}@NAME (or {volume} NAME)"
        ))),
    }
}

/// What a refresh or rollback asks for.
struct Repoint<'a> {
    /// The API's verb: `refresh` or `rollback`.
    action: &'a str,
    /// What the CLI says it did: `refreshed`, `rolled back`.
    done: &'a str,
    snapshot: &'a str,
    force: bool,
}

/// Refresh or rollback: the volume now reads as the snapshot (its new origin).
fn repoint(client: &ApiClient, to: &Repoint<'_>, volume: &str, json: bool) -> anyhow::Result<()> {
    let path = format!("/volumes/{}/{}", seg(volume), to.action);
    let mut body = json!({ "snapshot": to.snapshot });
    if to.force {
        // Only when set: a server from before sessions refuses unknown fields.
        body["force"] = true.into();
    }
    let v = client.call("POST", &path, Some(body))?;
    show(json, &v, |v| {
        // Without force the server refused while clients had the volume open: none did.
        let cut = if to.force {
            "; clients that had it open were disconnected"
        } else {
            ""
        };
        // The snapshot's full name, as the server resolved it (`tue` -> `pgdata@tue`), in
        // both messages.
        println!(
            "{} {volume} to snapshot {}{cut}",
            to.done,
            v["origin"].as_str().unwrap_or(to.snapshot)
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_named_in_two_arguments_or_one_with_an_at() {
        let ok = |v: &str, n: Option<&str>| snapshot_names(v.into(), n.map(Into::into)).unwrap();
        assert_eq!(ok("pgdata", Some("wed")), ("pgdata".into(), "wed".into()));
        assert_eq!(ok("pgdata@wed", None), ("pgdata".into(), "wed".into()));
        for (v, n) in [
            ("pgdata", None),
            ("pgdata@", None),
            ("@wed", None),
            ("pgdata@wed", Some("x")),
        ] {
            let e = snapshot_names(v.into(), n.map(Into::into)).unwrap_err();
            assert_eq!(
                crate::exit_code::of(&e),
                crate::exit_code::USAGE,
                "{v} {n:?}"
            );
        }
    }
}
