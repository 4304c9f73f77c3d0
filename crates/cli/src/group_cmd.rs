//! The consistency group commands: `weft group create|add|remove|list|info|delete|snapshot|
//! clone|qos|refresh|rollback`, and the group forms of the snapshot and clone commands
//! (`weft snapshot create pgprod@monday`, `weft snapshot info|delete pgprod@monday` and
//! `weft clone create pgprod@monday pgdev [--map pgdata=devdata]` act on the group when
//! `pgprod` is one: see [`names_group`]).
//!
//! A clone group's members are named `CLONE-MEMBER` (`pgdev-pgdata`), or as `--map` says.

use clap::Subcommand;
use serde_json::{json, Value};

use crate::client::{seg, show, ApiClient};
use crate::confirm;
use crate::exit_code::Failure;
use crate::print::{date, human, table};

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Make a consistency group of volumes: snapshotted, cloned, refreshed and rolled back at
    /// one crash-consistent point (`weft snapshot create GROUP@NAME`).
    Create {
        /// The group's name (shares the namespace of volume names).
        name: String,
        /// Its member volumes, comma-separated (each in no other group).
        #[arg(long, value_delimiter = ',', required = true)]
        volumes: Vec<String>,
    },
    /// Add volumes to a group (its next group snapshot includes them).
    Add {
        /// The group.
        name: String,
        /// The volumes to add (each in no other group, in the group's shard).
        #[arg(required = true)]
        volumes: Vec<String>,
    },
    /// Take volumes out of a group (they stay volumes).
    Remove {
        /// The group.
        name: String,
        /// The volumes to take out.
        #[arg(required = true)]
        volumes: Vec<String>,
    },
    /// List groups with their members, group snapshots and space.
    #[command(visible_alias = "ls")]
    List,
    /// Show a group.
    Info {
        /// The group.
        name: String,
    },
    /// Delete a group (asks on a terminal; --yes in scripts). Its volumes stay unless
    /// --volumes.
    #[command(visible_alias = "rm")]
    Delete {
        /// The group.
        name: String,
        /// Delete its group snapshots too (refused without it when it has some).
        #[arg(long)]
        with_snapshots: bool,
        /// Delete its member volumes too.
        #[arg(long)]
        volumes: bool,
        /// Go on while clients have an export this deletes open: they are disconnected.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(short, long)]
        yes: bool,
    },
    /// Snapshot every member at one point: `group snapshot pgprod@monday` (the same as
    /// `weft snapshot create pgprod@monday`).
    Snapshot {
        /// The group snapshot to take.
        #[arg(value_name = "GROUP@SNAPSHOT")]
        snapshot: String,
    },
    /// Make a clone group of a group snapshot (the same as `weft clone create`).
    Clone {
        /// The group snapshot to clone.
        #[arg(value_name = "GROUP@SNAPSHOT")]
        snapshot: String,
        /// The clone group's name; its members are NAME-MEMBER unless --map names them.
        #[arg(value_name = "NEWGROUP")]
        name: String,
        /// MEMBER=NAME: the name of a member's clone (repeat, or comma-separate).
        #[arg(long, value_delimiter = ',')]
        map: Vec<String>,
    },
    /// Show or change a group's quality of service, live: limits its members share (each
    /// member's I/O pays them and its own), and a latency target and minimum share for the
    /// members that set none. The same options as `weft volume qos`.
    Qos(crate::qos_cmd::GroupQosArgs),
    /// Make every member of a clone group read as another snapshot of its source group, at once.
    Refresh {
        /// The clone group.
        name: String,
        /// The group snapshot, GROUP@SNAPSHOT.
        #[arg(long = "to", value_name = "GROUP@SNAPSHOT")]
        snapshot: String,
        /// Go on while clients have a member open: they are disconnected.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(short, long)]
        yes: bool,
    },
    /// Discard every member's writes since one of the group's own group snapshots, at once.
    Rollback {
        /// The group.
        name: String,
        /// The group snapshot: SNAPSHOT or GROUP@SNAPSHOT.
        #[arg(long = "to", value_name = "SNAPSHOT")]
        snapshot: String,
        /// Go on while clients have a member open: they are disconnected.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(short, long)]
        yes: bool,
    },
}

