//! `/proc/PID/maps` lines, executable mappings only.

use std::rc::Rc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Map {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub path: Rc<str>,
}

/// Parses maps text; keeps executable mappings, sorted by start.
pub fn parse(text_untrusted: &str, max: usize) -> Vec<Map> {
    let mut out = Vec::new();
    for line in text_untrusted.lines() {
        if out.len() >= max {
            break;
        }
        let mut it = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if perms.as_bytes().get(2) != Some(&b'x') {
            continue;
        }
        let path: Rc<str> = it.nth(2).unwrap_or("").trim_start().into();
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(pgoff)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        if end > start {
            out.push(Map {
                start,
                end,
                pgoff,
                path,
            });
        }
    }
    out.sort_unstable_by_key(|m| m.start);
    out
}

/// The mapping containing `addr`.
pub fn find(maps: &[Map], addr: u64) -> Option<&Map> {
    find_index(maps, addr).map(|i| &maps[i])
}

/// Index of the mapping containing `addr`.
pub fn find_index(maps: &[Map], addr: u64) -> Option<usize> {
    let i = maps.partition_point(|m| m.start <= addr).checked_sub(1)?;
    (addr < maps[i].end).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_executable_mappings() {
        let text = "00400000-00452000 r-xp 00001000 08:02 173521      /usr/bin/dbus-daemon\n\
                    00651000-00652000 rw-p 00051000 08:02 173521      /usr/bin/dbus-daemon\n\
                    7fff1000-7fff3000 r-xp 00000000 00:00 0                  [vdso]\n\
                    garbage\n";
        let m = parse(text, 100);
        assert_eq!(m.len(), 2);
        assert_eq!(&*m[0].path, "/usr/bin/dbus-daemon");
        assert_eq!(m[0].pgoff, 0x1000);
        assert_eq!(&*m[1].path, "[vdso]");
        assert_eq!(find(&m, 0x400010).unwrap().start, 0x400000);
        assert!(find(&m, 0x452000).is_none());
    }
}
