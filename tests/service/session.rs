//! End to end against the real daemon: `tracebox traced` on private socket
//! names, a producer (ipc client + TraceWriter over the received memfd SMB)
//! and a consumer (ipc client) run whole sessions; the packets read back
//! must be byte-identical to what the producer wrote, and (when a Python
//! venv exists) valid for PyPI perfetto's TracePacket descriptors.

use crate::support::traced as traced_support;

use std::os::fd::OwnedFd;

use tracebox::pb::protos::*;
use tracebox::protozero::decode::{decode_message, FieldIter};
use tracebox::protozero::{put_bytes, put_varint, VecStream};
use traced_support::*;

fn sockets(tag: &str) -> (String, String) {
    let pid = std::process::id();
    (
        format!("@tracebox-test-traced-p-{tag}-{pid}"),
        format!("@tracebox-test-traced-c-{tag}-{pid}"),
    )
}

fn enable_request(config: &[u8]) -> Vec<u8> {
    let mut req = VecStream::new();
    put_bytes(&mut req, 1, config);
    req.into_bytes()
}

#[test]
fn full_session_over_real_sockets() {
    let (psock, csock) = sockets("full");
    let _daemon = start_traced(&psock, &csock);
    let mut prod = TestProducer::connect(&psock, "test.producer", "test.ds", 512);
    let (mut cons, cport) = connect(&csock, "ConsumerPort");
    let enable = cons
        .start_invoke(
            &cport,
            "EnableTracing",
            &enable_request(&trace_config()),
            None,
        )
        .unwrap();
    let cfg = prod.start(512);
    assert!(cfg.ftrace_config.is_some());
    let expected = prod.write(60, 7);

    // Stop: the pending EnableTracing completes; the producer is told to stop.
    call(&mut cons, &cport, "DisableTracing", &[]);
    let done = cons.next_reply(enable).unwrap().unwrap();
    let done: EnableTracingResponse = decode_message(&done.payload).unwrap();
    assert!(done.error.is_none(), "{:?}", done.error);
    prod.serve_until_stop();

    let packets = packets_from_replies(&cons.invoke(&cport, "ReadBuffers", &[], None).unwrap());
    let config_packet = packets
        .iter()
        .find_map(|p| {
            FieldIter::new(p)
                .find(|f| f.number == 33)
                .map(|f| f.value.to_vec())
        })
        .expect("trace_config packet");
    assert_eq!(
        config_packet,
        trace_config(),
        "trace_config packet is the consumer's bytes"
    );
    let got = producer_payloads(&packets);
    assert_eq!(got.len(), expected.len());
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(g == e, "packet {i} differs");
    }
    check_with_python(&packets, expected.len());

    // The raw DataSourceConfig reaches the producer with unknown fields
    // (pb-rs drops them, so look at the raw command bytes).
    call(&mut cons, &cport, "FreeBuffers", &[]);
    let _enable2 = cons
        .start_invoke(
            &cport,
            "EnableTracing",
            &enable_request(&trace_config()),
            None,
        )
        .unwrap();
    let r = prod.client.next_reply(prod.stream).unwrap().unwrap();
    let sds = FieldIter::new(&r.payload)
        .find(|f| f.number == 6)
        .expect("setup_data_source");
    let cfg = FieldIter::new(sds.value).find(|f| f.number == 2).unwrap();
    assert!(FieldIter::new(cfg.value).any(|f| f.number == 7777));
    let stats: GetTraceStatsResponse =
        decode_message(&call(&mut cons, &cport, "GetTraceStats", &[])).unwrap();
    assert_eq!(stats.trace_stats.unwrap().producers_connected, Some(1));
}

#[test]
fn read_larger_than_the_ipc_queue() {
    let (psock, csock) = sockets("large");
    let _daemon = start_traced(&psock, &csock);
    let mut prod = TestProducer::connect(&psock, "big.producer", "test.ds", 1024);
    let (mut cons, cport) = connect(&csock, "ConsumerPort");
    let enable = cons
        .start_invoke(
            &cport,
            "EnableTracing",
            &enable_request(&trace_config_with(32 * 1024, &[])),
            None,
        )
        .unwrap();
    prod.start(1024);
    // ~18 MB: more than the consumer send-queue bound (16 MiB), so the read
    // must be streamed at the pace the consumer reads.
    let expected = prod.write(2000, 1);
    call(&mut cons, &cport, "DisableTracing", &[]);
    assert!(cons.next_reply(enable).unwrap().is_some());
    let packets = packets_from_replies(&cons.invoke(&cport, "ReadBuffers", &[], None).unwrap());
    let got = producer_payloads(&packets);
    assert_eq!(got.len(), expected.len());
    assert!(got == expected);
}

