//! Remote machines in the core: which data sources of which machine a
//! config starts (upstream's `trace_all_machines` / `machine_name_filter`
//! rule), and the per-machine SystemInfo and RemoteClockSync packets.

use crate::pb::protos::mod_TracePacket::OneOfdata;
use crate::pb::protos::*;

use super::test_env::*;
use super::types::*;

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
    let host = h.producer("probes", 0, &["ds"]);
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
