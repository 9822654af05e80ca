//! Perfetto's packet-filter bytecode (TraceConfig.trace_filter), loaded
//! into per-message lookup tables.
//!
//! The bytecode is a stream of varints: one word per allowed field,
//! `(field_id << 3) | opcode`, messages in index order, each ended by a 0
//! word. The last word is a checksum: the low 32 bits of the 64-bit FNV-1a
//! hash of every earlier word taken as 4 little-endian bytes. An optional
//! overlay (same framing, 3 words per entry: message index, field word,
//! argument) adds or upgrades simple and string fields.

/// Bit set in a field state when the field is allowed.
const ALLOWED: u32 = 1 << 31;
/// Field state payloads (state & !ALLOWED) above nested message indices.
pub const SIMPLE: u32 = 0x7fff_ffff;
pub const FILTER_STRING: u32 = 0x7fff_fffe;
pub const FILTER_STRING_TYPED: u32 = 0x7fff_0000;
const SEMANTIC_TYPE_MASK: u32 = 0xffff;
/// Field ids below this are kept in a direct table while a message is read.
const DIRECT_LIMIT: u32 = 128;

const OP_END_OF_MESSAGE: u32 = 0;
const OP_SIMPLE_FIELD: u32 = 1;
const OP_SIMPLE_FIELD_RANGE: u32 = 2;
const OP_NESTED_FIELD: u32 = 3;
const OP_FILTER_STRING: u32 = 4;
const OP_FILTER_STRING_TYPED: u32 = 5;

/// What the filter does with one field of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldRule {
    Dropped,
    /// Copied as is (any wire type).
    Simple,
    /// A string run through the string filter rules (none are supported,
    /// so it is copied as is); only length-delimited values are kept.
    String,
    /// A message filtered with the rules of message `index`.
    Nested(u32),
}

/// Allowed field ids `[start, end)` of one message with their state.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    end: u32,
    state: u32,
}

/// The loaded bytecode: sorted spans per message.
#[derive(Debug, Clone, Default)]
pub struct FilterTables {
    spans: Vec<Span>,
    /// Message i owns `spans[msg_start[i]..msg_start[i + 1]]`.
    msg_start: Vec<usize>,
}

/// FNV-1a 64 over the words, truncated to 32 bits.
pub fn checksum(words: &[u32]) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for b in w.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h as u32
}

/// Splits a bytecode blob into its words and checks the trailing checksum.
fn words_checked(bytes_untrusted: &[u8], what: &str) -> Result<Vec<u32>, String> {
    let mut words = Vec::with_capacity(bytes_untrusted.len().min(1 << 16));
    let mut rest = bytes_untrusted;
    while !rest.is_empty() {
        let (v, n) = crate::protozero::decode::read_varint(rest)
            .ok_or_else(|| format!("{what}: truncated varint"))?;
        words.push(v as u32);
        rest = &rest[n..];
    }
    let Some(sum) = words.pop() else {
        return Err(format!("{what}: empty"));
    };
    let want = checksum(&words);
    if want != sum {
        return Err(format!(
            "{what}: checksum mismatch (computed {want:#x}, found {sum:#x})"
        ));
    }
    Ok(words)
}

fn string_state(opcode: u32, arg: u32) -> Option<u32> {
    match opcode {
        OP_SIMPLE_FIELD => Some(SIMPLE),
        OP_FILTER_STRING => Some(FILTER_STRING),
        OP_FILTER_STRING_TYPED => Some(FILTER_STRING_TYPED | (arg & SEMANTIC_TYPE_MASK)),
        _ => None,
    }
}

/// One overlay entry: `(message index, field id, state payload)`.
type OverlayEntry = (u32, u32, u32);

fn parse_overlay(bytes_untrusted: &[u8]) -> Result<Vec<OverlayEntry>, String> {
    let words = words_checked(bytes_untrusted, "overlay")?;
    if words.len() % 3 != 0 {
        return Err("overlay: size not a multiple of 3 words".into());
    }
    let mut out: Vec<OverlayEntry> = Vec::with_capacity(words.len() / 3);
    for w in words.chunks_exact(3) {
        let state = string_state(w[1] & 7, w[2])
            .ok_or_else(|| format!("overlay: invalid opcode {}", w[1] & 7))?;
        let e = (w[0], w[1] >> 3, state);
        if out.last().is_some_and(|p| (p.0, p.1) >= (e.0, e.1)) {
            return Err("overlay: entries not sorted".into());
        }
        out.push(e);
    }
    Ok(out)
}

/// The message being read: directly indexed fields and ranges, as upstream
/// builds them (so the same bytecode is accepted and refused alike).
#[derive(Default)]
struct MessageBuilder {
    direct: Vec<u32>,
    ranges: Vec<Span>,
}

impl MessageBuilder {
    fn add(&mut self, field: u32, payload: u32) {
        if field < DIRECT_LIMIT {
            let i = field as usize;
            if self.direct.len() <= i {
                self.direct.resize(i + 1, 0);
            }
            self.direct[i] = ALLOWED | payload;
        } else {
            self.ranges.push(Span {
                start: field,
                end: field + 1,
                state: ALLOWED | payload,
            });
        }
    }
}

