//! Builds `libperfetto_c.a` for perfetto-sdk-sys (used non-vendored, see
//! .cargo/config.toml) from the amalgamated Perfetto C SDK that the
//! perfetto-sdk-sys crate ships, plus our `cpp/real_traced.cc`, which adds a
//! C entry point that runs the real tracing service (ServiceIPCHost).
//! One compile of the amalgamation serves both the SDK peers and real-traced.
//!
//! `cpp/c_writer.cc` (the C-API writer for `sdk-producer --api c`) only needs
//! the public header and is a separate small library.

use std::{
    env, fs,
    path::{Path, PathBuf},
};

const SYS_CRATE_DIR: &str = "perfetto-sdk-sys-1.4.0";
/// Bump when the flags of the amalgamation compile change: the library is
/// shared by all profiles and rebuilt only when this or an input changes.
const AMALGAMATION_RECIPE: &str = "v1 c++17 -O2 NDEBUG";

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

fn base_build(amalgamation: &Path) -> cc::Build {
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .include(amalgamation)
        // Same flags as the vendored build; always optimised so the benchmark
        // reference is meaningful even in debug builds of the peers.
        .define("NDEBUG", None)
        .opt_level(2)
        .debug(false)
        .warnings(false)
        .flag_if_supported("-Wno-redundant-move")
        .flag_if_supported("-Wno-unused-const-variable");
    build
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=cpp/real_traced.cc");
    println!("cargo:rerun-if-changed=cpp/c_writer.cc");
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
    let stamp = lib_dir.join("recipe.txt");
    let inputs = [
        PathBuf::from("cpp/real_traced.cc"),
        amalgamation.join("perfetto_c.cc"),
        amalgamation.join("perfetto_c.h"),
    ];
    let recipe_matches = fs::read_to_string(&stamp).is_ok_and(|s| s == AMALGAMATION_RECIPE);
    if !(recipe_matches && is_newer_than_all(&lib, &inputs)) {
        let _ = fs::remove_file(&stamp);
        base_build(&amalgamation)
            .file("cpp/real_traced.cc")
            .out_dir(&lib_dir)
            .cargo_metadata(false)
            .compile("perfetto_c");
        fs::write(&stamp, AMALGAMATION_RECIPE).unwrap();
    }

    base_build(&amalgamation)
        .file("cpp/c_writer.cc")
        .compile("tbx_c_writer");

    // perfetto-sdk-sys emits `-lperfetto_c`; the C++ runtime must come after
    // it on the link line, hence a trailing link arg rather than a link-lib.
    println!("cargo:rustc-link-arg=-lstdc++");
    println!("cargo:rustc-link-arg=-lpthread");
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
