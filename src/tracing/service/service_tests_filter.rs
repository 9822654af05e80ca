//! TraceConfig.trace_filter through the service: what a consumer reads.

use super::test_env::*;
use super::trace_filter::tests::{bytecode, Allow};
use super::*;
use crate::pb::protos::mod_TraceConfig::mod_TraceFilter::{StringFilterChain, StringFilterRule};
use crate::pb::protos::mod_TraceConfig::TraceFilter as TraceFilterConfig;
use crate::pb::protos::mod_TracePacket::OneOfdata;
use crate::pb::protos::DataSourceConfig;
use crate::pb::protos::TraceConfig;
use crate::protozero::decode::{decode_message, FieldIter};

fn with_filter(code: Vec<u8>) -> TraceConfig {
    TraceConfig {
        trace_filter: Some(TraceFilterConfig {
            bytecode_v2: Some(code),
            ..Default::default()
        }),
        ..basic_config("ds", 64)
    }
}

/// The global buffer id the producer was told to write into.
fn target_buffer(outs: &[Output], p: ProducerId) -> u32 {
    cmds_for(outs, p)
        .iter()
        .find_map(|cmd| match cmd {
            ProducerCommand::SetupDataSource { config, .. } => {
                decode_message::<DataSourceConfig>(config)
                    .ok()?
                    .target_buffer
            }
            _ => None,
        })
        .unwrap()
}

fn field_numbers(packet: &[u8]) -> Vec<u32> {
    FieldIter::new(packet).map(|f| f.number).collect()
}

#[test]
fn packets_keep_only_allowed_fields() {
    use Allow::*;
    // Trace.packet -> TracePacket{trusted_uid(3), timestamp(8)}.
    let code = bytecode(&[&[Nested(1, 1)], &[Simple(3), Simple(8)]]);
    let mut h = H::new();
    let p = h.producer("prod", 1000, &["ds"]);
    let c = h.svc.connect_consumer(1000);
    h.enable(c, &with_filter(code)).unwrap();
    let outs = h.outputs();
    let global = target_buffer(&outs, p);
    h.commit_packets(p, 1, global, &[test_packet(11, 30), test_packet(12, 0)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    let packets = h.read(c);
    // Producer packets: timestamp and trusted_uid stay; the padding (900),
    // trusted_pid (79) and sequence id (10) are gone.
    let producer: Vec<_> = packets
        .iter()
        .filter(|p| matches!(decode_packet(p).timestamp, Some(11 | 12)))
        .collect();
    assert_eq!(producer.len(), 2);
    for p in &producer {
        assert_eq!(field_numbers(p), [8, 3], "{p:?}");
    }
    // Service packets kept only allowed fields (none of theirs, mostly
    // trusted_uid), except trace_stats which is not filtered.
    let last = decode_packet(packets.last().unwrap());
    let OneOfdata::trace_stats(st) = last.data else {
        panic!("last packet is not trace_stats: {last:?}");
    };
    let fs = st.filter_stats.expect("filter_stats");
    assert!(fs.input_packets.unwrap() >= 2 + 5, "{fs:?}");
    assert_eq!(fs.errors, Some(0));
    assert!(fs.output_bytes.unwrap() < fs.input_bytes.unwrap());
    assert_eq!(fs.bytes_discarded_per_buffer.len(), 1);
    for p in &packets[..packets.len() - 1] {
        assert!(
            field_numbers(p).iter().all(|f| [3, 8].contains(f)),
            "{:?}",
            field_numbers(p)
        );
    }
}

#[test]
fn bad_filters_are_refused_at_enable() {
    use Allow::*;
    let mut h = H::new();
    h.producer("prod", 1000, &["ds"]);
    let c = h.svc.connect_consumer(1000);
    let mut code = bytecode(&[&[Nested(1, 1)], &[Simple(8)]]);
    *code.last_mut().unwrap() ^= 0x01;
    let e = h.enable(c, &with_filter(code)).unwrap_err();
    assert!(
        e.contains("Trace filter bytecode invalid") && e.contains("checksum"),
        "{e}"
    );
    let e = h.enable(c, &with_filter(Vec::new())).unwrap_err();
    assert!(e.contains("Trace filter bytecode invalid"), "{e}");

    let mut cfg = with_filter(bytecode(&[&[Nested(1, 1)], &[Simple(8)]]));
    cfg.trace_filter.as_mut().unwrap().string_filter_chain = Some(StringFilterChain {
        rules: vec![StringFilterRule {
            regex_pattern: Some("x".into()),
            ..Default::default()
        }],
    });
    let e = h.enable(c, &cfg).unwrap_err();
    assert!(e.contains("string_filter_chain"), "{e}");
    // Nothing was left behind.
    assert!(h.svc.session_ids().is_empty());
}

#[test]
fn write_into_file_is_filtered_too() {
    use Allow::*;
    let code = bytecode(&[&[Nested(1, 1)], &[Simple(8)]]);
    let mut h = H::new();
    let p = h.producer("prod", 1000, &["ds"]);
    let c = h.svc.connect_consumer(1000);
    let mut cfg = with_filter(code);
    cfg.write_into_file = Some(true);
    h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    let outs = h.outputs();
    let global = target_buffer(&outs, p);
    h.commit_packets(p, 1, global, &[test_packet(7, 40)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    let mut file = Vec::new();
    for o in h.outputs() {
        if let Output::WriteToFile { data, .. } = o {
            file.extend_from_slice(&data);
        }
    }
    // Trace.packet fields: every packet but trace_stats holds at most a
    // timestamp; the producer's is exactly `timestamp: 7`.
    let packets: Vec<&[u8]> = FieldIter::new(&file).map(|f| f.value).collect();
    assert!(packets.contains(&&[0x40u8, 7][..]), "{packets:02x?}");
    let (stats, rest) = packets.split_last().unwrap();
    assert!(matches!(
        decode_packet(stats).data,
        OneOfdata::trace_stats(_)
    ));
    for p in rest {
        assert!(field_numbers(p).iter().all(|&f| f == 8), "{p:02x?}");
    }
}

#[test]
fn clones_keep_the_filter() {
    use crate::pb::protos::CommitDataRequest;
    use Allow::*;
    let code = bytecode(&[&[Nested(1, 1)], &[Simple(8)]]);
    let mut h = H::new();
    let p = h.producer("p", 0, &["ds"]);
    let c = h.svc.connect_consumer(10);
    let sid = h.enable(c, &with_filter(code)).unwrap();
    let outs = h.outputs();
    let global = target_buffer(&outs, p);
    h.commit_packets(p, 1, global, &[test_packet(5, 20)]);
    let cc = h.svc.connect_consumer(10);
    h.svc
        .clone_session(h.now, cc, CloneSelector::Id(sid), 5, Default::default())
        .unwrap();
    let flush_id = flush_request(&h.outputs(), p).unwrap();
    let ack = CommitDataRequest {
        flush_request_id: Some(flush_id),
        ..Default::default()
    };
    h.svc.commit_data(h.now, p, &ack);
    let packets = h.read(cc);
    assert!(packets.iter().any(|p| p == &[0x40, 5]), "{packets:02x?}");
    let (_, rest) = packets.split_last().unwrap();
    for p in rest {
        assert!(field_numbers(p).iter().all(|&f| f == 8), "{p:02x?}");
    }
}
