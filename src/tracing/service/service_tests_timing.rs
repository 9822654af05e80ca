//! Service core tests driven by fake time: duration, flushes, stop
//! timeouts, write_into_file, triggers.

use super::session::SessionState;
use super::test_env::*;
use super::*;
use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::{Trigger, TriggerMode};
use crate::pb::protos::mod_TraceConfig::TriggerConfig;
use crate::pb::protos::mod_TracePacket::OneOfdata;
use crate::pb::protos::{DataSourceDescriptor, TraceConfig};
use crate::protozero::decode::decode_message;

fn ack(h: &mut H, p: ProducerId, id: u64) {
    let req = crate::pb::protos::CommitDataRequest {
        flush_request_id: Some(id),
        ..Default::default()
    };
    h.svc.commit_data(h.now, p, &req);
}

#[test]
fn duration_expiry_flushes_then_disables() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.duration_ms = Some(2000);
    let sid = h.enable(c, &cfg).unwrap();
    h.outputs();
    assert_eq!(h.svc.next_deadline(), Some(h.now + ms(2000)));
    h.advance(ms(1999));
    assert!(flush_request(&h.outputs(), p).is_none());
    h.advance(ms(1));
    let id = flush_request(&h.outputs(), p).expect("flush before stop");
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Started));
    ack(&mut h, p, id);
    let outs = h.outputs();
    assert!(cmds_for(&outs, p)
        .iter()
        .any(|c| matches!(c, ProducerCommand::StopDataSource { .. })));
    assert!(outs.contains(&Output::TracingDisabled {
        consumer: c,
        error: None
    }));
}

#[test]
fn duration_expiry_stops_even_if_flush_times_out() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.duration_ms = Some(1000);
    cfg.flush_timeout_ms = Some(300);
    let sid = h.enable(c, &cfg).unwrap();
    h.advance(ms(1000));
    assert!(flush_request(&h.outputs(), p).is_some());
    h.advance(ms(299));
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Started));
    h.advance(ms(1));
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));
}

#[test]
fn consumer_flush_success_and_timeout() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    h.outputs();
    h.svc.flush(h.now, c, 1000, 0, 77).unwrap();
    let id = flush_request(&h.outputs(), p).unwrap();
    ack(&mut h, p, id);
    assert!(h.outputs().contains(&Output::FlushResult {
        consumer: c,
        token: 77,
        success: true
    }));
    h.svc.flush(h.now, c, 1000, 0, 78).unwrap();
    h.outputs();
    h.advance(ms(999));
    assert!(h.outputs().is_empty());
    h.advance(ms(1));
    assert!(h.outputs().contains(&Output::FlushResult {
        consumer: c,
        token: 78,
        success: false
    }));
    // Producer disconnect completes a pending flush.
    h.svc.flush(h.now, c, 1000, 0, 79).unwrap();
    h.svc.disconnect_producer(h.now, p);
    assert!(h.outputs().contains(&Output::FlushResult {
        consumer: c,
        token: 79,
        success: true
    }));
}

#[test]
fn periodic_flush() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.flush_period_ms = Some(500);
    h.enable(c, &cfg).unwrap();
    h.outputs();
    h.advance(ms(500));
    assert!(flush_request(&h.outputs(), p).is_some());
    h.advance(ms(500));
    assert!(flush_request(&h.outputs(), p).is_some());
}

