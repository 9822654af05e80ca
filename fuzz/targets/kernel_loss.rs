//! The client's look at ftrace_stats and service events (what was asked
//! for and not obtained) in a finished trace: a packet whole,
//! in slices, and a trace walked in memory and through the file window
//! (the two walks must agree).

use std::io::Write;

use tracebox::cmd::kernel_loss::KernelLoss;

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let mut whole = KernelLoss::default();
    whole.observe_packet(&[data]);

    let mut sliced = KernelLoss::default();
    let a = data.first().map_or(0, |&b| b as usize).min(data.len());
    let b = (a + data.get(1).map_or(0, |&b| b as usize)).min(data.len());
    sliced.observe_packet(&[&data[..a], &data[a..b], &data[b..]]);
    assert_eq!(whole.events_lost(), sliced.events_lost());
    assert_eq!(whole.malformed, sliced.malformed);
    assert_eq!(whole.setup_errors, sliced.setup_errors);
    assert_eq!(whole.faults.phrases(), sliced.faults.phrases());

    let mut in_memory = KernelLoss::default();
    in_memory.scan_trace(data);
    let path = std::env::temp_dir().join(format!("tbx-fuzz-kloss-{}", std::process::id()));
    let mut f = std::fs::File::options()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.write_all(data).unwrap();
    let mut from_file = KernelLoss::default();
    from_file.scan_file(&f).unwrap();
    assert_eq!(in_memory.events_lost(), from_file.events_lost());
    assert_eq!(in_memory.malformed, from_file.malformed);
    assert_eq!(in_memory.faults.phrases(), from_file.faults.phrases());
}
