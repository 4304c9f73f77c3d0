//! What libiscsi's `iscsi-ls` shows an initiator of the array target: the LUN numbers it sees,
//! or why its login failed, for tests of host edits (initiators added and removed, CHAP set,
//! changed and removed) checked by logging in as a host would.

use std::net::SocketAddr;

use crate::common::*;

/// The LUN numbers `iscsi-ls -s` reports on `target` through `portal` for `initiator`,
/// logging in with `auth` (`""`, or `user%secret@` for CHAP); `Err` with the tool's output
/// when the login fails.
pub fn array_luns(
    portal: SocketAddr,
    target: &str,
    initiator: &str,
    auth: &str,
) -> Result<Vec<u64>, String> {
    let out = tool(
        "iscsi-ls",
        &["-s", "-i", initiator, &format!("iscsi://{auth}{portal}")],
    );
    if !out.success() {
        return Err(out.all());
    }
    let mut luns = Vec::new();
    let mut in_target = false;
    for line in out.stdout.lines() {
        if let Some(t) = line.strip_prefix("Target:") {
            in_target = t.split_whitespace().next() == Some(target);
        } else if in_target {
            if let Some(rest) = line.trim().strip_prefix("Lun:") {
                let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
                luns.push(n.parse().unwrap());
            }
        }
    }
    Ok(luns)
}
