//! End to end against the real daemon: `tracebox traced` on private socket
//! names, a producer (ipc client + TraceWriter over the received memfd SMB)
//! and a consumer (ipc client) run whole sessions; the packets read back
//! must be byte-identical to what the producer wrote, and (when a Python
//! venv exists) valid for PyPI perfetto's TracePacket descriptors.

mod traced_support;

use std::os::fd::OwnedFd;

use tracebox::pb::protos::*;
use tracebox::protozero::{put_bytes, put_varint, VecStream};
use tracebox::tracing::service::raw_proto::{decode_message, FieldIter};
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
            &enable_request(&trace_config_with(16 * 1024, &[])),
            None,
        )
        .unwrap();
    prod.start(1024);
    let expected = prod.write(700, 1); // ~6.3 MB, above the 4 MiB default queue
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
