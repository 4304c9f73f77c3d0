//! Tests of the reservation records: round trips, power-on, news across c.nodes, renames.

use super::*;

fn record(aptpl: bool) -> ReservationRecord {
    ReservationRecord {
        generation: 2,
        registrations: vec![RegistrationRecord {
            nexus: Nexus::iscsi("iqn.2026-01.test:a", [0x80, 0, 0, 0, 0, 1], 1),
            key: 0xabcd_0000_0000_0001,
            all_target_ports: true,
        }],
        reservation: Some(ReservationHolder {
            holder: Nexus::iscsi("iqn.2026-01.test:a", [0x80, 0, 0, 0, 0, 1], 1),
            type_code: 3,
        }),
        aptpl,
        reserved_by: None,
        news: RecordNews::default(),
    }
}

/// A record with a RESERVE(6) holder and nobody registered.
fn reserved6(aptpl: bool) -> ReservationRecord {
    ReservationRecord {
        reserved_by: Some(Nexus::new("iqn.2026-01.test:b,i,0x800000000001", 257)),
        registrations: Vec::new(),
        reservation: None,
        ..record(aptpl)
    }
}

fn format_of(bytes: &[u8]) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(bytes).expect("JSON");
    v["format"].as_u64().expect("a format")
}

#[test]
fn records_without_reserve6_or_news_keep_the_first_format() {
    let plain = encode(&record(true), Some("c1"));
    assert_eq!(
        format_of(&plain),
        1,
        "builds from before RESERVE(6) was shared read it"
    );
    assert_eq!(decode(&plain), Ok((record(true), None)));
    let with_reserve6 = encode(&reserved6(false), None);
    assert_eq!(format_of(&with_reserve6), 2);
    assert_eq!(decode(&with_reserve6), Ok((reserved6(false), None)));
    let news = RecordNews {
        reset: true,
        attentions: vec![(
            Nexus::new("iqn.2026-01.test:a,i,0x800000000001", 1),
            (0x2a, 0x05),
        )],
    };
    let told = ReservationRecord {
        news: news.clone(),
        ..record(false)
    };
    let stored = encode(&told, Some("c1"));
    assert_eq!(format_of(&stored), 2);
    assert_eq!(decode(&stored), Ok((told.clone(), Some("c1".to_string()))));
    // Without an origin (a server alone) the news are not stored at all.
    assert_eq!(decode(&encode(&told, None)), Ok((record(false), None)));
}

#[test]
fn news_are_heard_from_other_cnodes_only_and_not_moved_by_a_rename() {
    let kv: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory());
    let peers = |me: &str| Peers {
        me: me.to_string(),
        others: Arc::new(Vec::new),
        wait: Duration::from_millis(10),
    };
    let c1 = ReservationRecords::new(Arc::clone(&kv)).with_peers(peers("c1"));
    let c2 = ReservationRecords::new(Arc::clone(&kv)).with_peers(peers("c2"));
    let told = ReservationRecord {
        news: RecordNews {
            reset: true,
            attentions: Vec::new(),
        },
        ..reserved6(false)
    };
    c1.for_export("vol").store(&told, 0).expect("store");
    let value = kv.get(&key_of("vol")).expect("get").expect("stored").value;
    assert_eq!(c1.news_from_elsewhere(&value), None, "c1 stored them");
    assert_eq!(c2.news_from_elsewhere(&value), Some(told.news.clone()));
    c1.rename("vol", "renamed").expect("rename");
    let moved = kv
        .get(&key_of("renamed"))
        .expect("get")
        .expect("moved")
        .value;
    assert_eq!(
        c2.news_from_elsewhere(&moved),
        None,
        "heard once, not again"
    );
    assert_eq!(
        c2.for_export("renamed").load().expect("load").0.reserved_by,
        reserved6(false).reserved_by,
        "the RESERVE(6) holder moves with the record"
    );
}

