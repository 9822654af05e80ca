//! Integration tests: schema. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod pbtx_configs;
mod py_crosscheck;
mod schema_json;