#[test]
fn stop_waits_for_acks_or_timeout() {
    let mut h = H::new();
    let d = DataSourceDescriptor {
        name: Some("ds".into()),
        will_notify_on_stop: Some(true),
        will_notify_on_start: Some(true),
        ..Default::default()
    };
    let p = h.producer_with("prod", 0, [d]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.data_source_stop_timeout_ms = Some(700);
    let sid = h.enable(c, &cfg).unwrap();
    let inst = cmds_for(&h.outputs(), p)
        .into_iter()
        .find_map(|c| match c {
            ProducerCommand::StartDataSource { instance_id, .. } => Some(instance_id),
            _ => None,
        })
        .unwrap();
    h.svc.notify_data_source_started(h.now, p, inst, &[]);
    h.svc.disable_tracing(h.now, c).unwrap();
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Stopping));
    h.svc.notify_data_source_stopped(h.now, p, inst);
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));

    let c2 = h.svc.connect_consumer(0);
    let sid2 = h.enable(c2, &cfg).unwrap();
    let inst2 = cmds_for(&h.outputs(), p)
        .into_iter()
        .find_map(|c| match c {
            ProducerCommand::StartDataSource { instance_id, .. } => Some(instance_id),
            _ => None,
        })
        .unwrap();
    h.svc.notify_data_source_started(h.now, p, inst2, &[]);
    h.svc.disable_tracing(h.now, c2).unwrap();
    h.advance(ms(699));
    assert_eq!(h.svc.session_state(sid2), Some(SessionState::Stopping));
    h.advance(ms(1));
    assert_eq!(h.svc.session_state(sid2), Some(SessionState::Disabled));
}

fn file_outputs(outs: &[Output]) -> (Vec<u8>, bool) {
    let mut data = Vec::new();
    let mut closed = false;
    for o in outs {
        match o {
            Output::WriteToFile { data: d, .. } => data.extend_from_slice(d),
            Output::CloseFile { .. } => closed = true,
            _ => {}
        }
    }
    (data, closed)
}

fn trace_packets(file: &[u8]) -> Vec<Vec<u8>> {
    let t: crate::pb::protos::Trace = decode_message(file).unwrap();
    t.packet.iter().map(encode).collect()
}

#[test]
fn write_into_file_periodically_and_at_stop() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    cfg.file_write_period_ms = Some(10); // clamped to 100 ms
    let sid = h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let global = global_buffer(&h.outputs(), p);
    assert!(h.svc.read_buffers(h.now, c).is_err());
    h.commit_packets(p, 1, global, &[test_packet(1, 0)]);
    h.advance(ms(99));
    assert!(file_outputs(&h.outputs()).0.is_empty());
    h.advance(ms(1));
    let (first, closed) = file_outputs(&h.outputs());
    assert!(!closed);
    assert_eq!(producer_markers(&trace_packets(&first)), vec![1]);
    h.commit_packets(p, 1, global, &[test_packet(2, 0)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    let outs = h.outputs();
    let (rest, closed) = file_outputs(&outs);
    assert!(closed);
    assert_eq!(producer_markers(&trace_packets(&rest)), vec![2]);
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));
}

/// A buffer past half full is written at once, not a period later, and
/// the writes go on back to back while data is readable.
#[test]
fn write_into_file_writes_early_when_the_buffer_is_half_full() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    cfg.file_write_period_ms = Some(4_000); // no flush before writes
    h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let global = global_buffer(&h.outputs(), p);
    // 20 KiB: under half of 64 KiB, so it waits for the period.
    for i in 0..5 {
        h.commit_packets(p, 1, global, &[test_packet(i, 4000)]);
    }
    h.advance(ms(1));
    assert!(file_outputs(&h.outputs()).0.is_empty());
    // Past 32 KiB: written in the next timer pass, long before 4 s.
    for i in 5..10 {
        h.commit_packets(p, 1, global, &[test_packet(i, 4000)]);
    }
    h.advance(ms(1));
    let (data, _) = file_outputs(&h.outputs());
    assert_eq!(
        producer_markers(&trace_packets(&data)),
        (0..10).collect::<Vec<_>>()
    );
    // The backlog ends, then the period again.
    h.advance(ms(1));
    h.commit_packets(p, 1, global, &[test_packet(10, 100)]);
    h.advance(ms(3_990));
    assert!(file_outputs(&h.outputs()).0.is_empty());
    h.advance(ms(20));
    let (data, _) = file_outputs(&h.outputs());
    assert_eq!(producer_markers(&trace_packets(&data)), vec![10]);
}

