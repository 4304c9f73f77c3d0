//! Destructive commands ask before they act: on a terminal they print what is about to go,
//! with facts fetched from the API ("Delete volume pgdata (1.5 TiB, 3 snapshots)? [y/N]"),
//! and go on only on `y`; with `--yes` they do not ask. Without a terminal (a script, a pipe,
//! cron) and without `--yes` they refuse with the usage exit code, before any request that
//! changes something: a script must say `--yes` to destroy data.
//!
//! Commands that cut clients off (volume delete, refresh, rollback) name the clients that
//! have the volume open in the question when `--force` is given, and without it refuse
//! before asking (exit 5, as the server's 409 would).

use std::io::{BufRead, IsTerminal, Write};

use serde_json::Value;

use crate::client::{seg, ApiClient};
use crate::exit_code::Failure;
use crate::print::{date, human, plural};

/// Go on when `yes`, or when a person on the terminal answers yes to `question()` (which
/// may ask the API for the facts it shows; its errors, such as a 404, end the command).
/// `what` names the action for the refusal, e.g. "delete volume pgdata".
pub fn confirm(
    yes: bool,
    what: &str,
    question: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::Usage(format!(
            "refusing to {what} without --yes: standard input is not a terminal to ask on \
             (scripts pass --yes)"
        ))
        .into());
    }
    let question = question()?;
    let mut err = std::io::stderr().lock();
    write!(err, "{question} [y/N] ")?;
    err.flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if is_yes(&answer) {
        Ok(())
    } else {
        anyhow::bail!("not confirmed: did not {what}")
    }
}

fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// `weft volume delete`.
pub fn volume_delete(
    client: &ApiClient,
    name: &str,
    with_snapshots: bool,
    force: bool,
) -> anyhow::Result<String> {
    let v = client.call("GET", &format!("/volumes/{}", seg(name)), None)?;
    let size = size_of(&v);
    let snaps = list(&v["snapshots"]);
    let mut sessions: Vec<Value> = v["sessions"].as_array().cloned().unwrap_or_default();
    if with_snapshots && !snaps.is_empty() {
        let all = client.call("GET", &format!("/snapshots?volume={}", seg(name)), None)?;
        for s in all.as_array().into_iter().flatten() {
            sessions.extend(s["sessions"].as_array().cloned().unwrap_or_default());
        }
    }
    let clients = clients(&sessions, &format!("delete volume {name}"), force)?;
    Ok(match (with_snapshots, snaps.len()) {
        (true, n) if n > 0 => format!(
            "Delete volume {name} ({size}) and its {} ({})?{clients}",
            plural(n, "snapshot"),
            snaps.join(", ")
        ),
        (_, n) => format!(
            "Delete volume {name} ({size}, {})?{clients}",
            plural(n, "snapshot")
        ),
    })
}

/// `weft volume rollback`.
pub fn volume_rollback(
    client: &ApiClient,
    name: &str,
    snapshot: &str,
    force: bool,
) -> anyhow::Result<String> {
    let v = client.call("GET", &format!("/volumes/{}", seg(name)), None)?;
    let clients = clients(
        v["sessions"].as_array().map_or(&[], Vec::as_slice),
        &format!("roll back volume {name}"),
        force,
    )?;
    let s = client.call("GET", &format!("/snapshots/{}", seg(snapshot)), None)?;
    Ok(format!(
        "Roll back volume {name} ({}) to snapshot {snapshot} (taken {})? Its writes since \
         then are discarded and its clients disconnected.{clients}",
        size_of(&v),
        date(&s["created_unix_s"])
    ))
}

/// `weft volume refresh`.
pub fn volume_refresh(
    client: &ApiClient,
    name: &str,
    snapshot: &str,
    force: bool,
) -> anyhow::Result<String> {
    let v = client.call("GET", &format!("/volumes/{}", seg(name)), None)?;
    let clients = clients(
        v["sessions"].as_array().map_or(&[], Vec::as_slice),
        &format!("refresh volume {name}"),
        force,
    )?;
    let s = client.call("GET", &format!("/snapshots/{}", seg(snapshot)), None)?;
    Ok(format!(
        "Refresh volume {name} ({}, {} of its own changes) to snapshot {snapshot} of {} \
         (taken {})? Its changes are discarded and its clients disconnected.{clients}",
        size_of(&v),
        human(v["space"]["own_bytes"].as_u64().unwrap_or(0)),
        s["volume"].as_str().unwrap_or("-"),
        date(&s["created_unix_s"])
    ))
}

/// The clients of `sessions` (the API's session objects) for the question: nothing when
/// there are none; without `force`, a refusal naming them (exit 5, before asking anything);
/// with it, a sentence naming them.
fn clients(sessions: &[Value], what: &str, force: bool) -> anyhow::Result<String> {
    if sessions.is_empty() {
        return Ok(String::new());
    }
    let named: Vec<String> = sessions.iter().map(crate::print::session_text).collect();
    let count = plural(sessions.len(), "client");
    let (has, them) = if sessions.len() == 1 {
        ("has", "it")
    } else {
        ("have", "them")
    };
    if !force {
        return Err(Failure::Conflict(format!(
            "refusing to {what}: {count} {has} it open ({}); stop {them} first, or pass --force \
             to disconnect {them}",
            named.join(", ")
        ))
        .into());
    }
    Ok(format!(
        " {count} {has} it open and will be disconnected: {}.",
        named.join(", ")
    ))
}

