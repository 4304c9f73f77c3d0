//! Snapshots, thin clones and refresh end to end: the real `weft serve`, the HTTP API, and real
//! NBD clients (qemu-io, nbdcopy, nbdinfo, fio's nbd engine).
//!
//! - `twenty_six_clones_each_read_their_own_data_plus_the_shared_base`: 64 MiB of random data,
//!   a snapshot, 26 clones; 26 qemu-io processes write to the 26 clones at the same instant
//!   (each clone i: 1 MiB of its own random data at its own offset, and 64 KiB of the byte
//!   0x10+i at offset 0, a region every clone writes). Every clone must read back exactly its
//!   own writes over the base, the snapshot and the base volume the base. The API must show
//!   that the clones did not copy the base: each clone owns exactly what it wrote, their unique
//!   stored bytes add up to their changes, and the family stores one base plus the changes.
//! - `snapshot_export_is_read_only_over_nbd`: the snapshot is an NBD export of its own name
//!   that nbdinfo sees read-only with the right size; qemu-io and fio cannot write to it, and
//!   the server itself answers EPERM to a write that a client sends anyway; it keeps the old
//!   data while the volume is overwritten.
//! - `refresh_disconnects_clients_and_serves_the_new_snapshot`: a clone of s1 with its own
//!   writes, a busy fio reader and an idle qemu-io on it; refresh to s2 ends both connections
//!   (no more I/O is served on them), a new connection reads exactly s2, and the clone's old
//!   blocks are freed after sync + gc.
//! - `snapshot_survives_kill_9`: a snapshot cut, the volume overwritten, `kill -9` (with no
//!   sync or checkpoint in between), restart: the snapshot reads the old data, the volume the
//!   new, both after a first kill right after the cut and after a second one after the
//!   overwrite.
//!
//! Why the space figures are exact or nearly so: all data that counts is random, so no two
//! 4 KiB blocks are equal (no dedup) and LZ4 cannot shrink them (a random block is stored as
//! its 4096 bytes, a little over at most); the constant 64 KiB regions dedup to one block per
//! clone that compresses to a few dozen bytes. Figures are read after `POST /api/v1/sync`, so
//! the write buffer is destaged.

mod common;

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const CLONES: usize = 26;
const BASE_SIZE: u64 = 64 * MIB;
/// Each clone's own random region: 1 MiB at `own_offset(i)`.
const OWN_LEN: u64 = MIB;
/// The region every clone writes, each with its own constant byte.
const COMMON_LEN: u64 = 64 << 10;

// ------------------------------------------------------------------------------------------
// Helpers: the API
// ------------------------------------------------------------------------------------------

/// A request that must answer exactly `status`; returns the JSON body (Null if empty).
fn api_expect(srv: &Server, method: &str, path: &str, body: Option<Value>, status: u16) -> Value {
    let (st, text) = srv.api(method, path, body.clone());
    assert_eq!(
        st,
        status,
        "{method} {path} {} -> {st} (expected {status}): {text}",
        body.map(|b| b.to_string()).unwrap_or_default()
    );
    if text.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"))
}

fn create_volume(srv: &Server, name: &str, size: u64) -> Value {
    api_expect(
        srv,
        "POST",
        "/api/v1/volumes",
        Some(json!({"name": name, "size_bytes": size})),
        201,
    )
}

fn create_snapshot(srv: &Server, volume: &str, name: &str) -> Value {
    let info = api_expect(
        srv,
        "POST",
        &format!("/api/v1/volumes/{volume}/snapshots"),
        Some(json!({ "name": name })),
        201,
    );
    // Its full name is VOLUME@NAME, whichever form was given.
    let full = if name.contains('@') {
        name.to_string()
    } else {
        format!("{volume}@{name}")
    };
    assert_eq!(
        info["name"],
        full.as_str(),
        "snapshot create answer: {info}"
    );
    assert_eq!(
        info["short_name"],
        full.split_once('@').unwrap().1,
        "{info}"
    );
    assert_eq!(info["volume"], volume, "snapshot create answer: {info}");
    info
}

fn create_clone(srv: &Server, snapshot: &str, name: &str) -> Value {
    let info = api_expect(
        srv,
        "POST",
        &format!("/api/v1/snapshots/{snapshot}/clones"),
        Some(json!({ "name": name })),
        201,
    );
    assert_eq!(info["name"], name, "clone create answer: {info}");
    assert_eq!(info["origin"], snapshot, "clone create answer: {info}");
    info
}