#[test]
fn max_file_size_stops_the_session() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 256);
    cfg.write_into_file = Some(true);
    cfg.file_write_period_ms = Some(1000);
    cfg.max_file_size_bytes = Some(3000);
    let sid = h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let global = global_buffer(&h.outputs(), p);
    for i in 0..10 {
        h.commit_packets(p, 1, global, &[test_packet(i, 500)]);
    }
    h.advance(ms(1000));
    let outs = h.outputs();
    let (data, closed) = file_outputs(&outs);
    assert!(closed);
    assert!(data.len() <= 3000 && data.len() > 1000, "{}", data.len());
    assert!(!trace_packets(&data).is_empty());
    assert!(matches!(
        h.svc.session_state(sid),
        Some(SessionState::Disabled)
    ));
}

fn trigger_config(mode: TriggerMode, regex: Option<&str>, delay: u32) -> TraceConfig {
    let mut cfg = basic_config("ds", 64);
    cfg.trigger_config = Some(TriggerConfig {
        trigger_mode: Some(mode),
        trigger_timeout_ms: Some(10_000),
        triggers: vec![Trigger {
            name: Some("go".into()),
            producer_name_regex: regex.map(String::from),
            stop_delay_ms: Some(delay),
            ..Default::default()
        }],
        ..Default::default()
    });
    cfg
}

#[test]
fn start_trigger_starts_then_stops_after_delay() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let t = h.producer("app.trigger", 0, &[]);
    let c = h.svc.connect_consumer(0);
    let sid = h
        .enable(
            c,
            &trigger_config(TriggerMode::START_TRACING, Some("app\\..*"), 500),
        )
        .unwrap();
    let outs = h.outputs();
    assert!(cmds_for(&outs, p)
        .iter()
        .all(|c| !matches!(c, ProducerCommand::StartDataSource { .. })));
    assert!(h.read(c).is_empty(), "no trace before a trigger");
    h.svc.activate_triggers(h.now, p, &["go".into()]); // regex mismatch
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Configured));
    h.svc
        .activate_triggers(h.now, t, &["nope".into(), "go".into()]);
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Started));
    assert!(cmds_for(&h.outputs(), p)
        .iter()
        .any(|c| matches!(c, ProducerCommand::StartDataSource { .. })));
    h.advance(ms(500));
    let id = flush_request(&h.outputs(), p).unwrap();
    ack(&mut h, p, id);
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));
    let packets = h.read(c);
    let triggers: Vec<_> = packets
        .iter()
        .filter_map(|p| match decode_packet(p).data {
            OneOfdata::trigger(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(triggers.len(), 1);
    assert_eq!(triggers[0].trigger_name.as_deref(), Some("go"));
    assert_eq!(triggers[0].producer_name.as_deref(), Some("app.trigger"));
}

#[test]
fn start_trigger_timeout_gives_empty_trace() {
    let mut h = H::new();
    h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let sid = h
        .enable(c, &trigger_config(TriggerMode::START_TRACING, None, 0))
        .unwrap();
    h.advance(ms(10_000));
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));
    assert!(h.outputs().contains(&Output::TracingDisabled {
        consumer: c,
        error: None
    }));
    assert!(h.read(c).is_empty());
}

#[test]
fn stop_trigger_stops_after_delay_and_timeout_is_empty() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let sid = h
        .enable(c, &trigger_config(TriggerMode::STOP_TRACING, None, 200))
        .unwrap();
    let global = global_buffer(&h.outputs(), p);
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Started));
    h.commit_packets(p, 1, global, &[test_packet(3, 0)]);
    h.advance(ms(100));
    h.svc.activate_triggers(h.now, p, &["go".into()]);
    h.advance(ms(199));
    assert!(flush_request(&h.outputs(), p).is_none());
    h.advance(ms(1));
    let id = flush_request(&h.outputs(), p).unwrap();
    ack(&mut h, p, id);
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));
    assert_eq!(producer_markers(&h.read(c)), vec![3]);

    let c2 = h.svc.connect_consumer(0);
    let sid2 = h
        .enable(c2, &trigger_config(TriggerMode::STOP_TRACING, None, 200))
        .unwrap();
    let global = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, global, &[test_packet(4, 0)]);
    h.advance(ms(10_000));
    assert_eq!(h.svc.session_state(sid2), Some(SessionState::Disabled));
    assert!(h.read(c2).is_empty());
}

