//! The host commands, the storage-array model of who sees which volume:
//! `weft host create|list|info|delete`, in-place edits (`add-initiator`, `remove-initiator`,
//! `set-chap`) and `weft volume map|unmap`.
//!
//! Secrets can come from the command line, a file (`--chap-secret-file`, first line) or the
//! environment (`WEFT_CHAP_SECRET`, `WEFT_MUTUAL_SECRET`), so scripts need not put them in
//! the process list. They are sent to the API once and never printed.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::client::{print_json, show, ApiClient};

#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Define a host: its iSCSI initiator names, NBD client addresses and CHAP secrets.
    Create(Box<CreateHostArgs>),
    /// List hosts.
    #[command(visible_alias = "ls")]
    List,
    /// Show a host, its LUNs and how to reach them.
    Info {
        /// The host's name.
        name: String,
    },
    /// Delete a host (unmap its volumes first): its definition and CHAP secrets go, no data.
    #[command(visible_alias = "rm")]
    Delete {
        /// The host's name.
        name: String,
    },
    /// Let a host log in with one more iSCSI initiator name (it sees its LUNs from it).
    AddInitiator {
        /// The host's name.
        name: String,
        /// The initiator name, e.g. from /etc/iscsi/initiatorname.iscsi.
        iqn: String,
    },
    /// Take an initiator name away from a host: its sessions lose their LUNs at once.
    RemoveInitiator {
        /// The host's name.
        name: String,
        /// The initiator name.
        iqn: String,
    },
    /// Set or change a host's CHAP secrets (or remove them with --none) without deleting it:
    /// the next login needs the new ones; sessions logged in go on.
    SetChap(Box<SetChapArgs>),
}

#[derive(Debug, Args)]
pub struct SetChapArgs {
    /// The host's name.
    name: String,
    /// Remove the host's CHAP: its initiators log in without it.
    #[arg(long, conflicts_with_all = ["chap_user", "chap_secret", "chap_secret_file", "mutual_user", "mutual_secret", "mutual_secret_file"])]
    none: bool,
    /// CHAP user name the initiator logs in with.
    #[arg(long, required_unless_present = "none")]
    chap_user: Option<String>,
    /// The new CHAP secret (12-255 characters).
    #[arg(
        long,
        env = "WEFT_CHAP_SECRET",
        hide_env_values = true,
        conflicts_with = "chap_secret_file"
    )]
    chap_secret: Option<String>,
    /// Read the new CHAP secret from the first line of this file.
    #[arg(long, value_name = "FILE")]
    chap_secret_file: Option<PathBuf>,
    /// Name the target answers mutual CHAP with (default: the CHAP user).
    #[arg(long)]
    mutual_user: Option<String>,
    /// Mutual CHAP: the secret the target proves itself with (without it: one-way CHAP).
    #[arg(
        long,
        env = "WEFT_MUTUAL_SECRET",
        hide_env_values = true,
        conflicts_with = "mutual_secret_file"
    )]
    mutual_secret: Option<String>,
    /// Read the mutual CHAP secret from the first line of this file.
    #[arg(long, value_name = "FILE")]
    mutual_secret_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CreateHostArgs {
    /// The host's name (how volume map --host names it).
    name: String,
    /// iSCSI initiator name (repeat for several), e.g. the InitiatorName in a Linux host's
    /// /etc/iscsi/initiatorname.iscsi.
    #[arg(long = "iqn", value_name = "IQN")]
    iqns: Vec<String>,
    /// Address or network its NBD connections come from (repeat for several), e.g.
    /// 10.0.0.5 or 10.0.0.0/24.
    #[arg(long = "nbd-address", value_name = "ADDR")]
    nbd_addresses: Vec<String>,
    /// Name its NBD TLS client certificate carries (subject CN or DNS name; repeat for
    /// several): a verified certificate with it identifies the host from any address.
    #[arg(long = "tls-name", value_name = "NAME")]
    tls_names: Vec<String>,
    /// CHAP user name the initiator logs in with.
    #[arg(long)]
    chap_user: Option<String>,
    /// CHAP secret the initiator answers with (12-255 characters).
    #[arg(
        long,
        env = "WEFT_CHAP_SECRET",
        hide_env_values = true,
        conflicts_with = "chap_secret_file"
    )]
    chap_secret: Option<String>,
    /// Read the CHAP secret from the first line of this file.
    #[arg(long, value_name = "FILE")]
    chap_secret_file: Option<PathBuf>,
    /// Name the target answers mutual CHAP with (default: the CHAP user).
    #[arg(long)]
    mutual_user: Option<String>,
    /// Mutual CHAP: the secret the target proves itself with (differs from the CHAP secret).
    #[arg(
        long,
        env = "WEFT_MUTUAL_SECRET",
        hide_env_values = true,
        conflicts_with = "mutual_secret_file"
    )]
    mutual_secret: Option<String>,
    /// Read the mutual CHAP secret from the first line of this file.
    #[arg(long, value_name = "FILE")]
    mutual_secret_file: Option<PathBuf>,
}

