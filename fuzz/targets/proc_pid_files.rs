//! /proc/<pid>/{status,stat,cmdline,smaps_rollup} parsers on arbitrary bytes.

use tracebox::traced_probes::ps::parse::{
    parse_smaps_rollup, parse_stat_times, parse_status, parse_status_ids,
};
use tracebox::traced_probes::ps::Argv;

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let _ = parse_status(data);
    let _ = parse_status_ids(data);
    let _ = parse_stat_times(data, 10_000_000);
    let argv = Argv::from_cmdline(data);
    assert_eq!(argv.args().count(), argv.to_vec().len());
    let _ = parse_smaps_rollup(data);
}
