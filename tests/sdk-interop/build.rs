//! Builds `libperfetto_c.a` for perfetto-sdk-sys (used non-vendored, see
//! .cargo/config.toml) from the amalgamated Perfetto C SDK that the
//! perfetto-sdk-sys crate ships, plus our `cpp/real_traced.cc`, which adds a
//! C entry point that runs the real tracing service (ServiceIPCHost).
//!
//! One compile of the amalgamation serves both the SDK peers and real-traced.

use std::{
    env, fs,
    path::{Path, PathBuf},
};

const SYS_CRATE_DIR: &str = "perfetto-sdk-sys-1.4.0";

fn find_amalgamation() -> PathBuf {
    if let Ok(dir) = env::var("PERFETTO_C_AMALGAMATION_DIR") {
        return PathBuf::from(dir);
    }
    let cargo_home = env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env::var("HOME").unwrap()).join(".cargo"));
    let registry_src = cargo_home.join("registry").join("src");
    let entries = fs::read_dir(&registry_src)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", registry_src.display()));
    for index_dir in entries.flatten() {
        let candidate = index_dir.path().join(SYS_CRATE_DIR).join("libperfetto_c");
        if candidate.join("perfetto_c.cc").exists() {
            return candidate;
        }
    }
    panic!(
        "{SYS_CRATE_DIR}/libperfetto_c/perfetto_c.cc not found under {}; \
         run `cargo fetch` or set PERFETTO_C_AMALGAMATION_DIR",
        registry_src.display()
    );
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=cpp/real_traced.cc");
    println!("cargo:rerun-if-env-changed=PERFETTO_C_AMALGAMATION_DIR");
    println!("cargo:rerun-if-env-changed=PERFETTO_SYS_LIB_DIR");
    println!("cargo:rerun-if-env-changed=CXX");

    let lib_dir = PathBuf::from(env::var("PERFETTO_SYS_LIB_DIR").expect(
        "PERFETTO_SYS_LIB_DIR unset: run cargo from tests/sdk-interop so that \
         .cargo/config.toml applies",
    ));
    fs::create_dir_all(&lib_dir).unwrap();
    let amalgamation = find_amalgamation();
    println!(
        "cargo:rerun-if-changed={}",
        amalgamation.join("perfetto_c.cc").display()
    );

    let lib = lib_dir.join("libperfetto_c.a");
    let inputs = [
        PathBuf::from("build.rs"),
        PathBuf::from("cpp/real_traced.cc"),
        amalgamation.join("perfetto_c.cc"),
        amalgamation.join("perfetto_c.h"),
    ];
    if is_newer_than_all(&lib, &inputs) {
        // Shared by every profile (release, dev, check): compile it once.
        emit_link_args();
        return;
    }

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file(Path::new("cpp/real_traced.cc"))
        .include(&amalgamation)
        // Same flags as the vendored build; the SDK is always optimised so the
        // benchmark reference is meaningful even in debug builds of the peers.
        .define("NDEBUG", None)
        .opt_level(2)
        .debug(false)
        .warnings(false)
        .flag_if_supported("-Wno-redundant-move")
        .flag_if_supported("-Wno-unused-const-variable")
        .out_dir(&lib_dir)
        .cargo_metadata(false)
        .compile("perfetto_c");
    emit_link_args();
}

fn mtime(p: &Path) -> Option<std::time::SystemTime> {
    fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn is_newer_than_all(target: &Path, inputs: &[PathBuf]) -> bool {
    let Some(t) = mtime(target) else {
        return false;
    };
    inputs.iter().all(|i| mtime(i).is_some_and(|m| m < t))
}

fn emit_link_args() {
    // perfetto-sdk-sys emits `-lperfetto_c`; the C++ runtime must come after
    // it on the link line, hence a trailing link arg rather than a link-lib.
    println!("cargo:rustc-link-arg=-lstdc++");
    println!("cargo:rustc-link-arg=-lpthread");
}