/// As upstream: a CLONE_SNAPSHOT session's duration is its trigger
/// timeout, so it ends there even after a trigger hit (issue 33, defect 3).
#[test]
fn clone_snapshot_session_stops_at_its_trigger_timeout_after_a_hit() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let sid = h
        .enable(c, &trigger_config(TriggerMode::CLONE_SNAPSHOT, None, 0))
        .unwrap();
    h.svc.activate_triggers(h.now, p, &["go".into()]);
    h.advance(ms(9_999));
    assert!(flush_request(&h.outputs(), p).is_none());
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Started));
    h.advance(ms(1));
    let id = flush_request(&h.outputs(), p).expect("the stop's flush");
    ack(&mut h, p, id);
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));
    assert!(h.outputs().contains(&Output::TracingDisabled {
        consumer: c,
        error: None
    }));
}

#[test]
fn clone_snapshot_trigger_notifies_and_only_clones_are_readable() {
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    h.svc.observe_events(c, 4);
    let sid = h
        .enable(c, &trigger_config(TriggerMode::CLONE_SNAPSHOT, None, 100))
        .unwrap();
    let global = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, global, &[test_packet(7, 0)]);
    h.svc.activate_triggers(h.now, p, &["go".into()]);
    h.advance(ms(99));
    assert!(h.outputs().is_empty());
    h.advance(ms(1));
    let hits: Vec<crate::pb::protos::ObservableEvents> = h
        .outputs()
        .into_iter()
        .filter_map(|o| match o {
            Output::ObservableEvents { events, .. } => Some(decode_message(&events).unwrap()),
            _ => None,
        })
        .collect();
    let hit = hits[0].clone_trigger_hit.as_ref().unwrap();
    assert_eq!(hit.tracing_session_id, Some(sid as i64));
    assert_eq!(hit.trigger_name.as_deref(), Some("go"));
    assert_eq!(hit.trigger_delay_ms, Some(100));
    assert!(
        h.read(c).is_empty(),
        "CLONE_SNAPSHOT sessions are read through clones"
    );
    let cc = h.svc.connect_consumer(0);
    h.svc
        .clone_session(h.now, cc, CloneSelector::Id(sid), 1, Default::default())
        .unwrap();
    let id = flush_request(&h.outputs(), p).unwrap();
    ack(&mut h, p, id);
    assert_eq!(producer_markers(&h.read(cc)), vec![7]);
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Started));
}

/// A started write_into_file session with a 100 ms write period:
/// (producer, its target buffer).
fn file_session(h: &mut H, size_kb: u32) -> (ProducerId, u32) {
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", size_kb);
    cfg.write_into_file = Some(true);
    cfg.file_write_period_ms = Some(100);
    h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let global = global_buffer(&h.outputs(), p);
    (p, global)
}

#[test]
fn write_into_file_reuses_a_recycled_buffer() {
    let mut h = H::new();
    let (p, global) = file_session(&mut h, 64);
    let take_file_data = |outs: Vec<Output>| {
        outs.into_iter()
            .find_map(|o| match o {
                Output::WriteToFile { data, .. } => Some(data),
                _ => None,
            })
            .expect("a file write")
    };
    h.commit_packets(p, 1, global, &[test_packet(1, 0)]);
    h.advance(ms(100));
    let mut first = take_file_data(h.outputs());
    // A capacity no fresh pass buffer has, to recognise the allocation.
    first.reserve_exact(3 << 20);
    let marked = first.capacity();
    h.svc.recycle_file_buffer(first);
    h.commit_packets(p, 1, global, &[test_packet(2, 0)]);
    h.advance(ms(100));
    let second = take_file_data(h.outputs());
    assert_eq!(
        second.capacity(),
        marked,
        "the recycled allocation is reused"
    );
    assert_eq!(producer_markers(&trace_packets(&second)), vec![2]);
}

