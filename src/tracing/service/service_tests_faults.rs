//! Service core tests: what a session asked for and did not get.

use super::faults::{MAX_DATA_SOURCES_PER_CONFIG, MAX_INSTANCES_PER_SESSION};
use super::session::SessionState;
use super::test_env::*;
use super::*;
use crate::cmd::trace_faults::TraceFaults;
use crate::pb::protos::{DataSourceConfig, DataSourceDescriptor};
use crate::protozero::decode::decode_message;
use crate::tracing::core::smb_abi::{ChunkHeader, PageLayout};

/// The service events of a read-back, as the client reads them.
fn faults_of(packets: &[Vec<u8>]) -> TraceFaults {
    let mut k = crate::cmd::kernel_loss::KernelLoss::default();
    for p in packets {
        k.observe_packet(&[p]);
    }
    k.faults
}

fn target_of(h: &mut H, p: ProducerId) -> u32 {
    let cfg = cmds_for(&h.outputs(), p)
        .into_iter()
        .find_map(|c| match c {
            ProducerCommand::SetupDataSource { config, .. } => Some(config),
            _ => None,
        })
        .expect("SetupDataSource sent");
    decode_message::<DataSourceConfig>(&cfg)
        .unwrap()
        .target_buffer
        .unwrap()
}

