//! A check of a file's `.eh_frame_hdr` search table before framehop may
//! binary-search it: the table comes from whatever file a profiled
//! process mapped, and an entry pointing below `.eh_frame` makes gimli
//! subtract past zero. Only the layout every linker writes is accepted
//! (version 1; `.eh_frame` pointer pc-relative sdata4; count udata4;
//! entries data-relative sdata4). Anything else is dropped, and framehop
//! builds its own index from `.eh_frame`: slower, never wrong.

use std::ops::Range;

const PCREL_SDATA4: u8 = 0x1b;
const UDATA4: u8 = 0x03;
const DATAREL_SDATA4: u8 = 0x3b;
const HEADER: usize = 12;

/// Whether the table at `hdr_addr` (`hdr_untrusted`, the section's bytes)
/// points at `.eh_frame`'s start and every entry's FDE lies inside it.
pub fn search_table_is_sound(hdr_addr: u64, hdr_untrusted: &[u8], eh_frame: &Range<u64>) -> bool {
    let Some(head) = hdr_untrusted.get(..HEADER) else {
        return false;
    };
    if head[..4] != [1, PCREL_SDATA4, UDATA4, DATAREL_SDATA4] {
        return false;
    }
    let word = |b: &[u8], at: usize| i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let eh_frame_ptr = (hdr_addr + 4).wrapping_add_signed(word(head, 4).into());
    let count = word(head, 8) as u32 as usize;
    let table = &hdr_untrusted[HEADER..];
    if eh_frame_ptr != eh_frame.start || count > table.len() / 8 {
        return false;
    }
    table.chunks_exact(8).take(count).all(|entry| {
        let fde = hdr_addr.wrapping_add_signed(word(entry, 4).into());
        eh_frame.contains(&fde)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HDR: u64 = 0x2000;
    const EH: Range<u64> = 0x3000..0x3100;

    fn hdr(fdes: &[u64]) -> Vec<u8> {
        let mut b = vec![1, PCREL_SDATA4, UDATA4, DATAREL_SDATA4];
        b.extend(((EH.start - (HDR + 4)) as i32).to_le_bytes());
        b.extend((fdes.len() as u32).to_le_bytes());
        for (i, fde) in fdes.iter().enumerate() {
            b.extend((i as i32 * 16).to_le_bytes());
            b.extend(((*fde as i64 - HDR as i64) as i32).to_le_bytes());
        }
        b
    }

    #[test]
    fn a_linker_table_inside_eh_frame_is_kept() {
        assert!(search_table_is_sound(HDR, &hdr(&[0x3000, 0x3040]), &EH));
    }

    #[test]
    fn entries_outside_eh_frame_or_past_the_section_are_refused() {
        assert!(!search_table_is_sound(HDR, &hdr(&[0x3000, 0x1000]), &EH));
        assert!(!search_table_is_sound(HDR, &hdr(&[0x3100]), &EH));
        let mut short = hdr(&[0x3000]);
        short[8] = 9;
        assert!(!search_table_is_sound(HDR, &short, &EH));
        let mut other_start = hdr(&[0x3000]);
        other_start[4] ^= 8;
        assert!(!search_table_is_sound(HDR, &other_start, &EH));
        assert!(!search_table_is_sound(HDR, &[1, 0x1b], &EH));
        let mut absptr = hdr(&[0x3000]);
        absptr[3] = 0x00;
        assert!(!search_table_is_sound(HDR, &absptr, &EH));
    }

    #[test]
    fn this_test_binarys_own_table_is_kept() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let s = crate::traced_perf::elf::unwind_sections(&exe[..], 64 << 20).unwrap();
        assert!(s.eh_frame.is_some() && s.eh_frame_hdr.is_some(), "{s:?}");
    }
}