#[test]
fn power_on_releases_reserve6_even_in_an_aptpl_record() {
    let records = ReservationRecords::in_memory();
    records
        .for_export("held")
        .store(&reserved6(true), 0)
        .expect("store");
    records
        .for_export("plain")
        .store(&reserved6(false), 0)
        .expect("store");
    let live: BTreeSet<String> = ["held", "plain"].map(String::from).into();
    // A takeover keeps it (the holder's nexus may be on the c.node that takes over).
    assert_eq!(
        records.power_on(&live, true, &|_| false).expect("failover"),
        0
    );
    assert!(records
        .for_export("held")
        .load()
        .expect("load")
        .0
        .reserved_by
        .is_some());
    assert_eq!(
        records
            .power_on(&live, false, &|_| false)
            .expect("power on"),
        1
    );
    let (kept, version) = records.for_export("held").load().expect("load");
    assert!(version > 0 && kept.aptpl, "the APTPL record stays");
    assert_eq!(kept.reserved_by, None, "without its RESERVE(6) reservation");
    assert_eq!(records.for_export("plain").load().expect("load").1, 0);
}

#[test]
fn records_round_trip_with_compare_and_swap() {
    let records = ReservationRecords::in_memory();
    let store = records.for_export("vol");
    assert_eq!(store.load(), Ok((ReservationRecord::default(), 0)));
    let v1 = store.store(&record(true), 0).expect("first store");
    assert_eq!(store.load(), Ok((record(true), v1)));
    assert_eq!(store.store(&record(false), 0), Err(StoreError::Conflict));
    let other = records.for_export("other");
    assert_eq!(other.load().expect("load").1, 0, "one record per export");
    records.remove("vol").expect("remove");
    assert_eq!(store.load(), Ok((ReservationRecord::default(), 0)));
}

#[test]
fn power_on_keeps_aptpl_records_of_live_exports_only() {
    let records = ReservationRecords::in_memory();
    for (export, aptpl) in [("kept", true), ("cleared", false), ("deleted", true)] {
        records
            .for_export(export)
            .store(&record(aptpl), 0)
            .expect("store");
    }
    let live: BTreeSet<String> = ["kept", "cleared"].map(String::from).into();
    // A c.node taking over keeps them all but the deleted export's.
    assert_eq!(
        records.power_on(&live, true, &|_| false).expect("failover"),
        1
    );
    assert!(records.for_export("cleared").load().expect("load").1 > 0);
    assert_eq!(
        records
            .power_on(&live, false, &|_| false)
            .expect("power on"),
        1
    );
    assert!(records.for_export("kept").load().expect("load").1 > 0);
    assert_eq!(records.for_export("cleared").load().expect("load").1, 0);
    assert_eq!(records.for_export("deleted").load().expect("load").1, 0);
}

#[test]
fn power_on_leaves_another_shards_records_alone() {
    let records = ReservationRecords::in_memory();
    for export in ["mine", "theirs", "theirs@snap", "gone"] {
        records
            .for_export(export)
            .store(&record(true), 0)
            .expect("store");
    }
    let live: BTreeSet<String> = ["mine"].map(String::from).into();
    let foreign = |export: &str| export.split('@').next() == Some("theirs");
    assert_eq!(
        records.power_on(&live, true, &foreign).expect("failover"),
        1,
        "only the record of the export no shard has"
    );
    for kept in ["mine", "theirs", "theirs@snap"] {
        assert!(
            records.for_export(kept).load().expect("load").1 > 0,
            "{kept}"
        );
    }
    assert_eq!(records.for_export("gone").load().expect("load").1, 0);
}

