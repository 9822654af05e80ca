//! Service core tests: producer ACLs, hostile producers, consumer access
//! control, clone, observe events, queries.

use super::test_env::*;
use super::*;
use crate::pb::protos::mod_CommitDataRequest::mod_ChunkToPatch::Patch;
use crate::pb::protos::mod_CommitDataRequest::{ChunkToPatch, ChunksToMove};
use crate::pb::protos::mod_TracePacket::OneOfdata;
use crate::pb::protos::{CommitDataRequest, ObservableEvents, TraceStats};
use crate::protozero::decode::decode_message;

fn stats_of(h: &H, c: ConsumerId) -> TraceStats {
    decode_message(&h.svc.get_trace_stats(c).unwrap()).unwrap()
}

#[test]
fn producer_may_only_write_into_its_sessions_buffers() {
    let mut h = H::new();
    let a = h.producer("a", 0, &["ds_a"]);
    let b = h.producer("b", 0, &["ds_b"]);
    let ca = h.svc.connect_consumer(0);
    h.enable(ca, &basic_config("ds_a", 64)).unwrap();
    let buf_a = global_buffer(&h.outputs(), a);
    let cb = h.svc.connect_consumer(0);
    h.enable(cb, &basic_config("ds_b", 64)).unwrap();
    let buf_b = global_buffer(&h.outputs(), b);
    // b tries to write into a's buffer and into a buffer that does not exist.
    h.commit_packets(b, 1, buf_a, &[test_packet(66, 0)]);
    h.commit_packets(b, 1, 999, &[test_packet(67, 0)]);
    h.commit_packets(b, 1, buf_b, &[test_packet(68, 0)]);
    // A registered writer may only write into its registered buffer.
    h.svc.register_trace_writer(a, 5, buf_a + 100);
    h.commit_packets(a, 5, buf_a, &[test_packet(69, 0)]);
    h.commit_packets(a, 1, buf_a, &[test_packet(70, 0)]);
    h.svc.disable_tracing(h.now, ca).unwrap();
    h.svc.disable_tracing(h.now, cb).unwrap();
    assert_eq!(producer_markers(&h.read(ca)), vec![70]);
    assert_eq!(producer_markers(&h.read(cb)), vec![68]);
    assert_eq!(stats_of(&h, cb).chunks_discarded, Some(3));
}

