//! Kernel counter names <-> Perfetto enum ids (`MeminfoCounters`,
//! `VmstatCounters` in protos/perfetto/common/sys_stats_counters.proto).
//!
//! Vmstat ids are dense and each name is the enum name without `VMSTAT_`,
//! lowercased, so the table is simply indexed by id. Meminfo keys do not
//! follow a rule (`Active(anon)`, `Committed_AS`), so they are listed.

use std::collections::HashMap;

/// `/proc/meminfo` key -> `MeminfoCounters` id.
pub const MEMINFO_KEYS: [(&str, u32); 38] = [
    ("MemTotal", 1),
    ("MemFree", 2),
    ("MemAvailable", 3),
    ("Buffers", 4),
    ("Cached", 5),
    ("SwapCached", 6),
    ("Active", 7),
    ("Inactive", 8),
    ("Active(anon)", 9),
    ("Inactive(anon)", 10),
    ("Active(file)", 11),
    ("Inactive(file)", 12),
    ("Unevictable", 13),
    ("Mlocked", 14),
    ("SwapTotal", 15),
    ("SwapFree", 16),
    ("Dirty", 17),
    ("Writeback", 18),
    ("AnonPages", 19),
    ("Mapped", 20),
    ("Shmem", 21),
    ("Slab", 22),
    ("SReclaimable", 23),
    ("SUnreclaim", 24),
    ("KernelStack", 25),
    ("PageTables", 26),
    ("CommitLimit", 27),
    ("Committed_AS", 28),
    ("VmallocTotal", 29),
    ("VmallocUsed", 30),
    ("VmallocChunk", 31),
    ("CmaTotal", 32),
    ("CmaFree", 33),
    ("Gpu", 34),
    ("Zram", 35),
    ("Misc", 36),
    ("ION_heap", 37),
    ("ION_heap_pool", 38),
];

/// `/proc/vmstat` names indexed by `VmstatCounters` id.
pub const VMSTAT_NAMES: [&str; 189] = [
    "", // 0: unspecified
    "nr_free_pages",
    "nr_alloc_batch",
    "nr_inactive_anon",
    "nr_active_anon",
    "nr_inactive_file",
    "nr_active_file",
    "nr_unevictable",
    "nr_mlock",
    "nr_anon_pages",
    "nr_mapped",
    "nr_file_pages",
    "nr_dirty",
    "nr_writeback",
    "nr_slab_reclaimable",
    "nr_slab_unreclaimable",
    "nr_page_table_pages",
    "nr_kernel_stack",
    "nr_overhead",
    "nr_unstable",
    "nr_bounce",
    "nr_vmscan_write",
    "nr_vmscan_immediate_reclaim",
    "nr_writeback_temp",
    "nr_isolated_anon",
    "nr_isolated_file",
    "nr_shmem",
    "nr_dirtied",
    "nr_written",
    "nr_pages_scanned",
    "workingset_refault",
    "workingset_activate",
    "workingset_nodereclaim",
    "nr_anon_transparent_hugepages",
    "nr_free_cma",
    "nr_swapcache",
    "nr_dirty_threshold",
    "nr_dirty_background_threshold",
    "pgpgin",
    "pgpgout",
    "pgpgoutclean",
    "pswpin",
    "pswpout",
    "pgalloc_dma",
    "pgalloc_normal",
    "pgalloc_movable",
    "pgfree",
    "pgactivate",
    "pgdeactivate",
    "pgfault",
    "pgmajfault",
    "pgrefill_dma",
    "pgrefill_normal",
    "pgrefill_movable",
    "pgsteal_kswapd_dma",
    "pgsteal_kswapd_normal",
    "pgsteal_kswapd_movable",
    "pgsteal_direct_dma",
    "pgsteal_direct_normal",
    "pgsteal_direct_movable",
    "pgscan_kswapd_dma",
    "pgscan_kswapd_normal",
    "pgscan_kswapd_movable",
    "pgscan_direct_dma",
    "pgscan_direct_normal",
    "pgscan_direct_movable",
    "pgscan_direct_throttle",
    "pginodesteal",
    "slabs_scanned",
    "kswapd_inodesteal",
    "kswapd_low_wmark_hit_quickly",
    "kswapd_high_wmark_hit_quickly",
    "pageoutrun",
    "allocstall",
    "pgrotated",
    "drop_pagecache",
    "drop_slab",
    "pgmigrate_success",
    "pgmigrate_fail",
    "compact_migrate_scanned",
    "compact_free_scanned",
    "compact_isolated",
    "compact_stall",
    "compact_fail",
    "compact_success",
    "compact_daemon_wake",
    "unevictable_pgs_culled",
    "unevictable_pgs_scanned",
    "unevictable_pgs_rescued",
    "unevictable_pgs_mlocked",
    "unevictable_pgs_munlocked",
    "unevictable_pgs_cleared",
    "unevictable_pgs_stranded",
    "nr_zspages",
    "nr_ion_heap",
    "nr_gpu_heap",
    "allocstall_dma",
    "allocstall_movable",
    "allocstall_normal",
    "compact_daemon_free_scanned",
    "compact_daemon_migrate_scanned",
    "nr_fastrpc",
    "nr_indirectly_reclaimable",
    "nr_ion_heap_pool",
    "nr_kernel_misc_reclaimable",
    "nr_shadow_call_stack_bytes",
    "nr_shmem_hugepages",
    "nr_shmem_pmdmapped",
    "nr_unreclaimable_pages",
    "nr_zone_active_anon",
    "nr_zone_active_file",
    "nr_zone_inactive_anon",
    "nr_zone_inactive_file",
    "nr_zone_unevictable",
    "nr_zone_write_pending",
    "oom_kill",
    "pglazyfree",
    "pglazyfreed",
    "pgrefill",
    "pgscan_direct",
    "pgscan_kswapd",
    "pgskip_dma",
    "pgskip_movable",
    "pgskip_normal",
    "pgsteal_direct",
    "pgsteal_kswapd",
    "swap_ra",
    "swap_ra_hit",
    "workingset_restore",
    "allocstall_device",
    "allocstall_dma32",
    "balloon_deflate",
    "balloon_inflate",
    "balloon_migrate",
    "cma_alloc_fail",
    "cma_alloc_success",
    "nr_file_hugepages",
    "nr_file_pmdmapped",
    "nr_foll_pin_acquired",
    "nr_foll_pin_released",
    "nr_sec_page_table_pages",
    "nr_shadow_call_stack",
    "nr_swapcached",
    "nr_throttled_written",
    "pgalloc_device",
    "pgalloc_dma32",
    "pgdemote_direct",
    "pgdemote_kswapd",
    "pgreuse",
    "pgscan_anon",
    "pgscan_file",
    "pgskip_device",
    "pgskip_dma32",
    "pgsteal_anon",
    "pgsteal_file",
    "thp_collapse_alloc",
    "thp_collapse_alloc_failed",
    "thp_deferred_split_page",
    "thp_fault_alloc",
    "thp_fault_fallback",
    "thp_fault_fallback_charge",
    "thp_file_alloc",
    "thp_file_fallback",
    "thp_file_fallback_charge",
    "thp_file_mapped",
    "thp_migration_fail",
    "thp_migration_split",
    "thp_migration_success",
    "thp_scan_exceed_none_pte",
    "thp_scan_exceed_share_pte",
    "thp_scan_exceed_swap_pte",
    "thp_split_page",
    "thp_split_page_failed",
    "thp_split_pmd",
    "thp_swpout",
    "thp_swpout_fallback",
    "thp_zero_page_alloc",
    "thp_zero_page_alloc_failed",
    "vma_lock_abort",
    "vma_lock_miss",
    "vma_lock_retry",
    "vma_lock_success",
    "workingset_activate_anon",
    "workingset_activate_file",
    "workingset_nodes",
    "workingset_refault_anon",
    "workingset_refault_file",
    "workingset_restore_anon",
    "workingset_restore_file",
];

