//! Dumps the generated schema table as JSON for tests/py/check_schema.py.
//! Set TRACEBOX_SCHEMA_JSON=/path/out.json to write the file.

#[test]
fn schema_json_dump() {
    let json = tracebox::schema::dump_json();
    assert!(json.starts_with("{\"messages\": {"));
    assert!(json.contains("\"perfetto.protos.TraceConfig\": ["));
    assert!(json.contains("\"perfetto.protos.TraceConfig.BufferConfig.FillPolicy\": {"));
    // Balanced braces and brackets: the dump is hand-built.
    assert_eq!(json.matches('{').count(), json.matches('}').count());
    assert_eq!(json.matches('[').count(), json.matches(']').count());
    if let Ok(path) = std::env::var("TRACEBOX_SCHEMA_JSON") {
        std::fs::write(&path, &json).unwrap();
    }
}