#[test]
fn a_vanishing_producer_is_scraped_and_named() {
    let mut h = H::new();
    // Scraping not asked for: a dead producer is scraped all the same.
    let p = h.producer("probes", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    let global = target_of(&mut h, p);
    h.svc.register_trace_writer(p, 1, global);
    let frags = [fragment(&test_packet(1, 0)), fragment(&test_packet(2, 0))].concat();
    h.write_chunk(p, 1, global, &frags, 2, 0); // complete, never committed
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
    h.advance(ms(2000));
    h.svc.disconnect_producer(h.now, p);
    h.svc.disable_tracing(h.now, c).unwrap();
    let packets = h.read(c);
    assert_eq!(producer_markers(&packets), vec![1, 2, 3]);
    let f = faults_of(&packets);
    assert_eq!(f.vanished.len(), 1);
    assert_eq!(f.vanished[0].producer, "probes");
    assert_eq!(f.vanished[0].data_sources, ["ds"]);
    assert!(f.phrases()[0].starts_with("producer probes disconnected 2.0 s into the trace"));
}

#[test]
fn a_producer_leaving_after_its_stop_is_not_a_fault() {
    let mut h = H::new();
    let p = h.producer("probes", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    h.svc.disable_tracing(h.now, c).unwrap();
    h.svc.disconnect_producer(h.now, p);
    let f = faults_of(&h.read(c));
    assert!(f.phrases().is_empty(), "{:?}", f.phrases());
}

#[test]
fn unoffered_data_sources_and_ignored_fields_are_written() {
    let mut h = H::new();
    h.producer("probes", 0, &["linux.ftrace"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("linux.ftrce", 64);
    cfg.exclusive_prio = Some(1);
    h.enable(c, &cfg).unwrap();
    h.svc.disable_tracing(h.now, c).unwrap();
    let f = faults_of(&h.read(c));
    assert_eq!(f.not_offered, ["linux.ftrce"]);
    assert_eq!(f.ignored_fields, ["exclusive_prio"]);
}

#[test]
fn data_source_instances_are_bounded_per_session() {
    let mut h = H::new();
    let names: Vec<String> = (0..MAX_INSTANCES_PER_SESSION + 3)
        .map(|i| format!("ds{i}"))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    h.producer("many", 0, &refs);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds0", 64);
    let one = cfg.data_sources[0].clone();
    cfg.data_sources = names
        .iter()
        .take(MAX_DATA_SOURCES_PER_CONFIG)
        .map(|n| {
            let mut d = one.clone();
            d.config.as_mut().unwrap().name = Some(n.clone());
            d
        })
        .collect();
    // Two producers offering all of them: more instances than the bound.
    h.producer("many2", 0, &refs);
    h.enable(c, &cfg).unwrap();
    // Matching again (as ChangeTraceConfig does) does not count again.
    h.svc.change_trace_config(h.now, c, &encode(&cfg)).unwrap();
    h.svc.disable_tracing(h.now, c).unwrap();
    let f = faults_of(&h.read(c));
    let refused = 2 * MAX_DATA_SOURCES_PER_CONFIG - MAX_INSTANCES_PER_SESSION;
    assert_eq!(f.refused.len(), 33, "32 listed and the rest counted");
    assert_eq!(f.refused[32], format!("{} more", refused - 32));
    let mut too_many = cfg.clone();
    too_many.data_sources.push(one);
    let c2 = h.svc.connect_consumer(0);
    let e = h.enable(c2, &too_many).unwrap_err();
    assert!(e.contains("Too many data sources configured"), "{e}");
}

#[test]
fn a_failed_file_write_ends_the_session_with_the_error() {
    let mut h = H::new();
    h.producer("probes", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    cfg.duration_ms = Some(10_000);
    let sid = h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    h.outputs();
    assert_eq!(
        h.svc.file_write_failed(h.now, sid, "disk full".into()),
        None
    );
    h.advance(ms(6000)); // past the stop timeout
    let outs = h.outputs();
    assert!(outs.contains(&Output::TracingDisabled {
        consumer: c,
        error: Some("disk full".into())
    }));
    assert!(!outs.iter().any(|o| matches!(o, Output::WriteToFile { .. })));
}

#[test]
fn a_failed_final_write_names_the_consumer_to_tell() {
    let mut h = H::new();
    h.producer("probes", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    let sid = h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    h.svc.disable_tracing(h.now, c).unwrap();
    h.advance(ms(6000)); // past the stop timeout: the final write is queued
    let outs = h.outputs();
    assert!(outs.iter().any(|o| matches!(o, Output::WriteToFile { .. })));
    assert!(outs.contains(&Output::TracingDisabled {
        consumer: c,
        error: None
    }));
    assert_eq!(h.svc.file_write_failed(h.now, sid, "EIO".into()), Some(c));
}

#[test]
fn ignored_config_fields_are_listed_and_plain_configs_have_none() {
    use super::faults::ignored_config_fields;
    use crate::pb::protos::mod_TraceConfig::StatsdLogging;
    use crate::pb::protos::mod_TraceConfig::{mod_TriggerConfig::Trigger, TriggerConfig};
    assert!(ignored_config_fields(&basic_config("ds", 64)).is_empty());
    let mut cfg = basic_config("ds", 64);
    cfg.exclusive_prio = Some(3);
    cfg.trace_all_machines = Some(true); // honoured: not listed
    cfg.trigger_config = Some(TriggerConfig {
        triggers: vec![Trigger {
            max_per_24_h: Some(2),
            ..Default::default()
        }],
        ..Default::default()
    });
    assert_eq!(
        ignored_config_fields(&cfg),
        ["exclusive_prio", "trigger_config.triggers.max_per_24_h"]
    );
    let mut cfg = basic_config("ds", 64);
    cfg.persist_trace_across_reboots = Some(true);
    cfg.notify_traceur = Some(true);
    cfg.statsd_logging = Some(StatsdLogging::STATSD_LOGGING_ENABLED);
    cfg.experimental_trace_buffer_v2_compaction = Some(true);
    assert_eq!(
        ignored_config_fields(&cfg),
        [
            "persist_trace_across_reboots",
            "notify_traceur",
            "statsd_logging",
            "experimental_trace_buffer_v2_compaction"
        ]
    );
    // Asking for none of it is honoured.
    cfg.persist_trace_across_reboots = Some(false);
    cfg.notify_traceur = Some(false);
    cfg.statsd_logging = Some(StatsdLogging::STATSD_LOGGING_DISABLED);
    cfg.experimental_trace_buffer_v2_compaction = Some(false);
    assert!(ignored_config_fields(&cfg).is_empty());
    // zstd and deflate are honoured; a `compression {}` naming neither
    // (a codec newer than this build) is listed.
    use crate::pb::protos::mod_TraceConfig::{mod_CompressionConfig::Zstd, CompressionConfig};
    cfg.compression = Some(CompressionConfig {
        zstd: Some(Zstd { level: Some(5) }),
        ..Default::default()
    });
    assert!(ignored_config_fields(&cfg).is_empty());
    cfg.compression = Some(CompressionConfig::default());
    assert_eq!(
        ignored_config_fields(&cfg),
        ["compression (only deflate and zstd are built)"]
    );
}

/// A clone of a running session names what the session did not get so
/// far (a producer that vanished, a data source nobody offers), and the
/// session still names them at its own end.
#[test]
fn a_clone_names_the_faults_of_its_session() {
    use super::consumer_ops::CloneSelector;
    let mut h = H::new();
    let p = h.producer("gone", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.data_sources
        .push(basic_config("linux.ftrce", 64).data_sources.remove(0));
    let sid = h.enable(c, &cfg).unwrap();
    h.advance(ms(1000));
    h.svc.disconnect_producer(h.now, p);
    let cc = h.svc.connect_consumer(0);
    h.svc
        .clone_session(h.now, cc, CloneSelector::Id(sid), 3, Default::default())
        .unwrap();
    assert!(h.outputs().iter().any(|o| matches!(
        o,
        Output::CloneResult {
            token: 3,
            result: Ok(_),
            ..
        }
    )));
    for f in [faults_of(&h.read(cc)), {
        h.svc.disable_tracing(h.now, c).unwrap();
        faults_of(&h.read(c))
    }] {
        assert_eq!(f.vanished.len(), 1, "{:?}", f.phrases());
        assert_eq!(f.vanished[0].producer, "gone");
        assert_eq!(f.not_offered, ["linux.ftrce"]);
    }
}

#[test]
fn a_final_flush_and_a_stop_that_time_out_are_named() {
    let mut h = H::new();
    let d = DataSourceDescriptor {
        name: Some("ds".into()),
        will_notify_on_stop: Some(true),
        ..Default::default()
    };
    let p = h.producer_with("mute", 0, [d]);
    let quick = h.producer("quick", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.duration_ms = Some(1000);
    cfg.flush_timeout_ms = Some(300);
    cfg.data_source_stop_timeout_ms = Some(700);
    let sid = h.enable(c, &cfg).unwrap();
    let global = target_of(&mut h, p);
    h.commit_packets(p, 1, global, &[test_packet(1, 0)]);
    // The duration ends: the final flush goes out; only `quick` answers.
    h.advance(ms(1000));
    let flush = flush_request(&h.outputs(), quick).expect("final flush sent");
    h.svc.on_flush_ack(h.now, quick, flush);
    h.advance(ms(300));
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Stopping));
    h.advance(ms(700));
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));
    let packets = h.read(c);
    assert_eq!(producer_markers(&packets), vec![1], "what it wrote is kept");
    let f = faults_of(&packets);
    assert_eq!(f.slow_final_flush, ["ds in mute"]);
    assert_eq!(f.stop_timed_out, ["ds in mute"]);
    let phrases = f.phrases();
    assert!(
        phrases.iter().any(|p| p.starts_with(
            "data sources that did not answer the final flush within flush_timeout_ms"
        ) && p.ends_with(": ds in mute")),
        "{phrases:?}"
    );
    assert!(
        phrases.iter().any(|p| p
            .starts_with("data sources that did not stop within data_source_stop_timeout_ms")
            && p.ends_with(": ds in mute")),
        "{phrases:?}"
    );
}

/// A data source whose setup the producer refused (it never reports
/// started, nor stopped: a refused linux.perf) is named once, as never
/// started, not also as a stop that timed out (issue 33, defect 10).
#[test]
fn a_source_that_never_started_is_not_also_a_stop_timeout() {
    let mut h = H::new();
    let d = DataSourceDescriptor {
        name: Some("linux.perf".into()),
        will_notify_on_start: Some(true),
        will_notify_on_stop: Some(true),
        ..Default::default()
    };
    let p = h.producer_with("perfetto.traced_perf", 0, [d]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("linux.perf", 64);
    cfg.duration_ms = Some(1000);
    cfg.data_source_stop_timeout_ms = Some(700);
    let sid = h.enable(c, &cfg).unwrap();
    h.advance(ms(1000));
    if let Some(flush) = flush_request(&h.outputs(), p) {
        h.svc.on_flush_ack(h.now, p, flush);
    }
    // Nothing to wait for: it stops without the timeout.
    assert_eq!(h.svc.session_state(sid), Some(SessionState::Disabled));
    let f = faults_of(&h.read(c));
    assert!(f.stop_timed_out.is_empty(), "{:?}", f.phrases());
    let phrases = f.phrases();
    assert_eq!(phrases.len(), 1, "{phrases:?}");
    assert!(
        phrases[0].starts_with("data sources that never started")
            && phrases[0].ends_with(": linux.perf in perfetto.traced_perf"),
        "{phrases:?}"
    );
}

#[test]
fn flushes_and_stops_answered_in_time_are_not_faults() {
    let mut h = H::new();
    let p = h.producer("quick", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.duration_ms = Some(1000);
    h.enable(c, &cfg).unwrap();
    h.advance(ms(1000));
    let flush = flush_request(&h.outputs(), p).expect("final flush sent");
    h.svc.on_flush_ack(h.now, p, flush);
    let f = faults_of(&h.read(c));
    assert!(f.slow_final_flush.is_empty() && f.stop_timed_out.is_empty());
    assert!(f.phrases().is_empty(), "{:?}", f.phrases());
}

/// A clone whose flush a producer did not answer names its data sources;
/// the session it was cloned from, whose own final flush is answered,
/// does not.
#[test]
fn a_clone_whose_flush_times_out_names_the_silent_data_sources() {
    use super::consumer_ops::CloneSelector;
    let mut h = H::new();
    let p = h.producer("mute", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.flush_timeout_ms = Some(300);
    let sid = h.enable(c, &cfg).unwrap();
    let global = target_of(&mut h, p);
    h.commit_packets(p, 1, global, &[test_packet(1, 0)]);
    let cc = h.svc.connect_consumer(0);
    h.svc
        .clone_session(h.now, cc, CloneSelector::Id(sid), 3, Default::default())
        .unwrap();
    h.advance(ms(300));
    assert!(h.outputs().iter().any(|o| matches!(
        o,
        Output::CloneResult {
            token: 3,
            result: Ok(_),
            ..
        }
    )));
    let packets = h.read(cc);
    assert_eq!(producer_markers(&packets), vec![1]);
    assert_eq!(faults_of(&packets).slow_final_flush, ["ds in mute"]);
    h.svc.disable_tracing(h.now, c).unwrap();
    let f = faults_of(&h.read(c));
    assert!(f.slow_final_flush.is_empty(), "{:?}", f.phrases());
}
