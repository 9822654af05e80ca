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
    std::fs::write(&merged, schema::strip_services(&merged_text)).unwrap();
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
    let configs = pb_rs::ConfigBuilder::new(&[merged.clone()], None, Some(&pb_dir), &[])
        .unwrap()
        .dont_use_cow(true)
        .headers(false)
        .single_module(true)
        .build();
    pb_rs::types::FileDescriptor::run(&configs).unwrap();
}
