//! The fuzz targets on the stable toolchain: every committed corpus file of
//! each target, then deterministic mutations of them (bit flips, magic
//! bytes, inserts, deletes, splices), within a per-target budget. A panic
//! fails the test and leaves the input in `target/fuzz-replay-crashes/`.
//!
//! Budget: `TRACEBOX_FUZZ_RUNS` mutated inputs per target (default 200) and
//! at most `TRACEBOX_FUZZ_SECS` seconds per target (default 3);
//! scripts/test.sh runs it again with a larger budget. `TRACEBOX_FUZZ_SEED`
//! (default 0) picks other mutations; a failure prints the seed that
//! replays it.

#[allow(dead_code, unused_imports)]
#[path = "../fuzz/targets/mod.rs"]
mod targets;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// xorshift64*: deterministic, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn corpus(name: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files.iter().filter_map(|f| std::fs::read(f).ok()).collect()
}

/// One to four edits of `input`, some taking bytes from `other`.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    const MAGIC: [u8; 8] = [0, 1, 0x7f, 0x80, 0xff, 0x0a, 0x12, 0x08];
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = MAGIC[rng.below(MAGIC.len())];
            }
            2 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                v.drain(i..i + n);
            }
            4 if len > 0 => v.truncate(rng.below(len)),
            5 if !other.is_empty() => {
                let i = rng.below(len + 1);
                let s = rng.below(other.len());
                let n = 1 + rng.below((other.len() - s).min(256));
                v.splice(i..i, other[s..s + n].iter().copied());
            }
            6 if len > 1 => {
                let (a, b) = (rng.below(len), rng.below(len));
                v.swap(a, b);
            }
            _ if len > 0 => {
                // Duplicate a run: repeated fields and nested lengths.
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(32));
                let run: Vec<u8> = v[i..i + n].to_vec();
                v.splice(i..i, run);
            }
            _ => v.push(rng.next() as u8),
        }
    }
    v.truncate(1 << 16);
    v
}

fn save_crash(name: &str, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-replay-crashes");
    let _ = std::fs::create_dir_all(&dir);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in input {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    let path = dir.join(format!("{name}-{h:016x}"));
    let _ = std::fs::write(&path, input);
    path
}

fn replay(name: &str, target: fn(&[u8])) {
    let seeds = corpus(name);
    assert!(!seeds.is_empty(), "fuzz/corpus/{name} has no seed files");
    let runs = env_num("TRACEBOX_FUZZ_RUNS", 200);
    let budget = Duration::from_secs(env_num("TRACEBOX_FUZZ_SECS", 3));
    let start = Instant::now();
    // Per target, and per run when TRACEBOX_FUZZ_SEED is set (a different
    // seed explores other mutations; the same seed replays them).
    let run_seed = env_num("TRACEBOX_FUZZ_SEED", 0);
    let seed = name
        .bytes()
        .fold(0x9e37_79b9_7f4a_7c15u64 ^ run_seed, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
    let mut rng = Rng(seed | 1);
    let inputs = seeds.iter().cloned().chain((0..runs).map_while(|_| {
        if start.elapsed() > budget {
            return None;
        }
        let a = &seeds[rng.below(seeds.len())];
        let b = &seeds[rng.below(seeds.len())];
        Some(mutate(&mut rng, a, b))
    }));
    let mut done = 0u64;
    for input in inputs {
        if catch_unwind(AssertUnwindSafe(|| target(&input))).is_err() {
            let path = save_crash(name, &input);
            panic!(
                "fuzz target {name} panicked on input #{done} ({} bytes, \
                 TRACEBOX_FUZZ_SEED={run_seed}), saved as {}",
                input.len(),
                path.display()
            );
        }
        done += 1;
    }
    eprintln!(
        "fuzz target {name}: {} seeds + {} mutations in {:?}",
        seeds.len(),
        done - seeds.len() as u64,
        start.elapsed()
    );
}

macro_rules! replay_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                replay(stringify!($name), targets::$name::run);
            }
        )*
        /// Every target file has a test here (a new one cannot be forgotten).
        #[test]
        fn every_target_is_replayed() {
            let ours = [$(stringify!($name)),*];
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
            for e in std::fs::read_dir(dir).unwrap() {
                let file = e.unwrap().file_name().into_string().unwrap();
                let name = file.trim_end_matches(".rs");
                assert!(ours.contains(&name), "fuzz target {name} is not in tests/fuzz_replay.rs");
            }
        }
    };
}

replay_tests!(
    cli_replies,
    ftrace_format,
    ftrace_ksyms,
    ftrace_page,
    ipc_frame,
    kernel_loss,
    packet_validator,
    pbtx,
    perf_inputs,
    perf_unwind,
    probes_commands,
    proc_pid_files,
    proc_text_files,
    relay_wire,
    report,
    service_commit,
    smb_chunk_reader,
    trace_buffer,
    trace_filter,
    websocket_wire,
    zstd_frame,
);
