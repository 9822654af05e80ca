//! Seeded xorshift PRNG and a random nested-message generator.

use tracebox::protozero::{begin_nested, end_nested, put_bytes, put_varint, Stream};

#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Packet size budget: mostly small, some medium, a few up to 1 MiB.
pub fn packet_budget(rng: &mut Rng) -> usize {
    match rng.below(100) {
        0..=54 => rng.below(200),
        55..=84 => 200 + rng.below(8 * 1024),
        85..=97 => 8 * 1024 + rng.below(64 * 1024),
        _ => 64 * 1024 + rng.below(1024 * 1024 - 64 * 1024),
    }
}

/// Writes a random message of roughly `budget` bytes with nested messages
/// up to `max_depth` levels. Replaying the same `rng` state on two streams
/// writes identical bytes.
pub fn gen_message<S: Stream>(rng: &mut Rng, s: &mut S, budget: usize, depth: u32) {
    let mut used = 0usize;
    while used < budget {
        let left = budget - used;
        let field = 1 + rng.below(60) as u32;
        match rng.below(10) {
            0..=4 => {
                let cap = if rng.below(4) == 0 {
                    left
                } else {
                    left.min(300)
                };
                let n = rng.below(cap + 1);
                let data = rng.bytes(n);
                put_bytes(s, field, &data);
                used += n + 3;
            }
            5..=6 => {
                put_varint(s, field, rng.next() >> rng.below(64));
                used += 6;
            }
            _ if depth < 6 => {
                let sub = rng.below(left + 1);
                let n = begin_nested(s, field);
                gen_message(rng, s, sub, depth + 1);
                end_nested(s, n);
                used += sub + 5;
            }
            _ => used += 1,
        }
    }
}