#[test]
fn write_into_file_with_passed_fd() {
    let (psock, csock) = sockets("file");
    let _daemon = start_traced(&psock, &csock);
    let mut prod = TestProducer::connect(&psock, "file.producer", "test.ds", 512);
    let (mut cons, cport) = connect(&csock, "ConsumerPort");
    let mut extra = VecStream::new();
    put_varint(&mut extra, 3, 300); // duration_ms
    put_varint(&mut extra, 8, 1); // write_into_file
    put_varint(&mut extra, 9, 100); // file_write_period_ms
    let cfg = trace_config_with(2048, extra.as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.pftrace");
    let file = std::fs::File::create(&path).unwrap();
    let enable = cons
        .start_invoke(
            &cport,
            "EnableTracing",
            &enable_request(&cfg),
            Some(OwnedFd::from(file)),
        )
        .unwrap();
    prod.start(512);
    let expected = prod.write(80, 9);
    // duration_ms expires: the service flushes, stops and completes
    // EnableTracing after the final file write.
    prod.serve_until_stop();
    let done = cons.next_reply(enable).unwrap().unwrap();
    let done: EnableTracingResponse = decode_message(&done.payload).unwrap();
    assert!(done.error.is_none(), "{:?}", done.error);
    let packets = packets_from_file(&std::fs::read(&path).unwrap());
    assert!(
        FieldIter::new(&packets[0]).any(|f| f.number == 6),
        "clock snapshot first"
    );
    let got = producer_payloads(&packets);
    assert_eq!(got.len(), expected.len());
    assert!(got == expected);
    check_with_python(&packets, expected.len());
    // ReadBuffers is refused for write_into_file sessions.
    let r = cons.invoke(&cport, "ReadBuffers", &[], None).unwrap();
    assert!(!r[0].success);
}

#[test]
fn enable_errors_come_back_in_the_reply() {
    let (psock, csock) = sockets("err");
    let _daemon = start_traced(&psock, &csock);
    let (mut cons, cport) = connect(&csock, "ConsumerPort");
    let mut extra = VecStream::new();
    put_varint(&mut extra, 8, 1); // write_into_file without a file
    let r = call(
        &mut cons,
        &cport,
        "EnableTracing",
        &enable_request(&trace_config_with(64, extra.as_bytes())),
    );
    let r: EnableTracingResponse = decode_message(&r).unwrap();
    assert!(r.error.unwrap().contains("no output file"));
    // A producer must initialize first.
    let (mut p, port) = connect(&psock, "ProducerPort");
    let replies = p.invoke(&port, "RegisterDataSource", &[], None).unwrap();
    assert!(!replies[0].success);
    let caps: QueryCapabilitiesResponse =
        decode_message(&call(&mut cons, &cport, "QueryCapabilities", &[])).unwrap();
    assert_eq!(caps.capabilities.unwrap().has_clone_session, Some(true));
}

#[test]
fn query_service_state_and_observe_events() {
    let (psock, csock) = sockets("query");
    let _daemon = start_traced(&psock, &csock);
    let mut prod = TestProducer::connect(&psock, "query.producer", "test.ds", 256);
    let (mut cons, cport) = connect(&csock, "ConsumerPort");
    // ObserveEvents(TYPE_DATA_SOURCES_INSTANCES, TYPE_ALL_DATA_SOURCES_STARTED)
    let observe = cons
        .start_invoke(&cport, "ObserveEvents", &[0x08, 0x01, 0x08, 0x02], None)
        .unwrap();
    let _enable = cons
        .start_invoke(
            &cport,
            "EnableTracing",
            &enable_request(&trace_config_with(256, &[])),
            None,
        )
        .unwrap();
    prod.start(256);
    let mut saw_started = false;
    let mut saw_all = false;
    while !(saw_started && saw_all) {
        let r = cons.next_reply(observe).unwrap().unwrap();
        let r: ObserveEventsResponse = decode_message(&r.payload).unwrap();
        let ev = r.events.unwrap();
        saw_started |= ev
            .instance_state_changes
            .iter()
            .any(|c| c.data_source_name.as_deref() == Some("test.ds"));
        saw_all |= ev.all_data_sources_started == Some(true);
    }
    let replies = cons.invoke(&cport, "QueryServiceState", &[], None).unwrap();
    let mut state_bytes = Vec::new();
    // Each reply carries a piece of the serialized state (field 1).
    for r in &replies {
        let piece = FieldIter::new(&r.payload).find(|f| f.number == 1).unwrap();
        state_bytes.extend_from_slice(piece.value);
    }
    let state: TracingServiceState = decode_message(&state_bytes).unwrap();
    assert!(state
        .producers
        .iter()
        .any(|p| p.name.as_deref() == Some("query.producer")));
    assert!(state
        .data_sources
        .iter()
        .any(|d| d.ds_descriptor.as_ref().unwrap().name.as_deref() == Some("test.ds")));
    assert_eq!(state.tracing_sessions.len(), 1);
    assert_eq!(state.tracing_sessions[0].state.as_deref(), Some("STARTED"));
}

#[test]
fn write_into_file_with_output_path() {
    let (psock, csock) = sockets("path");
    let _daemon = start_traced(&psock, &csock);
    let mut prod = TestProducer::connect(&psock, "path.producer", "test.ds", 256);
    let (mut cons, cport) = connect(&csock, "ConsumerPort");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("by-traced.pftrace");
    let mut extra = VecStream::new();
    put_varint(&mut extra, 8, 1); // write_into_file
    tracebox::protozero::put_str(&mut extra, 29, path.to_str().unwrap()); // output_path
    let cfg = trace_config_with(1024, extra.as_bytes());
    let enable = cons
        .start_invoke(&cport, "EnableTracing", &enable_request(&cfg), None)
        .unwrap();
    prod.start(256);
    let expected = prod.write(30, 10);
    call(&mut cons, &cport, "DisableTracing", &[]);
    let done: EnableTracingResponse =
        decode_message(&cons.next_reply(enable).unwrap().unwrap().payload).unwrap();
    assert!(done.error.is_none(), "{:?}", done.error);
    let got = producer_payloads(&packets_from_file(&std::fs::read(&path).unwrap()));
    assert!(got == expected);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o644
    );
    // The file must not exist already (O_EXCL).
    call(&mut cons, &cport, "FreeBuffers", &[]);
    let r = call(&mut cons, &cport, "EnableTracing", &enable_request(&cfg));
    let r: EnableTracingResponse = decode_message(&r).unwrap();
    assert!(r.error.unwrap().contains("Failed to create"));
}
