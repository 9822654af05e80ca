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
    let generated = pb_dir.join("perfetto_protos.rs");
    let code = std::fs::read_to_string(&generated).unwrap();
    std::fs::write(&generated, collapse_opaque_sub_configs(&code)).unwrap();
}

/// Opaque sub-configs our code reads by name: they keep their fields.
const NAMED_OPAQUE_SUB_CONFIGS: &[&str] = &["priority_boost", "perf_event_config"];

/// Rewrites pb-rs's DataSourceConfig so that its ~45 other opaque
/// sub-configs (see `opaque_unused_sub_configs`) are one list of raw
/// fields, `opaque_sub_configs: Vec<(tag, bytes)>`, instead of a struct
/// field and a read, size and write arm each. Reading keeps the last of a
/// repeated tag, as the named fields did (src/pb/mod.rs).
fn collapse_opaque_sub_configs(code: &str) -> String {
    let start = code.find("\npub struct DataSourceConfig {").unwrap();
    let end = code[start..]
        .find("\npub mod mod_DataSourceConfig {")
        .unwrap()
        + start;
    // `Ok(TAG) => msg.NAME = Some(r.read_bytes(bytes)?.to_owned()),`: in
    // DataSourceConfig only the opaque sub-configs are bytes.
    let (mut tags, names): (Vec<u32>, Vec<&str>) = code[start..end]
        .lines()
        .filter_map(|line| {
            line.trim()
                .strip_prefix("Ok(")?
                .strip_suffix(" = Some(r.read_bytes(bytes)?.to_owned()),")?
                .split_once(") => msg.")
        })
        .filter(|(_, name)| !NAMED_OPAQUE_SUB_CONFIGS.contains(name))
        .map(|(tag, name)| (tag.parse::<u32>().unwrap(), name))
        .unzip();
    let mut out = String::with_capacity(end - start);
    let mut in_get_size = false;
    for line in code[start..end].lines() {
        let t = line.trim();
        let of_opaque = |prefix: &str| {
            names.iter().any(|n| {
                t.strip_prefix(prefix)
                    .and_then(|r| r.strip_prefix(n))
                    .is_some_and(|r| r.starts_with([':', '.', ' ']))
            })
        };
        if of_opaque("pub ")
            || names.iter().any(|n| {
                t.ends_with(&format!(
                    ") => msg.{n} = Some(r.read_bytes(bytes)?.to_owned()),"
                ))
            })
            || of_opaque("+ self.")
            || of_opaque("if let Some(ref s) = self.")
        {
            continue;
        }
        if t == "Ok(t) => { r.read_unknown(bytes, t)?; }" {
            out.push_str(
                "                Ok(t) if crate::pb::is_opaque_tag(t) => \
                 crate::pb::keep_opaque(&mut msg.opaque_sub_configs, t, r.read_bytes(bytes)?),\n",
            );
        }
        out.push_str(line);
        out.push('\n');
        match t {
            "pub struct DataSourceConfig {" => out.push_str(
                "    /// Sub-configs forwarded untouched, as (tag, bytes).\n    \
                 pub opaque_sub_configs: Vec<(u32, Vec<u8>)>,\n",
            ),
            "fn write_message<W: WriterBackend>(&self, w: &mut Writer<W>) -> Result<()> {" => out
                .push_str(
                    "        for (t, b) in &self.opaque_sub_configs \
                     { w.write_with_tag(*t, |w| w.write_bytes(b))?; }\n",
                ),
            "fn get_size(&self) -> usize {" => in_get_size = true,
            "0" if in_get_size => {
                out.push_str("        + crate::pb::opaque_size(&self.opaque_sub_configs)\n");
                in_get_size = false;
            }
            _ => {}
        }
    }
    assert!(
        names.len() > 30,
        "pb-rs output changed: {} opaque sub-configs",
        names.len()
    );
    for name in &names {
        assert!(
            !out.contains(&format!("self.{name}")),
            "{name} left in DataSourceConfig"
        );
    }
    tags.sort_unstable();
    let tags: Vec<String> = tags.iter().map(u32::to_string).collect();
    format!(
        "{}{out}{}\n/// Tags of DataSourceConfig's opaque sub-configs, sorted.\n\
         pub const OPAQUE_SUB_CONFIG_TAGS: &[u32] = &[{}];\n",
        &code[..start],
        &code[end..],
        tags.join(", ")
    )
}
