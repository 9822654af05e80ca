//! Every format file we have (old Android kernels, hypervisor, synthetic
//! oddities, and the live kernel) parses or fails cleanly, and parsed
//! layouts match the files.

use std::path::{Path, PathBuf};
use tracebox::traced_probes::ftrace::parse::format::{parse_format, parse_header_page, FieldType};
use tracebox::traced_probes::ftrace::Tracefs;

/// Format files captured from many kernels, kept in the repository.
const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ftrace-formats");

fn format_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            format_files(&p, out);
        } else if p.file_name().is_some_and(|n| n == "format") {
            out.push(p);
        }
    }
}

/// (parsed, failed paths) for one corpus directory.
fn parse_all(dir: &Path) -> (usize, Vec<String>) {
    let mut files = Vec::new();
    format_files(dir, &mut files);
    let mut ok = 0;
    let mut failed = Vec::new();
    for f in files {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        match parse_format(&text) {
            Ok(ev) => {
                ok += 1;
                for field in ev.fields.iter().chain(&ev.common_fields) {
                    assert!(!field.name.is_empty(), "{}", f.display());
                }
            }
            Err(_) => failed.push(f.strip_prefix(dir).unwrap().display().to_string()),
        }
    }
    (ok, failed)
}

fn load(rel: &str) -> tracebox::traced_probes::ftrace::parse::format::EventFormat {
    let text = std::fs::read_to_string(Path::new(CORPUS).join(rel)).unwrap();
    parse_format(&text).unwrap()
}

#[test]
fn corpus_counts() {
    let expect: [(&str, usize, &[&str]); 6] = [
        ("android_hammerhead_MRA59G_3.4.0", 444, &[]),
        ("android_flounder_lte_LRX16F_3.10.40", 818, &[]),
        ("android_walleye_OPM5.171019.017.A1_4.4.88", 959, &[]),
        ("hypervisor", 17, &[]),
        // Kprobes and function_graph as a Debian 6.1 kernel has them.
        ("debian_6.1.0-56-amd64", 7, &[]),
        // An empty file: an error, not a panic.
        ("synthetic", 242, &["events/trusty/format"]),
    ];
    for (kernel, ok_want, failed_want) in expect {
        let (ok, failed) = parse_all(&Path::new(CORPUS).join(kernel));
        assert_eq!(ok, ok_want, "{kernel}");
        assert_eq!(failed, failed_want, "{kernel}");
    }
}

/// Debian's PREEMPT_RT kernel (6.1.0-56-rt-amd64, captured in the VM
/// stage): a fifth common field moves every sched_switch field by four
/// bytes; the layout comes from the file, so nothing is dropped.
#[test]
fn preempt_rt_sched_switch_has_the_lazy_count_common_field() {
    let sw = load("debian_6.1.0-56-rt-amd64/events/sched/sched_switch/format");
    let common: Vec<_> = sw
        .common_fields
        .iter()
        .map(|f| (f.name.as_str(), f.offset))
        .collect();
    assert_eq!(
        common,
        [
            ("common_type", 0),
            ("common_flags", 2),
            ("common_preempt_count", 3),
            ("common_pid", 4),
            ("common_preempt_lazy_count", 8)
        ]
    );
    let at = |name: &str| {
        let f = sw.field(name).unwrap();
        (f.offset, f.size, f.ty)
    };
    assert_eq!(at("prev_comm"), (12, 16, Some(FieldType::FixedCString)));
    assert_eq!(at("prev_state"), (40, 8, Some(FieldType::Int64)));
    assert_eq!(at("next_pid"), (64, 4, Some(FieldType::Pid32)));
    assert_eq!(at("next_prio"), (68, 4, Some(FieldType::Int32)));
    let waking = load("debian_6.1.0-56-rt-amd64/events/sched/sched_waking/format");
    assert_eq!(waking.field("comm").unwrap().offset, 12);
    let (ok, failed) = parse_all(&Path::new(CORPUS).join("debian_6.1.0-56-rt-amd64"));
    assert_eq!((ok, failed.len()), (3, 0));
}

