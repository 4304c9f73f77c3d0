//! A real file system on a weft volume: nbdfuse exposes the export as a file, mkfs.ext4 and a
//! loop mount put ext4 on it, files go in, and after unmount + kill -9 + restart they read back
//! identical. And mkfs.ext4 straight on the nbdfuse file of a 512e volume. Needs root (mount)
//! and /dev/fuse (package fuse3).
//!
//! nbdfuse 1.14 passes the file's I/O through unaligned: mkfs.ext4 writes the 1 KiB superblock
//! at offset 1024 and zeroes 512-byte sectors. A 512e volume (the default) takes those as
//! read-modify-writes, so `mkfs.ext4 nbdfuse-file` works; a 4Kn one answers them with EINVAL
//! (the contract), and `losetup -b 4096` is what makes every request 4 KiB-aligned there, as
//! a kernel NBD client with a 4096 block size would. The kill -9 test keeps that loop device,
//! so it runs the aligned path whatever the volume's block size.

mod common;
mod mount_support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use mount_support::*;
use rand::Rng;

#[test]
fn ext4_over_nbdfuse_survives_kill9() {
    if !fs_prerequisites("ext4_over_nbdfuse_survives_kill9") {
        return;
    }
    require_tools(&[
        "nbdfuse",
        "fusermount3",
        "mkfs.ext4",
        "e2fsck",
        "losetup",
        "mount",
        "umount",
    ]);
    let (mut rng, _) = test_rng("ext4_over_nbdfuse_survives_kill9");
    let mut srv = Server::start_with("ext4", ServeOpts::default().volume_size("256M"));
    let uri = srv.nbd_uri("vol0");
    let mut m = Mounts::new(srv.scratch.join("fuse"), srv.scratch.join("mnt"));

    m.expose(&uri);
    let size = fs::metadata(m.disk()).unwrap().len();
    assert_eq!(size, 256 << 20, "nbdfuse file size");
    let dev = m.attach_loop();
    mkfs_ext4(&dev);
    m.mount();

    // Files of assorted sizes, some in subdirectories, one larger than the write buffer is likely to be.
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for i in 0..24 {
        let len = match i % 4 {
            0 => rng.random_range(1..4096),
            1 => rng.random_range(4096..65536),
            2 => rng.random_range(65536..(1 << 20)),
            _ => rng.random_range((1 << 20)..(3 << 20)),
        };
        let rel = PathBuf::from(format!("d{}/f{i}.bin", i % 3));
        files.push((rel, random_bytes(&mut rng, len)));
    }
    files.push((
        PathBuf::from("big/large.bin"),
        random_bytes(&mut rng, 24 << 20),
    ));
    files.push((PathBuf::from("text.txt"), b"weft end-to-end\n".repeat(1000)));
    for (rel, data) in &files {
        let p = srv.scratch.join("mnt").join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data).unwrap();
    }
    run(&mut Command::new("sync"), Duration::from_secs(120)).ok();
    m.umount();
    m.unexpose();

    srv.kill9_and_restart();

    m.expose(&uri);
    let dev = m.attach_loop();
    run(
        Command::new(require_tool("e2fsck"))
            .args(["-f", "-n"])
            .arg(&dev),
        Duration::from_secs(300),
    )
    .ok();
    m.mount();
    for (rel, data) in &files {
        let p = srv.scratch.join("mnt").join(rel);
        let got =
            fs::read(&p).unwrap_or_else(|e| panic!("read {} after restart: {e}", rel.display()));
        if let Some(at) = first_diff(&got, data) {
            panic!(
                "{} differs after kill -9 + restart, first at byte {at} (len {} vs {})",
                rel.display(),
                got.len(),
                data.len()
            );
        }
    }
    m.umount();
    m.unexpose();
}

#[test]
fn mkfs_ext4_directly_on_a_512e_export_checks_clean() {
    if !fs_prerequisites("mkfs_ext4_directly_on_a_512e_export_checks_clean") {
        return;
    }
    require_tools(&["nbdfuse", "fusermount3", "mkfs.ext4", "e2fsck"]);
    let mut srv = Server::start_with("ext4-direct", ServeOpts::default().volume_size("256M"));
    if srv.is_weft() {
        let info = srv.api_json("GET", "/api/v1/volumes/vol0", None);
        assert_eq!(info["logical_block_size"], 512, "vol0 is 512e: {info}");
    }
    let uri = srv.nbd_uri("vol0");
    let mut m = Mounts::new(srv.scratch.join("fuse"), srv.scratch.join("mnt"));
    m.expose(&uri);
    // Exit 0: nothing to fix (`ok` fails the test otherwise, with e2fsck's output).
    let e2fsck = |disk: &Path| {
        run(
            Command::new(require_tool("e2fsck"))
                .args(["-f", "-n"])
                .arg(disk),
            Duration::from_secs(300),
        )
        .ok();
    };
    // No loop device: the file system's sub-4 KiB writes reach weft as they are.
    mkfs_ext4(m.disk());
    e2fsck(&m.disk());
    m.unexpose();
    // What mkfs wrote (read-modify-writes included) is still there after kill -9.
    srv.kill9_and_restart();
    m.expose(&uri);
    e2fsck(&m.disk());
    m.unexpose();
}
