//! JSON dump of the schema table, read by tests/py/check_schema.py to
//! compare our schemas with Perfetto's published descriptors.

use super::table::{enums, messages, PACKAGE};

fn push_str(out: &mut String, s: &str) {
    // Schema names are plain identifiers; no escaping needed beyond quotes.
    out.push('"');
    out.push_str(s);
    out.push('"');
}

/// `{"messages": {"perfetto.protos.X": [{"name", "number", "type", "label",
/// "type_name"}...]}, "enums": {"perfetto.protos.E": {"NAME": n}}}`.
/// Types and labels use descriptor.proto numbering.
#[doc(hidden)]
pub fn dump_json() -> String {
    let mut out = String::from("{\"messages\": {");
    for (i, m) in messages().iter().enumerate() {
        if i > 0 {
            out.push_str(",\n");
        }
        push_str(&mut out, &format!("{PACKAGE}.{}", m.name()));
        out.push_str(": [");
        for (j, f) in m.fields().iter().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            let type_name = match (f.message_type(), f.enum_type()) {
                (Some(m), _) => format!("{PACKAGE}.{}", m.name()),
                (_, Some(e)) => format!("{PACKAGE}.{}", e.name()),
                _ => String::new(),
            };
            out.push_str(&format!(
                "{{\"name\": \"{}\", \"number\": {}, \"type\": {}, \"label\": {}, \"packed\": {}, \"type_name\": \"{type_name}\"}}",
                f.name(),
                f.number(),
                f.field_type() as u8,
                f.label() as u8,
                f.is_packed(),
            ));
        }
        out.push(']');
    }
    out.push_str("},\n\"enums\": {");
    for (i, e) in enums().iter().enumerate() {
        if i > 0 {
            out.push_str(",\n");
        }
        push_str(&mut out, &format!("{PACKAGE}.{}", e.name()));
        out.push_str(": {");
        for (j, v) in e.values().iter().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("\"{}\": {}", v.name(), v.number()));
        }
        out.push('}');
    }
    out.push_str("}}\n");
    out
}
