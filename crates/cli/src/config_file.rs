//! `--config FILE` for the daemons (`weft serve`, `weft cnode`, `weft dnode`): a TOML file whose
//! keys are the subcommand's long flag names, so `weft serve --help` documents it.
//!
//! ```toml
//! data-dir = "/var/lib/weft"
//! nbd-listen = "0.0.0.0:10809"
//! iscsi-listen = "127.0.0.1:3260,127.0.0.2:3260"
//! write-buffer-size = "1G"
//! pg-count = 64                   # integers may be bare
//! nbd-open-network = true         # flags are booleans
//! data = ["/srv/disk1", "/srv/disk2"]   # repeatable flags take an array
//! ```
//!
//! How: a first, error-tolerant parse of the command line finds the subcommand, its `--config`
//! (or `WEFT_CONFIG`) and which flags the command line or the environment already set. Each key
//! of the file that neither set becomes a `--key=value` argument appended to the command line
//! (one per item of an array; `--key` for `true`, nothing for `false`), and the real parse runs
//! on that. So the precedence is built-in default < file < environment variable
//! (`WEFT_CLUSTER`, ...) < command-line flag, a repeatable flag on the command line (`--data`)
//! replaces the file's list instead of adding to it, and the file's values count as given
//! (a required flag is satisfied, and `weft dnode --config F` runs a d.node). This is simpler
//! than `ArgMatches::value_source` after the fact and needs no `args_override_self`: an
//! appended argument never meets the same flag from the user. A flag set `true` in the file
//! cannot be switched off from the command line (clap flags have no `--no-` form); set it
//! `false` in the file instead.
//!
//! Which subcommand takes a file is not listed here: any subcommand with a `--config` argument
//! ([`DaemonArgs`]) does, unless it is running a subcommand of its own (`weft dnode list`).
//!
//! Checked before anything starts, each error naming the file and the key: a key that is not a
//! long flag of the subcommand (a typo must not be ignored), a value of the wrong TOML type, and
//! a value the flag's own parser rejects. There is no implicit default path: a service passes
//! `--config` (see packaging/systemd), so a stray `/etc` file never changes a test or dev run.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, Args, CommandFactory, FromArgMatches};

use crate::logging::LogFormat;

/// The clap id of `--config` (the field name in [`DaemonArgs`]).
const CONFIG_ARG_ID: &str = "config";
/// The clap id of `--check-config`.
const CHECK_CONFIG_ARG_ID: &str = "check_config";
/// The one global flag a daemon's file may set (the others configure API clients).
const GLOBAL_KEY_DATA_DIR: &str = "data-dir";
const GLOBAL_ARG_ID_DATA_DIR: &str = "data_dir";
/// A config file larger than this is refused (ours are a few hundred bytes).
const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;
/// Exit status for a bad config file: clap's status for a usage error.
const EXIT_CONFIG_ERROR: i32 = 2;

/// Flags every daemon takes besides its own.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// TOML config file: keys are this command's long flag names (`nbd-listen = "..."`,
    /// `data-dir`, `write-buffer-size = "1G"`, booleans as `true`); flags override it.
    #[arg(long, env = "WEFT_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format on stderr: `text` (coloured only on a terminal) or `json` (one object a line).
    /// The level is set with WEFT_LOG (error, warn, info, debug, trace; default info).
    #[arg(long, env = "WEFT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Check the config file and the flags, print the settings they give (and where each
    /// comes from), and exit without starting.
    #[arg(long)]
    pub check_config: bool,
}

/// Parses the process's command line, completed with the values of the daemon's `--config`
/// file. A bad file is reported (naming the file and the key) and the process exits.
/// With `--check-config`, prints the settings instead and exits.
pub fn parse<P: CommandFactory + FromArgMatches>() -> P {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let (argv, file) = match with_config_args(P::command(), argv) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(EXIT_CONFIG_ERROR);
        }
    };
    let mut command = P::command();
    command.build();
    let matches = command.clone().get_matches_from(&argv);
    let parsed =
        P::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut P::command()).exit());
    if let Some((sub_name, sub_matches)) = matches.subcommand() {
        if matches!(
            sub_matches.try_get_one::<bool>(CHECK_CONFIG_ARG_ID),
            Ok(Some(true))
        ) {
            let sub = command
                .find_subcommand(sub_name)
                .expect("the parse found this subcommand");
            print!("{}", effective_settings(sub, sub_matches, file.as_ref()));
            std::process::exit(0);
        }
    }
    parsed
}