#[test]
fn a_record_of_another_format_is_corrupt() {
    let records = ReservationRecords::in_memory();
    records
        .kv
        .put(&key_of("vol"), br#"{"format":2}"#, None)
        .expect("put");
    assert!(matches!(
        records.for_export("vol").load(),
        Err(StoreError::Corrupt(_))
    ));
}

/// Two c.nodes on one etcd, each with its own connection and its own `LunState` of one
/// LU: a reservation one takes is seen and enforced by the other once the watch tells it;
/// the unit attentions of a PREEMPT and a LU reset through one are queued on the other
/// before the command returns.
#[test]
fn two_cnodes_on_one_etcd_share_a_reservation_and_a_change_waits_for_the_other() {
    use weft_scsi::{build, opcode, LunState, MemLun, Status};

    let etcd = weft_meta::testing::EtcdServer::start().expect("starting etcd");
    // Each c.node knows the other serves the LU: a change waits until the other applied it.
    let connect = |me: &str, other: &'static str| -> ReservationRecords {
        ReservationRecords::new(Arc::new(etcd.connect().expect("connect"))).with_peers(Peers {
            me: me.to_string(),
            others: Arc::new(move || vec![other.to_string()]),
            wait: Duration::from_secs(3),
        })
    };
    let (one, two) = (connect("one", "two"), connect("two", "one"));
    let state_one =
        LunState::with_reservation_store(one.for_export("vol")).with_local_ports(vec![1]);
    let state_two = Arc::new(
        LunState::with_reservation_store(two.for_export("vol")).with_local_ports(vec![257]),
    );
    let resets_two = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let lu = MemLun::with_blocks(512, 64);
    let (a, b) = (
        Nexus::iscsi("iqn.2026-01.test:a", [0x80, 0, 0, 0, 0, 1], 1),
        Nexus::iscsi("iqn.2026-01.test:b", [0x80, 0, 0, 0, 0, 1], 257),
    );
    let write = |state: &LunState, nexus: &Nexus| {
        let cdb = build::rw10(opcode::WRITE_10, 0, 1, 1);
        weft_scsi::execute(state, &lu, nexus, &cdb, &[1; 512]).status
    };
    // b has written through c.node two: its cache is loaded and fresh.
    assert_eq!(write(&state_two, &b), Status::Good);
    let shutdown = CancellationToken::new();
    let follower = {
        let (two, state_two, shutdown, resets_two) = (
            two.clone(),
            Arc::clone(&state_two),
            shutdown.clone(),
            Arc::clone(&resets_two),
        );
        std::thread::spawn(move || {
            follow(&two, &shutdown, |export, news| {
                if let Some(news) = news {
                    if news.reset {
                        resets_two.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    state_two.heard(news);
                }
                if export.is_none_or(|e| e == "vol") {
                    state_two.invalidate_reservations();
                }
            })
        })
    };
    let prout = |sa, kind, key, sark| {
        let cdb = build::persistent_reserve_out(sa, kind, 24);
        let list = build::prout_parameters(key, sark, 0x01);
        weft_scsi::execute(&state_one, &lu, &a, &cdb, &list).status
    };
    assert_eq!(prout(opcode::SA_REGISTER, 0, 0, 0xa), Status::Good);
    let started = std::time::Instant::now();
    assert_eq!(prout(opcode::SA_RESERVE, 0x3, 0xa, 0), Status::Good);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "c.node two applied it: no time-out"
    );
    assert_eq!(
        write(&state_two, &b),
        Status::ReservationConflict,
        "c.node two refuses b's very next write"
    );
    // b registers through two; a preempts it through one: b's very next command through
    // two meets REGISTRATIONS PREEMPTED, once.
    let register_b = build::persistent_reserve_out(opcode::SA_REGISTER, 0, 24);
    let list = build::prout_parameters(0, 0xb, 0x01);
    assert_eq!(
        weft_scsi::execute(&state_two, &lu, &b, &register_b, &list).status,
        Status::Good
    );
    assert_eq!(prout(opcode::SA_PREEMPT, 0x3, 0xa, 0xb), Status::Good);
    let tur = [0u8; 6];
    let attention = state_two
        .unit_attention(&b, &tur)
        .expect("a unit attention");
    assert_eq!(
        attention.sense.map(|s| (s.key, s.asc, s.ascq)),
        Some((0x06, 0x2a, 0x05))
    );
    assert!(state_two.unit_attention(&b, &tur).is_none(), "once");
    assert!(
        state_one.unit_attention(&b, &tur).is_none(),
        "b is not a nexus of c.node one"
    );
    // A LU reset through one has reached two when it returns.
    state_one.logical_unit_reset().expect("reset");
    assert_eq!(resets_two.load(std::sync::atomic::Ordering::SeqCst), 1);
    shutdown.cancel();
    follower.join().expect("follower");
    let (record, _) = two.for_export("vol").load().expect("load");
    assert!(record.aptpl && record.reservation.is_some());
}
