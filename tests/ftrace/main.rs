//! Integration tests: ftrace. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod bundle;
mod formats;
mod kprobes_funcgraph;
mod ksyms;
mod pages;
mod print_filter;
mod reader;
mod syscalls;
