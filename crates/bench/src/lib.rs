//! `weft bench`: an ORION-style I/O benchmark against an NBD export, an iSCSI LUN, a file or a
//! block device.
//!
//! The crate owns the load generator (`runner`), the targets it drives (`target`: our own small
//! NBD client, our own iSCSI initiator over the sans-IO `weft-iscsi` and `weft-scsi` crates, and
//! an O_DIRECT file/device backend), the statistics (`stats`), the result files (`results`: JSON
//! and CSV) and the self-contained HTML report (`report`).
//!
//! Entry points for the `weft` binary: [`BenchArgs`], [`run`], [`main_exit_code`] and
//! [`request_stop`] (a signal handler's way to end a run early, e.g. so that `weft bench
//! --create-volume` still deletes its volume after Ctrl-C).
//! Exit codes: 0 success, 2 bad arguments or an unusable target, 1 any other failure, 130
//! stopped by [`request_stop`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

mod args;
mod cpu;
mod datagen;
mod machine;
mod plan;
mod report;
mod results;
mod runner;
pub mod size;
mod stats;
mod sys;
mod target;
mod unwritten;

pub use args::{BenchArgs, BenchCommand, Mode, Protocol, ReportArgs, RunArgs};

/// Exit code for success.
pub const EXIT_OK: i32 = 0;
/// Exit code for failures during the run (I/O errors from the target, output files).
pub const EXIT_FAILURE: i32 = 1;
/// Exit code for bad arguments, an unreachable or unusable target, or a bad region.
pub const EXIT_USAGE: i32 = 2;
/// Exit code of a run ended by [`request_stop`] (128 + SIGINT, as a shell reports Ctrl-C).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Set by [`request_stop`]; the runner checks it between I/Os and points.
static STOP: AtomicBool = AtomicBool::new(false);

/// Ends the running benchmark soon: outstanding I/Os complete, no result files are written
/// and the run fails with [`BenchError::Interrupted`]. Only stores to an atomic, so a signal
/// handler may call it.
pub fn request_stop() {
    STOP.store(true, Ordering::Relaxed);
}

/// Whether [`request_stop`] was called.
pub(crate) fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Errors that decide the exit code. Anything else maps to [`EXIT_FAILURE`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The arguments cannot describe a run (bad region, sizes, read-only target, ...).
    #[error("{0}")]
    Usage(String),
    /// The target could not be opened or does not speak the protocol.
    #[error(transparent)]
    Target(#[from] target::TargetError),
    /// The target failed while the benchmark ran.
    #[error("point {point}: {source}")]
    Run {
        point: String,
        #[source]
        source: target::TargetError,
    },
    /// A result file could not be written or read.
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A result file is not a weft bench result.
    #[error("{path}: not a weft bench result file: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// [`request_stop`] ended the run.
    #[error("stopped before the end of the run; no result files written")]
    Interrupted,
}

impl BenchError {
    /// The process exit code this error should produce.
    pub fn exit_code(&self) -> i32 {
        match self {
            BenchError::Usage(_) | BenchError::Target(_) | BenchError::Parse { .. } => EXIT_USAGE,
            BenchError::Run { .. } | BenchError::File { .. } => EXIT_FAILURE,
            BenchError::Interrupted => EXIT_INTERRUPTED,
        }
    }
}

/// Runs `weft bench` with parsed arguments.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    run_typed(args).map_err(anyhow::Error::from)
}

/// Runs `weft bench`, prints any error to stderr and returns the process exit code.
pub fn main_exit_code(args: BenchArgs) -> i32 {
    match run_typed(args) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            let mut msg = format!("weft bench: error: {e}");
            let mut source = std::error::Error::source(&e);
            // Some messages already include their source's text (`Run` prints it); append
            // only what is not there yet, so the cause (an io::Error's "Connection refused")
            // shows once.
            while let Some(s) = source {
                let text = s.to_string();
                if !msg.contains(&text) {
                    msg.push_str(&format!(": {text}"));
                }
                source = s.source();
            }
            eprintln!("{msg}");
            e.exit_code()
        }
    }
}

fn run_typed(args: BenchArgs) -> Result<(), BenchError> {
    match args.command {
        Some(BenchCommand::Report(r)) => report::run_report(&r),
        None => runner::run_bench(&args.run),
    }
}

#[cfg(test)]
mod tests {
    use clap::{Parser, Subcommand};

    use super::*;

    /// The shape `weft` uses: `Command::Bench(args) => weft_bench::run(args)`.
    #[derive(Parser, Debug)]
    struct Weft {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Subcommand, Debug)]
    enum Command {
        Bench(BenchArgs),
    }

    fn parse(args: &[&str]) -> BenchArgs {
        let Command::Bench(b) = Weft::try_parse_from(args).expect("parses").command;
        b
    }

    #[test]
    fn bench_parses_as_a_weft_subcommand() {
        let b = parse(&[
            "weft",
            "bench",
            "nbd://h/e",
            "--mode",
            "oltp",
            "--qd",
            "1,8",
        ]);
        assert!(b.command.is_none());
        assert_eq!(b.run.target.as_deref(), Some("nbd://h/e"));
        assert_eq!(b.run.mode, Mode::Oltp);
        assert_eq!(b.run.qd, [1, 8]);
        let b = parse(&[
            "weft", "bench", "report", "a.json", "b.json", "-o", "c.html",
        ]);
        match b.command {
            Some(BenchCommand::Report(r)) => assert_eq!(r.inputs.len(), 2),
            other => panic!("expected report, got {other:?}"),
        }
        assert!(
            Weft::try_parse_from(["weft", "bench"]).is_err(),
            "TARGET is required"
        );
    }
}