/// `weft volume map` and `weft volume unmap`.
#[derive(Debug, Args)]
pub struct MapArgs {
    /// A volume or snapshot (snapshots are served read-only).
    pub export: String,
    /// The host that will see it.
    #[arg(long)]
    pub host: String,
    /// The LUN number the host sees it under (default: the lowest free).
    #[arg(long)]
    pub lun: Option<u64>,
}

#[derive(Debug, Args)]
pub struct UnmapArgs {
    /// A volume or snapshot.
    pub export: String,
    /// The host that will no longer see it.
    #[arg(long)]
    pub host: String,
}

fn secret(inline: Option<String>, file: Option<PathBuf>) -> anyhow::Result<Option<String>> {
    match (inline, file) {
        (Some(s), _) => Ok(Some(s)),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(Some(text.lines().next().unwrap_or("").to_string()))
        }
        (None, None) => Ok(None),
    }
}

pub fn host(client: &ApiClient, command: HostCommand, json: bool) -> anyhow::Result<()> {
    match command {
        HostCommand::Create(a) => {
            let body = json!({
                "name": a.name,
                "iqns": a.iqns,
                "nbd_addresses": a.nbd_addresses,
                "tls_names": a.tls_names,
                "chap_user": a.chap_user,
                "chap_secret": secret(a.chap_secret, a.chap_secret_file)?,
                "mutual_chap_user": a.mutual_user,
                "mutual_chap_secret": secret(a.mutual_secret, a.mutual_secret_file)?,
            });
            let v = client.call("POST", "/hosts", Some(body))?;
            if json {
                return print_json(&v);
            }
            println!("created host {}", v["name"].as_str().unwrap_or(""));
            print_host(&v);
        }
        HostCommand::List => {
            let v = client.call("GET", "/hosts", None)?;
            if json {
                return print_json(&v);
            }
            let hosts = v.as_array().cloned().unwrap_or_default();
            if hosts.is_empty() {
                println!("no hosts (weft host create NAME --iqn IQN)");
            }
            let rows: Vec<Vec<String>> = hosts
                .iter()
                .map(|h| {
                    vec![
                        h["name"].as_str().unwrap_or("").to_string(),
                        h["luns"].as_array().map_or(0, Vec::len).to_string(),
                        chap_kind(h).to_string(),
                        names(h),
                    ]
                })
                .collect();
            if !rows.is_empty() {
                crate::print::table(
                    &["HOST", "LUNS>", "CHAP", "INITIATORS AND ADDRESSES"],
                    &rows,
                );
            }
        }
        HostCommand::Info { name } => {
            let v = client.call("GET", &format!("/hosts/{}", seg(&name)), None)?;
            if json {
                return print_json(&v);
            }
            println!("host {}", v["name"].as_str().unwrap_or(""));
            print_host(&v);
        }
        HostCommand::Delete { name } => {
            client.call("DELETE", &format!("/hosts/{}", seg(&name)), None)?;
            let v = json!({ "deleted": "host", "name": name });
            show(json, &v, |_| println!("deleted host {name}"))?;
        }
        HostCommand::AddInitiator { name, iqn } => {
            let path = format!("/hosts/{}/initiators", seg(&name));
            let v = client.call("POST", &path, Some(json!({ "iqn": iqn })))?;
            show(json, &v, |v| {
                println!("host {name} logs in as {}", names_of(v, "iqns"));
            })?;
        }
        HostCommand::RemoveInitiator { name, iqn } => {
            let path = format!("/hosts/{}/initiators/{}", seg(&name), seg(&iqn));
            let v = client.call("DELETE", &path, None)?;
            show(json, &v, |v| {
                println!(
                    "removed initiator {iqn} from host {name}; it logs in as {}",
                    names_of(v, "iqns")
                );
            })?;
        }
        HostCommand::SetChap(a) => set_chap(client, *a, json)?,
    }
    Ok(())
}

