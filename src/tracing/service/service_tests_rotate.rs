//! Service core tests: rotation of a write_into_file session's file.

use super::test_env::*;
use super::*;
use crate::pb::protos::mod_TracePacket::OneOfdata;
use crate::pb::protos::{CommitDataRequest, DataSourceDescriptor};
use crate::protozero::decode::FieldIter;

/// The packets of `Trace`-framed bytes.
fn packets(data: &[u8]) -> Vec<Vec<u8>> {
    FieldIter::new(data).map(|f| f.value.to_vec()).collect()
}

fn count(packets: &[Vec<u8>], what: fn(&OneOfdata) -> bool) -> usize {
    packets
        .iter()
        .filter(|p| what(&decode_packet(p).data))
        .count()
}

/// A write_into_file session (writing only when asked) of one producer
/// whose data source clears its incremental state: (harness, producer,
/// consumer, session, target buffer).
fn streaming_session() -> (H, ProducerId, ConsumerId, SessionId, u32) {
    streaming_session_with(|_| {})
}

/// [`streaming_session`] with more config.
fn streaming_session_with(
    more: impl FnOnce(&mut crate::pb::protos::TraceConfig),
) -> (H, ProducerId, ConsumerId, SessionId, u32) {
    let mut h = H::new();
    let info = ProducerInfo {
        uid: 0,
        pid: Some(1),
        name: "p".into(),
        ..Default::default()
    };
    let p = h.svc.connect_producer(info, None).unwrap();
    let desc = DataSourceDescriptor {
        name: Some("ds".into()),
        handles_incremental_state_clear: Some(true),
        ..Default::default()
    };
    h.svc.register_data_source(h.now, p, desc).unwrap();
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    cfg.file_write_period_ms = Some(3_600_000);
    more(&mut cfg);
    let sid = h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let buf = global_buffer(&h.outputs(), p);
    (h, p, c, sid, buf)
}