pub fn group(client: &ApiClient, command: GroupCommand, json: bool) -> anyhow::Result<()> {
    match command {
        GroupCommand::Create { name, volumes } => {
            let v = client.call(
                "POST",
                "/groups",
                Some(json!({ "name": name, "volumes": volumes })),
            )?;
            show(json, &v, |v| {
                println!("created group {name}: {}", member_list(v));
            })
        }
        GroupCommand::Add { name, volumes } => {
            let path = format!("/groups/{}/members", seg(&name));
            let v = client.call("POST", &path, Some(json!({ "volumes": volumes })))?;
            show(json, &v, |v| println!("group {name}: {}", member_list(v)))
        }
        GroupCommand::Remove { name, volumes } => {
            let mut v = Value::Null;
            for volume in &volumes {
                let path = format!("/groups/{}/members/{}", seg(&name), seg(volume));
                v = client.call("DELETE", &path, None)?;
            }
            show(json, &v, |v| println!("group {name}: {}", member_list(v)))
        }
        GroupCommand::List => {
            let v = client.call("GET", "/groups", None)?;
            show(json, &v, group_table)
        }
        GroupCommand::Info { name } => {
            let v = client.call("GET", &format!("/groups/{}", seg(&name)), None)?;
            show(json, &v, group_details)
        }
        GroupCommand::Delete {
            name,
            with_snapshots,
            volumes,
            force,
            yes,
        } => {
            confirm::confirm(yes, &format!("delete group {name}"), || {
                let g = client.call("GET", &format!("/groups/{}", seg(&name)), None)?;
                Ok(format!(
                    "Delete group {name} ({}, {} group snapshots){}?",
                    member_list(&g),
                    g["snapshots"].as_array().map_or(0, Vec::len),
                    if volumes {
                        " with its volumes"
                    } else {
                        ", keeping its volumes"
                    }
                ))
            })?;
            let path = format!(
                "/groups/{}?with_snapshots={with_snapshots}&volumes={volumes}&force={force}",
                seg(&name)
            );
            client.call("DELETE", &path, None)?;
            let v = json!({ "deleted": "group", "name": name, "volumes": volumes, "with_snapshots": with_snapshots });
            show(json, &v, |_| println!("deleted group {name}"))
        }
        GroupCommand::Snapshot { snapshot } => {
            let (group, short) = split(&snapshot)?;
            create_snapshot(client, group, short, json)
        }
        GroupCommand::Clone {
            snapshot,
            name,
            map,
        } => clone(client, &snapshot, &name, &map, json),
        GroupCommand::Qos(args) => crate::qos_cmd::run_group(client, args, json),
        GroupCommand::Refresh {
            name,
            snapshot,
            force,
            yes,
        } => repoint(client, &name, &snapshot, "refresh", force, yes, json),
        GroupCommand::Rollback {
            name,
            snapshot,
            force,
            yes,
        } => repoint(client, &name, &snapshot, "rollback", force, yes, json),
    }
}

/// Whether `name` (or the `GROUP` of `GROUP@SNAPSHOT`) is a consistency group: the snapshot
/// and clone commands then act on the group. A server without groups answers 404 too.
pub fn names_group(client: &ApiClient, name: &str) -> bool {
    let group = name.split_once('@').map_or(name, |(g, _)| g);
    client
        .call("GET", &format!("/groups/{}", seg(group)), None)
        .is_ok()
}

pub fn create_snapshot(
    client: &ApiClient,
    group: &str,
    short: &str,
    json: bool,
) -> anyhow::Result<()> {
    let path = format!("/groups/{}/snapshots", seg(group));
    let v = client.call("POST", &path, Some(json!({ "name": short })))?;
    show(json, &v, |v| {
        println!(
            "created group snapshot {} at one point across {} (writes held {} us)",
            v["name"].as_str().unwrap_or(""),
            strings(&v["members"]).join(", "),
            v["barrier_micros"]
        );
    })
}

pub fn snapshot_info(client: &ApiClient, name: &str, json: bool) -> anyhow::Result<()> {
    let v = client.call("GET", &format!("/group-snapshots/{}", seg(name)), None)?;
    show(json, &v, |v| {
        println!("group snapshot {}", v["name"].as_str().unwrap_or(""));
        println!("  taken      {}", date(&v["created_unix_s"]));
        println!("  members    {}", strings(&v["members"]).join(", "));
        println!("  clones     {}", or_none(strings(&v["clones"])));
        println!(
            "  allocated  {}, unique {}",
            human(v["space"]["mapped_bytes"].as_u64().unwrap_or(0)),
            human(v["space"]["unique_stored_bytes"].as_u64().unwrap_or(0))
        );
    })
}

pub fn delete_snapshot(
    client: &ApiClient,
    name: &str,
    keep_hidden: bool,
    yes: bool,
    json: bool,
) -> anyhow::Result<()> {
    confirm::confirm(yes, &format!("delete group snapshot {name}"), || {
        let v = client.call("GET", &format!("/group-snapshots/{}", seg(name)), None)?;
        Ok(format!(
            "Delete group snapshot {name} (its member snapshots {})?",
            strings(&v["members"]).join(", ")
        ))
    })?;
    let query = if keep_hidden { "?keep_hidden=true" } else { "" };
    client.call(
        "DELETE",
        &format!("/group-snapshots/{}{query}", seg(name)),
        None,
    )?;
    let v = json!({ "deleted": "group snapshot", "name": name, "keep_hidden": keep_hidden });
    show(json, &v, |_| println!("deleted group snapshot {name}"))
}

