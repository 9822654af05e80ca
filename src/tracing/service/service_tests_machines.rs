//! Remote machines in the core: which data sources of which machine a
//! config starts (upstream's `trace_all_machines` / `machine_name_filter`
//! rule), and the per-machine SystemInfo and RemoteClockSync packets.

use crate::pb::protos::mod_TracePacket::OneOfdata;
use crate::pb::protos::*;

use super::test_env::*;
use super::types::*;
use crate::protozero::decode::decode_message;

fn remote(h: &mut H, name: &str, hint: &str, machine: &str) -> ProducerId {
    let info = ProducerInfo {
        name: name.into(),
        machine_id_hint: Some(hint.into()),
        machine_name: machine.into(),
        ..Default::default()
    };
    let id = h.svc.connect_producer(info, None).unwrap();
    let d = DataSourceDescriptor {
        name: Some("ds".into()),
        ..Default::default()
    };
    h.svc.register_data_source(h.now, id, d).unwrap();
    id
}

fn started(h: &mut H, cfg: &TraceConfig, producers: &[ProducerId]) -> Vec<bool> {
    let c = h.svc.connect_consumer(0);
    h.enable(c, cfg).unwrap();
    let outs = h.outputs();
    producers
        .iter()
        .map(|&p| {
            cmds_for(&outs, p)
                .iter()
                .any(|c| matches!(c, ProducerCommand::SetupDataSource { .. }))
        })
        .collect()
}

#[test]
fn remote_data_sources_start_only_when_the_config_asks() {
    let mut h = H::new();
    let info = ProducerInfo {
        name: "probes".into(),
        machine_name: "central".into(),
        ..Default::default()
    };
    let host = h.svc.connect_producer(info, None).unwrap();
    let d = DataSourceDescriptor {
        name: Some("ds".into()),
        ..Default::default()
    };
    h.svc.register_data_source(h.now, host, d).unwrap();
    let b = remote(&mut h, "probes", "boot-b", "board-b");
    let c = remote(&mut h, "probes", "boot-c", "board-c");
    let all = [host, b, c];
    let plain = basic_config("ds", 64);
    assert_eq!(started(&mut h, &plain, &all), [true, false, false]);

    let mut every = plain.clone();
    every.trace_all_machines = Some(true);
    assert_eq!(started(&mut h, &every, &all), [true, true, true]);

    let mut only_b = plain.clone();
    only_b.data_sources[0].machine_name_filter = vec!["board-b".into()];
    assert_eq!(started(&mut h, &only_b, &all), [false, true, false]);

    // "host" names traced's machine; an explicit filter wins over the flag.
    let mut host_and_c = every.clone();
    host_and_c.data_sources[0].machine_name_filter = vec!["host".into(), "board-c".into()];
    assert_eq!(started(&mut h, &host_and_c, &all), [true, false, true]);
    // traced's machine also answers to its own name.
    let mut central = plain.clone();
    central.data_sources[0].machine_name_filter = vec!["central".into(), "board-b".into()];
    assert_eq!(started(&mut h, &central, &all), [true, true, false]);
}

fn machine_packets(packets: &[Vec<u8>]) -> Vec<TracePacket> {
    packets
        .iter()
        .map(|p| decode_packet(p))
        .filter(|p| p.machine_id.is_some())
        .collect()
}

#[test]
fn machines_system_info_and_clock_syncs_are_written_with_their_ids() {
    let mut h = H::new();
    remote(&mut h, "probes", "boot-b", "board-b");
    let b = h.svc.machine_id_for("boot-b", "board-b").unwrap();
    assert_eq!(b, 1);
    // utsname { sysname: "B" }
    h.svc
        .set_machine_system_info(b, vec![0x0a, 0x03, 0x0a, 0x01, b'B']);
    h.svc.sync_machine_clocks(b, vec![(6, 100), (3, 90)]);
    h.svc.sync_machine_clocks(b, vec![(6, 200), (3, 190)]);
    let c = h.svc.connect_consumer(0);
    h.enable(c, &basic_config("ds", 64)).unwrap();
    let got = machine_packets(&h.read(c));
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|p| p.machine_id == Some(b)));
    let OneOfdata::system_info(info) = &got[0].data else {
        panic!("{:?}", got[0])
    };
    assert_eq!(info.utsname.as_ref().unwrap().sysname.as_deref(), Some("B"));
    let OneOfdata::remote_clock_sync(sync) = &got[1].data else {
        panic!("{:?}", got[1])
    };
    assert_eq!(sync.synced_clocks.len(), 2);
    let client = sync.synced_clocks[1].client_clocks.as_ref().unwrap();
    assert_eq!(client.clocks[0].timestamp, Some(200));
    assert!(!sync.synced_clocks[1]
        .host_clocks
        .as_ref()
        .unwrap()
        .clocks
        .is_empty());

    // Written once; a new exchange brings a new clock-sync packet.
    assert!(machine_packets(&h.read(c)).is_empty());
    h.svc.sync_machine_clocks(b, vec![(6, 300)]);
    let got = machine_packets(&h.read(c));
    assert_eq!(got.len(), 1);
    assert!(matches!(got[0].data, OneOfdata::remote_clock_sync(_)));
}

