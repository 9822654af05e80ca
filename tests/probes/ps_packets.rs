//! process_tree / process_stats packets decode with the pb-rs types.

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::{mod_TracePacket::OneOfdata, TracePacket};
use tracebox::protozero::VecStream;
use tracebox::traced_probes::ps::{
    write_process_stats_packet, write_process_tree_packet, Argv, ProcStatsSample,
    ProcessStatsPacket, ProcessTreePacket, TreeProcess, TreeThread,
};

fn decode(bytes: &[u8]) -> TracePacket {
    TracePacket::from_reader(&mut BytesReader::from_bytes(bytes), bytes).unwrap()
}

#[test]
fn process_tree_round_trip() {
    let tree = ProcessTreePacket {
        timestamp: 123,
        collection_end_timestamp: 456,
        incremental_state_cleared: true,
        processes: vec![
            TreeProcess {
                pid: 10,
                ppid: 1,
                uid: -2,
                cmdline: Argv::from_args(["/bin/app", "--flag", ""]),
                nspid: vec![3],
                start_from_boot_ns: Some(99),
                is_kthread: Some(false),
                ..Default::default()
            },
            TreeProcess {
                pid: 2,
                cmdline: Argv::from_args(["kthreadd"]),
                cmdline_is_comm: true,
                is_kthread: Some(true),
                ..Default::default()
            },
        ],
        threads: vec![TreeThread {
            tid: 11,
            tgid: 10,
            name: Some("worker".into()),
            nstid: vec![4],
        }],
    };
    let mut s = VecStream::new();
    write_process_tree_packet(&mut s, &tree);
    let p = decode(s.as_bytes());
    assert_eq!(p.timestamp, Some(123));
    assert_eq!(p.incremental_state_cleared, Some(true));
    let OneOfdata::process_tree(t) = p.data else {
        panic!("not a process tree")
    };
    assert_eq!(t.collection_end_timestamp, Some(456));
    assert_eq!(t.processes.len(), 2);
    let a = &t.processes[0];
    assert_eq!((a.pid, a.ppid, a.uid), (Some(10), Some(1), Some(-2)));
    assert_eq!(a.cmdline, vec!["/bin/app", "--flag", ""]);
    assert_eq!(a.nspid, vec![3]);
    assert_eq!(a.process_start_from_boot, Some(99));
    assert_eq!((a.is_kthread, a.cmdline_is_comm), (Some(false), None));
    let k = &t.processes[1];
    assert_eq!((k.cmdline_is_comm, k.is_kthread), (Some(true), Some(true)));
    assert_eq!(k.process_start_from_boot, None);
    let th = &t.threads[0];
    assert_eq!(
        (th.tid, th.tgid, th.name.as_deref()),
        (Some(11), Some(10), Some("worker"))
    );
    assert_eq!(th.nstid, vec![4]);
}

#[test]
fn process_stats_round_trip() {
    let stats = ProcessStatsPacket {
        timestamp: 5,
        collection_end_timestamp: 6,
        incremental_state_cleared: false,
        processes: vec![ProcStatsSample {
            pid: 42,
            vm_size_kb: Some(1000),
            vm_rss_kb: Some(200),
            rss_anon_kb: Some(50),
            rss_file_kb: Some(150),
            rss_shmem_kb: Some(0),
            vm_swap_kb: Some(1),
            vm_locked_kb: Some(2),
            vm_hwm_kb: Some(300),
            oom_score_adj: Some(-1000),
            smr_rss_kb: Some(7),
            smr_pss_kb: Some(8),
            smr_swap_pss_kb: Some(9),
            runtime_user_mode_ns: Some(1_000_000),
            runtime_kernel_mode_ns: Some(2_000_000),
            dmabuf_rss_kb: Some(3),
            fds: vec![(3, "/dev/null".into())],
            ..Default::default()
        }],
    };
    let mut s = VecStream::new();
    write_process_stats_packet(&mut s, &stats);
    let p = decode(s.as_bytes());
    assert_eq!(p.timestamp, Some(5));
    assert_eq!(p.incremental_state_cleared, None);
    let OneOfdata::process_stats(st) = p.data else {
        panic!("not process stats")
    };
    assert_eq!(st.collection_end_timestamp, Some(6));
    let q = &st.processes[0];
    assert_eq!(q.pid, Some(42));
    assert_eq!(
        (q.vm_size_kb, q.vm_rss_kb, q.rss_anon_kb, q.rss_file_kb),
        (Some(1000), Some(200), Some(50), Some(150))
    );
    assert_eq!(
        (q.rss_shmem_kb, q.vm_swap_kb, q.vm_locked_kb, q.vm_hwm_kb),
        (Some(0), Some(1), Some(2), Some(300))
    );
    assert_eq!(q.oom_score_adj, Some(-1000));
    assert_eq!(
        (
            q.smr_rss_kb,
            q.smr_pss_kb,
            q.smr_swap_pss_kb,
            q.smr_pss_anon_kb
        ),
        (Some(7), Some(8), Some(9), None)
    );
    assert_eq!(
        (q.runtime_user_mode, q.runtime_kernel_mode),
        (Some(1_000_000), Some(2_000_000))
    );
    assert_eq!(q.dmabuf_rss_kb, Some(3));
    assert_eq!(q.fds.len(), 1);
    assert_eq!(
        (q.fds[0].fd, q.fds[0].path.as_deref()),
        (Some(3), Some("/dev/null"))
    );
}
