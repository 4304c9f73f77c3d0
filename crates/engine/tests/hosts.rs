//! Hosts and LUN mappings in the cluster state: validation, LUN numbering, the refusals that
//! keep a host's LUNs from vanishing under it, and persistence across a restart. Secrets
//! never appear in what the engine shows or logs.

use weft_engine::hosts::SECRET_MIN_BYTES;
use weft_engine::{Engine, EngineConfig, EngineError, HostSpec};

fn open(dir: &std::path::Path) -> Engine {
    Engine::open(EngineConfig::for_tests(dir)).expect("engine opens")
}

fn db1() -> HostSpec {
    HostSpec {
        name: "db1".into(),
        iqns: vec!["iqn.1994-05.com.RedHat:db1".into()],
        chap_user: Some("db1".into()),
        chap_secret: Some("initiator-secret-1".into()),
        mutual_secret: Some("target-secret-22".into()),
        ..HostSpec::default()
    }
}

#[test]
fn hosts_map_luns_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    e.create_volume("pgdata", 1 << 30).unwrap();
    e.create_volume("pgwal", 1 << 30).unwrap();
    let info = e.create_host(&db1()).unwrap();
    assert_eq!(info.iqns, ["iqn.1994-05.com.redhat:db1"]);
    assert_eq!(info.chap_user.as_deref(), Some("db1"));
    assert_eq!(info.mutual_chap_user.as_deref(), Some("db1"));
    let g0 = e.hosts_generation();

    assert_eq!(e.map_export("db1", "pgdata", None).unwrap().lun, 0);
    assert_eq!(e.map_export("db1", "pgwal", Some(5)).unwrap().lun, 5);
    assert!(e.hosts_generation() > g0);
    e.create_snapshot("pgdata", "monday").unwrap();
    // A snapshot is mapped under its full name, whichever name found it.
    let snap = e.map_export("db1", "monday", None).unwrap();
    assert_eq!((snap.lun, snap.read_only), (1, true));
    assert_eq!(snap.export, "pgdata@monday");
    assert!(matches!(
        e.map_export("db1", "pgdata@monday", None),
        Err(EngineError::InUse { .. })
    ));
    // A short name two snapshots have maps neither.
    e.create_snapshot("pgwal", "pgwal@monday").unwrap();
    let err = e.map_export("db1", "monday", None).unwrap_err();
    assert!(
        matches!(err, EngineError::AmbiguousSnapshot { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("pgdata@monday, pgwal@monday"),
        "{err}"
    );
    e.delete_snapshot("pgwal@monday", false).unwrap();

    // Refusals: a taken LUN, a second mapping, an unknown export, an unknown host.
    assert!(matches!(
        e.map_export("db1", "pgdata", Some(9)),
        Err(EngineError::InUse { .. })
    ));
    e.create_volume("scratch", 1 << 30).unwrap();
    assert!(matches!(
        e.map_export("db1", "scratch", Some(5)),
        Err(EngineError::InUse { .. })
    ));
    assert!(matches!(
        e.map_export("db1", "scratch", Some(0x4000)),
        Err(EngineError::InvalidHost { .. })
    ));
    assert!(matches!(
        e.map_export("db1", "nothing", None),
        Err(EngineError::UnknownVolume { .. })
    ));
    assert!(matches!(
        e.map_export("db9", "scratch", None),
        Err(EngineError::UnknownHost { .. })
    ));

    // A mapped export is not deleted, nor a host with LUNs.
    let err = e.delete_volume("pgwal", false).unwrap_err();
    assert!(matches!(err, EngineError::Mapped { .. }), "{err}");
    assert!(err.to_string().contains("db1 (LUN 5)"), "{err}");
    assert!(matches!(
        e.delete_snapshot("monday", false),
        Err(EngineError::Mapped { .. })
    ));
    assert!(matches!(
        e.delete_snapshot("pgdata@monday", false),
        Err(EngineError::Mapped { .. })
    ));
    assert!(matches!(
        e.delete_volume("pgdata", true),
        Err(EngineError::Mapped { .. })
    ));
    assert!(matches!(
        e.delete_host("db1"),
        Err(EngineError::InUse { .. })
    ));

    drop(e);
    let e = open(dir.path());
    let info = e.host_info("db1").unwrap();
    let luns: Vec<(u64, &str)> = info
        .luns
        .iter()
        .map(|l| (l.lun, l.export.as_str()))
        .collect();
    assert_eq!(luns, [(0, "pgdata"), (1, "pgdata@monday"), (5, "pgwal")]);
    let records = e.host_records();
    let chap = records[0].chap.as_ref().unwrap();
    assert_eq!(chap.secret.expose(), "initiator-secret-1");
    assert!(!format!("{records:?}").contains("initiator-secret-1"));
    assert!(!serde_json::to_string(&info).unwrap().contains("secret-"));

    // Unmapped (a snapshot by its short name too), everything goes.
    for export in ["pgdata", "pgwal", "monday"] {
        e.unmap_export("db1", export).unwrap();
    }
    assert!(matches!(
        e.unmap_export("db1", "pgdata"),
        Err(EngineError::NotMapped { .. })
    ));
    e.delete_snapshot("monday", false).unwrap();
    e.delete_volume("pgwal", false).unwrap();
    e.delete_host("db1").unwrap();
    assert!(e.list_hosts().is_empty());
}

#[test]
fn host_definitions_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    e.create_host(&db1()).unwrap();
    let bad = |spec: HostSpec| {
        let err = e.create_host(&spec).unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::InvalidHost { .. }
                    | EngineError::HostExists { .. }
                    | EngineError::InUse { .. }
            ),
            "{spec:?}: {err}"
        );
        err.to_string()
    };
    bad(db1());
    let other = |f: &dyn Fn(&mut HostSpec)| {
        let mut s = HostSpec {
            name: "db2".into(),
            iqns: vec!["iqn.2020-01.org.example:db2".into()],
            ..HostSpec::default()
        };
        f(&mut s);
        s
    };
    // The same initiator name as db1 (case differs).
    bad(other(&|s| {
        s.iqns = vec!["IQN.1994-05.com.redhat:DB1".into()]
    }));
    bad(other(&|s| s.iqns = vec!["db2".into()]));
    bad(other(&|s| s.iqns.clear()));
    bad(other(&|s| s.name = "-db2".into()));
    bad(other(&|s| s.nbd_addresses = vec!["10.0.0.0/40".into()]));
    bad(other(&|s| s.chap_user = Some("u".into())));
    let short = bad(other(&|s| {
        s.chap_user = Some("u".into());
        s.chap_secret = Some("short".into());
    }));
    assert!(short.contains(&SECRET_MIN_BYTES.to_string()) && !short.contains("short\""));
    bad(other(&|s| {
        s.chap_user = Some("u".into());
        s.chap_secret = Some("same-secret-xx".into());
        s.mutual_secret = Some("same-secret-xx".into());
    }));
    bad(other(&|s| {
        s.mutual_secret = Some("target-secret-22".into())
    }));
    // An NBD-only host needs no initiator name.
    let nbd = e
        .create_host(&HostSpec {
            name: "app1".into(),
            nbd_addresses: vec!["10.1.0.0/16".into(), "10.9.9.9".into()],
            ..HostSpec::default()
        })
        .unwrap();
    assert_eq!(nbd.nbd_addresses, ["10.1.0.0/16", "10.9.9.9/32"]);
    assert_eq!(e.list_hosts().len(), 2);
}
