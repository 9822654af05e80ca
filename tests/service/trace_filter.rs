//! TraceConfig.trace_filter end to end: the same producer packets and the
//! same bytecode through our traced and through real Perfetto's traced
//! (tests/sdk-interop real-traced) come out byte-identical; a malformed
//! bytecode is refused at EnableTracing by both.

use crate::support::probes as traced_probes_common;
use crate::support::traced as traced_support;

use std::path::Path;

use tracebox::pb::protos::*;
use tracebox::protozero::decode::{decode_message, read_varint, FieldIter};
use tracebox::protozero::{encode_varint, put_bytes, VecStream};
use traced_probes_common::{interop_bin, start_our_traced, start_real_traced, Proc, Sockets};
use traced_support::*;

/// Bytecode from `messages` of `(field, nested message index or 0)`,
/// upstream's format: `field << 3 | 1` (simple) or `| 3` + index, an end
/// word per message, the FNV-1a checksum last.
fn bytecode(messages: &[&[(u32, u32)]]) -> Vec<u8> {
    let mut words = Vec::new();
    for m in messages {
        for &(f, nested) in *m {
            if nested == 0 {
                words.push(f << 3 | 1);
            } else {
                words.extend([f << 3 | 3, nested]);
            }
        }
        words.push(0);
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in &words {
        for b in w.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    words.push(h as u32);
    let mut out = Vec::new();
    for w in words {
        let mut v = [0u8; 10];
        let n = encode_varint(w as u64, &mut v);
        out.extend_from_slice(&v[..n]);
    }
    out
}

fn config_with_filter(code: &[u8]) -> Vec<u8> {
    let mut filter = VecStream::new();
    put_bytes(&mut filter, 2, code);
    let mut field = VecStream::new();
    put_bytes(&mut field, 33, filter.as_bytes());
    trace_config_with(4096, field.as_bytes())
}

fn enable_request(config: &[u8]) -> Vec<u8> {
    let mut req = VecStream::new();
    put_bytes(&mut req, 1, config);
    req.into_bytes()
}

/// Keeps TracePacket.timestamp (8) and field 900 with only its field 1.
fn allowlist() -> Vec<u8> {
    bytecode(&[&[(1, 1)], &[(8, 0), (900, 2)], &[(1, 0)]])
}

/// Records with `code` as trace filter; returns the packets read back.
fn record(s: &Sockets, code: &[u8]) -> Vec<Vec<u8>> {
    let mut prod = TestProducer::connect(&s.producer, "filter.producer", "test.ds", 512);
    let (mut cons, cport) = connect(&s.consumer, "ConsumerPort");
    let enable = cons
        .start_invoke(
            &cport,
            "EnableTracing",
            &enable_request(&config_with_filter(code)),
            None,
        )
        .unwrap();
    prod.start(512);
    prod.write(30, 7);
    call(&mut cons, &cport, "DisableTracing", &[]);
    let done = cons.next_reply(enable).unwrap().unwrap();
    let done: EnableTracingResponse = decode_message(&done.payload).unwrap();
    assert!(done.error.is_none(), "{:?}", done.error);
    prod.serve_until_stop();
    packets_from_replies(&cons.invoke(&cport, "ReadBuffers", &[], None).unwrap())
}

/// Producer packets by their timestamp (1000 + i).
fn producer_packets(packets: &[Vec<u8>]) -> Vec<Vec<u8>> {
    packets
        .iter()
        .filter(|p| {
            FieldIter::new(p).any(|f| {
                f.number == 8
                    && read_varint(f.value).is_some_and(|(v, _)| (1000..1030).contains(&v))
            })
        })
        .cloned()
        .collect()
}

fn refused(s: &Sockets) -> String {
    let mut bad = allowlist();
    *bad.last_mut().unwrap() ^= 1;
    let (mut cons, cport) = connect(&s.consumer, "ConsumerPort");
    let r = cons
        .invoke(
            &cport,
            "EnableTracing",
            &enable_request(&config_with_filter(&bad)),
            None,
        )
        .unwrap();
    let r: EnableTracingResponse = decode_message(&r[0].payload).unwrap();
    r.error.expect("a malformed filter bytecode was accepted")
}

fn run_against(start: impl Fn(&Sockets, &Path) -> Proc) -> (Vec<Vec<u8>>, String) {
    let dir = tempfile::tempdir().unwrap();
    let s = Sockets::in_dir(dir.path());
    let _traced = start(&s, &dir.path().join("traced.log"));
    let packets = record(&s, &allowlist());
    (producer_packets(&packets), refused(&s))
}

#[test]
fn ours_filters_like_real_perfetto() {
    let (ours, our_error) = run_against(start_our_traced);
    assert_eq!(ours.len(), 30);
    for (i, p) in ours.iter().enumerate() {
        // timestamp, then 900 { 1: "packet i" }: the 9000-byte payload,
        // the sequence id and trusted uid/pid are gone.
        let fields: Vec<u32> = FieldIter::new(p).map(|f| f.number).collect();
        assert_eq!(fields, [8, 900], "packet {i}");
        let inner = FieldIter::new(p).find(|f| f.number == 900).unwrap();
        let inner: Vec<_> = FieldIter::new(inner.value)
            .map(|f| (f.number, f.value.to_vec()))
            .collect();
        assert_eq!(inner, [(1, format!("packet {i}").into_bytes())]);
    }
    assert!(
        our_error.contains("Trace filter bytecode invalid"),
        "{our_error}"
    );

    let real = interop_bin("real-traced").unwrap();
    let (theirs, their_error) = run_against(|s, log| start_real_traced(&real, s, log));
    assert_eq!(ours, theirs, "filtered packets differ from real Perfetto's");
    assert!(!their_error.is_empty());
}

/// A text config carrying upstream's bytecode as an octal-escaped string
/// (test/configs/ftrace_with_filter.cfg upstream: sched_switch only) parses
/// to the same bytes, and those load as a filter.
#[test]
fn upstream_text_config_bytecode_loads() {
    use tracebox::cmd::pbtx::{text_to_proto, ParseOptions, TRACE_CONFIG};
    use tracebox::tracing::service::trace_filter::TraceFilter;
    let text = r#"
buffers { size_kb: 1024 }
trace_filter {
  bytecode: "\013\001\000\013\002\101\121\151\321\002\000\011\023\003\031\000\012\002\043\004\000\012\007\000\273\341\337\347\016"
}
"#;
    let raw = text_to_proto(
        TRACE_CONFIG,
        "cfg",
        text,
        ParseOptions {
            allow_unknown: false,
        },
    )
    .unwrap();
    let cfg: TraceConfig = decode_message(&raw).unwrap();
    let tf = cfg.trace_filter.unwrap();
    assert_eq!(
        tf.bytecode.as_deref().unwrap(),
        b"\x0b\x01\x00\x0b\x02\x41\x51\x69\xd1\x02\x00\x09\x13\x03\x19\x00\x0a\x02\x23\x04\x00\x0a\x07\x00\xbb\xe1\xdf\xe7\x0e"
    );
    TraceFilter::from_config(&tf).unwrap();
}

/// Our `perfetto` client against our traced: a config whose filter does
/// not load fails with the service's reason on stderr.
#[test]
fn perfetto_client_prints_why_a_filter_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Sockets::in_dir(dir.path());
    let _traced = start_our_traced(&s, &dir.path().join("traced.log"));
    let cfg = dir.path().join("cfg.pbtx");
    std::fs::write(
        &cfg,
        "buffers { size_kb: 1024 }\nduration_ms: 500\n\
         data_sources { config { name: \"test.ds\" } }\n\
         trace_filter { bytecode_v2: \"\\013\\001\\000\\000\" }\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(dir.path().join("t.pftrace"))
        .env("PERFETTO_CONSUMER_SOCK_NAME", &s.consumer)
        .env("PERFETTO_PRODUCER_SOCK_NAME", &s.producer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Trace filter bytecode invalid: bytecode: checksum mismatch"),
        "{err}"
    );
}

/// Real kernel events through our daemons with upstream's sched_switch-only
/// bytecode (its test/configs/ftrace_with_filter.cfg): the trace holds
/// sched_switch events and no other event, and no field the bytecode does
/// not allow, whether read back or written into the file.
#[test]
fn ftrace_through_upstream_sched_switch_filter() {
    for (instance, write_into_file) in [("tbx_filter_rb", false), ("tbx_filter_wif", true)] {
        let _ = std::fs::remove_dir(traced_probes_common::instance_dir(instance));
        let dir = tempfile::tempdir().unwrap();
        let daemons = traced_probes_common::start_our_daemons(dir.path());
        let cfg = dir.path().join("cfg.pbtx");
        std::fs::write(
            &cfg,
            format!(
                r#"duration_ms: 1500
write_into_file: {write_into_file}
buffers {{ size_kb: 8192 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "sched/sched_switch"
    ftrace_events: "sched/sched_waking"
    compact_sched {{ enabled: false }}
    instance_name: "{instance}"
    drain_period_ms: 100 }} }} }}
trace_filter {{
  bytecode: "\013\001\000\013\002\101\121\151\321\002\000\011\023\003\031\000\012\002\043\004\000\012\007\000\273\341\337\347\016"
}}
"#
            ),
        )
        .unwrap();
        let out = dir.path().join("t.pftrace");
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["perfetto", "--txt", "-c"])
            .arg(&cfg)
            .arg("-o")
            .arg(&out)
            .env("PERFETTO_CONSUMER_SOCK_NAME", &daemons.socks.consumer)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        if !o.status.success() {
            traced_probes_common::dump(dir.path());
            panic!("{err}");
        }
        let trace = std::fs::read(&out).unwrap();
        let packets: Vec<&[u8]> = FieldIter::new(&trace).map(|f| f.value).collect();
        let (stats, rest) = packets.split_last().unwrap();
        assert!(
            FieldIter::new(stats).any(|f| f.number == 35),
            "trace_stats last"
        );
        let mut switches = 0;
        for p in rest {
            for f in FieldIter::new(p) {
                assert!(
                    [1, 8, 10, 13, 42].contains(&f.number),
                    "packet field {}",
                    f.number
                );
                if f.number != 1 {
                    continue;
                }
                for b in FieldIter::new(f.value) {
                    assert!([1, 2, 3].contains(&b.number), "bundle field {}", b.number);
                    if b.number != 2 {
                        continue;
                    }
                    for e in FieldIter::new(b.value) {
                        assert!([1, 2, 4].contains(&e.number), "event field {}", e.number);
                        if e.number == 4 {
                            switches += 1;
                            assert!(FieldIter::new(e.value).all(|s| (1..8).contains(&s.number)));
                        }
                    }
                }
            }
        }
        assert!(switches > 0, "no sched_switch kept ({instance})");
        drop(daemons);
    }
}