#[test]
fn hostile_producer_costs_only_its_own_data() {
    let mut h = H::new();
    let good = h.producer("good", 0, &["ds"]);
    let bad = h.producer("bad", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    let buf = global_buffer(&h.outputs(), good);
    h.commit_packets(good, 1, buf, &[test_packet(1, 0)]);
    // Commits of chunks that do not exist or are not complete.
    let req = CommitDataRequest {
        chunks_to_move: vec![
            ChunksToMove {
                page: Some(100_000),
                chunk: Some(0),
                target_buffer: Some(buf),
                ..Default::default()
            },
            ChunksToMove {
                page: Some(0),
                chunk: Some(13),
                target_buffer: Some(buf),
                ..Default::default()
            },
            ChunksToMove {
                page: None,
                chunk: None,
                target_buffer: Some(buf),
                ..Default::default()
            },
            ChunksToMove {
                data: Some(vec![1, 2, 3]),
                target_buffer: Some(buf),
                ..Default::default()
            },
        ],
        chunks_to_patch: vec![
            ChunkToPatch {
                target_buffer: Some(buf),
                writer_id: Some(1),
                chunk_id: Some(42),
                patches: vec![Patch {
                    offset: Some(0),
                    data: Some(vec![1, 2, 3, 4]),
                }],
                ..Default::default()
            },
            ChunkToPatch {
                target_buffer: Some(buf),
                writer_id: Some(1),
                chunk_id: Some(0),
                patches: vec![Patch {
                    offset: Some(0),
                    data: Some(vec![1]),
                }],
                ..Default::default()
            },
            ChunkToPatch {
                target_buffer: Some(buf),
                writer_id: Some(70_000),
                chunk_id: Some(0),
                ..Default::default()
            },
        ],
        flush_request_id: Some(12345),
    };
    h.svc.commit_data(h.now, bad, &req);
    // Garbage fragment sizes, a packet with a reserved field, writer id 0.
    let garbage = [0xffu8; 64];
    let mv = h.write_chunk(bad, 3, buf, &garbage, 5, 0);
    h.svc.commit_data(
        h.now,
        bad,
        &CommitDataRequest {
            chunks_to_move: vec![mv],
            ..Default::default()
        },
    );
    let mut forged = test_packet(99, 0);
    forged.extend_from_slice(&[0x18, 0x00]); // trusted_uid = 0
    h.commit_packets(bad, 4, buf, &[forged, test_packet(100, 0)]);
    let mv = h.write_chunk(bad, 0, buf, &fragment(&test_packet(101, 0)), 1, 0);
    h.svc.commit_data(
        h.now,
        bad,
        &CommitDataRequest {
            chunks_to_move: vec![mv],
            ..Default::default()
        },
    );
    // A packet cut in the middle (continues in a chunk that never comes).
    let half = fragment(&test_packet(102, 40));
    let mv = h.write_chunk(bad, 6, buf, &half[..20], 1, smb_flags::LAST_CONTINUES);
    h.svc.commit_data(
        h.now,
        bad,
        &CommitDataRequest {
            chunks_to_move: vec![mv],
            ..Default::default()
        },
    );
    h.svc.disconnect_producer(h.now, bad);

    h.commit_packets(good, 1, buf, &[test_packet(2, 0)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    let packets = h.read(c);
    let markers = producer_markers(&packets);
    assert!(
        markers.starts_with(&[1, 2]) || markers.contains(&1) && markers.contains(&2),
        "{markers:?}"
    );
    assert!(
        !markers.contains(&99) && !markers.contains(&102),
        "{markers:?}"
    );
    let st = stats_of(&h, c);
    assert!(st.invalid_packets.unwrap() >= 1);
    assert!(
        st.patches_discarded.unwrap_or(0) + st.buffer_stats[0].patches_failed.unwrap_or(0) >= 2
    );
    // Out-of-range/non-complete/missing indices and a short emulated chunk.
    assert!(st.chunks_discarded.unwrap() >= 4, "{st:?}");
}

mod smb_flags {
    pub const LAST_CONTINUES: u8 =
        crate::tracing::core::smb_abi::FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK;
}

#[test]
fn patches_fix_up_a_chunk() {
    let mut h = H::new();
    let p = h.producer("p", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    let buf = global_buffer(&h.outputs(), p);
    // A packet whose timestamp (field 8, 4-byte varint = 1) is patched to 5.
    let pkt_ok = vec![0x40, 0x81, 0x80, 0x80, 0x00];
    let frags = fragment(&pkt_ok);
    let mv = h.write_chunk(
        p,
        1,
        buf,
        &frags,
        1,
        crate::tracing::core::smb_abi::FLAG_CHUNK_NEEDS_PATCHING,
    );
    h.svc.commit_data(
        h.now,
        p,
        &CommitDataRequest {
            chunks_to_move: vec![mv],
            ..Default::default()
        },
    );
    let patch = ChunkToPatch {
        target_buffer: Some(buf),
        writer_id: Some(1),
        chunk_id: Some(0),
        patches: vec![Patch {
            offset: Some(2),
            data: Some(vec![0x85, 0x80, 0x80, 0x00]),
        }],
        has_more_patches: Some(false),
    };
    h.svc.commit_data(
        h.now,
        p,
        &CommitDataRequest {
            chunks_to_patch: vec![patch],
            ..Default::default()
        },
    );
    h.svc.disable_tracing(h.now, c).unwrap();
    assert_eq!(producer_markers(&h.read(c)), vec![5]);
}

#[test]
fn consumers_see_only_their_uid_unless_root() {
    let mut h = H::new();
    h.producer("p", 0, &["ds"]);
    let c1 = h.svc.connect_consumer(1000);
    let mut cfg = basic_config("ds", 64);
    cfg.unique_session_name = Some("mine".into());
    let sid = h.enable(c1, &cfg).unwrap();
    let other = h.svc.connect_consumer(2000);
    let root = h.svc.connect_consumer(0);
    assert!(h
        .svc
        .query_service_state(other, true)
        .tracing_sessions
        .is_empty());
    let st = h.svc.query_service_state(root, false);
    assert_eq!(st.tracing_sessions.len(), 1);
    assert_eq!(st.tracing_sessions[0].state.as_deref(), Some("STARTED"));
    assert_eq!(st.producers.len(), 1);
    assert_eq!(st.data_sources.len(), 1);
    assert_eq!(
        h.svc.query_service_state(c1, true).tracing_sessions[0].id,
        Some(sid)
    );
    let err = h
        .svc
        .clone_session(h.now, other, CloneSelector::Id(sid), 1, Default::default())
        .unwrap_err();
    assert!(err.contains("another UID"));
    assert!(h.svc.disable_tracing(h.now, other).is_err());
    assert!(h
        .svc
        .clone_session(
            h.now,
            root,
            CloneSelector::UniqueName("mine".into()),
            2,
            Default::default()
        )
        .is_ok());
    assert!(h.svc.query_capabilities().has_clone_session.unwrap());
}

#[test]
fn clone_session_snapshots_buffers() {
    let mut h = H::new();
    let p = h.producer("p", 0, &["ds"]);
    let c = h.svc.connect_consumer(10);
    let mut cfg = basic_config("ds", 64);
    cfg.unique_session_name = Some("snap".into());
    let sid = h.enable(c, &cfg).unwrap();
    let buf = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, buf, &[test_packet(1, 0), test_packet(2, 0)]);
    let cc = h.svc.connect_consumer(10);
    h.svc
        .clone_session(h.now, cc, CloneSelector::Id(sid), 5, Default::default())
        .unwrap();
    let flush_id = flush_request(&h.outputs(), p).unwrap();
    h.commit_packets(p, 1, buf, &[test_packet(3, 0)]);
    h.svc.commit_data(
        h.now,
        p,
        &CommitDataRequest {
            flush_request_id: Some(flush_id),
            ..Default::default()
        },
    );
    let res = h.outputs().into_iter().find_map(|o| match o {
        Output::CloneResult {
            consumer,
            token: 5,
            result,
        } if consumer == cc => Some(result),
        _ => None,
    });
    let res = res.unwrap().unwrap();
    assert_ne!(res.session, sid);
    h.commit_packets(p, 1, buf, &[test_packet(4, 0)]);
    assert_eq!(producer_markers(&h.read(cc)), vec![1, 2, 3]);
    // The source still has everything, and keeps running.
    h.svc.disable_tracing(h.now, c).unwrap();
    assert_eq!(producer_markers(&h.read(c)), vec![1, 2, 3, 4]);
    // A second session with the same name is allowed while the clone lives
    // only if the original is gone.
    h.svc.free_buffers(h.now, c).unwrap();
    let c3 = h.svc.connect_consumer(10);
    h.enable(c3, &cfg).unwrap();
}

#[test]
fn observe_events_reports_instance_states() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    h.svc.observe_events(c, 1 | 2);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    let evs: Vec<ObservableEvents> = h
        .outputs()
        .into_iter()
        .filter_map(|o| match o {
            Output::ObservableEvents { consumer, events } if consumer == c => {
                Some(decode_message(&events).unwrap())
            }
            _ => None,
        })
        .collect();
    assert_eq!(evs.len(), 2);
    assert_eq!(
        evs[0].instance_state_changes[0].data_source_name.as_deref(),
        Some("ds")
    );
    assert_eq!(evs[1].all_data_sources_started, Some(true));
    h.svc.disconnect_producer(h.now, p);
    let outs = h.outputs();
    assert!(outs
        .iter()
        .any(|o| matches!(o, Output::ObservableEvents { .. })));
}

/// What a producer's setup could not do, and names nobody offers, reach
/// an observing consumer right away (bounded), not only the trace's end.
#[test]
fn setup_problems_and_unoffered_names_reach_the_consumer_at_start() {
    let mut h = H::new();
    let d = crate::pb::protos::DataSourceDescriptor {
        name: Some("ds".into()),
        will_notify_on_start: Some(true),
        ..Default::default()
    };
    let p = h.producer_with("prod", 0, [d]);
    let c = h.svc.connect_consumer(0);
    h.svc.observe_events(c, 1);
    let mut cfg = basic_config("ds", 64);
    cfg.data_sources
        .extend(basic_config("linux.ftrce", 64).data_sources);
    h.enable(c, &cfg).unwrap();
    let decoded = |outs: &[Output]| -> Vec<ObservableEvents> {
        outs.iter()
            .filter_map(|o| match o {
                Output::ObservableEvents { consumer, events } if *consumer == c => {
                    Some(decode_message(events).unwrap())
                }
                _ => None,
            })
            .collect()
    };
    let outs = h.outputs();
    let evs = decoded(&outs);
    assert!(evs
        .iter()
        .any(|e| e.tracebox_data_sources_not_offered == ["linux.ftrce"]));
    let inst = cmds_for(&outs, p)
        .into_iter()
        .find_map(|c| match c {
            ProducerCommand::StartDataSource { instance_id, .. } => Some(instance_id),
            _ => None,
        })
        .unwrap();
    let long = "x".repeat(5000);
    let mut problems = vec!["unknown ftrace events or atrace categories: shed".to_owned()];
    problems.extend(std::iter::repeat_n(long, 40));
    h.svc.notify_data_source_started(h.now, p, inst, &problems);
    let evs = decoded(&h.outputs());
    let change = &evs[0].instance_state_changes[0];
    assert_eq!(change.tracebox_setup_problems[0], problems[0]);
    assert_eq!(change.tracebox_setup_problems.len(), 16);
    assert!(change.tracebox_setup_problems[1].len() <= 1024);
}

#[test]
fn producer_provided_smb_gets_empty_setup_tracing() {
    let mut h = H::new();
    let mem = std::sync::Arc::new(crate::mem::shared_mem::SharedMem::new_heap(64 * 1024).unwrap());
    let info = ProducerInfo {
        name: "sdk".into(),
        ..Default::default()
    };
    let p = h
        .svc
        .connect_producer(
            info,
            Some(ProvidedSmb {
                mem,
                page_size: 4096,
            }),
        )
        .unwrap();
    h.svc.on_producer_command_stream_open(p);
    let cmds = cmds_for(&h.outputs(), p);
    assert_eq!(
        cmds,
        vec![ProducerCommand::SetupTracing {
            page_size_kb: 4,
            service_created_smb: false
        }]
    );
    let d = crate::pb::protos::DataSourceDescriptor {
        name: Some("ds".into()),
        ..Default::default()
    };
    h.svc.register_data_source(h.now, p, d).unwrap();
    let c = h.svc.connect_consumer(0);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    let outs = h.outputs();
    assert!(h.log.borrow().smb_requests.is_empty());
    let buf = global_buffer(&outs, p);
    h.commit_packets(p, 1, buf, &[test_packet(8, 0)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    let packets = h.read(c);
    assert_eq!(producer_markers(&packets), vec![8]);
    assert!(packets
        .iter()
        .any(|p| matches!(decode_packet(p).data, OneOfdata::trace_uuid(_))));
    let bad = std::sync::Arc::new(crate::mem::shared_mem::SharedMem::new_heap(6000).unwrap());
    let info = ProducerInfo {
        name: "sdk2".into(),
        ..Default::default()
    };
    assert!(h
        .svc
        .connect_producer(
            info,
            Some(ProvidedSmb {
                mem: bad,
                page_size: 4096
            })
        )
        .is_err());
}

/// Clones `sid` for a new consumer while the producer commits marker 3
/// during the clone's flush; returns the clone's consumer and the outputs
/// up to and including the clone's result.
fn clone_with_flush(
    h: &mut H,
    p: ProducerId,
    sid: SessionId,
    buf: u32,
    file: bool,
) -> (ConsumerId, Vec<Output>) {
    let cc = h.svc.connect_consumer(10);
    let opts = crate::tracing::service::CloneOptions {
        with_file: file,
        trigger: None,
    };
    h.svc
        .clone_session(h.now, cc, CloneSelector::Id(sid), 7, opts)
        .unwrap();
    let flush_id = flush_request(&h.outputs(), p).unwrap();
    h.commit_packets(p, 1, buf, &[test_packet(3, 0)]);
    h.svc.commit_data(
        h.now,
        p,
        &CommitDataRequest {
            flush_request_id: Some(flush_id),
            ..Default::default()
        },
    );
    (cc, h.outputs())
}

fn snapshot_config(
    edit: impl Fn(&mut crate::pb::protos::mod_TraceConfig::BufferConfig),
) -> crate::pb::protos::TraceConfig {
    let mut cfg = basic_config("ds", 64);
    edit(&mut cfg.buffers[0]);
    cfg
}

#[test]
fn clear_before_clone_keeps_only_what_the_clone_flush_brings() {
    let mut h = H::new();
    let p = h.producer("p", 0, &["ds"]);
    let c = h.svc.connect_consumer(10);
    let sid = h
        .enable(c, &snapshot_config(|b| b.clear_before_clone = Some(true)))
        .unwrap();
    let buf = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, buf, &[test_packet(1, 0), test_packet(2, 0)]);
    let (cc, _) = clone_with_flush(&mut h, p, sid, buf, false);
    assert_eq!(producer_markers(&h.read(cc)), vec![3]);
}

#[test]
fn transfer_on_clone_moves_the_buffer_into_the_clone() {
    let mut h = H::new();
    let p = h.producer("p", 0, &["ds"]);
    let c = h.svc.connect_consumer(10);
    let sid = h
        .enable(c, &snapshot_config(|b| b.transfer_on_clone = Some(true)))
        .unwrap();
    let buf = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, buf, &[test_packet(1, 0), test_packet(2, 0)]);
    let (cc, _) = clone_with_flush(&mut h, p, sid, buf, false);
    h.commit_packets(p, 1, buf, &[test_packet(4, 0)]);
    assert_eq!(producer_markers(&h.read(cc)), vec![1, 2, 3]);
    h.svc.disable_tracing(h.now, c).unwrap();
    assert_eq!(producer_markers(&h.read(c)), vec![4]);
}

#[test]
fn write_into_file_clone_copies_the_file_then_appends_the_buffers() {
    let mut h = H::new();
    let p = h.producer("p", 0, &["ds"]);
    let c = h.svc.connect_consumer(10);
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    cfg.file_write_period_ms = Some(3_600_000);
    let sid = h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let buf = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, buf, &[test_packet(1, 0)]);
    // Without a file the clone is refused.
    let cx = h.svc.connect_consumer(10);
    let e = h
        .svc
        .clone_session(h.now, cx, CloneSelector::Id(sid), 1, Default::default())
        .unwrap_err();
    assert!(e.contains("a file descriptor is required"), "{e}");
    let (_, outs) = clone_with_flush(&mut h, p, sid, buf, true);
    let copy = outs
        .iter()
        .position(|o| matches!(o, Output::CopyFileForClone { token: 7, from, .. } if *from == sid))
        .expect("copy asked for");
    let Output::CopyFileForClone { to, .. } = outs[copy] else {
        unreachable!()
    };
    let mut data = Vec::new();
    let mut closed = false;
    for o in &outs[copy..] {
        match o {
            Output::WriteToFile { session, data: d } if *session == to => data.extend_from_slice(d),
            Output::CloseFile { session } if *session == to => closed = true,
            Output::CloneResult {
                token: 7, result, ..
            } => {
                assert!(result.as_ref().unwrap().was_write_into_file);
                assert!(closed, "the file is complete before the reply");
            }
            _ => {}
        }
    }
    // The trace's packets are `Trace.packet` fields.
    let trace: Vec<Vec<u8>> = crate::protozero::decode::FieldIter::new(&data)
        .map(|f| f.value.to_vec())
        .collect();
    assert_eq!(producer_markers(&trace), vec![1, 3]);
}