/// The bytes of every `WriteToFile` in `outs`.
fn file_data(outs: &[Output]) -> Vec<u8> {
    outs.iter()
        .filter_map(|o| match o {
            Output::WriteToFile { data, .. } => Some(data.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The bytes of the `WriteToFile`s of session `sid` in `outs`.
fn file_data_of(outs: &[Output], sid: SessionId) -> Vec<u8> {
    outs.iter()
        .filter_map(|o| match o {
            Output::WriteToFile { data, session } if *session == sid => Some(data.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// A cut whose flush sees 3 and 4 (a cleared state) committed while it is
/// pending: the old file's last bytes and what the new file got at the
/// switch.
fn cut_holding_three_and_four(
    h: &mut H,
    p: ProducerId,
    c: ConsumerId,
    sid: SessionId,
    buf: u32,
) -> (Vec<u8>, Vec<u8>) {
    h.svc.rotate_file(h.now, c, 5).unwrap();
    let flush = flush_request(&h.outputs(), p).unwrap();
    h.commit_packets(p, 1, buf, &[flagged(3, CLEARED), flagged(4, NEEDS_STATE)]);
    let (old, after) = ack_cut(h, p, sid, flush);
    (old, file_data(&after))
}

/// Acks the cut's flush: the old file's bytes, and the outputs from the
/// switch to the new file on.
fn ack_cut(h: &mut H, p: ProducerId, sid: SessionId, flush_id: u64) -> (Vec<u8>, Vec<Output>) {
    let ack = CommitDataRequest {
        flush_request_id: Some(flush_id),
        ..Default::default()
    };
    h.svc.commit_data(h.now, p, &ack);
    let mut outs = h.outputs();
    let switch = outs
        .iter()
        .position(|o| matches!(o, Output::SwitchFile { session, token: 5 } if *session == sid))
        .expect("switched");
    let after = outs.split_off(switch);
    (file_data(&outs), after)
}

#[test]
fn rotation_moves_on_to_the_new_file_with_its_own_header() {
    let (mut h, p, c, sid, buf) = streaming_session();
    h.commit_packets(p, 1, buf, &[test_packet(1, 0), test_packet(2, 0)]);

    h.svc.rotate_file(h.now, c, 5).unwrap();
    let e = h.svc.rotate_file(h.now, c, 6).unwrap_err();
    assert!(e.contains("already in progress"), "{e}");
    let before = h.outputs();
    // One ClearIncrementalState per cut, before its flush (a second one
    // after the switch made process_stats scan /proc twice per cut).
    let clears = |outs: &[Output]| {
        outs.iter()
            .filter(|o| {
                matches!(
                    o,
                    Output::ProducerCommand {
                        cmd: ProducerCommand::ClearIncrementalState { .. },
                        ..
                    }
                )
            })
            .count()
    };
    assert_eq!(clears(&before), 1);
    let flush_id = flush_request(&before, p).expect("a flush before the cut");
    h.commit_packets(p, 1, buf, &[test_packet(3, 0)]);
    let (old, after) = ack_cut(&mut h, p, sid, flush_id);
    assert_eq!(clears(&after), 0);
    assert!(after.iter().any(|o| matches!(
        o,
        Output::RotateResult {
            token: 5,
            result: Ok(()),
            ..
        }
    )));

    h.commit_packets(p, 1, buf, &[test_packet(4, 0)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    let mut new = file_data(&after);
    new.extend(file_data(&h.outputs()));
    let (old, new) = (packets(&old), packets(&new));
    // Every packet once, in the file of its time.
    assert_eq!(producer_markers(&old), vec![1, 2, 3]);
    assert_eq!(producer_markers(&new), vec![4]);
    for file in [&old, &new] {
        assert_eq!(count(file, |d| matches!(d, OneOfdata::trace_config(_))), 1);
        assert_eq!(count(file, |d| matches!(d, OneOfdata::system_info(_))), 1);
        assert!(count(file, |d| matches!(d, OneOfdata::clock_snapshot(_))) >= 1);
        assert!(count(file, |d| matches!(d, OneOfdata::trace_stats(_))) >= 1);
    }
}

/// A packet with `TracePacket.sequence_flags`.
fn flagged(marker: u64, flags: u64) -> Vec<u8> {
    let mut s = crate::protozero::VecStream::new();
    crate::protozero::put_varint(&mut s, 8, marker);
    crate::protozero::put_varint(&mut s, 13, flags);
    s.into_bytes()
}

const CLEARED: u64 = 1;
const NEEDS_STATE: u64 = 2;

/// Data sources clear their incremental state before the cut; what a
/// sequence wrote from its clearing packet on goes to the new file, so
/// each file has the interned data its packets refer to.
#[test]
fn packets_after_a_clear_go_to_the_new_file() {
    let (mut h, p, c, sid, buf) = streaming_session();
    h.commit_packets(p, 1, buf, &[flagged(1, CLEARED), flagged(2, NEEDS_STATE)]);
    h.commit_packets(p, 2, buf, &[test_packet(10, 0)]);

    h.svc.rotate_file(h.now, c, 5).unwrap();
    let cmds = cmds_for(&h.outputs(), p);
    let at = |f: fn(&ProducerCommand) -> bool| cmds.iter().position(f).unwrap();
    let clear = at(|c| matches!(c, ProducerCommand::ClearIncrementalState { .. }));
    let flush = at(|c| matches!(c, ProducerCommand::Flush { .. }));
    assert!(clear < flush, "{cmds:?}");
    let ProducerCommand::Flush { request_id, .. } = cmds[flush] else {
        unreachable!()
    };
    // Writer 1 honours the clear; writer 2 has no incremental state.
    h.commit_packets(p, 1, buf, &[flagged(3, CLEARED), flagged(4, NEEDS_STATE)]);
    h.commit_packets(p, 2, buf, &[test_packet(11, 0)]);
    let (old, after) = ack_cut(&mut h, p, sid, request_id);
    let old = packets(&old);
    let mut new_bytes = file_data(&after);
    h.commit_packets(p, 1, buf, &[flagged(5, NEEDS_STATE)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    new_bytes.extend(file_data(&h.outputs()));
    let new = packets(&new_bytes);
    assert_eq!(producer_markers(&old), vec![1, 2, 10, 11]);
    assert_eq!(producer_markers(&new), vec![3, 4, 5]);
    assert_header_before(&new, 3);
}

/// A periodic write while the cut's flush is pending (a slow producer)
/// still holds a cleared sequence's packets for the new file.
#[test]
fn a_periodic_write_during_the_cut_holds_cleared_packets_back() {
    let (mut h, p, c, sid, buf) = streaming_session();
    h.commit_packets(p, 1, buf, &[flagged(1, CLEARED), flagged(2, NEEDS_STATE)]);
    h.svc.rotate_file(h.now, c, 5).unwrap();
    let request_id = flush_request(&h.outputs(), p).unwrap();
    h.commit_packets(p, 1, buf, &[flagged(3, CLEARED), flagged(4, NEEDS_STATE)]);
    h.svc.write_file_period(h.now, sid);
    let mut old_bytes = file_data(&h.outputs());
    let (old, after) = ack_cut(&mut h, p, sid, request_id);
    old_bytes.extend(old);
    let mut new_bytes = file_data(&after);
    h.svc.disable_tracing(h.now, c).unwrap();
    new_bytes.extend(file_data(&h.outputs()));
    assert_eq!(producer_markers(&packets(&old_bytes)), vec![1, 2]);
    assert_eq!(producer_markers(&packets(&new_bytes)), vec![3, 4]);
}

/// A session stopped while its cut is pending keeps what the cut held.
#[test]
fn a_stop_during_the_cut_writes_the_held_packets() {
    let (mut h, p, c, _sid, buf) = streaming_session();
    h.svc.rotate_file(h.now, c, 5).unwrap();
    h.commit_packets(p, 1, buf, &[flagged(3, CLEARED), flagged(4, NEEDS_STATE)]);
    h.svc.write_file_period(h.now, _sid);
    let mut bytes = file_data(&h.outputs());
    h.svc.disable_tracing(h.now, c).unwrap();
    bytes.extend(file_data(&h.outputs()));
    assert_eq!(producer_markers(&packets(&bytes)), vec![3, 4]);
}

#[test]
fn rotation_is_refused_without_a_streamed_file() {
    let mut h = H::new();
    h.producer("p", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let e = h.svc.rotate_file(h.now, c, 1).unwrap_err();
    assert!(e.contains("No tracing session"), "{e}");
    h.enable(c, &basic_config("ds", 64)).unwrap();
    let e = h.svc.rotate_file(h.now, c, 1).unwrap_err();
    assert!(e.contains("write_into_file"), "{e}");
    // Before the start there is nothing to cut; the client tries later.
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    cfg.deferred_start = Some(true);
    h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let e = h.svc.rotate_file(h.now, c, 2).unwrap_err();
    assert!(e.contains("has not started yet"), "{e}");
}

/// A clone taken while a cut is pending (the clone's flush done first) is
/// one file: it has the packets the cut holds for the source's next file,
/// and the source's next file has them too.
#[test]
fn a_clone_during_a_pending_cut_has_the_held_packets() {
    let (mut h, p, c, sid, buf) = streaming_session();
    h.commit_packets(p, 1, buf, &[flagged(1, CLEARED), flagged(2, NEEDS_STATE)]);
    let cc = h.svc.connect_consumer(0);
    let opts = consumer_ops::CloneOptions {
        with_file: true,
        ..Default::default()
    };
    h.svc
        .clone_session(h.now, cc, CloneSelector::Id(sid), 7, opts)
        .unwrap();
    let clone_flush = flush_request(&h.outputs(), p).unwrap();
    h.svc.rotate_file(h.now, c, 5).unwrap();
    let cut_flush = flush_request(&h.outputs(), p).unwrap();
    h.commit_packets(p, 1, buf, &[flagged(3, CLEARED), flagged(4, NEEDS_STATE)]);
    // A periodic write meanwhile: 1 and 2 into the old file, 3 and 4 held.
    h.svc.write_file_period(h.now, sid);
    let old = file_data_of(&h.outputs(), sid);
    assert_eq!(producer_markers(&packets(&old)), vec![1, 2]);
    h.commit_packets(p, 1, buf, &[flagged(5, NEEDS_STATE)]);
    let ack = CommitDataRequest {
        flush_request_id: Some(clone_flush),
        ..Default::default()
    };
    h.svc.commit_data(h.now, p, &ack);
    let outs = h.outputs();
    let clone = outs
        .iter()
        .find_map(|o| match o {
            Output::CloneResult {
                result: Ok(r),
                token: 7,
                ..
            } => Some(r.session),
            _ => None,
        })
        .expect("cloned");
    // The clone continues the source's old file: after 1 and 2, the rest.
    let cloned = packets(&file_data_of(&outs, clone));
    assert_eq!(producer_markers(&cloned), vec![3, 4, 5]);
    let (_, after) = ack_cut(&mut h, p, sid, cut_flush);
    let mut new_bytes = file_data_of(&after, sid);
    h.svc.disable_tracing(h.now, c).unwrap();
    new_bytes.extend(file_data_of(&h.outputs(), sid));
    assert_eq!(producer_markers(&packets(&new_bytes)), vec![3, 4, 5]);
}

/// The packets of `Trace`-framed bytes, each `compressed_packets` or
/// `zstd_compressed_packets` opened (only `field`'s are expected); and how
/// many top-level packets were not compressed.
fn inflated(data: &[u8], field: u32) -> (Vec<Vec<u8>>, usize) {
    use crate::codec;
    let (mut out, mut plain) = (Vec::new(), 0);
    for p in packets(data) {
        let z = FieldIter::new(&p).find(|f| codec::is_compressed_packets(f.number));
        match z {
            Some(z) => {
                assert_eq!((z.number, z.wire_type), (field, 2));
                let raw = codec::decompress_packets(field, z.value, 64 << 20).unwrap();
                out.extend(packets(&raw));
            }
            None => {
                plain += 1;
                out.push(p);
            }
        }
    }
    (out, plain)
}

/// With deflate, the packets held at a cut are compressed with the rest
/// of the new file's first write, after its header.
#[test]
fn held_packets_are_compressed_in_a_deflate_trace() {
    use crate::pb::protos::mod_TraceConfig::CompressionType;
    held_packets_are_compressed(50, |cfg| {
        cfg.compression_type = Some(CompressionType::COMPRESSION_TYPE_DEFLATE)
    });
}

/// The same with zstd: each file's passes are `zstd_compressed_packets`.
#[test]
fn held_packets_are_compressed_in_a_zstd_trace() {
    held_packets_are_compressed(133, |cfg| {
        let z = crate::pb::protos::mod_TraceConfig::mod_CompressionConfig::Zstd { level: Some(1) };
        cfg.compression = Some(crate::pb::protos::mod_TraceConfig::CompressionConfig {
            zstd: Some(z),
            deflate: Some(Default::default()),
        })
    });
}

fn held_packets_are_compressed(
    field: u32,
    config: impl FnOnce(&mut crate::pb::protos::TraceConfig),
) {
    let (mut h, p, c, sid, buf) = streaming_session_with(config);
    h.commit_packets(p, 1, buf, &[flagged(1, CLEARED), flagged(2, NEEDS_STATE)]);
    h.commit_packets(p, 2, buf, &[test_packet(10, 0)]);
    let (old, mut new_bytes) = cut_holding_three_and_four(&mut h, p, c, sid, buf);
    h.commit_packets(p, 1, buf, &[flagged(5, NEEDS_STATE)]);
    h.commit_packets(p, 2, buf, &[test_packet(11, 0)]);
    h.svc.write_file_period(h.now, sid);
    new_bytes.extend(file_data(&h.outputs()));
    h.svc.disable_tracing(h.now, c).unwrap();
    new_bytes.extend(file_data(&h.outputs()));
    let (old, old_plain) = inflated(&old, field);
    let (new, new_plain) = inflated(&new_bytes, field);
    assert_eq!((old_plain, new_plain), (0, 0));
    assert_eq!(producer_markers(&old), vec![1, 2, 10]);
    assert_eq!(producer_markers(&new), vec![3, 4, 5, 11]);
    assert_header_before(&new, 3);
}

/// The new file's header (its trace config) comes before the packet
/// stamped `ts` (the first one held at the cut).
fn assert_header_before(new: &[Vec<u8>], ts: u64) {
    let config = new
        .iter()
        .position(|p| matches!(decode_packet(p).data, OneOfdata::trace_config(_)))
        .unwrap();
    let first = new
        .iter()
        .position(|p| decode_packet(p).timestamp == Some(ts))
        .unwrap();
    assert!(config < first);
}

/// A failed cut the client names goes into the trace as
/// `tracebox_service_event.rotation_stopped`, bounded in length and in
/// number per session.
#[test]
fn a_failed_cut_is_named_in_the_trace_within_bounds() {
    let (mut h, _p, c, sid, _buf) = streaming_session();
    let long = "é".repeat(1000);
    h.svc.note_rotation_stopped(h.now, c, "no space").unwrap();
    h.svc.note_rotation_stopped(h.now, c, &long).unwrap();
    for _ in 0..10 {
        let _ = h.svc.note_rotation_stopped(h.now, c, "again");
    }
    h.svc.write_file_period(h.now, sid);
    let named: Vec<Vec<u8>> = packets(&file_data(&h.outputs()))
        .iter()
        .flat_map(|p| {
            FieldIter::new(p)
                .filter(|f| f.number == crate::schema::trace_extensions::TRACEBOX_SERVICE_EVENT)
                .flat_map(|f| FieldIter::new(f.value).filter(|g| g.number == 9))
                .map(|g| g.value.to_vec())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(named.len(), 4);
    assert_eq!(named[0], b"no space");
    assert_eq!(named[1].len(), 512);
    assert!(std::str::from_utf8(&named[1]).is_ok());
    let other = h.svc.connect_consumer(0);
    assert!(h.svc.note_rotation_stopped(h.now, other, "x").is_err());
}

/// Through a trace filter too, a sequence's packets from its clear on go
/// to the new file (the filter hands each packet with its trailer inside).
#[test]
fn a_filtered_trace_holds_cleared_packets_for_the_new_file() {
    use super::trace_filter::tests::{bytecode, Allow::*};
    use crate::pb::protos::mod_TraceConfig::TraceFilter;
    // Trace.packet -> trusted_uid, timestamp, sequence id, sequence_flags.
    let code = bytecode(&[
        &[Nested(1, 1)],
        &[Simple(3), Simple(8), Simple(10), Simple(13)],
    ]);
    let (mut h, p, c, sid, buf) = streaming_session_with(|cfg| {
        cfg.trace_filter = Some(TraceFilter {
            bytecode_v2: Some(code),
            ..Default::default()
        })
    });
    h.commit_packets(p, 1, buf, &[flagged(1, CLEARED), flagged(2, NEEDS_STATE)]);
    let (old, mut new_bytes) = cut_holding_three_and_four(&mut h, p, c, sid, buf);
    h.commit_packets(p, 1, buf, &[flagged(5, NEEDS_STATE)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    new_bytes.extend(file_data(&h.outputs()));
    assert_eq!(producer_markers(&packets(&old)), vec![1, 2]);
    assert_eq!(producer_markers(&packets(&new_bytes)), vec![3, 4, 5]);
}
