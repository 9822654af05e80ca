//! Service core tests: session lifecycle and read-back.

use super::session::SessionState;
use super::test_env::*;
use super::*;
use crate::pb::protos::mod_TracePacket::OneOfdata;
use crate::pb::protos::{DataSourceConfig, TraceStats};
use crate::protozero::decode::{decode_message, FieldIter};
use crate::protozero::{put_bytes, put_str, put_varint, VecStream};

fn setup_ds_instance(outs: &[Output], producer: ProducerId) -> (u64, Vec<u8>) {
    cmds_for(outs, producer)
        .into_iter()
        .find_map(|c| match c {
            ProducerCommand::SetupDataSource {
                instance_id,
                config,
            } => Some((instance_id, config)),
            _ => None,
        })
        .expect("SetupDataSource sent")
}

#[test]
fn full_session_roundtrip() {
    let mut h = H::new();
    let p = h.producer("prod", 1000, &["ds"]);
    let c = h.svc.connect_consumer(1000);
    let sid = h.enable(c, &basic_config("ds", 64)).unwrap();
    let outs = h.outputs();
    let cmds = cmds_for(&outs, p);
    assert!(matches!(
        cmds[0],
        ProducerCommand::SetupTracing {
            page_size_kb: 4,
            service_created_smb: true
        }
    ));
    assert!(matches!(cmds[1], ProducerCommand::SetupDataSource { .. }));
    assert!(matches!(cmds[2], ProducerCommand::StartDataSource { .. }));
    let (_, cfg) = setup_ds_instance(&outs, p);
    let cfg: DataSourceConfig = decode_message(&cfg).unwrap();
    let global = cfg.target_buffer.unwrap();
    assert_ne!(global, 0);
    assert_eq!(cfg.tracing_session_id, Some(sid));
    assert_eq!(h.log.borrow().smb_requests, vec![(p, 256 * 1024, 4096)]);

    h.commit_packets(p, 1, global, &[test_packet(11, 0), test_packet(12, 30)]);
    h.commit_packets(p, 2, global, &[test_packet(21, 0)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    let outs = h.outputs();
    assert!(cmds_for(&outs, p)
        .iter()
        .any(|c| matches!(c, ProducerCommand::StopDataSource { .. })));
    assert!(outs.contains(&Output::TracingDisabled {
        consumer: c,
        error: None
    }));
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));

    let packets = h.read(c);
    let decoded: Vec<_> = packets.iter().map(|p| decode_packet(p)).collect();
    // Order: clock snapshot, sync marker, trace_config, uuid, system_info,
    // service events, buffer contents, read-completed event, stats.
    // (The snapshot taken at disable follows the initial one.)
    assert!(matches!(decoded[0].data, OneOfdata::clock_snapshot(_)));
    assert!(matches!(decoded[1].data, OneOfdata::clock_snapshot(_)));
    let decoded = &decoded[1..];
    assert!(matches!(
        decoded[1].data,
        OneOfdata::synchronization_marker(_)
    ));
    assert!(matches!(decoded[2].data, OneOfdata::trace_config(_)));
    assert!(matches!(decoded[3].data, OneOfdata::trace_uuid(_)));
    // extension_descriptor (72), which our pb does not declare.
    assert!(crate::protozero::decode::FieldIter::new(&packets[5]).any(|f| f.number == 72));
    assert!(matches!(decoded[5].data, OneOfdata::system_info(_)));
    assert!(matches!(
        decoded.last().unwrap().data,
        OneOfdata::trace_stats(_)
    ));
    for d in &decoded[..6] {
        assert_eq!(trusted_uid(d), Some(SERVICE_UID as i32));
        assert_eq!(seq_id(d), Some(1));
    }
    if let OneOfdata::clock_snapshot(cs) = &decoded[0].data {
        assert_eq!(cs.clocks[0].clock_id, Some(CLOCK_BOOTTIME));
    }
    let events: Vec<_> = decoded
        .iter()
        .filter_map(|d| match &d.data {
            OneOfdata::service_event(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    assert!(events.len() >= 4, "{events:?}");
    let prod: Vec<_> = decoded
        .iter()
        .filter(|d| seq_id(d).unwrap_or(0) >= 2)
        .collect();
    assert_eq!(
        prod.iter()
            .map(|d| d.timestamp.unwrap())
            .collect::<Vec<_>>(),
        vec![11, 12, 21]
    );
    for d in &prod {
        assert_eq!(trusted_uid(d), Some(1000));
        assert_eq!(d.trusted_pid, Some(1001));
    }
    assert_eq!(seq_id(prod[0]), Some(2));
    assert_eq!(seq_id(prod[2]), Some(3));
    // Producer packet bytes are passed through, trailer appended.
    let raw = packets
        .iter()
        .find(|p| decode_packet(p).timestamp == Some(12))
        .unwrap();
    assert!(raw.starts_with(&test_packet(12, 30)));
    // The last packet is trace_stats with one BufferStats.
    if let OneOfdata::trace_stats(st) = &decoded.last().unwrap().data {
        let st: &TraceStats = st;
        assert_eq!(st.buffer_stats.len(), 1);
        assert_eq!(st.buffer_stats[0].chunks_written, Some(2));
    }
    // A second read returns no buffer data and no initial packets again.
    let again = h.read(c);
    assert!(producer_markers(&again).is_empty());
    assert!(again
        .iter()
        .all(|p| !matches!(decode_packet(p).data, OneOfdata::trace_config(_))));
    h.svc.free_buffers(h.now, c).unwrap();
    assert!(h.svc.session_ids().is_empty());
}

#[test]
fn data_source_config_bytes_pass_through() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut dsc = VecStream::new();
    put_str(&mut dsc, 1, "ds");
    put_varint(&mut dsc, 4, 12345); // forged session id
    put_bytes(&mut dsc, 100, &[0x0a, 0x01, b'x', 0xf8, 0x7f, 0x01]); // ftrace_config w/ unknown
    put_varint(&mut dsc, 7777, 5); // field unknown to this build
    let mut ds = VecStream::new();
    put_bytes(&mut ds, 1, dsc.as_bytes());
    let mut tc = VecStream::new();
    put_bytes(&mut tc, 1, &[0x08, 0x40]); // buffers { size_kb: 64 }
    put_bytes(&mut tc, 2, ds.as_bytes());
    put_varint(&mut tc, 3, 0);
    let sid = h
        .svc
        .enable_tracing(h.now, c, tc.as_bytes(), false)
        .unwrap();
    let (_, cfg) = setup_ds_instance(&h.outputs(), p);
    let fields: Vec<_> = FieldIter::new(&cfg)
        .map(|f| (f.number, f.value.to_vec()))
        .collect();
    assert_eq!(fields[0], (1, b"ds".to_vec()));
    assert_eq!(fields[1], (100, vec![0x0a, 0x01, b'x', 0xf8, 0x7f, 0x01]));
    assert_eq!(fields[2].0, 7777);
    let sess: Vec<_> = fields.iter().filter(|f| f.0 == 4).collect();
    assert_eq!(sess.len(), 1);
    let decoded: DataSourceConfig = decode_message(&cfg).unwrap();
    assert_eq!(decoded.tracing_session_id, Some(sid));
    assert_eq!(decoded.stop_timeout_ms, Some(5000));
}

#[test]
fn producer_name_filters_and_multiple_producers() {
    use crate::pb::protos::mod_TraceConfig::DataSource;
    let mut h = H::new();
    let a = h.producer("com.a.app", 0, &["track_event"]);
    let b = h.producer("com.b.app", 0, &["track_event"]);
    let x = h.producer("other", 0, &["track_event"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("track_event", 64);
    cfg.data_sources[0].producer_name_filter = vec!["com.a.app".into()];
    cfg.data_sources[0].producer_name_regex_filter = vec!["com\\.b\\..*".into()];
    // A second entry for the same data source without filters would match
    // everyone; check filters apply per entry.
    cfg.data_sources.push(DataSource {
        config: Some(DataSourceConfig {
            name: Some("missing".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    h.enable(c, &cfg).unwrap();
    let outs = h.outputs();
    assert!(!cmds_for(&outs, a).is_empty());
    assert!(!cmds_for(&outs, b).is_empty());
    assert!(cmds_for(&outs, x).is_empty());

    let c2 = h.svc.connect_consumer(0);
    h.enable(c2, &basic_config("track_event", 64)).unwrap();
    let outs = h.outputs();
    for p in [a, b, x] {
        assert!(cmds_for(&outs, p)
            .iter()
            .any(|c| matches!(c, ProducerCommand::StartDataSource { .. })));
    }
}

#[test]
fn smb_size_priority() {
    use crate::pb::protos::mod_TraceConfig::ProducerConfig;
    let mut h = H::new();
    let info = |name: &str| ProducerInfo {
        name: name.into(),
        shm_size_hint_bytes: 2 * 1024 * 1024,
        page_size_hint_bytes: 32 * 1024,
        ..Default::default()
    };
    let p1 = h.svc.connect_producer(info("hinted"), None).unwrap();
    let p2 = h.svc.connect_producer(info("overridden"), None).unwrap();
    let p3 = h
        .svc
        .connect_producer(
            ProducerInfo {
                name: "bad".into(),
                page_size_hint_bytes: 3000,
                ..Default::default()
            },
            None,
        )
        .unwrap();
    for p in [p1, p2, p3] {
        let d = crate::pb::protos::DataSourceDescriptor {
            name: Some("ds".into()),
            ..Default::default()
        };
        h.svc.register_data_source(h.now, p, d).unwrap();
    }
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.producers = vec![ProducerConfig {
        producer_name: Some("overridden".into()),
        shm_size_kb: Some(512),
        page_size_kb: Some(8),
    }];
    h.enable(c, &cfg).unwrap();
    let mut reqs = h.log.borrow().smb_requests.clone();
    reqs.sort();
    assert_eq!(
        reqs,
        vec![
            (p1, 2 << 20, 32 << 10),
            (p2, 512 << 10, 8 << 10),
            (p3, 256 << 10, 4 << 10)
        ]
    );
    // The SMB is created once per producer, not per session.
    let c2 = h.svc.connect_consumer(0);
    h.enable(c2, &cfg).unwrap();
    assert_eq!(h.log.borrow().smb_requests.len(), 3);
}

#[test]
fn data_source_registered_after_start_joins_session() {
    let mut h = H::new();
    let c = h.svc.connect_consumer(0);
    h.enable(c, &basic_config("late", 64)).unwrap();
    h.outputs();
    let p = h.producer("late_prod", 0, &["late"]);
    let cmds = cmds_for(&h.outputs(), p);
    assert!(matches!(cmds[0], ProducerCommand::SetupTracing { .. }));
    assert!(matches!(cmds[1], ProducerCommand::SetupDataSource { .. }));
    assert!(matches!(cmds[2], ProducerCommand::StartDataSource { .. }));
}

#[test]
fn deferred_start_waits_for_start_tracing() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.deferred_start = Some(true);
    let sid = h.enable(c, &cfg).unwrap();
    let cmds = cmds_for(&h.outputs(), p);
    assert!(cmds
        .iter()
        .all(|c| !matches!(c, ProducerCommand::StartDataSource { .. })));
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Configured));
    h.svc.start_tracing(h.now, c).unwrap();
    let cmds = cmds_for(&h.outputs(), p);
    assert!(matches!(cmds[0], ProducerCommand::StartDataSource { .. }));
    assert!(h.svc.start_tracing(h.now, c).is_err());
}

#[test]
fn enable_errors_are_reported() {
    let mut h = H::new();
    let c = h.svc.connect_consumer(0);
    assert!(h
        .svc
        .enable_tracing(h.now, c, &[0xff, 0xff], false)
        .unwrap_err()
        .contains("decode"));
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    assert!(h.enable(c, &cfg).unwrap_err().contains("no output file"));
    h.enable(c, &basic_config("ds", 64)).unwrap();
    assert!(h
        .enable(c, &basic_config("ds", 64))
        .unwrap_err()
        .contains("already active"));
}

#[test]
fn unique_session_name_and_limits() {
    let mut h = H::new();
    let mut cfg = basic_config("ds", 4);
    cfg.unique_session_name = Some("n".into());
    let c1 = h.svc.connect_consumer(5);
    h.enable(c1, &cfg).unwrap();
    let c2 = h.svc.connect_consumer(5);
    assert!(h
        .enable(c2, &cfg)
        .unwrap_err()
        .contains("unique session name"));
    let cfg = basic_config("ds", 4);
    for _ in 0..4 {
        let c = h.svc.connect_consumer(5);
        h.enable(c, &cfg).unwrap();
    }
    let c = h.svc.connect_consumer(5);
    assert!(h.enable(c, &cfg).unwrap_err().contains("for uid 5"));
    for uid in 100..110 {
        let c = h.svc.connect_consumer(uid);
        h.enable(c, &cfg).unwrap();
    }
    let c = h.svc.connect_consumer(200);
    assert!(h
        .enable(c, &cfg)
        .unwrap_err()
        .contains("Too many concurrent"));
}

#[test]
fn consumer_disconnect_frees_unless_detached() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(7);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    h.svc.disconnect_consumer(h.now, c);
    assert!(h.svc.session_ids().is_empty());
    assert!(cmds_for(&h.outputs(), p)
        .iter()
        .any(|c| matches!(c, ProducerCommand::StopDataSource { .. })));

    let c = h.svc.connect_consumer(7);
    let sid = h.enable(c, &basic_config("ds", 64)).unwrap();
    let (_, cfg) = setup_ds_instance(&h.outputs(), p);
    let global = decode_message::<DataSourceConfig>(&cfg)
        .unwrap()
        .target_buffer
        .unwrap();
    h.commit_packets(p, 1, global, &[test_packet(5, 0)]);
    h.svc.detach(c, "key").unwrap();
    h.svc.disconnect_consumer(h.now, c);
    assert_eq!(h.svc.session_ids(), vec![sid]);
    let other_uid = h.svc.connect_consumer(8);
    assert!(h.svc.attach(other_uid, "key").is_err());
    let c2 = h.svc.connect_consumer(7);
    let raw = h.svc.attach(c2, "key").unwrap();
    assert_eq!(raw, encode(&basic_config("ds", 64)));
    h.svc.disable_tracing(h.now, c2).unwrap();
    assert_eq!(producer_markers(&h.read(c2)), vec![5]);
}

#[test]
fn producer_disconnect_keeps_committed_data() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    let (_, cfg) = setup_ds_instance(&h.outputs(), p);
    let global = decode_message::<DataSourceConfig>(&cfg)
        .unwrap()
        .target_buffer
        .unwrap();
    h.commit_packets(p, 1, global, &[test_packet(1, 0), test_packet(2, 0)]);
    h.svc.disconnect_producer(h.now, p);
    assert_eq!(h.svc.num_producers(), 0);
    h.svc.disable_tracing(h.now, c).unwrap();
    assert_eq!(producer_markers(&h.read(c)), vec![1, 2]);
}

#[test]
fn smb_scraping_copies_uncommitted_chunks_at_stop() {
    use crate::tracing::core::smb_abi::{ChunkHeader, PageLayout};
    for scraping in [true, false] {
        let mut h = H::new();
        let info = ProducerInfo {
            name: "sdk".into(),
            smb_scraping_enabled: scraping,
            ..Default::default()
        };
        let p = h.svc.connect_producer(info, None).unwrap();
        let d = crate::pb::protos::DataSourceDescriptor {
            name: Some("ds".into()),
            ..Default::default()
        };
        h.svc.register_data_source(h.now, p, d).unwrap();
        let c = h.svc.connect_consumer(0);
        h.enable(c, &basic_config("ds", 64)).unwrap();
        let (_, cfg) = setup_ds_instance(&h.outputs(), p);
        let global = decode_message::<DataSourceConfig>(&cfg)
            .unwrap()
            .target_buffer
            .unwrap();
        h.svc.register_trace_writer(p, 1, global);
        // A complete chunk never committed.
        let frags = [fragment(&test_packet(1, 0)), fragment(&test_packet(2, 0))].concat();
        h.write_chunk(p, 1, global, &frags, 2, 0);
        // A chunk still being written: 2 packets counted, the last one in
        // progress.
        let smb = h.svc.producer_smb(p).unwrap().clone();
        assert!(smb.try_partition_page(1, PageLayout::Div1));
        let hdr = ChunkHeader {
            chunk_id: 1,
            writer_id: 1,
            packet_count: 2,
            flags: 0,
        };
        let chunk = smb.try_acquire_chunk_for_writing(1, 0, &hdr).unwrap();
        let frags = [fragment(&test_packet(3, 0)), vec![0x05, 0x40]].concat();
        smb.mem().write(chunk.payload_offset(), &frags);
        h.svc.disable_tracing(h.now, c).unwrap();
        let markers = producer_markers(&h.read(c));
        if scraping {
            assert_eq!(markers, vec![1, 2, 3]);
        } else {
            assert!(markers.is_empty());
        }
    }
}

#[test]
fn change_trace_config_only_changes_producer_filters() {
    let mut h = H::new();
    let a = h.producer("a", 0, &["ds"]);
    let b = h.producer("b", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.data_sources[0].producer_name_filter = vec!["a".into()];
    h.enable(c, &cfg).unwrap();
    let outs = h.outputs();
    assert!(!cmds_for(&outs, a).is_empty() && cmds_for(&outs, b).is_empty());
    let mut bad = cfg.clone();
    bad.duration_ms = Some(5);
    assert!(h.svc.change_trace_config(h.now, c, &encode(&bad)).is_err());
    cfg.data_sources[0].producer_name_filter.push("b".into());
    h.svc.change_trace_config(h.now, c, &encode(&cfg)).unwrap();
    let outs = h.outputs();
    assert!(cmds_for(&outs, a).is_empty());
    assert!(cmds_for(&outs, b)
        .iter()
        .any(|c| matches!(c, ProducerCommand::StartDataSource { .. })));
}

#[test]
fn lockdown_mode_refuses_other_uids() {
    use crate::pb::protos::mod_TraceConfig::LockdownModeOperation;
    let mut h = H::new();
    let other = h.producer("other", 1234, &["ds"]);
    let own = h.producer("own", SERVICE_UID, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.lockdown_mode = Some(LockdownModeOperation::LOCKDOWN_SET);
    h.enable(c, &cfg).unwrap();
    let outs = h.outputs();
    assert!(cmds_for(&outs, other).is_empty());
    assert!(!cmds_for(&outs, own).is_empty());
    let info = ProducerInfo {
        uid: 1234,
        name: "late".into(),
        ..Default::default()
    };
    assert!(h
        .svc
        .connect_producer(info.clone(), None)
        .unwrap_err()
        .contains("lockdown"));
    let c2 = h.svc.connect_consumer(0);
    cfg.lockdown_mode = Some(LockdownModeOperation::LOCKDOWN_CLEAR);
    h.enable(c2, &cfg).unwrap();
    assert!(h.svc.connect_producer(info, None).is_ok());
}

/// `target_buffer_name` picks the buffer of that `name`, as upstream: the
/// producer is told the same global buffer as for its index.
#[test]
fn a_data_source_targets_a_buffer_by_name() {
    use crate::pb::protos::mod_TraceConfig::{BufferConfig, DataSource};
    let mut h = H::new();
    let p = h.producer("prod", 0, &["by_index", "by_name", "default"]);
    let c = h.svc.connect_consumer(0);
    let ds = |name: &str, index: Option<u32>, by_name: Option<&str>| DataSource {
        config: Some(DataSourceConfig {
            name: Some(name.into()),
            target_buffer: index,
            target_buffer_name: by_name.map(Into::into),
            ..Default::default()
        }),
        ..Default::default()
    };
    let buffer = |name: &str| BufferConfig {
        size_kb: Some(64),
        name: Some(name.into()),
        ..Default::default()
    };
    let cfg = crate::pb::protos::TraceConfig {
        buffers: vec![buffer("small"), buffer("big")],
        data_sources: vec![
            ds("by_index", Some(1), None),
            ds("by_name", None, Some("big")),
            ds("default", None, None),
        ],
        ..Default::default()
    };
    h.enable(c, &cfg).unwrap();
    let globals: Vec<(String, u32)> = cmds_for(&h.outputs(), p)
        .into_iter()
        .filter_map(|c| match c {
            ProducerCommand::SetupDataSource { config, .. } => {
                let d: DataSourceConfig = decode_message(&config).unwrap();
                Some((d.name.unwrap(), d.target_buffer.unwrap()))
            }
            _ => None,
        })
        .collect();
    let of = |n: &str| globals.iter().find(|g| g.0 == n).unwrap().1;
    assert_eq!(globals.len(), 3, "{globals:?}");
    assert_eq!(of("by_name"), of("by_index"));
    assert_ne!(of("by_name"), of("default"));
}
