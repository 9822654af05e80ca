//! Malformed method arguments (a nested length running past its parent,
//! which quick-protobuf would trust) get a failed reply; traced survives
//! and keeps serving the same and other clients.

use crate::support::traced as traced_support;

use traced_support::{connect, start_traced};

#[test]
fn nested_overruns_are_refused_and_traced_keeps_serving() {
    let pid = std::process::id();
    let (p, c) = (
        format!("@tbx-hostile-{pid}-p"),
        format!("@tbx-hostile-{pid}-c"),
    );
    let _traced = start_traced(&p, &c);

    let (mut consumer, cport) = connect(&c, "ConsumerPort");
    // EnableTracingRequest{ trace_config { buffers { <9 bytes claimed, 0 there> } } }
    let bad_enable = [0x0a, 0x04, 0x0a, 0x02, 0x0a, 0x09];
    let r = consumer
        .invoke(&cport, "EnableTracing", &bad_enable, None)
        .unwrap();
    assert_eq!(r.len(), 1);
    assert!(!r[0].success, "malformed EnableTracing accepted");

    let (mut producer, pport) = connect(&p, "ProducerPort");
    // CommitDataRequest{ chunks_to_move { data: <5 bytes claimed, 0 there> } }
    let bad_commit = [0x0a, 0x02, 0x22, 0x05];
    let r = producer
        .invoke(&pport, "InitializeConnection", &[0x1a, 0x01, b'x'], None)
        .unwrap();
    assert!(r[0].success);
    let r = producer
        .invoke(&pport, "CommitData", &bad_commit, None)
        .unwrap();
    assert!(!r[0].success, "malformed CommitData accepted");

    // Both connections, and the service, still work.
    let r = consumer
        .invoke(&cport, "QueryServiceState", &[], None)
        .unwrap();
    assert!(r.iter().all(|x| x.success) && !r.is_empty());
    let r = producer.invoke(&pport, "Sync", &[], None).unwrap();
    assert!(r[0].success);
}
