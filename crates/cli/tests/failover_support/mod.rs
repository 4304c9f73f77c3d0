//! Two c.nodes, each the other's partner: the setup of the failover tests, and waits for the
//! mirror and for what the owner says about its write buffer.
#![allow(dead_code)]

use std::time::Duration;

use crate::cluster_support::*;
use crate::common::*;

/// etcd, 6 d.nodes, owner `c1` and standby `c2`, each the other's partner (`--partner`,
/// `--mirror-listen`), lease 3 s; returns once the standby holds a complete mirror.
pub fn pair(test: &str) -> (Cluster, Cnode, u64) {
    let (c, standby, seed, _) = start_pair(test, false);
    (c, standby, seed)
}

/// [`pair`] with each c.node's NBD listener on a port of its own that a restart keeps (so a
/// client that reconnects finds it again): returns c1's and c2's NBD ports too.
pub fn pair_on_fixed_nbd_ports(test: &str) -> (Cluster, Cnode, u64, [u16; 2]) {
    let (c, standby, seed, ports) = start_pair(test, true);
    (c, standby, seed, ports.expect("fixed ports"))
}

fn start_pair(test: &str, fixed_nbd: bool) -> (Cluster, Cnode, u64, Option<[u16; 2]>) {
    let (mut rng, seed) = test_rng(test);
    let mirror_c1 = format!("127.0.0.1:{}", free_port(&mut rng));
    let mirror_c2 = format!("127.0.0.1:{}", free_port(&mut rng));
    let nbd = fixed_nbd.then(|| [free_port(&mut rng), free_port(&mut rng)]);
    let mut opts = ClusterOpts::new(6).volume_size("256M");
    let args = |partner: &str, listen: &str, nbd: Option<u16>| -> Vec<String> {
        let mut args: Vec<String> = ["--partner", partner, "--mirror-listen", listen]
            .iter()
            .chain(&["--lease-ttl", "3s"])
            .map(|s| s.to_string())
            .collect();
        if let Some(port) = nbd {
            args.extend(["--nbd-listen".to_string(), format!("127.0.0.1:{port}")]);
        }
        args
    };
    opts.cnode_args
        .insert("c1".into(), args(&mirror_c2, &mirror_c1, nbd.map(|p| p[0])));
    opts.cnode_args
        .insert("c2".into(), args(&mirror_c1, &mirror_c2, nbd.map(|p| p[1])));
    let mut c = Cluster::start(test, seed, opts);
    let standby = c.spawn_other_cnode("c2");
    wait_for_mirror(&c, c.cnode.as_ref().unwrap(), &standby);
    wait_write_buffer(&c, "mirrored");
    (c, standby, seed, nbd)
}

/// Until `weft cluster status` says the owner's write buffer is `mode`; checks the text
/// and `/metrics` say the same.
pub fn wait_write_buffer(c: &Cluster, mode: &str) {
    poll_until(
        Duration::from_secs(30),
        "the owner's write-buffer mode",
        || {
            let v = c.cli_json(&["cluster", "status", "--json"]);
            (v["compute"]["write_buffer"].as_str() == Some(mode)).then_some(())
        },
    );
    let text = c.cli_ok(&["cluster", "status"]);
    let line = text
        .lines()
        .find(|l| l.starts_with("c.node "))
        .unwrap_or_default();
    match mode {
        "mirrored" => assert!(line.contains("mirrored to partner"), "{text}"),
        _ => assert!(line.contains("losing this machine now loses"), "{text}"),
    }
    let base = c
        .cnode
        .as_ref()
        .unwrap()
        .metrics
        .trim_end_matches("/metrics")
        .to_string();
    let (_, metrics) = api_request(&base, "GET", "/metrics", None, None);
    let want = format!(
        "weft_write_buffer_mirrored {}",
        u8::from(mode == "mirrored")
    );
    assert!(metrics.contains(&want), "no `{want}` in /metrics");
    c.step(&format!("the owner says its write buffer is {mode}"));
}

/// Until `partner` holds a complete mirror of `owner`'s write buffer.
pub fn wait_for_mirror(c: &Cluster, owner: &Cnode, partner: &Cnode) {
    let id = std::fs::read_to_string(owner.data_dir.join("cnode-id")).unwrap();
    let dir = partner.data_dir.join("mirror").join(id.trim());
    poll_until(
        Duration::from_secs(30),
        "the partner to hold a complete mirror",
        || {
            std::fs::read_dir(&dir)
                .ok()?
                .flatten()
                .any(|g| g.path().join("complete").exists())
                .then_some(())
        },
    );
    c.step(&format!("{} holds {}'s mirror", partner.name, owner.name));
}

/// A c.node's id (its data dir's `cnode-id`).
pub fn cnode_id(cnode: &Cnode) -> String {
    std::fs::read_to_string(cnode.data_dir.join("cnode-id"))
        .unwrap()
        .trim()
        .to_string()
}

/// `weft cnode list` says `owner` owns the cluster (every family, its write buffer
/// mirrored) and `standby` holds its mirror in sync; `weft volume info vol0` names the owner.
pub fn check_cnode_list(c: &Cluster, owner: &str, standby: &str) {
    let listed = poll_until(
        Duration::from_secs(30),
        "weft cnode list to show the owner and its standby",
        || {
            let v = c.cli_json(&["cnode", "list", "--json"]);
            let rows = v.as_array()?.clone();
            let o = rows.iter().find(|r| r["id"] == owner)?;
            let s = rows.iter().find(|r| r["id"] == standby)?;
            (o["owner"] == true
                && o["role"] == "owner"
                && o["write_buffer"] == "mirrored"
                && s["owner"] == false
                && s["role"] == "standby"
                && s["mirror_of"] == format!("{owner} (in sync)"))
            .then_some(rows)
        },
    );
    let families = listed
        .iter()
        .find(|r| r["id"] == owner)
        .and_then(|r| r["families"].as_u64())
        .unwrap_or(0);
    assert!(families > 0, "the owner owns no family: {listed:?}");
    let text = c.cli_ok(&["cnode", "list"]);
    assert!(
        text.contains(&format!("holds the mirror of {owner} (in sync)")),
        "{text}"
    );
    let info = c.cli_json(&["volume", "info", "vol0", "--json"]);
    assert_eq!(info["served_by"]["owner"], owner, "{info}");
    assert_eq!(info["served_by"]["write_buffer"], "mirrored", "{info}");
    c.step(&format!(
        "weft cnode list: {owner} owns {families} families, {standby} holds its mirror in sync"
    ));
}