/// Builds the name -> id lookup for the enabled counters. `enabled` is the
/// config's allow-list; `None` (list absent) enables everything. Unknown or
/// zero ids in the list are ignored and returned for logging.
pub fn build_lookup(
    all: impl Iterator<Item = (&'static str, u32)>,
    enabled: Option<&[u32]>,
) -> (HashMap<&'static str, u32>, Vec<u32>) {
    let table: Vec<(&'static str, u32)> = all.collect();
    let mut rejected = Vec::new();
    let mut map = HashMap::new();
    match enabled {
        None => map.extend(table.iter().copied()),
        Some(ids) => {
            for &id in ids {
                match table.iter().find(|(_, i)| *i == id) {
                    Some(&(name, id)) => {
                        map.insert(name, id);
                    }
                    None => rejected.push(id),
                }
            }
        }
    }
    (map, rejected)
}

/// Iterator over `(name, id)` of every vmstat counter.
pub fn vmstat_entries() -> impl Iterator<Item = (&'static str, u32)> {
    VMSTAT_NAMES
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, n)| (*n, i as u32))
}

/// Iterator over `(key, id)` of every meminfo counter.
pub fn meminfo_entries() -> impl Iterator<Item = (&'static str, u32)> {
    MEMINFO_KEYS.iter().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_honour_allow_list() {
        let (all, rejected) = build_lookup(meminfo_entries(), None);
        assert_eq!(all.len(), 38);
        assert!(rejected.is_empty());
        let (some, rejected) = build_lookup(vmstat_entries(), Some(&[1, 0, 188, 999]));
        assert_eq!(some.get("nr_free_pages"), Some(&1));
        assert_eq!(some.get("workingset_restore_file"), Some(&188));
        assert_eq!(some.len(), 2);
        assert_eq!(rejected, vec![0, 999]);
    }

    /// Our tables must agree with the schema's enums (proto/common/
    /// sys_stats_counters.proto as compiled by pb-rs).
    #[test]
    fn tables_match_schema_enums() {
        use crate::pb::protos::{MeminfoCounters, VmstatCounters};
        for (id, name) in VMSTAT_NAMES.iter().enumerate().skip(1) {
            let variant = format!("{:?}", VmstatCounters::from(id as i32));
            assert_eq!(variant, format!("VMSTAT_{}", name.to_uppercase()));
        }
        // The id past the table must be unknown to the schema too.
        assert_eq!(
            VmstatCounters::from(VMSTAT_NAMES.len() as i32),
            VmstatCounters::VMSTAT_UNSPECIFIED
        );
        for (key, id) in MEMINFO_KEYS {
            assert_ne!(
                MeminfoCounters::from(id as i32),
                MeminfoCounters::MEMINFO_UNSPECIFIED,
                "{key}"
            );
        }
        assert_eq!(
            MeminfoCounters::from(MEMINFO_KEYS.len() as i32 + 1),
            MeminfoCounters::MEMINFO_UNSPECIFIED
        );
        assert_eq!(
            MeminfoCounters::from(9),
            MeminfoCounters::MEMINFO_ACTIVE_ANON
        );
        assert_eq!(
            MeminfoCounters::from(28),
            MeminfoCounters::MEMINFO_COMMITED_AS
        );
    }

    #[test]
    fn names_are_unique() {
        let mut v: Vec<&str> = VMSTAT_NAMES[1..].to_vec();
        v.sort();
        v.dedup();
        assert_eq!(v.len(), VMSTAT_NAMES.len() - 1);
    }
}