/// A config file that was applied: its path, and the keys that became arguments.
#[derive(Debug)]
struct AppliedFile {
    path: PathBuf,
    keys_applied: Vec<String>,
}

/// `argv` completed with the config file the command line names, if any.
fn with_config_args(
    command: clap::Command,
    mut argv: Vec<OsString>,
) -> anyhow::Result<(Vec<OsString>, Option<AppliedFile>)> {
    // Tolerant: required flags may still be missing (the file may supply them). On --help,
    // --version or a bad flag, leave the command line as it is: the real parse reports it.
    let Ok(first) = command
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(&argv)
    else {
        return Ok((argv, None));
    };
    let Some((sub_name, sub_matches)) = first.subcommand() else {
        return Ok((argv, None));
    };
    if sub_matches.subcommand().is_some() {
        return Ok((argv, None));
    }
    let Ok(Some(path)) = sub_matches.try_get_one::<PathBuf>(CONFIG_ARG_ID) else {
        return Ok((argv, None));
    };
    let table = read_table(path)?;
    let sub = command
        .find_subcommand(sub_name)
        .expect("the first parse found this subcommand");
    let mut extra = Vec::new();
    let mut keys_applied = Vec::new();
    for (key, value) in &table {
        let (id, values) = file_values(&command, sub, key, value)
            .map_err(|what| anyhow!("config file {}: {key}: {what}", path.display()))?;
        let given = |m: &clap::ArgMatches| {
            matches!(
                m.value_source(id.as_str()),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        };
        if given(sub_matches) || (id == GLOBAL_ARG_ID_DATA_DIR && given(&first)) {
            continue;
        }
        for v in values {
            extra.push(match v {
                Some(text) => OsString::from(format!("--{key}={text}")),
                None => OsString::from(format!("--{key}")),
            });
        }
        keys_applied.push(key.clone());
    }
    // Before a `--` (after it, everything is a positional value), else at the end.
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    argv.splice(at..at, extra);
    let file = AppliedFile {
        path: path.clone(),
        keys_applied,
    };
    Ok((argv, Some(file)))
}

/// The clap id a key names and the arguments its value becomes (`None`: a bare `--key`), or
/// why the key or the value is not accepted.
fn file_values(
    root: &clap::Command,
    sub: &clap::Command,
    key: &str,
    value: &toml::Value,
) -> Result<(String, Vec<Option<String>>), String> {
    if key == GLOBAL_KEY_DATA_DIR {
        let arg = root
            .get_arguments()
            .find(|a| a.get_id() == GLOBAL_ARG_ID_DATA_DIR)
            .expect("the binary has a global --data-dir");
        let texts = arg_values(arg, value)?;
        return Ok((
            GLOBAL_ARG_ID_DATA_DIR.to_string(),
            texts.into_iter().map(Some).collect(),
        ));
    }
    let arg = sub
        .get_arguments()
        .find(|a| {
            a.get_long() == Some(key)
                && a.get_id() != CONFIG_ARG_ID
                && a.get_id() != CHECK_CONFIG_ARG_ID
        })
        .ok_or_else(|| {
            format!(
                "unknown key (the keys are the long flags of `weft {} --help`)",
                sub.get_name()
            )
        })?;
    let texts = arg_values(arg, value)?;
    let id = arg.get_id().to_string();
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        let on = texts.first().is_some_and(|t| t == "true");
        return Ok((id, if on { vec![None] } else { Vec::new() }));
    }
    check_values(sub, key, &texts)?;
    Ok((id, texts.into_iter().map(Some).collect()))
}

fn read_table(path: &Path) -> anyhow::Result<toml::Table> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("config file {}: cannot open", path.display()))?;
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, CONFIG_FILE_BYTES_MAX + 1),
        &mut text,
    )
    .with_context(|| format!("config file {}: cannot read", path.display()))?;
    if text.len() as u64 > CONFIG_FILE_BYTES_MAX {
        bail!(
            "config file {}: larger than {CONFIG_FILE_BYTES_MAX} bytes",
            path.display()
        );
    }
    text.parse::<toml::Table>()
        .map_err(|e| anyhow!("config file {}: {e}", path.display()))
}

