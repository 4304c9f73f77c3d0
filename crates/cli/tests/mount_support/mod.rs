//! A weft export as a kernel file system without the kernel's NBD client (absent here):
//! nbdfuse exposes the export as a file, a loop device with 4096-byte sectors goes over it,
//! and ext4 is mounted on that. [`Mounts`] undoes all of it on drop, also when a test panics.
//! Needs root and /dev/fuse ([`fs_prerequisites`]).
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// Unmounts the loop mount and the FUSE mount on drop, also when the test panics.
pub struct Mounts {
    fuse_dir: PathBuf,
    mnt_dir: PathBuf,
    nbdfuse: Option<Bg>,
    loop_dev: Option<String>,
    loop_mounted: bool,
}

impl Mounts {
    pub fn new(fuse_dir: PathBuf, mnt_dir: PathBuf) -> Mounts {
        fs::create_dir_all(&fuse_dir).unwrap();
        fs::create_dir_all(&mnt_dir).unwrap();
        Mounts {
            fuse_dir,
            mnt_dir,
            nbdfuse: None,
            loop_dev: None,
            loop_mounted: false,
        }
    }

    pub fn disk(&self) -> PathBuf {
        self.fuse_dir.join("disk")
    }

    /// `nbdfuse -P PIDFILE FUSE_DIR/disk URI`, ready when the pid file appears.
    pub fn expose(&mut self, uri: &str) {
        let pidfile = self.fuse_dir.with_extension("pid");
        let _ = fs::remove_file(&pidfile);
        let mut cmd = Command::new(require_tool("nbdfuse"));
        cmd.arg("-P").arg(&pidfile).arg(self.disk()).arg(uri);
        let mut bg = Bg::spawn(&mut cmd);
        poll_until(
            Duration::from_secs(30),
            "nbdfuse to write its pid file",
            || {
                if let Some(st) = bg.try_wait() {
                    panic!("nbdfuse exited early ({st}):\n{}", bg.all_so_far());
                }
                fs::metadata(&pidfile)
                    .ok()
                    .filter(|m| m.len() > 0)
                    .map(|_| ())
            },
        );
        self.nbdfuse = Some(bg);
    }

    /// A loop device with 4096-byte logical sectors over the nbdfuse file.
    pub fn attach_loop(&mut self) -> String {
        let out = run(
            Command::new(require_tool("losetup"))
                .args(["-f", "--show", "-b", "4096"])
                .arg(self.disk()),
            Duration::from_secs(60),
        )
        .ok();
        let dev = out.stdout.trim().to_string();
        assert!(dev.starts_with("/dev/loop"), "losetup printed {dev:?}");
        self.loop_dev = Some(dev.clone());
        dev
    }

    pub fn mount(&mut self) {
        let dev = self.loop_dev.clone().expect("attach_loop first");
        run(
            Command::new("mount").arg(&dev).arg(&self.mnt_dir),
            Duration::from_secs(60),
        )
        .ok();
        self.loop_mounted = true;
    }

    pub fn umount(&mut self) {
        if self.loop_mounted {
            run(
                Command::new("umount").arg(&self.mnt_dir),
                Duration::from_secs(120),
            )
            .ok();
            self.loop_mounted = false;
        }
        if let Some(dev) = self.loop_dev.take() {
            run(
                Command::new("losetup").arg("-d").arg(&dev),
                Duration::from_secs(60),
            )
            .ok();
        }
    }

    /// After the server behind the export is gone: a lazy unmount, the loop device detached
    /// and the FUSE mount dropped, with no error checked (each may fail on the dead export).
    pub fn abandon(&mut self) {
        if self.loop_mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt_dir).status();
            self.loop_mounted = false;
        }
        if let Some(dev) = self.loop_dev.take() {
            let _ = Command::new("losetup").arg("-d").arg(&dev).status();
        }
        if let Some(mut bg) = self.nbdfuse.take() {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.fuse_dir)
                .status();
            bg.sigkill();
        }
    }

    /// `fusermount3 -u`, then wait for nbdfuse to exit by itself.
    pub fn unexpose(&mut self) {
        if let Some(bg) = self.nbdfuse.take() {
            run(
                Command::new("fusermount3").arg("-u").arg(&self.fuse_dir),
                Duration::from_secs(60),
            )
            .ok();
            let out = bg.wait(Duration::from_secs(60));
            assert!(
                !out.timed_out,
                "nbdfuse did not exit after fusermount3 -u:\n{}",
                out.all()
            );
        }
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        if self.loop_mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt_dir).status();
        }
        if let Some(dev) = &self.loop_dev {
            let _ = Command::new("losetup").arg("-d").arg(dev).status();
        }
        if self.nbdfuse.is_some() {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.fuse_dir)
                .status();
        }
    }
}

/// `mkfs.ext4 -F -q TARGET` (a loop device, or the nbdfuse file itself); fails the test if it fails.
pub fn mkfs_ext4(target: impl AsRef<Path>) {
    run(
        Command::new(require_tool("mkfs.ext4"))
            .args(["-F", "-q"])
            .arg(target.as_ref()),
        Duration::from_secs(300),
    )
    .ok();
}

pub fn is_root() -> bool {
    run(Command::new("id").arg("-u"), Duration::from_secs(10))
        .stdout
        .trim()
        == "0"
}

/// Without /dev/fuse or root these tests cannot run: outside CI they say so and return; on CI
/// (CI=true), where .ci/run sets both up, they fail.
pub fn fs_prerequisites(test: &str) -> bool {
    let missing = if !Path::new("/dev/fuse").exists() {
        Some("/dev/fuse is absent")
    } else if !is_root() {
        Some("mount needs root")
    } else {
        None
    };
    if let Some(why) = missing {
        if std::env::var("CI").is_ok() {
            panic!("file system test cannot run on CI: {why}");
        }
        eprintln!("SKIPPED {test}: {why}");
        return false;
    }
    true
}
