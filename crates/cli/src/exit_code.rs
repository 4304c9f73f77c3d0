//! The CLI's exit codes: a small documented set scripts can branch on, and the one function
//! that turns a command's error into one of them.
//!
//! Errors that should be told apart carry a [`Failure`] somewhere in their `anyhow` chain
//! (the API client makes them from HTTP statuses and transport errors, the CLI from its own
//! refusals); everything else is a plain failure. The table is printed by `weft --help` and
//! repeated in README.md: change all three together.

use std::fmt;

/// Success.
pub const OK: u8 = 0;
/// Any other failure: the server failed (HTTP 500, 507 out of space), an I/O error, a
/// question answered "no".
pub const FAILURE: u8 = 1;
/// The command line is wrong: clap rejected it (clap exits 2 itself), the server refused its
/// values (HTTP 400), or a destructive command was run off a terminal without `--yes`.
pub const USAGE: u8 = 2;
/// No server: none found in the data dir (no serve.json or api-token), or it did not answer.
pub const UNREACHABLE: u8 = 3;
/// What the command names does not exist (HTTP 404).
pub const NOT_FOUND: u8 = 4;
/// The request conflicts with the current state: the name is taken, the volume has
/// snapshots, is mapped or has clients connected (without `--force`), the snapshot has clones
/// (HTTP 409).
pub const CONFLICT: u8 = 5;
/// The server refused the token (HTTP 401, 403).
pub const DENIED: u8 = 6;
/// `weft cluster status`: the cluster answered but is not healthy (a d.node down or out,
/// placement groups degraded or incomplete, a rebuild to finish, still recovering); as
/// `ceph health` says HEALTH_WARN. Monitoring can alert on it.
pub const UNHEALTHY: u8 = 7;

/// The table `weft --help` prints after its options (and README.md repeats).
pub const HELP_TABLE: &str = "\
Exit codes:
  0  success
  1  any other failure (server error, out of space, a question answered no)
  2  usage: bad arguments or values (also HTTP 400), or a destructive command
     off a terminal without --yes
  3  no server: none found in the data dir, or it did not answer
  4  not found (HTTP 404)
  5  conflict: name taken, has snapshots, clones, mappings or connected
     clients (HTTP 409)
  6  the server refused the token (HTTP 401, 403)
  7  cluster status: the cluster answered but is NOT healthy";

/// An error a script can tell apart by its exit code.
#[derive(Debug)]
pub enum Failure {
    /// The command line is wrong (the message says how).
    Usage(String),
    /// No server found, or it did not answer (the message says where the CLI looked).
    Unreachable(String),
    /// The API answered with an error status.
    Api { status: u16, message: String },
    /// The CLI saw the conflict itself before asking the API (clients have the volume open).
    Conflict(String),
    /// `cluster status` found the cluster not healthy (the message says why).
    Unhealthy(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m)
            | Failure::Unreachable(m)
            | Failure::Conflict(m)
            | Failure::Unhealthy(m) => f.write_str(m),
            Failure::Api { status, message } => write!(f, "{message} (HTTP {status})"),
        }
    }
}

impl std::error::Error for Failure {}

/// The exit code of a failed command: that of the first [`Failure`] in its chain.
pub fn of(error: &anyhow::Error) -> u8 {
    error
        .chain()
        .find_map(|e| e.downcast_ref::<Failure>())
        .map_or(FAILURE, Failure::exit_code)
}

impl Failure {
    /// The one place HTTP statuses become exit codes.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => USAGE,
            Failure::Unreachable(_) => UNREACHABLE,
            Failure::Conflict(_) => CONFLICT,
            Failure::Unhealthy(_) => UNHEALTHY,
            Failure::Api { status, .. } => match status {
                400 => USAGE,
                401 | 403 => DENIED,
                404 => NOT_FOUND,
                409 => CONFLICT,
                _ => FAILURE,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    fn api(status: u16) -> anyhow::Error {
        Failure::Api {
            status,
            message: "m".into(),
        }
        .into()
    }

    #[test]
    fn http_statuses_map_to_documented_codes() {
        assert_eq!(of(&api(400)), USAGE);
        assert_eq!(of(&api(401)), DENIED);
        assert_eq!(of(&api(403)), DENIED);
        assert_eq!(of(&api(404)), NOT_FOUND);
        assert_eq!(of(&api(409)), CONFLICT);
        assert_eq!(of(&api(500)), FAILURE);
        assert_eq!(of(&api(507)), FAILURE);
        assert_eq!(of(&anyhow::anyhow!("plain")), FAILURE);
    }

    #[test]
    fn a_failure_under_context_keeps_its_code() {
        let e = Err::<(), _>(Failure::Unreachable("down".into()))
            .context("while asking")
            .unwrap_err();
        assert_eq!(of(&e), UNREACHABLE);
        assert_eq!(format!("{e:#}"), "while asking: down");
    }

    #[test]
    fn the_help_table_lists_every_code() {
        for code in [
            OK,
            FAILURE,
            USAGE,
            UNREACHABLE,
            NOT_FOUND,
            CONFLICT,
            DENIED,
            UNHEALTHY,
        ] {
            assert!(
                HELP_TABLE.contains(&format!("\n  {code}  ")),
                "exit code {code} missing from the help table"
            );
        }
    }
}
