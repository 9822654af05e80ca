//! Load generator for the ftrace bench (scripts/bench/ftrace.sh).
//!
//! `bench_load pingpong SECONDS`
//!   Two SCHED_FIFO threads bounce a byte over two pipes: every round trip
//!   is two wakeups (sched_waking) and two context switches (sched_switch)
//!   or more. Prints `load=pingpong round_trips=.. seconds=.. fifo=0|1`.
//!
//! `bench_load marker PATH THREADS RATE SECONDS`
//!   THREADS threads write fixed 32-byte strings to PATH (an instance's
//!   trace_marker) at RATE writes/s in total (0 = as fast as possible).
//!   Prints `load=marker threads=.. rate_target=.. written=.. failed=.. seconds=..`.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Makes the calling thread SCHED_FIFO (priority 10); false if refused.
fn set_fifo() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: pid 0 is the calling thread; `param` lives across the call.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

fn pingpong(seconds: f64) -> String {
    // Socket pairs behave like two pipes here and need no unsafe.
    let (mut a, mut b) = UnixStream::pair().expect("socketpair");
    let echo = {
        std::thread::spawn(move || {
            set_fifo();
            let mut byte = [0u8; 1];
            while b.read_exact(&mut byte).is_ok() {
                if byte[0] == 0 || b.write_all(&byte).is_err() {
                    break;
                }
            }
        })
    };
    let fifo = set_fifo();
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let mut trips = 0u64;
    let mut byte = [1u8; 1];
    while start.elapsed() < budget {
        for _ in 0..256 {
            if a.write_all(&[1]).is_err() || a.read_exact(&mut byte).is_err() {
                break;
            }
        }
        trips += 256;
    }
    let _ = a.write_all(&[0]);
    let _ = echo.join();
    format!(
        "load=pingpong round_trips={trips} seconds={:.3} fifo={}",
        start.elapsed().as_secs_f64(),
        u8::from(fifo)
    )
}

fn marker(path: &str, threads: u32, rate: u64, seconds: f64) -> Result<String, String> {
    let budget = Duration::from_secs_f64(seconds);
    let per_thread_rate = rate as f64 / f64::from(threads.max(1));
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..threads {
        let mut f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| format!("{path}: {e}"))?;
        handles.push(std::thread::spawn(move || {
            let msg = format!("tbx-bench marker thread {t:08}\n");
            let (mut written, mut failed) = (0u64, 0u64);
            'outer: loop {
                for _ in 0..64 {
                    if f.write(msg.as_bytes()).is_ok() {
                        written += 1;
                    } else {
                        failed += 1;
                    }
                }
                let elapsed = start.elapsed();
                if elapsed >= budget {
                    break 'outer;
                }
                if per_thread_rate > 0.0 {
                    // Ahead of schedule: sleep until the next write is due.
                    let due = Duration::from_secs_f64((written + failed) as f64 / per_thread_rate);
                    if due > elapsed {
                        std::thread::sleep((due - elapsed).min(budget.saturating_sub(elapsed)));
                    }
                }
            }
            (written, failed)
        }));
    }
    let (mut written, mut failed) = (0u64, 0u64);
    for h in handles {
        let (w, f) = h.join().map_err(|_| "writer thread panicked".to_string())?;
        written += w;
        failed += f;
    }
    Ok(format!(
        "load=marker threads={threads} rate_target={rate} written={written} failed={failed} seconds={:.3}",
        start.elapsed().as_secs_f64()
    ))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| args.get(i).and_then(|s| s.parse::<f64>().ok());
    let out = match args.first().map(String::as_str) {
        Some("pingpong") => num(1).map(|s| Ok(pingpong(s))),
        Some("marker") => match (args.get(1), num(2), num(3), num(4)) {
            (Some(p), Some(t), Some(r), Some(s)) => Some(marker(p, t as u32, r as u64, s)),
            _ => None,
        },
        _ => None,
    };
    match out {
        Some(Ok(line)) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Some(Err(e)) => {
            eprintln!("bench_load: {e}");
            ExitCode::from(1)
        }
        None => {
            eprintln!("usage: bench_load pingpong SECONDS | marker PATH THREADS RATE SECONDS");
            ExitCode::from(2)
        }
    }
}