/// `weft snapshot delete`.
pub fn snapshot_delete(
    client: &ApiClient,
    name: &str,
    keep_hidden: bool,
) -> anyhow::Result<String> {
    let s = client.call("GET", &format!("/snapshots/{}", seg(name)), None)?;
    let clones = list(&s["clones"]);
    let clones = if clones.is_empty() {
        "no clones".to_string()
    } else {
        format!("{}: {}", plural(clones.len(), "clone"), clones.join(", "))
    };
    let hidden = if keep_hidden {
        " (hidden while its clones need it)"
    } else {
        ""
    };
    Ok(format!(
        "Delete snapshot {name} of {} (taken {}, {clones}){hidden}?",
        s["volume"].as_str().unwrap_or("-"),
        date(&s["created_unix_s"])
    ))
}

/// `weft dnode out`.
pub fn dnode_out(client: &ApiClient, id: &str) -> anyhow::Result<String> {
    let n = client.call("GET", &format!("/dnodes/{}", seg(id)), None)?;
    Ok(format!(
        "Mark d.node {id} out ({}, {} used)? Its chunks are rebuilt on the other d.nodes.",
        n["state"].as_str().unwrap_or("?"),
        human(n["used_bytes"].as_u64().unwrap_or(0))
    ))
}

/// `weft cnode drain`: what the c.node does now, and who takes over.
pub fn cnode_drain(client: &ApiClient, id: &str) -> anyhow::Result<String> {
    let v = client.call("GET", "/cnodes", None)?;
    let rows = v.as_array().map_or(&[][..], Vec::as_slice);
    let Some(me) = rows.iter().find(|r| r["id"] == id) else {
        return Err(Failure::Api {
            status: 404,
            message: format!("no c.node {id} is registered (weft cnode list)"),
        }
        .into());
    };
    if me["owner"] != true {
        return Ok(format!(
            "c.node {id} owns nothing ({}); drain it anyway?",
            me["role"].as_str().unwrap_or("?")
        ));
    }
    let standby = rows
        .iter()
        .find(|r| r["mirror_of"].is_string())
        .and_then(|r| r["id"].as_str())
        .unwrap_or("no standby");
    Ok(format!(
        "Drain c.node {id}, the owner of {} families? Its NBD and iSCSI clients are disconnected and reconnect to the standby ({standby}), which takes over at once.",
        me["families"].as_u64().unwrap_or(0)
    ))
}

fn size_of(v: &Value) -> String {
    v["size_bytes"]
        .as_u64()
        .map_or("size unknown".into(), human)
}

fn list(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_y_or_yes_confirms() {
        for a in ["y\n", "Y\n", "yes\n", " YES \n"] {
            assert!(is_yes(a), "{a:?}");
        }
        for a in ["", "\n", "n\n", "no\n", "yep\n", "maybe\n"] {
            assert!(!is_yes(a), "{a:?}");
        }
    }

    #[test]
    fn yes_skips_the_question() {
        let asked = std::cell::Cell::new(false);
        confirm(true, "delete volume x", || {
            asked.set(true);
            Ok(String::new())
        })
        .unwrap();
        assert!(!asked.get());
    }

    #[test]
    fn clients_are_refused_without_force_and_named_with_it() {
        let nbd = serde_json::json!({
            "protocol": "nbd", "client": "127.0.0.1:5000", "address": "127.0.0.1:5000",
            "host": null, "export": "pgdata", "since": "2026-11-24T06:50:54Z"
        });
        let iscsi = serde_json::json!({
            "protocol": "iscsi", "client": "iqn.x:db1", "address": "10.0.0.5:4000",
            "host": "db1", "export": "pgdata@mon", "since": "2026-11-24T06:50:55Z"
        });
        assert_eq!(clients(&[], "delete volume pgdata", false).unwrap(), "");
        let refused =
            clients(std::slice::from_ref(&nbd), "delete volume pgdata", false).unwrap_err();
        assert_eq!(crate::exit_code::of(&refused), crate::exit_code::CONFLICT);
        assert!(
            refused.to_string().contains(
                "refusing to delete volume pgdata: 1 client has it open \
                 (nbd 127.0.0.1:5000 since 2026-11-24T06:50:54Z)"
            ),
            "{refused}"
        );
        let named = clients(&[nbd, iscsi], "delete volume pgdata", true).unwrap();
        assert_eq!(
            named,
            " 2 clients have it open and will be disconnected: nbd 127.0.0.1:5000 since \
             2026-11-24T06:50:54Z, iscsi iqn.x:db1 from 10.0.0.5:4000 (host db1) on pgdata@mon \
             since 2026-11-24T06:50:55Z."
        );
    }
}