/// An inline (emulated) chunk: header (id, writer, one packet) + fragment.
fn inline_chunk(buffer: u32, writer: u16, chunk_id: u32) -> mod_CommitDataRequest::ChunksToMove {
    let mut data = chunk_id.to_le_bytes().to_vec();
    data.extend_from_slice(&writer.to_le_bytes());
    data.extend_from_slice(&1u16.to_le_bytes());
    data.extend_from_slice(&fragment(&test_packet(u64::from(chunk_id), 0)));
    mod_CommitDataRequest::ChunksToMove {
        target_buffer: Some(buffer),
        data: Some(data),
        ..Default::default()
    }
}

#[test]
fn chunks_an_emulating_producer_never_sent_are_named() {
    let mut h = H::new();
    let b = remote(&mut h, "probes", "boot-b", "board-b");
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.trace_all_machines = Some(true);
    h.enable(c, &cfg).unwrap();
    let outs = h.outputs();
    let config = cmds_for(&outs, b)
        .into_iter()
        .find_map(|c| match c {
            ProducerCommand::SetupDataSource { config, .. } => Some(config),
            _ => None,
        })
        .unwrap();
    let buffer = decode_message::<DataSourceConfig>(&config)
        .unwrap()
        .target_buffer
        .unwrap();
    // Ids 0, 1, 4: 2 and 3 never came; a rewrite (4) or a late one (2)
    // adds nothing.
    for id in [0, 1, 4, 4, 2] {
        let req = CommitDataRequest {
            chunks_to_move: vec![inline_chunk(buffer, 1, id)],
            ..Default::default()
        };
        h.svc.commit_data(h.now, b, &req);
    }
    h.svc.disable_tracing(h.now, c).unwrap();
    let mut faults = crate::cmd::trace_faults::TraceFaults::default();
    let mut writer_losses = Vec::new();
    for p in h.read(c) {
        let d = decode_packet(&p);
        if let OneOfdata::trace_stats(st) = &d.data {
            let losses = st.buffer_stats.iter().map(|b| b.trace_writer_packet_loss);
            writer_losses.extend(losses.map(|l| l.unwrap_or(0)));
        }
        if let OneOfdata::service_event(_) = d.data {
            let event = crate::protozero::decode::FieldIter::new(&p)
                .find(|f| f.number == 69)
                .unwrap();
            faults.observe_service_event(d.timestamp.unwrap_or(0), event.value);
        }
    }
    assert_eq!(
        faults.never_arrived,
        [("probes on machine board-b".into(), 2)]
    );
    // One gap seen, in upstream's own counter of the target buffer.
    assert_eq!(writer_losses, [1], "trace_writer_packet_loss per buffer");
    let phrases = faults.phrases();
    assert!(
        phrases.contains(
            &"2 chunks of producer probes on machine board-b never reached traced \
              (it could not send them inline)"
                .to_string()
        ),
        "{phrases:?}"
    );
}

/// Flush rounds sent to `p` among `outs`.
fn flushes_to(outs: &[Output], p: ProducerId) -> usize {
    cmds_for(outs, p)
        .iter()
        .filter(|c| matches!(c, ProducerCommand::Flush { .. }))
        .count()
}

#[test]
fn relayed_producers_are_asked_to_commit_every_period_and_their_loss_window_is_named() {
    let mut h = H::new();
    let host = h.producer("local", 0, &["ds"]);
    let b = remote(&mut h, "probes", "boot-b", "board-b");
    h.svc.set_relay_commit_period_ms(400).unwrap();
    assert!(h.svc.set_relay_commit_period_ms(10).is_err());
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.trace_all_machines = Some(true);
    h.enable(c, &cfg).unwrap();
    h.outputs();
    h.advance(ms(399));
    assert_eq!(flushes_to(&h.outputs(), b), 0);
    h.advance(ms(1));
    let outs = h.outputs();
    assert_eq!(flushes_to(&outs, b), 1, "the relayed producer commits");
    assert_eq!(flushes_to(&outs, host), 0, "a local producer is left alone");
    h.advance(ms(400));
    assert_eq!(flushes_to(&h.outputs(), b), 1, "and again, every period");

    h.svc.disconnect_producer(h.now, b);
    h.advance(ms(400));
    assert_eq!(flushes_to(&h.outputs(), b), 0, "no rounds without it");
    h.svc.disable_tracing(h.now, c).unwrap();
    let mut faults = crate::cmd::trace_faults::TraceFaults::default();
    for p in h.read(c) {
        if let OneOfdata::service_event(_) = decode_packet(&p).data {
            let event = crate::protozero::decode::FieldIter::new(&p)
                .find(|f| f.number == 69)
                .unwrap();
            faults.observe_service_event(h.now, event.value);
        }
    }
    let gone = &faults.vanished;
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0].producer, "probes on machine board-b");
    assert_eq!(gone[0].uncommitted_window_ms, Some(400));
}
