//! Runs the Python cross-checks against PyPI's `perfetto` descriptors:
//! tests/py/check_schema.py (field numbers/types of every schema) and
//! tests/py/check_pbtx.py (our text-format output vs Python protobuf's).
//! Python comes from $TRACEBOX_PYTHON (set by scripts/test.sh) or .venv/.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The reference Python; its absence is a failure, not a skip.
fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("TRACEBOX_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(ROOT).join(".venv/bin/python");
    assert!(
        venv.exists(),
        "no Python venv with PyPI perfetto: run scripts/setup-python.sh"
    );
    Some(venv)
}

fn run(py: &Path, args: &[&str]) {
    let out = Command::new(py)
        .args(args)
        .current_dir(ROOT)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{args:?} failed:\n{text}");
    eprintln!("{text}");
}

#[test]
fn schema_matches_perfetto_descriptors() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("schema.json");
    std::fs::write(&json, tracebox::schema::dump_json()).unwrap();
    run(
        &py,
        &[
            "tests/py/check_schema.py",
            "--self-test",
            "--json",
            json.to_str().unwrap(),
        ],
    );
}

#[test]
fn pbtx_matches_python_text_format() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let fixtures = std::fs::read_dir(Path::new(ROOT).join("tests/data/pbtx")).unwrap();
    let examples = std::fs::read_dir(Path::new(ROOT).join("configs")).unwrap();
    for entry in fixtures.chain(examples) {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let bytes = tracebox::cmd::pbtx::trace_config_txt_to_pb("f", &text).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        std::fs::write(dir.path().join(name + ".bin"), bytes).unwrap();
    }
    run(
        &py,
        &[
            "tests/py/check_pbtx.py",
            "--bins",
            dir.path().to_str().unwrap(),
        ],
    );
}
