//! The traced_perf daemon: CPU profiling with call stacks, the
//! `linux.perf` data source.
//!
//! A producer on traced's producer socket: the producer traced_probes
//! runs too, with traced_perf's part in [`producer`]. Each instance opens one
//! perf event per CPU sampling every task ([`events`]; [`sys`] holds the
//! only unsafe code), reads the kernel's mmap rings on a timer
//! ([`records`]), keeps the
//! samples of processes in scope ([`scope`]), unwinds their user stacks
//! ([`unwind_queue`] holds them meanwhile; [`unwind`]: frame pointers through the copied stack; [`dwarf`]:
//! `.eh_frame` via framehop) or takes the kernel's callchain, resolves
//! the frames to mappings, build ids and function names ([`resolver`], [`maps`],
//! [`elf`] parsed by [`symbol_loader`], kallsyms), and writes PerfSample packets with interned
//! callstacks ([`intern`]), as upstream's traced_perf does.

pub mod config;
pub mod data_source;
pub mod dwarf;
pub mod eh_frame_hdr;
pub mod elf;
pub mod events;
pub mod far_stack;
pub mod intern;
pub mod maps;
pub mod producer;
pub mod records;
pub mod resolver;
pub mod scope;
pub mod symbol_loader;
pub mod sys;
pub mod unwind;
pub mod unwind_queue;

use crate::base::event_loop::EventLoop;
pub use producer::{Producer, NOTIFY_ENV};

/// Runs the daemon until SIGINT/SIGTERM. Returns the exit status.
pub fn run(socket: String, exit_with_traced: bool) -> i32 {
    let mut el = match EventLoop::new() {
        Ok(el) => el,
        Err(e) => {
            crate::log_error!("event loop: {e}");
            return 1;
        }
    };
    let mut producer = Producer::new(producer::Perf, socket, exit_with_traced);
    {
        let mut ctl = el.ctl();
        if let Err(e) = producer.watch_stop_signals(&mut ctl) {
            crate::log_error!("signals: {e}");
            return 1;
        }
        producer.start(&mut ctl);
    }
    match el.run(&mut producer) {
        Ok(()) => 0,
        Err(e) => {
            crate::log_error!("event loop: {e}");
            1
        }
    }
}