/// The flag value(s) `value` gives `arg`, or why its TOML type does not fit.
fn arg_values(arg: &Arg, value: &toml::Value) -> Result<Vec<String>, String> {
    let wrong = |expected: &str| format!("expected {expected}, found {}", value.type_str());
    match arg.get_action() {
        ArgAction::SetTrue | ArgAction::SetFalse => match value {
            toml::Value::Boolean(b) => Ok(vec![b.to_string()]),
            _ => Err(wrong("a boolean (true or false)")),
        },
        ArgAction::Append => match value {
            toml::Value::Array(items) => items
                .iter()
                .map(|v| scalar_text(v).ok_or_else(|| wrong("an array of strings")))
                .collect(),
            v => Ok(vec![
                scalar_text(v).ok_or_else(|| wrong("a string or an array"))?
            ]),
        },
        _ => Ok(vec![scalar_text(value).ok_or_else(|| wrong("a string"))?]),
    }
}

/// Strings as they are, integers in decimal; nothing else is a flag value.
fn scalar_text(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

/// Runs the flag's own value parser on the file's values, for an error that names the file
/// (the real parse would name only the flag, which the user did not type).
fn check_values(sub: &clap::Command, key: &str, values: &[String]) -> Result<(), String> {
    let probe = sub
        .clone()
        .no_binary_name(true)
        .mut_args(|a| a.required(false));
    let args: Vec<String> = values.iter().map(|v| format!("--{key}={v}")).collect();
    match probe.try_get_matches_from(args) {
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::ValueValidation | ErrorKind::InvalidValue
            ) =>
        {
            Err(clap_reason(&e))
        }
        // Anything else (a `requires` partner missing from this one-flag probe) is for the real
        // parse to judge.
        _ => Ok(()),
    }
}

/// `--check-config`: every setting of the (built) subcommand as a config line, with its source.
fn effective_settings(
    sub: &clap::Command,
    matches: &clap::ArgMatches,
    file: Option<&AppliedFile>,
) -> String {
    use std::fmt::Write as _;
    let mut out = match file {
        Some(f) => format!(
            "# weft {}: settings from {} and the command line\n",
            sub.get_name(),
            f.path.display()
        ),
        None => format!(
            "# weft {}: settings from the command line (no config file)\n",
            sub.get_name()
        ),
    };
    for arg in sub.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(key) = arg.get_long() else { continue };
        let daemon_own = !arg.is_global_set() || id == GLOBAL_ARG_ID_DATA_DIR;
        let setting = matches!(
            arg.get_action(),
            ArgAction::Set | ArgAction::Append | ArgAction::SetTrue | ArgAction::SetFalse
        );
        // Hidden flags are for tests (e.g. --test-clock-scale): not settings to show.
        if !daemon_own
            || !setting
            || arg.is_hide_set()
            || id == CONFIG_ARG_ID
            || id == CHECK_CONFIG_ARG_ID
        {
            continue;
        }
        let Some(raw) = matches.get_raw(id) else {
            let _ = writeln!(out, "# {key} = (not set)");
            continue;
        };
        let texts: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
        let value = match arg.get_action() {
            ArgAction::SetTrue | ArgAction::SetFalse => texts.join(""),
            ArgAction::Append => {
                let quoted: Vec<String> = texts.iter().map(|t| format!("{t:?}")).collect();
                format!("[{}]", quoted.join(", "))
            }
            _ => format!("{:?}", texts.join(",")),
        };
        let from_file = file.is_some_and(|f| f.keys_applied.iter().any(|k| k == key));
        let source = match matches.value_source(id) {
            _ if from_file => "config file",
            Some(ValueSource::CommandLine) => "command line",
            Some(ValueSource::EnvVariable) => "environment",
            _ => "default",
        };
        let _ = writeln!(out, "{key} = {value}  # {source}");
    }
    out
}