impl FilterTables {
    /// Loads `bytecode` (and the optional overlay); errors say what is wrong.
    pub fn load(bytecode_untrusted: &[u8], overlay_untrusted: &[u8]) -> Result<Self, String> {
        let words = words_checked(bytecode_untrusted, "bytecode")?;
        let overlay = if overlay_untrusted.is_empty() {
            Vec::new()
        } else {
            parse_overlay(overlay_untrusted)?
        };
        let mut t = FilterTables::default();
        let mut msg = MessageBuilder::default();
        let mut cur: u32 = 0;
        let mut max_nested: u32 = 0;
        let mut ov = 0usize;
        // Adds overlay entries of the current message with ids below
        // `field`; returns the upgrade for `field` itself, if any.
        let mut overlay_upto = |msg: &mut MessageBuilder, cur: u32, field: u32| -> Option<u32> {
            while let Some(&(m, f, state)) = overlay.get(ov) {
                if m > cur || (m == cur && f > field) {
                    break;
                }
                ov += 1;
                if m < cur {
                    return None; // unreachable with sorted entries; caught below
                }
                if f == field {
                    return Some(state);
                }
                msg.add(f, state);
            }
            None
        };
        let mut is_eom = true;
        let mut i = 0;
        while i < words.len() {
            let word = words[i];
            let has_next = i + 1 < words.len();
            let (op, field) = (word & 7, word >> 3);
            is_eom = op == OP_END_OF_MESSAGE;
            if field == 0 && !is_eom {
                return Err(format!("bytecode: field id 0 at word {i}"));
            }
            match op {
                OP_SIMPLE_FIELD | OP_NESTED_FIELD | OP_FILTER_STRING | OP_FILTER_STRING_TYPED => {
                    let mut payload = match op {
                        OP_SIMPLE_FIELD | OP_FILTER_STRING => string_state(op, 0).unwrap_or(SIMPLE),
                        _ => {
                            if !has_next {
                                return Err(format!("bytecode: word {i} lacks its argument"));
                            }
                            i += 1;
                            if op == OP_NESTED_FIELD {
                                max_nested = max_nested.max(words[i]);
                                words[i]
                            } else {
                                FILTER_STRING_TYPED | (words[i] & SEMANTIC_TYPE_MASK)
                            }
                        }
                    };
                    if let Some(up) = overlay_upto(&mut msg, cur, field) {
                        payload = up;
                    }
                    msg.add(field, payload);
                }
                OP_SIMPLE_FIELD_RANGE => {
                    if !has_next {
                        return Err(format!("bytecode: unterminated range at word {i}"));
                    }
                    i += 1;
                    let end = field.wrapping_add(words[i]);
                    let mut id = field;
                    while id < end && id < DIRECT_LIMIT {
                        msg.add(id, SIMPLE);
                        id += 1;
                    }
                    if id < end {
                        msg.ranges.push(Span {
                            start: id,
                            end,
                            state: ALLOWED | SIMPLE,
                        });
                    }
                }
                OP_END_OF_MESSAGE => {
                    overlay_upto(&mut msg, cur, u32::MAX);
                    if msg.ranges.windows(2).any(|w| w[1].start < w[0].end) {
                        return Err(format!("bytecode: overlapping ranges in message {cur}"));
                    }
                    t.msg_start.push(t.spans.len());
                    for (id, &state) in msg.direct.iter().enumerate() {
                        if state != 0 {
                            let id = id as u32;
                            t.spans.push(Span {
                                start: id,
                                end: id + 1,
                                state,
                            });
                        }
                    }
                    t.spans.append(&mut msg.ranges);
                    msg.direct.clear();
                    cur += 1;
                }
                _ => return Err(format!("bytecode: invalid opcode {op} at word {i}")),
            }
            i += 1;
        }
        if !is_eom {
            return Err("bytecode: does not end with an end-of-message word".into());
        }
        if ov != overlay.len() {
            return Err(format!(
                "overlay: {} entries match no message",
                overlay.len() - ov
            ));
        }
        let messages = t.msg_start.len();
        if max_nested > 0 && max_nested as usize >= messages {
            return Err(format!(
                "bytecode: message index {max_nested} out of range ({messages} messages)"
            ));
        }
        t.msg_start.push(t.spans.len());
        Ok(t)
    }

    pub fn num_messages(&self) -> usize {
        self.msg_start.len().saturating_sub(1)
    }

    /// The rule for `field` of message `msg`.
    pub fn query(&self, msg: u32, field: u32) -> FieldRule {
        let m = msg as usize;
        if m + 1 >= self.msg_start.len() {
            return FieldRule::Dropped;
        }
        let spans = &self.spans[self.msg_start[m]..self.msg_start[m + 1]];
        let i = spans.partition_point(|s| s.end <= field);
        let Some(s) = spans.get(i).filter(|s| s.start <= field) else {
            return FieldRule::Dropped;
        };
        if s.state & ALLOWED == 0 {
            return FieldRule::Dropped;
        }
        match s.state & !ALLOWED {
            SIMPLE => FieldRule::Simple,
            p if p >= FILTER_STRING_TYPED => FieldRule::String,
            p => FieldRule::Nested(p),
        }
    }
}
