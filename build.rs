//! Build script: turns our .proto schemas into Rust.
//!
//! * pb-rs generates quick-protobuf message types (config and IPC, cold paths)
//!   into `$OUT_DIR/pb/`, one file per schema, plus `$OUT_DIR/pb/mod.rs`.
//! * `src/codegen/` holds the other generators, compiled into this script only.

use std::path::{Path, PathBuf};

#[path = "src/codegen/ftrace_table.rs"]
mod ftrace_table;
#[path = "src/codegen/schema.rs"]
mod schema;

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_protos(&path, out);
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
}

/// Concatenates schemas of the single package `perfetto.protos`, dropping
/// the per-file `syntax`, `package` and `import` statements.
fn merge_protos(protos: &[PathBuf]) -> String {
    let mut merged = String::from("syntax = \"proto2\";\npackage perfetto.protos;\n");
    for path in protos {
        let text = std::fs::read_to_string(path).unwrap();
        merged.push_str(&format!("// ---- {}\n", path.display()));
        for line in text.lines() {
            let t = line.trim_start();
            if t.starts_with("syntax ") || t.starts_with("package ") || t.starts_with("import ") {
                if !t.starts_with("package perfetto.protos;") && t.starts_with("package ") {
                    panic!(
                        "{}: every schema must be in package perfetto.protos",
                        path.display()
                    );
                }
                continue;
            }
            merged.push_str(line);
            merged.push('\n');
        }
    }
    merged
}

/// DataSourceConfig sub-configs tracebox interprets; pb-rs decodes them.
const INTERPRETED_SUB_CONFIGS: &[&str] = &[
    "FtraceConfig",
    "ProcessStatsConfig",
    "SysStatsConfig",
    "SystemInfoConfig",
    "TestConfig",
];

/// For pb-rs only, declares every other message-typed field of
/// DataSourceConfig as `bytes` (same number, same wire type): traced
/// forwards them untouched anyway, and decoding them eagerly would link a
/// reader for every Android/Chrome/GPU sub-config into the binary. The
/// schema table (text configs) still sees the full messages.
fn opaque_unused_sub_configs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth_in_dsc: Option<i32> = None;
    for line in text.lines() {
        let t = line.trim_start();
        let mut line = line.to_owned();
        if depth_in_dsc.is_none() && t.starts_with("message DataSourceConfig ") {
            depth_in_dsc = Some(0);
        } else if let Some(depth) = depth_in_dsc {
            let words: Vec<&str> = t.split_whitespace().collect();
            let is_field = depth == 1 && words.len() >= 4 && words[0] == "optional";
            let ty = words.get(1).copied().unwrap_or("");
            let message_typed = ty.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && (ty.ends_with("Config") || ty.ends_with("Metrics") || ty.ends_with("Samples"))
                && !INTERPRETED_SUB_CONFIGS.contains(&ty);
            if is_field && message_typed {
                line = line.replacen(ty, "bytes", 1);
            }
        }
        if let Some(depth) = depth_in_dsc.as_mut() {
            *depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if *depth == 0 && line.contains('}') {
                depth_in_dsc = None;
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn main() {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let proto_root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("proto");
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=src/codegen");

    let mut protos = Vec::new();
    collect_protos(&proto_root, &mut protos);

    // pb-rs names its output after the proto package, so several files of
    // package `perfetto.protos` would overwrite each other. We merge every
    // schema into one file first; imports become unnecessary.
    let merged = out_dir.join("perfetto_protos.proto");
    let merged_text = merge_protos(&protos);
    let pb_text = opaque_unused_sub_configs(&schema::strip_services(&merged_text));
    std::fs::write(&merged, pb_text).unwrap();
    // Service method tables and the runtime schema table (src/schema/).
    let services = schema::services_rs(&merged_text);
    std::fs::write(out_dir.join("services.rs"), services).unwrap();
    let table = schema::runtime_table_rs(&merged_text);
    std::fs::write(out_dir.join("schema_table.rs"), table).unwrap();

    let event_map = std::fs::read_to_string(proto_root.join("trace/ftrace/event_map.txt")).unwrap();
    let table = ftrace_table::generate(&merged_text, &event_map);
    std::fs::write(out_dir.join("ftrace_table.rs"), table).unwrap();

    let pb_dir = out_dir.join("pb");
    let _ = std::fs::remove_dir_all(&pb_dir);
    std::fs::create_dir_all(&pb_dir).unwrap();
    let configs =
        pb_rs::ConfigBuilder::new(std::slice::from_ref(&merged), None, Some(&pb_dir), &[])
            .unwrap()
            .dont_use_cow(true)
            .headers(false)
            .single_module(true)
            .build();
    pb_rs::types::FileDescriptor::run(&configs).unwrap();
}