fn set_chap(client: &ApiClient, a: SetChapArgs, json: bool) -> anyhow::Result<()> {
    let path = format!("/hosts/{}/chap", seg(&a.name));
    let v = if a.none {
        client.call("DELETE", &path, None)?
    } else {
        let mutual = secret(a.mutual_secret, a.mutual_secret_file)?;
        let Some(chap_secret) = secret(a.chap_secret, a.chap_secret_file)? else {
            return Err(crate::exit_code::Failure::Usage(
                "give the new secret: --chap-secret, --chap-secret-file or WEFT_CHAP_SECRET".into(),
            )
            .into());
        };
        let body = json!({
            "chap_user": a.chap_user,
            "chap_secret": chap_secret,
            "mutual_chap_user": a.mutual_user,
            "mutual_chap_secret": mutual,
        });
        client.call("PUT", &path, Some(body))?
    };
    show(json, &v, |v| {
        println!("host {} chap: {}", a.name, chap_text(v));
    })
}

/// What a host's JSON says of its CHAP (never a secret).
fn chap_text(v: &Value) -> String {
    match (v["chap_user"].as_str(), v["mutual_chap_user"].as_str()) {
        (Some(u), Some(m)) => format!("user {u}, mutual (target answers as {m})"),
        (Some(u), None) => format!("user {u}"),
        _ => "none".into(),
    }
}

/// A list of a host's JSON, comma-separated, or `nothing`.
fn names_of(v: &Value, key: &str) -> String {
    let items: Vec<&str> = v[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if items.is_empty() {
        "no initiator".into()
    } else {
        items.join(", ")
    }
}

pub fn map(client: &ApiClient, a: MapArgs, json: bool) -> anyhow::Result<()> {
    let mut body = json!({ "export": a.export });
    if let Some(lun) = a.lun {
        body["lun"] = lun.into();
    }
    let v = client.call("POST", &format!("/hosts/{}/luns", seg(&a.host)), Some(body))?;
    if json {
        return print_json(&v);
    }
    let ro = if v["read_only"].as_bool() == Some(true) {
        " (read-only)"
    } else {
        ""
    };
    println!(
        "mapped {}{ro} to host {} as LUN {}",
        a.export,
        a.host,
        v["lun"].as_u64().unwrap_or(0)
    );
    if let Some(uri) = v["iscsi_uri"].as_str() {
        println!("iscsi: {uri}");
    }
    Ok(())
}

pub fn unmap(client: &ApiClient, a: UnmapArgs, json: bool) -> anyhow::Result<()> {
    client.call(
        "DELETE",
        &format!("/hosts/{}/luns/{}", seg(&a.host), seg(&a.export)),
        None,
    )?;
    let v = json!({ "unmapped": a.export, "host": a.host });
    show(json, &v, |_| {
        println!("unmapped {} from host {}", a.export, a.host);
    })
}

fn chap_kind(h: &Value) -> &'static str {
    match (
        h["chap_user"].is_string(),
        h["mutual_chap_user"].is_string(),
    ) {
        (true, true) => "mutual",
        (true, false) => "chap",
        _ => "no-chap",
    }
}

fn names(h: &Value) -> String {
    let list = |key: &str| -> Vec<String> {
        h[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let mut all = list("iqns");
    all.extend(
        list("nbd_addresses")
            .into_iter()
            .map(|a| format!("nbd:{a}")),
    );
    all.extend(list("tls_names").into_iter().map(|n| format!("tls:{n}")));
    all.join(", ")
}

fn print_host(v: &Value) {
    let list = |key: &str| -> String {
        let items: Vec<&str> = v[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if items.is_empty() {
            "-".into()
        } else {
            items.join(", ")
        }
    };
    println!("  initiators:    {}", list("iqns"));
    println!("  nbd addresses: {}", list("nbd_addresses"));
    println!("  tls names:     {}", list("tls_names"));
    println!("  chap:          {}", chap_text(v));
    if let (Some(target), Some(portal)) = (v["iscsi_target"].as_str(), v["iscsi_portal"].as_str()) {
        println!("  iscsi target:  {target} at {portal}");
    }
    let luns = v["luns"].as_array().cloned().unwrap_or_default();
    if luns.is_empty() {
        println!("  luns:          none (weft volume map VOLUME --host NAME)");
    }
    // Columns aligned over every LUN: the numbers right, the exports as wide as the widest.
    let export_width = luns
        .iter()
        .map(|l| l["export"].as_str().unwrap_or("").chars().count())
        .max()
        .unwrap_or(0);
    for l in &luns {
        let access = if l["read_only"].as_bool() == Some(true) {
            "read-only "
        } else {
            "read-write"
        };
        println!(
            "  LUN {:>3}  {:<export_width$}  {access}  {}",
            l["lun"].as_u64().unwrap_or(0),
            l["export"].as_str().unwrap_or(""),
            l["iscsi_uri"].as_str().unwrap_or("")
        );
    }
}

/// A name as one URL path segment (see `client`).
fn seg(name: &str) -> String {
    crate::client::seg(name)
}
