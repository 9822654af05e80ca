//! Hostile SMB bytes through the service-side chunk reader: acquire every
//! page/chunk index (valid or not), copy, split into fragments, free.

use std::sync::Arc;

use tracebox::mem::shared_mem::SharedMem;
use tracebox::tracing::core::chunk_reader::FragmentIter;
use tracebox::tracing::core::smb_abi::SmbAbi;

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let page_size = if data.last().is_some_and(|b| b & 0x80 != 0) {
        8192
    } else {
        4096
    };
    let mem = Arc::new(SharedMem::new_heap(4 * page_size).unwrap());
    mem.write(0, &data[..data.len().min(mem.len())]);
    let abi = SmbAbi::new(mem, page_size).unwrap();
    let extra = data
        .iter()
        .rev()
        .take(4)
        .map(|&b| (b as usize >> 4, b as usize & 15));
    for (page, chunk) in (0..6)
        .flat_map(|p| (0..16).map(move |c| (p, c)))
        .chain(extra)
    {
        if let Ok(c) = abi.try_acquire_chunk_for_reading(page, chunk) {
            let mut payload = Vec::new();
            let h = abi.read_chunk(&c, &mut payload);
            FragmentIter::new(&payload, h.packet_count).for_each(drop);
            let _ = abi.release_chunk_as_free(c);
        }
    }
}
