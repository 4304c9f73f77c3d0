//! `weft top` in a pseudo-terminal (util-linux `script` gives it one) while fio writes: the
//! screen is redrawn in place, the busy volume comes first with its write rate, idle ones are
//! hidden. Off a terminal it prints plain blocks, one per refresh.
//!
//! Needs fio and `script` (Debian bsdutils, always installed).

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// The numbers of the first line that starts with `name `.
fn row<'a>(screen: &'a str, name: &str) -> Option<Vec<&'a str>> {
    screen
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .map(|l| l.split_whitespace().collect())
}

#[test]
fn top_in_a_terminal_shows_the_busy_volume_first() {
    require_tools(&["fio", "script"]);
    let srv = Server::start_with("top", ServeOpts::default().volume_size("256M"));
    srv.cli_ok(&["volume", "create", "idle", "--size", "1G"]);
    let fio = Bg::spawn_group(&mut fio_cmd(
        srv.scratch.path(),
        &srv.nbd_uri("vol0"),
        &strs(&[
            "--name=w",
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=4",
            "--rate_iops=800",
            "--time_based",
            "--runtime=8",
            "--size=64M",
        ]),
    ));
    // Wait for the load to show, so the three refreshes below all see it.
    poll_until(Duration::from_secs(30), "vol0 to be busy", || {
        let v = srv.api_json("GET", "/api/v1/stats/volumes", None);
        v["volumes"]
            .as_array()?
            .iter()
            .any(|x| x["name"] == "vol0" && x["write"]["iops"].as_f64() > Some(0.0))
            .then_some(())
    });
    // fio keeps up to 4 writes in flight: weft has some of them at any moment.
    poll_until(Duration::from_secs(30), "vol0's queue depth", || {
        let v = srv.api_json("GET", "/api/v1/stats/volumes", None);
        v["volumes"]
            .as_array()?
            .iter()
            .find(|x| x["name"] == "vol0")
            .and_then(|x| x["write"]["queue_depth"].as_f64())
            .filter(|qd| *qd > 0.0 && *qd <= 4.5)
            .map(|_| ())
    });
    // ...so it is busy part of each second (%util), never more than all of it.
    poll_until(Duration::from_secs(30), "vol0's utilisation", || {
        let v = srv.api_json("GET", "/api/v1/stats/volumes", None);
        v["volumes"]
            .as_array()?
            .iter()
            .find(|x| x["name"] == "vol0")
            .and_then(|x| x["util_pct"].as_f64())
            .filter(|u| *u > 0.0 && *u <= 100.0)
            .map(|_| ())
    });

    let top = format!(
        "{} --data-dir {} top --count 3 --interval 500ms",
        weft_bin().display(),
        srv.data_dir.display()
    );
    let out = run(
        Command::new("timeout")
            .args(["60", "script", "-qfec", &top, "/dev/null"])
            .env("LINES", "30")
            .env("COLUMNS", "132"),
        Duration::from_secs(90),
    );
    assert!(out.success(), "weft top in a pty: {}", out.all());
    let text = out.stdout.replace('\r', "");
    assert_eq!(
        text.matches("\x1b[H\x1b[2J").count(),
        3,
        "a terminal screen is redrawn in place at each refresh: {text:?}"
    );
    let last = text.rsplit("\x1b[H\x1b[2J").next().unwrap();
    let lines: Vec<&str> = last.lines().collect();
    // Cut to the terminal's 132 columns, as top(1) does: a wrapped header would push the
    // screen past its height.
    assert!(
        lines.iter().all(|l| l.chars().count() <= 132),
        "a line wider than the terminal: {last}"
    );
    assert!(lines[0].starts_with("weft top"), "{last}");
    assert!(lines[0].contains("UTC"), "times carry their zone: {last}");
    assert!(
        lines[0].contains("(sorted by iops; latency is weft's own"),
        "{last}"
    );
    assert!(
        lines[1].starts_with("VOLUME") && lines[1].contains("w/s"),
        "{last}"
    );
    let vol0 = row(last, "vol0").unwrap_or_else(|| panic!("no vol0 line: {last}"));
    let writes: f64 = vol0[2].parse().unwrap();
    assert!(
        writes > 100.0,
        "vol0 writes {writes}/s, fio does 800: {last}"
    );
    assert!(
        lines[2].starts_with("vol0"),
        "the busy volume first: {last}"
    );
    assert!(
        row(last, "idle").is_none(),
        "idle volumes are hidden: {last}"
    );

    // Its help says what each column means (the screen's legend is cut to the terminal).
    let help = srv.cli_ok(&["top", "--help"]);
    for column in [
        "r_p50 ... w_p99",
        "weft's own",
        "QD ",
        "iostat's await",
        "%util",
        "IOPS/GB",
    ] {
        assert!(help.contains(column), "{column:?} not explained: {help}");
    }

    // Off a terminal: plain blocks, idle volumes with --all.
    let out = srv.cli(&["top", "--count", "2", "--interval", "200ms", "--all"]);
    assert!(out.success(), "{}", out.all());
    assert!(!out.stdout.contains('\x1b'), "no escapes off a terminal");
    assert_eq!(out.stdout.matches("VOLUME").count(), 2, "{}", out.stdout);
    assert!(row(&out.stdout, "idle").is_some(), "{}", out.stdout);
    let out = fio.wait(Duration::from_secs(60));
    assert!(out.success(), "fio: {}", out.all());
}
