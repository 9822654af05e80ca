//! What no kernel here can be made to produce on demand: cpu_frequency
//! changes (the test VMs have no cpufreq) and wakeups with chosen
//! latencies. A trace built by hand, field by field from the proto
//! definitions, whose answers are worked out here: frequency residency
//! per cpu, the latency percentiles and the worst threads.

use crate::report::report_ok;
use crate::report_end_line::py_json;

pub(crate) fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn int(field: u64, v: u64, out: &mut Vec<u8>) {
    varint(field << 3, out);
    varint(v, out);
}

pub(crate) fn bytes(field: u64, b: &[u8], out: &mut Vec<u8>) {
    varint(field << 3 | 2, out);
    varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

/// `FtraceEvent` with `timestamp`, `pid` and one payload.
pub(crate) fn event(ts: u64, pid: u64, payload_field: u64, payload: &[u8]) -> Vec<u8> {
    let mut e = Vec::new();
    int(1, ts, &mut e);
    int(2, pid, &mut e);
    bytes(payload_field, payload, &mut e);
    e
}

/// `SchedSwitchFtraceEvent` (prev_comm, prev_pid, prev_state, next_comm,
/// next_pid, next_prio).
fn switch(ts: u64, prev: u64, next: u64) -> Vec<u8> {
    let mut s = Vec::new();
    bytes(1, format!("t{prev}").as_bytes(), &mut s);
    int(2, prev, &mut s);
    int(4, 1, &mut s);
    bytes(5, format!("t{next}").as_bytes(), &mut s);
    int(6, next, &mut s);
    int(7, 120, &mut s);
    event(ts, prev, 4, &s)
}

/// `SchedWakingFtraceEvent` (comm, pid, prio, success, target_cpu).
fn waking(ts: u64, by: u64, pid: u64) -> Vec<u8> {
    let mut w = Vec::new();
    bytes(1, format!("t{pid}").as_bytes(), &mut w);
    int(2, pid, &mut w);
    int(3, 120, &mut w);
    int(4, 1, &mut w);
    int(5, 0, &mut w);
    event(ts, by, 20, &w)
}

/// `CpuFrequencyFtraceEvent` (state in kHz, cpu_id).
fn freq(ts: u64, khz: u64, cpu: u64) -> Vec<u8> {
    let mut f = Vec::new();
    int(1, khz, &mut f);
    int(2, cpu, &mut f);
    event(ts, 0, 11, &f)
}

/// `Trace.packet { trusted_packet_sequence_id, ftrace_events { cpu, event... } }`.
pub(crate) fn bundle(cpu: u64, events: &[Vec<u8>]) -> Vec<u8> {
    let mut b = Vec::new();
    int(1, cpu, &mut b);
    for e in events {
        bytes(2, e, &mut b);
    }
    let mut p = Vec::new();
    int(10, 1, &mut p);
    bytes(1, &b, &mut p);
    let mut t = Vec::new();
    bytes(1, &p, &mut t);
    t
}

const US: u64 = 1000;

#[test]
fn frequency_residency_and_latency_percentiles_of_a_known_trace() {
    // cpu 0: thread 100 runs from t0; then for i in 1..=100 it wakes
    // thread 100+i and the switch to it comes i µs later; it runs 10 µs.
    // cpu 0 runs at 1 GHz until the 50th switch, then at 2 GHz; cpu 1's
    // frequency is set once (one residency of 100 %).
    let t0 = 1_000_000_000;
    let mut ev = vec![freq(t0, 1_000_000, 0), freq(t0, 1_500_000, 1)];
    ev.push(switch(t0, 0, 100));
    let (mut now, mut running, mut switch50) = (t0 + 10 * US, 100, 0);
    for i in 1..=100 {
        let target = 100 + i;
        ev.push(waking(now, running, target));
        now += i * US;
        ev.push(switch(now, running, target));
        if i == 50 {
            switch50 = now;
            ev.push(freq(now, 2_000_000, 0));
        }
        running = target;
        now += 10 * US;
    }
    ev.push(switch(now, running, 0));
    let end = now;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("known.pftrace");
    std::fs::write(&path, bundle(0, &ev)).unwrap();
    let path = path.to_str().unwrap();

    let json = report_ok(&["--json", path]);
    // Residency: [t0, switch50) at 1 GHz, [switch50, end] at 2 GHz; the
    // frequency events of cpu 1 are recorded on cpu 0's bundle (as the
    // kernel does: the event names the cpu it is about).
    assert_eq!(
        py_json(&json, "d['cpus'][0]['freq_khz_ns']"),
        format!(
            "[[1000000, {}], [2000000, {}]]",
            switch50 - t0,
            end - switch50
        )
    );
    assert_eq!(
        py_json(&json, "d['cpus'][1]['freq_khz_ns']"),
        format!("[[1500000, {}]]", end - t0)
    );
    let lat = |k: &str| -> u64 {
        py_json(&json, &format!("d['latency']['{k}']"))
            .parse()
            .unwrap()
    };
    assert_eq!(lat("count"), 100);
    assert_eq!(lat("max_ns"), 100 * US);
    // Percentiles from a log histogram: within its 1/16 bucket width.
    for (q, want) in [
        ("p50_ns", 50 * US),
        ("p90_ns", 90 * US),
        ("p99_ns", 99 * US),
    ] {
        let got = lat(q);
        assert!(
            got.abs_diff(want) <= want / 16,
            "{q}: {got} ns, want {want}"
        );
    }
    // Each woken thread waited once, i µs.
    assert_eq!(
        py_json(
            &json,
            "sorted(((t['tid'],t['latency_count'],t['latency_max_ns']) for t in d['threads'] \
             if t['tid'] in (101,150,200)), reverse=True)"
        ),
        "[(200, 1, 100000), (150, 1, 50000), (101, 1, 1000)]"
    );

    let text = report_ok(&["--top", "3", path]);
    let share1 = 100.0 * (switch50 - t0) as f64 / (end - t0) as f64;
    let want = format!("1000MHz:{:.0}% 2000MHz:{:.0}%", share1, 100.0 - share1);
    assert!(text.contains(&want), "{want} not in\n{text}");
    assert!(text.contains("1500MHz:100%"), "{text}");
    assert!(text.contains("max 0.100 ms\n"), "{text}");
    // The worst threads, worst first, named from the sched comms.
    let worst: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Scheduling latency"))
        .skip(2)
        .take(3)
        .collect();
    let rows: Vec<Vec<&str>> = worst
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec!["200", "t200", "0.100", "0.100", "1"],
            vec!["199", "t199", "0.099", "0.099", "1"],
            vec!["198", "t198", "0.098", "0.098", "1"],
        ],
        "{text}"
    );
}