#[test]
fn spot_checks() {
    let sw = load("android_hammerhead_MRA59G_3.4.0/events/sched/sched_switch/format");
    assert_eq!(sw.id, 70);
    // 3.4 kernels have an extra common_padding.
    let common: Vec<_> = sw
        .common_fields
        .iter()
        .map(|f| (f.name.as_str(), f.offset))
        .collect();
    assert_eq!(
        common,
        [
            ("common_type", 0),
            ("common_flags", 2),
            ("common_preempt_count", 3),
            ("common_pid", 4),
            ("common_padding", 8)
        ]
    );
    let fields: Vec<_> = sw
        .fields
        .iter()
        .map(|f| (f.name.as_str(), f.offset, f.size, f.signed, f.ty))
        .collect();
    assert_eq!(
        fields,
        [
            ("prev_comm", 12, 16, false, Some(FieldType::FixedCString)),
            ("prev_pid", 28, 4, true, Some(FieldType::Pid32)),
            ("prev_prio", 32, 4, true, Some(FieldType::Int32)),
            ("prev_state", 36, 4, true, Some(FieldType::Int32)),
            ("next_comm", 40, 16, false, Some(FieldType::FixedCString)),
            ("next_pid", 56, 4, true, Some(FieldType::Pid32)),
            ("next_prio", 60, 4, true, Some(FieldType::Int32)),
        ]
    );

    let print = load("android_walleye_OPM5.171019.017.A1_4.4.88/events/ftrace/print/format");
    assert_eq!(print.id, 5);
    let buf = print.field("buf").unwrap();
    assert_eq!(
        (buf.offset, buf.size, buf.ty),
        (16, 0, Some(FieldType::CString))
    );
    assert_eq!(print.field("ip").unwrap().ty, Some(FieldType::Uint64));

    let hc = load("hypervisor/events/hyp/host_hcall/format");
    assert_eq!((hc.name.as_str(), hc.id), ("host_hcall", 1003));
    assert_eq!(hc.common_fields.len(), 1);
    let id = hc.field("id").unwrap();
    assert_eq!((id.offset, id.size, id.ty), (2, 4, Some(FieldType::Uint32)));

    let f2fs =
        load("android_flounder_lte_LRX16F_3.10.40/events/f2fs/f2fs_truncate_partial_nodes/format");
    assert_eq!(f2fs.id, 313);
    assert_eq!(f2fs.field("dev").unwrap().ty, Some(FieldType::DevId32));
    assert_eq!(f2fs.field("ino").unwrap().ty, Some(FieldType::Inode64));
    assert_eq!(f2fs.field("nid").unwrap().size, 4);

    let fs = load("synthetic/events/android_fs/android_fs_fsync_end/format");
    assert_eq!(fs.field("ino").unwrap().ty, Some(FieldType::Inode32));
    assert_eq!(fs.field("offset").unwrap().ty, Some(FieldType::Int64));

    let rss = load("synthetic/events/synthetic/rss_stat_throttled/format");
    assert_eq!(rss.id, 1471);
    let size = rss.field("size").unwrap();
    assert_eq!(
        (size.offset, size.size, size.ty),
        (32, 8, Some(FieldType::Int64))
    );

    // No print fmt at all: still an event.
    let end = load("android_flounder_lte_LRX16F_3.10.40/events/sched/sched_switch_end/format");
    assert_eq!((end.id, end.fields.len(), end.print_fmt), (67, 0, None));
}

#[test]
fn corpus_header_pages() {
    // hammerhead is a 32-bit kernel: 4-byte commit, data at 12.
    for (kernel, want) in [
        ("android_hammerhead_MRA59G_3.4.0", (4, 12, 4096)),
        ("android_flounder_lte_LRX16F_3.10.40", (8, 16, 4096)),
        ("android_walleye_OPM5.171019.017.A1_4.4.88", (8, 16, 4096)),
        ("synthetic", (8, 16, 4096)),
        ("debian_6.1.0-56-amd64", (8, 16, 4096)),
    ] {
        let path = Path::new(CORPUS).join(kernel).join("events/header_page");
        let l = parse_header_page(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(
            (l.commit_size, l.data_offset, l.page_size),
            want,
            "{kernel}"
        );
    }
}

/// The running kernel: every event format parses, ids are unique and
/// match the `id` files, and sched_switch looks like a 64-bit kernel's.
#[test]
fn live_kernel_formats() {
    let t = Tracefs::discover().unwrap();
    let events = t.all_events().unwrap();
    assert!(events.len() > 500, "{}", events.len());
    let mut ids = std::collections::HashSet::new();
    let mut failed = Vec::new();
    for (g, e) in &events {
        let Ok(text) = t.read_format(g, e) else {
            continue;
        };
        match parse_format(&text) {
            Ok(f) => {
                assert_eq!(&f.name, e);
                // ftrace/* internal events have no `id` file.
                if let Ok(id_file) = t.read_file(&format!("events/{g}/{e}/id")) {
                    assert_eq!(id_file.trim().parse::<u32>().unwrap(), f.id, "{g}/{e}");
                }
                assert!(ids.insert(f.id), "duplicate id {} at {g}/{e}", f.id);
            }
            Err(err) => failed.push(format!("{g}/{e}: {err}")),
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
    let sw = parse_format(&t.read_format("sched", "sched_switch").unwrap()).unwrap();
    assert_eq!(sw.field("prev_state").unwrap().ty, Some(FieldType::Int64));
    assert_eq!(sw.field("next_pid").unwrap().ty, Some(FieldType::Pid32));
    let l = parse_header_page(&t.read_header_page().unwrap()).unwrap();
    assert_eq!((l.commit_size, l.data_offset), (8, 16));
}