/// The reason in a clap value error, without its `error:` prefix and usage footer.
fn clap_reason(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct TestCli {
        #[arg(long, global = true, default_value = "./data")]
        data_dir: PathBuf,
        #[command(subcommand)]
        command: TestCommand,
    }

    #[derive(Debug, clap::Subcommand)]
    enum TestCommand {
        Run {
            #[command(flatten)]
            daemon: DaemonArgs,
            #[arg(long, default_value = "127.0.0.1:1")]
            listen: std::net::SocketAddr,
            #[arg(long)]
            cluster: String,
            #[arg(long)]
            open: bool,
            #[arg(long = "disk")]
            disks: Vec<PathBuf>,
        },
        Other,
    }

    fn parse_with(toml_text: &str, argv: &[&str]) -> anyhow::Result<TestCli> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("weft.toml");
        std::fs::write(&path, toml_text)?;
        let mut full: Vec<OsString> = argv.iter().map(OsString::from).collect();
        full.extend([OsString::from("--config"), path.into_os_string()]);
        let (full, _) = with_config_args(TestCli::command(), full)?;
        let matches = TestCli::command().try_get_matches_from(&full)?;
        Ok(TestCli::from_arg_matches(&matches)?)
    }

    fn run_fields(cli: &TestCli) -> (&std::net::SocketAddr, &str, bool, &[PathBuf]) {
        match &cli.command {
            TestCommand::Run {
                listen,
                cluster,
                open,
                disks,
                ..
            } => (listen, cluster, *open, disks),
            TestCommand::Other => panic!("parsed as another subcommand"),
        }
    }

    #[test]
    fn file_values_fill_flags_the_command_line_leaves_out() {
        let cli = parse_with(
            "data-dir = \"/d\"\nlisten = \"127.0.0.2:7\"\ncluster = \"etcd://x\"\nopen = true\ndisk = [\"/a\", \"/b\"]\nlog-format = \"json\"\n",
            &["weft", "run"],
        )
        .unwrap();
        let (listen, cluster, open, disks) = run_fields(&cli);
        assert_eq!(listen.to_string(), "127.0.0.2:7");
        assert_eq!(cluster, "etcd://x");
        assert!(open);
        assert_eq!(disks, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(cli.data_dir, PathBuf::from("/d"));
    }

    #[test]
    fn command_line_flags_override_the_file() {
        let cli = parse_with(
            "listen = \"127.0.0.2:7\"\ncluster = \"etcd://x\"\ndisk = [\"/a\", \"/b\"]\ndata-dir = \"/d\"\n",
            &["weft", "--data-dir", "/e", "run", "--listen", "127.0.0.3:8", "--disk", "/c"],
        )
        .unwrap();
        let (listen, _, _, disks) = run_fields(&cli);
        assert_eq!(listen.to_string(), "127.0.0.3:8");
        assert_eq!(disks, [PathBuf::from("/c")]);
        assert_eq!(cli.data_dir, PathBuf::from("/e"));
    }

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let e = parse_with("cluster = \"x\"\nlisten_addr = \"1\"\n", &["weft", "run"]).unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.contains("listen_addr") && text.contains("unknown key"),
            "{text}"
        );
        assert!(text.contains("weft.toml"), "{text}");
    }

    #[test]
    fn config_is_not_a_key() {
        let e = parse_with("config = \"other.toml\"\n", &["weft", "run"]).unwrap_err();
        assert!(format!("{e:#}").contains("config: unknown key"), "{e:#}");
    }

    #[test]
    fn wrong_types_and_bad_values_are_errors_naming_the_key() {
        for (text, key, what) in [
            ("open = \"yes\"\n", "open", "boolean"),
            ("listen = true\n", "listen", "string"),
            ("listen = 1.5\n", "listen", "string"),
            ("disk = [1.5]\n", "disk", "array of strings"),
            ("listen = \"nowhere\"\n", "listen", "nowhere"),
            ("log-format = \"xml\"\n", "log-format", "xml"),
            ("[run]\nlisten = \"127.0.0.1:1\"\n", "run", "unknown key"),
        ] {
            let e = parse_with(text, &["weft", "run", "--cluster", "x"]).unwrap_err();
            let msg = format!("{e:#}");
            assert!(
                msg.contains(&format!("{key}: ")) && msg.contains(what),
                "{text:?}: {msg}"
            );
        }
    }

    #[test]
    fn invalid_toml_is_an_error_naming_the_file() {
        let e = parse_with("listen = \n", &["weft", "run"]).unwrap_err();
        assert!(format!("{e:#}").contains("weft.toml"), "{e:#}");
    }

    #[test]
    fn subcommands_without_config_are_untouched() {
        let argv = ["weft", "other"].map(OsString::from).to_vec();
        let (after, file) = with_config_args(TestCli::command(), argv.clone()).unwrap();
        assert!(file.is_none());
        assert_eq!(after, argv);
    }

    #[test]
    fn false_flags_in_the_file_add_nothing() {
        let cli = parse_with("cluster = \"x\"\nopen = false\n", &["weft", "run"]).unwrap();
        assert!(!run_fields(&cli).2);
    }
}
