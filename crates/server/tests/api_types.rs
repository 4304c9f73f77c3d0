//! The typed API bodies serialise to the JSON the handlers built by hand before them, and
//! parse back into the same values (what the CLI and the tests do with them).

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;
use weft_engine::{HostInfo, LunInfo};
use weft_server::api::types::{
    ClusterStatus, Host, LocalNode, MappedLun, PoolCreated, RepairScan, ScanState, ScrubReport,
    SingleProcessStatus, Synced,
};
use weft_server::cluster::NodeState;

fn round_trip<T: Serialize + DeserializeOwned + std::fmt::Debug>(value: &T) -> serde_json::Value {
    let json = serde_json::to_value(value).expect("serialises");
    let back: T = serde_json::from_value(json.clone()).expect("parses back");
    assert_eq!(serde_json::to_value(&back).expect("serialises"), json);
    json
}

fn host_info() -> HostInfo {
    HostInfo {
        name: "db1".into(),
        iqns: vec!["iqn.1994-05.com.redhat:db1".into()],
        nbd_addresses: vec![],
        tls_names: vec![],
        chap_user: Some("db1".into()),
        mutual_chap_user: None,
        luns: vec![LunInfo {
            lun: 3,
            export: "pgdata".into(),
            read_only: false,
        }],
        created_unix_s: 7,
    }
}

#[test]
fn a_host_with_a_portal() {
    let host = Host::new(host_info(), "iqn.t:array", Some("127.0.0.1:3260"));
    assert_eq!(
        round_trip(&host),
        json!({
            "name": "db1", "iqns": ["iqn.1994-05.com.redhat:db1"], "nbd_addresses": [],
            "tls_names": [], "chap_user": "db1", "mutual_chap_user": null,
            "luns": [{"lun": 3, "export": "pgdata", "read_only": false,
                      "iscsi_uri": "iscsi://127.0.0.1:3260/iqn.t:array/3"}],
            "created_unix_s": 7, "iscsi_target": "iqn.t:array", "iscsi_portal": "127.0.0.1:3260",
        })
    );
}

#[test]
fn a_host_without_iscsi_has_no_lun_uris_and_a_null_portal() {
    let host = Host::new(host_info(), "iqn.t:array", None);
    let json = round_trip(&host);
    assert_eq!(
        json["luns"],
        json!([{"lun": 3, "export": "pgdata", "read_only": false}])
    );
    assert_eq!(json["iscsi_portal"], serde_json::Value::Null);
}

#[test]
fn a_mapped_lun_names_its_host() {
    let host = Host::new(host_info(), "iqn.t:array", Some("p:1"));
    let mapped = MappedLun {
        lun: host.luns[0].clone(),
        host: "db1".into(),
    };
    assert_eq!(
        round_trip(&mapped),
        json!({"lun": 3, "export": "pgdata", "read_only": false,
               "iscsi_uri": "iscsi://p:1/iqn.t:array/3", "host": "db1"})
    );
}

#[test]
fn single_process_cluster_status() {
    let status = ClusterStatus::SingleProcess(SingleProcessStatus {
        nodes: vec![LocalNode {
            id: "local".into(),
            state: NodeState::Up,
            capacity_bytes: None,
            used_bytes: 4096,
        }],
        pools: vec![],
        repair: Default::default(),
        degraded_reads: 0,
    });
    let json = round_trip(&status);
    assert_eq!(json["mode"], "single-process");
    assert_eq!(
        json["nodes"],
        json!([{"id": "local", "state": "up", "capacity_bytes": null, "used_bytes": 4096}])
    );
    assert_eq!(json["pools"], json!([]));
    assert_eq!(json["degraded_reads"], 0);
    assert!(json["repair"]["caught_up"].is_boolean());
    assert!(json.get("healthy").is_none());
}

#[test]
fn small_answers() {
    assert_eq!(
        round_trip(&Synced { synced: true }),
        json!({"synced": true})
    );
    assert_eq!(
        round_trip(&RepairScan {
            scan: ScanState::Started
        }),
        json!({"scan": "started"})
    );
    assert_eq!(
        round_trip(&ScrubReport {
            checked: 2,
            corrupt: vec![],
            failed_stores: vec!["d2".into()]
        }),
        json!({"checked": 2, "corrupt": [], "failed_stores": ["d2"]})
    );
    assert_eq!(
        round_trip(&PoolCreated {
            name: "fast".into(),
            redundancy: "4+2".into(),
            pg_count: 64,
            tier: None,
        }),
        json!({"name": "fast", "redundancy": "4+2", "pg_count": 64})
    );
}
