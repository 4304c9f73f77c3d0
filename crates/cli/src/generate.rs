//! `weft completions SHELL` and `weft man --output DIR`: shell completions and man pages
//! generated from the clap definition of the CLI itself, so they never disagree with it.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::Cli;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing), e.g. /usr/local/share/man/man1.
    #[arg(long, short, value_name = "DIR")]
    pub output: PathBuf,
}

/// The completion script, on stdout.
pub fn completions(args: &CompletionsArgs) -> anyhow::Result<()> {
    let mut cmd = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "weft", &mut out);
    Ok(())
}

/// One page per command, `weft.1`, `weft-volume.1`, `weft-volume-create.1`, ...
pub fn man(args: &ManArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    clap_mangen::generate_to(Cli::command(), &args.output)
        .with_context(|| format!("writing man pages into {}", args.output.display()))?;
    let count = std::fs::read_dir(&args.output)?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".1"))
        .count();
    eprintln!("{count} man pages in {}", args.output.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Command;

    /// Every argument and every subcommand has help text: man pages and completions are only
    /// as good as it.
    #[test]
    fn every_argument_and_subcommand_has_help() {
        fn walk(cmd: &Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_hide_set() {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} <{id}>"));
                }
            }
            for sub in cmd.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "weft", &mut missing);
        assert!(
            missing.is_empty(),
            "arguments and subcommands without help text:\n{}",
            missing.join("\n")
        );
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn completions_name_real_subcommands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "weft", &mut out);
            let text = String::from_utf8(out).unwrap();
            for word in ["volume", "snapshot", "rollback", "completions", "status"] {
                assert!(text.contains(word), "{shell} completion lacks {word}");
            }
        }
    }
}