pub fn clone(
    client: &ApiClient,
    snapshot: &str,
    name: &str,
    map: &[String],
    json: bool,
) -> anyhow::Result<()> {
    let mut pairs = serde_json::Map::new();
    for m in map {
        let Some((from, to)) = m.split_once('=') else {
            return Err(Failure::Usage(format!("--map {m:?}: give MEMBER=NAME")).into());
        };
        pairs.insert(from.to_string(), Value::String(to.to_string()));
    }
    let path = format!("/group-snapshots/{}/clones", seg(snapshot));
    let v = client.call("POST", &path, Some(json!({ "name": name, "map": pairs })))?;
    show(json, &v, |v| {
        println!(
            "created clone group {name} of {snapshot}: {}",
            member_list(v)
        );
    })
}

fn repoint(
    client: &ApiClient,
    name: &str,
    snapshot: &str,
    action: &str,
    force: bool,
    yes: bool,
    json: bool,
) -> anyhow::Result<()> {
    let verb = if action == "refresh" {
        "refresh"
    } else {
        "roll back"
    };
    confirm::confirm(yes, &format!("{verb} group {name}"), || {
        let g = client.call("GET", &format!("/groups/{}", seg(name)), None)?;
        Ok(format!(
            "{} group {name} ({}) to {snapshot}? Every member's writes since are discarded and its clients disconnected.",
            if action == "refresh" { "Refresh" } else { "Roll back" },
            member_list(&g)
        ))
    })?;
    let path = format!("/groups/{}/{action}", seg(name));
    let v = client.call(
        "POST",
        &path,
        Some(json!({ "snapshot": snapshot, "force": force })),
    )?;
    show(json, &v, |v| {
        println!(
            "group {name} now reads as {}: {}",
            v["origin"].as_str().unwrap_or(snapshot),
            member_list(v)
        );
    })
}

fn split(snapshot: &str) -> anyhow::Result<(&str, &str)> {
    snapshot
        .split_once('@')
        .ok_or_else(|| Failure::Usage(format!("{snapshot:?}: give GROUP@SNAPSHOT")).into())
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn or_none(list: Vec<String>) -> String {
    if list.is_empty() {
        "-".into()
    } else {
        list.join(", ")
    }
}

fn member_list(g: &Value) -> String {
    let members: Vec<String> = g["members"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|m| m["volume"].as_str().unwrap_or("?").to_string())
        .collect();
    format!("members {}", members.join(", "))
}

fn group_table(list: &Value) {
    let rows: Vec<Vec<String>> = list
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|g| {
            let snapshots: Vec<String> = g["snapshots"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .filter_map(|s| s["short_name"].as_str().map(str::to_string))
                .collect();
            vec![
                g["name"].as_str().unwrap_or("").to_string(),
                g["members"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice)
                    .iter()
                    .filter_map(|m| m["volume"].as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                human(g["space"]["mapped_bytes"].as_u64().unwrap_or(0)),
                g["origin"].as_str().unwrap_or("-").to_string(),
                or_none(snapshots),
            ]
        })
        .collect();
    table(
        &["NAME", "MEMBERS", "ALLOCATED>", "ORIGIN", "SNAPSHOTS"],
        &rows,
    );
}

fn group_details(g: &Value) {
    println!("group {}", g["name"].as_str().unwrap_or(""));
    println!("  created    {}", date(&g["created_unix_s"]));
    println!("  origin     {}", g["origin"].as_str().unwrap_or("-"));
    for m in g["members"].as_array().map_or(&[][..], Vec::as_slice) {
        let source = m["source"]
            .as_str()
            .map_or(String::new(), |s| format!(" (clone of {s})"));
        println!(
            "  member     {} ({}){source}",
            m["volume"].as_str().unwrap_or("?"),
            human(m["size_bytes"].as_u64().unwrap_or(0))
        );
    }
    println!(
        "  allocated  {}, own {}, unique {}",
        human(g["space"]["mapped_bytes"].as_u64().unwrap_or(0)),
        human(g["space"]["own_bytes"].as_u64().unwrap_or(0)),
        human(g["space"]["unique_stored_bytes"].as_u64().unwrap_or(0))
    );
    if g.get("qos").is_some() {
        println!("  qos        {}", crate::qos_cmd::describe(&g["qos"]));
    }
    for s in g["snapshots"].as_array().map_or(&[][..], Vec::as_slice) {
        println!(
            "  snapshot   {} (taken {}; {})",
            s["name"].as_str().unwrap_or(""),
            date(&s["created_unix_s"]),
            strings(&s["members"]).join(", ")
        );
    }
}
