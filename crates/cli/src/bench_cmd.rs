//! `weft bench --create-volume SIZE`: the benchmark on a volume of its own. The CLI creates a
//! thin volume through the management API, names its NBD (or iSCSI) URI as the target, runs
//! `weft_bench`, and deletes the volume afterwards, whether the run succeeded, failed or was
//! interrupted (SIGINT and SIGTERM end the run early through [`weft_bench::request_stop`]; a
//! second signal kills the process as usual, and the volume stays: its name was printed).
//! Writing to it destroys nothing, so the run needs no `--allow-destructive`.

use serde_json::{json, Value};

use crate::client::{seg, ApiClient};
use crate::exit_code;
use crate::print::human;

/// Runs the benchmark on a new volume of `size_bytes`; the process exit code.
pub fn on_new_volume(client: anyhow::Result<ApiClient>, mut args: weft_bench::BenchArgs) -> i32 {
    let Some(size_bytes) = args.run.create_volume else {
        unreachable!("called with --create-volume only");
    };
    let client = match client {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let name = volume_name();
    let created = client.call(
        "POST",
        "/volumes",
        Some(json!({ "name": name, "size_bytes": size_bytes })),
    );
    let volume = match created {
        Ok(v) => v,
        Err(e) => return fail(&e.context(format!("creating the bench volume {name}"))),
    };
    let uri = match uri_of(&volume, args.run.protocol) {
        Ok(uri) => uri,
        Err(e) => {
            delete(&client, &name);
            return fail(&e);
        }
    };
    eprintln!(
        "weft bench: created volume {name} ({}) for this run: {uri}; it is deleted afterwards",
        human(size_bytes)
    );
    args.run.target = Some(uri);
    args.run.target_is_scratch = true;
    if args.run.label.is_none() {
        args.run.label = Some(format!("new {} volume", human(size_bytes)));
    }
    stop_on_signals();
    let code = weft_bench::main_exit_code(args);
    let deleted = delete(&client, &name);
    if deleted || code != weft_bench::EXIT_OK {
        code
    } else {
        i32::from(exit_code::FAILURE)
    }
}

/// `bench-<pid>-<unix seconds>`: unique enough on one server, and says what it is for.
fn volume_name() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("bench-{}-{secs}", std::process::id())
}

fn uri_of(volume: &Value, protocol: weft_bench::Protocol) -> anyhow::Result<String> {
    let (field, what) = match protocol {
        weft_bench::Protocol::Nbd => ("nbd_uri", "an NBD URI"),
        weft_bench::Protocol::Iscsi => ("iscsi_uri", "an iSCSI URI (is iSCSI off?)"),
    };
    volume[field]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("the server gave the new volume no {what}"))
}

/// Deletes the bench's volume (forced: its own connections may still be closing); whether
/// it went.
fn delete(client: &ApiClient, name: &str) -> bool {
    match client.call(
        "DELETE",
        &format!("/volumes/{}?force=true", seg(name)),
        None,
    ) {
        Ok(_) => {
            eprintln!("weft bench: deleted volume {name}");
            true
        }
        Err(e) => {
            eprintln!(
                "weft bench: error: could not delete the bench volume {name}: {e:#}; delete it \
                 with `weft volume delete {name} --yes --force`"
            );
            false
        }
    }
}

fn fail(e: &anyhow::Error) -> i32 {
    eprintln!("weft bench: error: {e:#}");
    i32::from(exit_code::of(e))
}

/// SIGINT and SIGTERM end the run early (once; the next one acts as usual).
fn stop_on_signals() {
    extern "C" fn stop(_: libc::c_int) {
        weft_bench::request_stop();
    }
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sigaction` with a zeroed struct, an empty mask and a handler that only
        // stores to an atomic (async-signal-safe); SA_RESETHAND restores the default action
        // after the first signal.
        #[allow(unsafe_code)]
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}