fn sync(srv: &Server) {
    srv.api_json("POST", "/api/v1/sync", None);
}

fn u(v: &Value, path: &str) -> u64 {
    let mut cur = v;
    for p in path.split('.') {
        cur = &cur[p];
    }
    cur.as_u64()
        .unwrap_or_else(|| panic!("no unsigned integer at {path} in {v:#}"))
}

// ------------------------------------------------------------------------------------------
// Helpers: data in and out through real clients
// ------------------------------------------------------------------------------------------

/// `nbdcopy --flush FILE nbd://.../EXPORT`: the whole export from a file of the same size.
fn nbdcopy_in(srv: &Server, data: &[u8], export: &str) {
    let src = srv.scratch.join(format!("{export}.in"));
    fs::write(&src, data).unwrap();
    run(
        Command::new(require_tool("nbdcopy"))
            .arg("--flush")
            .arg(&src)
            .arg(srv.nbd_uri(export)),
        Duration::from_secs(60),
    )
    .ok();
    fs::remove_file(&src).unwrap();
}

/// The whole export, read with nbdcopy into a scratch file.
fn nbdcopy_out(srv: &Server, export: &str) -> Vec<u8> {
    let dest = srv.scratch.join(format!("{export}.out"));
    let _ = fs::remove_file(&dest);
    run(
        Command::new(require_tool("nbdcopy"))
            .arg(srv.nbd_uri(export))
            .arg(&dest),
        Duration::from_secs(60),
    )
    .ok();
    let data = fs::read(&dest).unwrap();
    fs::remove_file(&dest).unwrap();
    data
}

/// `qemu-io -f raw -c CMD... URI` (not yet run).
fn qemu_io_cmd(uri: &str, cmds: &[String]) -> Command {
    let mut cmd = Command::new(require_tool("qemu-io"));
    cmd.args(["-f", "raw"]);
    for c in cmds {
        cmd.arg("-c").arg(c);
    }
    cmd.arg(uri);
    cmd
}

/// Runs qemu-io and requires exit 0 and no failure line (qemu-io prints "... failed: ..." and
/// "Pattern verification failed" for errors).
fn qemu_io_ok(uri: &str, cmds: &[String]) -> CmdOut {
    let out = run(&mut qemu_io_cmd(uri, cmds), Duration::from_secs(60));
    assert_qemu_io_ok(&out);
    out
}

fn assert_qemu_io_ok(out: &CmdOut) {
    let all = out.all();
    assert!(
        out.success() && !all.contains("failed"),
        "qemu-io failed ({}):\n$ {}\n{all}",
        out.describe(),
        out.cmdline
    );
}

/// Writes `data` to `uri` at `offset` with `qemu-io write -s FILE` (a real client writing
/// arbitrary, here random, bytes), then flushes.
fn qemu_io_write_file(srv: &Server, uri: &str, offset: u64, data: &[u8], tag: &str) {
    let f = srv.scratch.join(format!("{tag}.bin"));
    fs::write(&f, data).unwrap();
    qemu_io_ok(
        uri,
        &[
            format!("write -q -s {} {offset} {}", f.display(), data.len()),
            "flush".into(),
        ],
    );
}

fn overlay(image: &mut [u8], offset: u64, data: &[u8]) {
    image[offset as usize..offset as usize + data.len()].copy_from_slice(data);
}

/// Byte-for-byte comparison with a message that names the differing 4 KiB blocks instead of
/// dumping megabytes.
fn assert_image(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: read {} bytes, expected {}",
        got.len(),
        want.len()
    );
    if got == want {
        return;
    }
    let b = BLOCK as usize;
    let bad: Vec<usize> = (0..want.len() / b)
        .filter(|i| got[i * b..(i + 1) * b] != want[i * b..(i + 1) * b])
        .collect();
    let first = bad[0] * b;
    panic!(
        "{what}: {} of {} 4 KiB blocks differ; first at byte {first} ({} MiB + {} KiB), \
         got {:02x?}... expected {:02x?}...; differing block numbers (first 32): {:?}",
        bad.len(),
        want.len() / b,
        first as u64 / MIB,
        (first as u64 % MIB) >> 10,
        &got[first..first + 8],
        &want[first..first + 8],
        &bad[..bad.len().min(32)]
    );
}