#[test]
fn a_file_write_backlog_goes_one_step_per_timer() {
    let mut h = H::new();
    let (p, global) = file_session(&mut h, 4096);
    // About 1.4 MiB: more than one write step.
    for i in 0..400 {
        h.commit_packets(p, 1, global, &[test_packet(i, 3500)]);
    }
    let file_writes = |outs: &[Output]| {
        outs.iter()
            .filter(|o| matches!(o, Output::WriteToFile { .. }))
            .count()
    };
    h.advance(ms(100));
    // One step, then producers' IPC gets its turn: the next step is due
    // just after this timer pass, not in it.
    assert_eq!(file_writes(&h.outputs()), 1);
    assert_eq!(h.svc.next_deadline(), Some(h.now + 1));
    h.advance(1);
    assert_eq!(file_writes(&h.outputs()), 1);
    // Drained: back to the period.
    assert_eq!(h.svc.next_deadline(), Some(h.now + ms(100)));
}

fn wif_config(
    period_ms: u32,
    mode: crate::pb::protos::mod_TraceConfig::WriteFlushMode,
) -> TraceConfig {
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    cfg.file_write_period_ms = Some(period_ms);
    cfg.write_flush_mode = Some(mode);
    cfg
}

#[test]
fn write_flush_enabled_flushes_before_each_write_and_syncs_after() {
    use crate::pb::protos::mod_TraceConfig::{FFlushMode, WriteFlushMode};
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = wif_config(200, WriteFlushMode::WRITE_FLUSH_ENABLED);
    cfg.fflush_post_write = Some(FFlushMode::FFLUSH_ENABLED);
    h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let global = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, global, &[test_packet(1, 0)]);
    h.advance(ms(200));
    let outs = h.outputs();
    let id = flush_request(&outs, p).expect("a flush before the write");
    assert!(
        file_outputs(&outs).0.is_empty(),
        "the write waits for the flush"
    );
    h.commit_packets(p, 1, global, &[test_packet(2, 0)]);
    h.svc.commit_data(
        h.now,
        p,
        &crate::pb::protos::CommitDataRequest {
            flush_request_id: Some(id),
            ..Default::default()
        },
    );
    let outs = h.outputs();
    let (data, _) = file_outputs(&outs);
    assert_eq!(producer_markers(&trace_packets(&data)), vec![1, 2]);
    assert!(outs.iter().any(|o| matches!(o, Output::SyncFile { .. })));
}

#[test]
fn write_flush_disabled_writes_without_flushing() {
    use crate::pb::protos::mod_TraceConfig::WriteFlushMode;
    let mut h = H::new();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let cfg = wif_config(6000, WriteFlushMode::WRITE_FLUSH_DISABLED);
    h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let global = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, global, &[test_packet(1, 0)]);
    h.advance(ms(6000));
    let outs = h.outputs();
    assert!(flush_request(&outs, p).is_none());
    assert_eq!(
        producer_markers(&trace_packets(&file_outputs(&outs).0)),
        vec![1]
    );
    assert!(!outs.iter().any(|o| matches!(o, Output::SyncFile { .. })));
    // AUTO with a period above 5 s flushes before each write instead.
    let c2 = h.svc.connect_consumer(0);
    let cfg = wif_config(6000, WriteFlushMode::WRITE_FLUSH_AUTO);
    h.svc
        .enable_tracing(h.now, c2, &encode(&cfg), true)
        .unwrap();
    h.outputs();
    h.advance(ms(6000));
    assert!(flush_request(&h.outputs(), p).is_some());
}