/// qemu-io in interactive mode, commands fed through a pipe: a client that stays connected
/// and idle between commands. Output goes to a file that is polled.
struct InteractiveQemuIo {
    child: Child,
    out: PathBuf,
}

impl InteractiveQemuIo {
    fn spawn(uri: &str, out: PathBuf) -> InteractiveQemuIo {
        let f = fs::File::create(&out).unwrap();
        eprintln!("$ qemu-io -f raw {uri}   (interactive, stdin piped)");
        let child = Command::new(require_tool("qemu-io"))
            .args(["-f", "raw", uri])
            .stdin(Stdio::piped())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("spawn qemu-io");
        InteractiveQemuIo { child, out }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        // The process may have exited already (connection gone): then the write fails.
        let _ = writeln!(stdin, "{line}");
        let _ = stdin.flush();
    }

    fn output(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits until the output contains `needle` `count` times.
    fn wait_for(&mut self, needle: &str, count: usize) {
        poll_until(Duration::from_secs(30), needle, || {
            (self.output().matches(needle).count() >= count).then_some(())
        });
    }

    fn quit(mut self) -> String {
        self.send("quit");
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.child.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("interactive qemu-io did not quit:\n{}", self.output());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.output()
    }
}

impl Drop for InteractiveQemuIo {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn clone_name(i: usize) -> String {
    format!("clone-{}", (b'a' + i as u8) as char)
}

/// Clone i's own region: 2 MiB apart from 2 MiB on, so the 26 regions cover 2..54 MiB and the
/// rest of the base stays visible between and after them.
fn own_offset(i: usize) -> u64 {
    2 * MIB + i as u64 * 2 * MIB
}

fn pattern(i: usize) -> u8 {
    0x10 + i as u8
}

// ------------------------------------------------------------------------------------------
// 1. 26 clones of one base
// ------------------------------------------------------------------------------------------

#[test]
fn twenty_six_clones_each_read_their_own_data_plus_the_shared_base() {
    const TEST: &str = "twenty_six_clones_each_read_their_own_data_plus_the_shared_base";
    require_tools(&["qemu-io", "nbdcopy"]);
    let srv = Server::start_with(TEST, ServeOpts::default().volume_size("4M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    let (mut rng, _) = test_rng(TEST);
    let t0 = Instant::now();

    // The base: 64 MiB of random data, through nbdcopy.
    create_volume(&srv, "base", BASE_SIZE);
    let base = random_bytes(&mut rng, BASE_SIZE as usize);
    nbdcopy_in(&srv, &base, "base");
    let snap = create_snapshot(&srv, "base", "base@base-snap");
    assert_eq!(u(&snap, "size_bytes"), BASE_SIZE, "snapshot: {snap}");

    let names: Vec<String> = (0..CLONES).map(clone_name).collect();
    for name in &names {
        let info = create_clone(&srv, "base@base-snap", name);
        assert_eq!(u(&info, "size_bytes"), BASE_SIZE, "{name}: {info}");
        assert_eq!(
            u(&info, "space.own_bytes"),
            0,
            "a new clone owns nothing: {info}"
        );
        assert_eq!(
            u(&info, "mapped_bytes"),
            BASE_SIZE,
            "a new clone maps its base: {info}"
        );
    }
    eprintln!(
        "base written, snapshot and {CLONES} clones created in {:?}",
        t0.elapsed()
    );

    // 26 qemu-io processes, one per clone, started together; each connects, then sleeps until
    // the same instant and writes its own 1 MiB of random data and its 64 KiB of 0x10+i.
    let own: Vec<Vec<u8>> = (0..CLONES)
        .map(|_| random_bytes(&mut rng, OWN_LEN as usize))
        .collect();
    let go = Instant::now() + Duration::from_millis(2500);
    let mut writers = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let f = srv.scratch.join(format!("{name}.own"));
        fs::write(&f, &own[i]).unwrap();
        let sleep_ms = go.saturating_duration_since(Instant::now()).as_millis();
        let cmds = [
            format!("sleep {sleep_ms}"),
            format!("write -q -s {} {} {OWN_LEN}", f.display(), own_offset(i)),
            format!("write -q -P {:#04x} 0 {COMMON_LEN}", pattern(i)),
            "flush".to_string(),
        ];
        writers.push(Bg::spawn(&mut qemu_io_cmd(&srv.nbd_uri(name), &cmds)));
    }
    for w in writers {
        assert_qemu_io_ok(&w.wait(Duration::from_secs(60)));
    }
    eprintln!("{CLONES} concurrent writers done at {:?}", t0.elapsed());

    // Each clone reads its writes over the base, through two real clients: qemu-io's pattern
    // check of the common region, and nbdcopy of the whole clone compared byte for byte.
    for (i, name) in names.iter().enumerate() {
        let uri = srv.nbd_uri(name);
        qemu_io_ok(
            &uri,
            &[format!("read -q -P {:#04x} 0 {COMMON_LEN}", pattern(i))],
        );
        let mut want = base.clone();
        want[..COMMON_LEN as usize].fill(pattern(i));
        overlay(&mut want, own_offset(i), &own[i]);
        assert_image(
            &format!("clone {name} (own region at {} MiB)", own_offset(i) / MIB),
            &nbdcopy_out(&srv, name),
            &want,
        );
    }
    assert_image(
        "snapshot base-snap after the clones' writes",
        &nbdcopy_out(&srv, "base@base-snap"),
        &base,
    );
    assert_image(
        "volume base after the clones' writes",
        &nbdcopy_out(&srv, "base"),
        &base,
    );
    eprintln!(
        "all {CLONES} clones, the snapshot and the base verified at {:?}",
        t0.elapsed()
    );

    // Space, after the write buffer is destaged.
    sync(&srv);
    let own_written = OWN_LEN + COMMON_LEN;
    let random_changes = CLONES as u64 * OWN_LEN;
    let list = srv.api_json("GET", "/api/v1/volumes", None);
    let listed: Vec<&Value> = list
        .as_array()
        .unwrap_or_else(|| panic!("volume list is not an array: {list}"))
        .iter()
        .filter(|v| v["name"].as_str().is_some_and(|n| n.starts_with("clone-")))
        .collect();
    assert_eq!(
        listed.len(),
        CLONES,
        "clones in GET /api/v1/volumes: {list:#}"
    );
    let base_info = srv.api_json("GET", "/api/v1/volumes/base", None);
    let family_id = u(&base_info, "family.id");

    let mut failures = Vec::new();
    let mut unique_sum = 0u64;
    for name in &names {
        let info = srv.api_json("GET", &format!("/api/v1/volumes/{name}"), None);
        let in_list = listed
            .iter()
            .find(|v| v["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} missing from the volume list"));
        let mut check = |ok: bool, msg: String| {
            if !ok {
                failures.push(format!("{name}: {msg}"));
            }
        };
        check(
            in_list["space"] == info["space"],
            format!(
                "space in the list {} != GET /volumes/{name} {}",
                in_list["space"], info["space"]
            ),
        );
        check(
            info["origin"] == "base@base-snap",
            format!("origin {}", info["origin"]),
        );
        check(
            u(&info, "chain_layers") == 2,
            format!(
                "chain_layers {} (clone top + snapshot)",
                info["chain_layers"]
            ),
        );
        check(
            u(&info, "family.id") == family_id,
            format!("family {} != base's {family_id}", info["family"]["id"]),
        );
        check(
            u(&info, "space.own_bytes") == own_written,
            format!(
                "space.own_bytes {} != the {own_written} bytes it wrote",
                info["space"]["own_bytes"]
            ),
        );
        check(
            u(&info, "space.mapped_bytes") == BASE_SIZE,
            format!("space.mapped_bytes {}", info["space"]["mapped_bytes"]),
        );
        check(
            u(&info, "space.shared_bytes") == BASE_SIZE - own_written,
            format!(
                "space.shared_bytes {} != the {} base bytes it reads through",
                info["space"]["shared_bytes"],
                BASE_SIZE - own_written
            ),
        );
        // 256 random blocks stored as 4096 bytes each, plus one deduped constant block that
        // compresses to a few dozen bytes.
        let unique = u(&info, "space.unique_stored_bytes");
        check(
            (OWN_LEN..=OWN_LEN + BLOCK).contains(&unique),
            format!("space.unique_stored_bytes {unique} not in [1 MiB, 1 MiB + 4 KiB]"),
        );
        unique_sum += unique;
    }
    let mut check = |ok: bool, msg: String| {
        if !ok {
            failures.push(msg);
        }
    };
    // The clones' unique bytes are their changes: 26 MiB of random data (stored 1:1, allow
    // 2 % for any per-block overhead) and 26 constant blocks (at most 4 KiB each).
    check(
        unique_sum as f64 >= 0.98 * random_changes as f64
            && unique_sum as f64 <= 1.02 * random_changes as f64 + (CLONES as u64 * BLOCK) as f64,
        format!(
            "sum of the clones' unique_stored_bytes {unique_sum} is not ~ their changes {random_changes}"
        ),
    );
    // The family: one base and 26 sets of changes, not 26 copies of the base.
    let fam = &base_info["family"];
    let red = &fam["reduction"];
    check(
        u(fam, "volumes") == CLONES as u64 + 1,
        format!("family.volumes {}", fam["volumes"]),
    );
    check(
        u(fam, "snapshots") == 1,
        format!("family.snapshots {}", fam["snapshots"]),
    );
    let logical = BASE_SIZE + CLONES as u64 * own_written;
    check(
        u(red, "logical_bytes") == logical,
        format!(
            "family logical_bytes {} != base + the clones' writes {logical} (each layer once)",
            red["logical_bytes"]
        ),
    );
    let blocks = (BASE_SIZE + random_changes) / BLOCK + CLONES as u64;
    check(
        u(red, "stored_blocks") == blocks,
        format!(
            "family stored_blocks {} != {blocks} (16384 base + 26 x 256 random + 26 constant)",
            red["stored_blocks"]
        ),
    );
    let stored = u(red, "stored_bytes");
    let ideal = BASE_SIZE + random_changes;
    check(
        stored >= ideal && (stored as f64) < 1.02 * ideal as f64 + (CLONES as u64 * BLOCK) as f64,
        format!(
            "family stored_bytes {stored} ({} MiB) is not ~ base + changes = {ideal} ({} MiB)",
            stored / MIB,
            ideal / MIB
        ),
    );
    check(
        stored < 2 * BASE_SIZE,
        format!(
            "family stored_bytes {stored} >= 2 x base: the clones copied the base \
             (26 copies would be {} MiB)",
            CLONES as u64 * BASE_SIZE / MIB
        ),
    );
    let snap_info = srv.api_json("GET", "/api/v1/snapshots/base-snap", None);
    let mut clones: Vec<String> = snap_info["clones"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    clones.sort();
    check(
        clones == names,
        format!("GET /snapshots/base-snap clones {}", snap_info["clones"]),
    );
    assert!(
        failures.is_empty(),
        "space accounting of 26 clones:\n{}\nbase volume: {base_info:#}",
        failures.join("\n")
    );
    eprintln!(
        "[{TEST}] clones' unique_stored_bytes sum {unique_sum}; family reduction {red}; \
         done in {:?}",
        t0.elapsed()
    );
}

// ------------------------------------------------------------------------------------------
// 2. Snapshot exports are read-only
// ------------------------------------------------------------------------------------------

#[test]
fn snapshot_export_is_read_only_over_nbd() {
    const TEST: &str = "snapshot_export_is_read_only_over_nbd";
    require_tools(&["qemu-io", "nbdcopy", "nbdinfo", "fio"]);
    let srv = Server::start_with(TEST, ServeOpts::default().volume_size("4M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    let (mut rng, _) = test_rng(TEST);
    const SIZE: u64 = 16 * MIB;
    create_volume(&srv, "ro", SIZE);
    let old = random_bytes(&mut rng, SIZE as usize);
    nbdcopy_in(&srv, &old, "ro");
    create_snapshot(&srv, "ro", "ro-snap");

    // nbdinfo: read-only, the volume's size; the volume itself stays writable.
    let info = nbdinfo_json(&srv.nbd_uri("ro@ro-snap"));
    let export = &info["exports"][0];
    assert_eq!(export["export-name"], "ro@ro-snap", "nbdinfo: {info:#}");
    assert_eq!(export["is_read_only"], true, "nbdinfo: {info:#}");
    assert_eq!(
        export["export-size"].as_u64(),
        Some(SIZE),
        "nbdinfo: {info:#}"
    );
    let vol = nbdinfo_json(&srv.nbd_uri("ro"));
    assert_eq!(
        vol["exports"][0]["is_read_only"], false,
        "nbdinfo ro: {vol:#}"
    );

    // qemu-io opens it read-write and must not be able to write.
    let out = run(
        &mut qemu_io_cmd(&srv.nbd_uri("ro@ro-snap"), &["write -P 0x55 0 4k".into()]),
        Duration::from_secs(60),
    );
    let all = out.all();
    assert!(
        !out.success() || all.contains("failed"),
        "qemu-io wrote to a snapshot export:\n{all}"
    );
    assert!(
        all.contains("Permission denied") || all.contains("Operation not permitted"),
        "qemu-io's write to a snapshot should fail with EPERM/EACCES:\n{all}"
    );
    // fio's nbd engine (libnbd): EPERM.
    let out = fio(
        srv.scratch.path(),
        &srv.nbd_uri("ro@ro-snap"),
        &strs(&["--name=w", "--rw=write", "--bs=64k", "--size=1M"]),
        Duration::from_secs(60),
    );
    assert!(
        !out.success() && out.all().contains("Operation not permitted"),
        "fio write to a snapshot export should fail with EPERM ({}):\n{}",
        out.describe(),
        out.all()
    );
    // Those clients refuse on their own when they see the read-only flag. The server must
    // refuse too: the harness's raw NBD client sends the write regardless.
    let mut c = srv.nbd_client("ro@ro-snap");
    assert_ne!(
        c.flags & 2,
        0,
        "NBD_FLAG_READ_ONLY missing: flags {:#x}",
        c.flags
    );
    for (what, res) in [
        ("write", c.write(0, &[0x55; 4096])),
        ("trim", c.trim(0, 4096)),
        ("write_zeroes", c.write_zeroes(0, 4096)),
    ] {
        match res {
            Err(NbdError::Server(1)) => {}
            other => panic!("{what} to the snapshot export: {other:?}, expected EPERM (1)"),
        }
    }
    assert_eq!(
        c.read(0, 4096).unwrap(),
        &old[..4096],
        "snapshot block 0 after the refused writes"
    );
    c.disconnect();

    // The volume is overwritten while nbdcopy reads the snapshot; the snapshot keeps the old
    // data, during and after the overwrite.
    let new = random_bytes(&mut rng, SIZE as usize);
    let new_file = srv.scratch.join("ro.new");
    fs::write(&new_file, &new).unwrap();
    let during = srv.scratch.join("ro-snap.during");
    let mut copies = Vec::new();
    for (src, dest) in [
        (new_file.display().to_string(), srv.nbd_uri("ro")),
        (srv.nbd_uri("ro@ro-snap"), during.display().to_string()),
    ] {
        // Small requests, so that the two copies interleave.
        let mut cmd = Command::new(require_tool("nbdcopy"));
        cmd.args(["--flush", "--request-size=65536", &src, &dest]);
        copies.push(Bg::spawn(&mut cmd));
    }
    for c in copies {
        c.wait(Duration::from_secs(60)).ok();
    }
    assert_image(
        "snapshot read while the volume was overwritten",
        &fs::read(&during).unwrap(),
        &old,
    );
    assert_image(
        "snapshot after the volume was overwritten",
        &nbdcopy_out(&srv, "ro@ro-snap"),
        &old,
    );
    assert_image("volume after the overwrite", &nbdcopy_out(&srv, "ro"), &new);
    sync(&srv);
    assert_image(
        "snapshot after sync",
        &nbdcopy_out(&srv, "ro@ro-snap"),
        &old,
    );
}

// ------------------------------------------------------------------------------------------
// 3. Refresh
// ------------------------------------------------------------------------------------------

#[test]
fn refresh_disconnects_clients_and_serves_the_new_snapshot() {
    const TEST: &str = "refresh_disconnects_clients_and_serves_the_new_snapshot";
    require_tools(&["qemu-io", "nbdcopy", "fio"]);
    let srv = Server::start_with(TEST, ServeOpts::default().volume_size("4M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    let (mut rng, seed) = test_rng(TEST);
    const SIZE: u64 = 16 * MIB;
    const CLONE_OWN: u64 = 4 * MIB;

    // src: A, snapshot s1; B over 4..12 MiB, snapshot s2.
    create_volume(&srv, "src", SIZE);
    let mut s1 = random_bytes(&mut rng, SIZE as usize);
    nbdcopy_in(&srv, &s1, "src");
    create_snapshot(&srv, "src", "s1");
    let b = random_bytes(&mut rng, (8 * MIB) as usize);
    qemu_io_write_file(&srv, &srv.nbd_uri("src"), 4 * MIB, &b, "b");
    create_snapshot(&srv, "src", "s2");
    let mut s2 = s1.clone();
    overlay(&mut s2, 4 * MIB, &b);

    // work: a clone of s1 with 4 MiB of its own random data at 0.
    create_clone(&srv, "src@s1", "work");
    let c = random_bytes(&mut rng, CLONE_OWN as usize);
    qemu_io_write_file(&srv, &srv.nbd_uri("work"), 0, &c, "c");
    overlay(&mut s1, 0, &c);
    assert_image("work before the refresh", &nbdcopy_out(&srv, "work"), &s1);
    sync(&srv);
    let before = srv.stats();
    let fam_before = srv.api_json("GET", "/api/v1/volumes/work", None)["family"].clone();

    // Two clients on work: fio reading as fast as it can for up to 60 s, and an idle qemu-io.
    let fio_dir = srv.scratch.join("fio");
    fs::create_dir_all(&fio_dir).unwrap();
    let mut reader = Bg::spawn_group(&mut fio_cmd(
        &fio_dir,
        &srv.nbd_uri("work"),
        &[
            "--name=busy".into(),
            "--rw=randread".into(),
            "--bs=4k".into(),
            "--iodepth=1".into(),
            "--time_based".into(),
            "--runtime=60".into(),
            format!("--randseed={}", seed % 1_000_000_007),
        ],
    ));
    poll_until(Duration::from_secs(30), "fio to connect", || {
        assert!(
            reader.try_wait().is_none(),
            "fio ended before the refresh:\n{}",
            reader.all_so_far()
        );
        reader
            .all_so_far()
            .contains("connected to NBD server")
            .then_some(())
    });
    let mut idle = InteractiveQemuIo::spawn(&srv.nbd_uri("work"), srv.scratch.join("idle.out"));
    idle.send("read 0 4k");
    idle.wait_for("read 4096/4096 bytes at offset 0", 1);
    std::thread::sleep(Duration::from_millis(500)); // fio is well into its reads

    // Refresh work to s2: refused while the two clients have it open, then forced.
    let (status, body) = srv.api(
        "POST",
        "/api/v1/volumes/work/refresh",
        Some(json!({"snapshot": "s2"})),
    );
    assert_eq!(
        status, 409,
        "refresh of a busy volume without force: {body}"
    );
    assert!(body.contains("2 clients have it open"), "{body}");
    assert!(
        reader.try_wait().is_none(),
        "the refused refresh cut fio off:\n{}",
        reader.all_so_far()
    );
    let refreshed_at = Instant::now();
    let info = srv.api_json(
        "POST",
        "/api/v1/volumes/work/refresh",
        Some(json!({"snapshot": "s2", "force": true})),
    );
    // By the short name: src@s2, the one snapshot named s2.
    assert_eq!(info["origin"], "src@s2", "refresh answer: {info:#}");
    assert_eq!(u(&info, "space.own_bytes"), 0, "refresh answer: {info:#}");
    assert_eq!(u(&info, "mapped_bytes"), SIZE, "refresh answer: {info:#}");

    // The busy client is cut off: fio ends with an error long before its 60 s.
    let out = reader.wait(Duration::from_secs(20));
    let ended_after = refreshed_at.elapsed();
    assert!(
        !out.timed_out && !out.success(),
        "fio kept reading the refreshed clone ({}, {ended_after:?} after the refresh):\n{}",
        out.describe(),
        out.all()
    );
    assert!(
        ended_after < Duration::from_secs(10),
        "fio ended only {ended_after:?} after the refresh:\n{}",
        out.all()
    );
    eprintln!(
        "fio ended {ended_after:?} after the refresh: {}",
        out.all()
            .lines()
            .find(|l| l.contains("err="))
            .unwrap_or("(no err= line)")
    );
    // The idle client is disconnected too, without waiting for its next request: every
    // connection the server logged as opened is logged as closed.
    let deadline = Instant::now() + Duration::from_secs(5);
    let open_connections = |log: &str| {
        log.matches("nbd client connected").count() as i64
            - log.matches("nbd client disconnected").count() as i64
    };
    while open_connections(&srv.server_output()) > 0 {
        assert!(
            Instant::now() < deadline,
            "the idle connection was not closed within 5 s of the refresh:\n{}",
            srv.server_output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // And its next read is not served.
    idle.send("read 0 4k");
    let idle_out = idle.quit();
    assert_eq!(
        idle_out.matches("read 4096/4096 bytes").count(),
        1,
        "the idle qemu-io's connection still served a read after the refresh:\n{idle_out}"
    );
    assert!(
        idle_out.contains("failed"),
        "the idle qemu-io's read after the refresh should fail:\n{idle_out}"
    );

    // A new connection reads exactly s2.
    assert_image(
        "work after the refresh to s2",
        &nbdcopy_out(&srv, "work"),
        &s2,
    );
    assert_image("snapshot s2", &nbdcopy_out(&srv, "src@s2"), &s2);

    // The clone's old 4 MiB (1024 unique random blocks) became garbage.
    sync(&srv);
    let gc = srv.api_json("POST", "/api/v1/gc", None);
    let after = srv.stats();
    let fam_after = srv.api_json("GET", "/api/v1/volumes/work", None)["family"].clone();
    let dropped = CLONE_OWN / BLOCK;
    assert_eq!(
        u(&after, "reduction.unique_blocks"),
        u(&before, "reduction.unique_blocks") - dropped,
        "stats unique_blocks should drop by the clone's {dropped} blocks\nbefore: {:#}\nafter: {:#}\ngc: {gc}",
        before["reduction"],
        after["reduction"]
    );
    assert_eq!(
        u(&fam_after, "reduction.stored_blocks"),
        u(&fam_before, "reduction.stored_blocks") - dropped,
        "family stored_blocks should drop by {dropped}\nbefore: {fam_before:#}\nafter: {fam_after:#}"
    );
    assert!(
        u(&fam_after, "reduction.stored_bytes") + CLONE_OWN
            <= u(&fam_before, "reduction.stored_bytes"),
        "family stored_bytes should drop by >= 4 MiB\nbefore: {fam_before:#}\nafter: {fam_after:#}"
    );
    // Still s2 after sync and gc.
    assert_image("work after sync + gc", &nbdcopy_out(&srv, "work"), &s2);
}

// ------------------------------------------------------------------------------------------
// 4. kill -9
// ------------------------------------------------------------------------------------------

#[test]
fn snapshot_survives_kill_9() {
    const TEST: &str = "snapshot_survives_kill_9";
    require_tools(&["nbdcopy", "nbdinfo"]);
    let mut srv = Server::start_with(TEST, ServeOpts::default().volume_size("4M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    let (mut rng, _) = test_rng(TEST);
    const SIZE: u64 = 16 * MIB;
    create_volume(&srv, "kv", SIZE);
    let old = random_bytes(&mut rng, SIZE as usize);
    nbdcopy_in(&srv, &old, "kv");
    create_snapshot(&srv, "kv", "kv@kv-snap");

    // First kill right after the cut: no sync, no checkpoint.
    srv.kill9_and_restart();
    let listed = srv.api_json("GET", "/api/v1/snapshots?volume=kv", None);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap_or_else(|| panic!("snapshot list is not an array: {listed}"))
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["kv@kv-snap"],
        "snapshots of kv after kill -9: {listed:#}"
    );
    assert_image(
        "kv-snap after the first kill -9",
        &nbdcopy_out(&srv, "kv@kv-snap"),
        &old,
    );
    assert_image("kv after the first kill -9", &nbdcopy_out(&srv, "kv"), &old);

    // Overwrite the volume (flushed), second kill.
    let new = random_bytes(&mut rng, SIZE as usize);
    nbdcopy_in(&srv, &new, "kv");
    srv.kill9_and_restart();
    assert_image(
        "kv-snap after the second kill -9",
        &nbdcopy_out(&srv, "kv@kv-snap"),
        &old,
    );
    assert_image(
        "kv after the second kill -9",
        &nbdcopy_out(&srv, "kv"),
        &new,
    );
    let snap = srv.api_json("GET", "/api/v1/snapshots/kv-snap", None);
    assert_eq!(snap["volume"], "kv", "{snap:#}");
    assert_eq!(u(&snap, "size_bytes"), SIZE, "{snap:#}");
    let vol = srv.api_json("GET", "/api/v1/volumes/kv", None);
    assert_eq!(vol["snapshots"], json!(["kv@kv-snap"]), "{vol:#}");
    assert_eq!(
        u(&vol, "space.own_bytes"),
        SIZE,
        "kv owns its overwrite: {vol:#}"
    );
    let info = nbdinfo_json(&srv.nbd_uri("kv@kv-snap"));
    assert_eq!(
        info["exports"][0]["is_read_only"], true,
        "kv-snap after restart: {info:#}"
    );
}
