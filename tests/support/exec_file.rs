//! Executables that tests place and then run. They are written by `cp`,
//! never through a descriptor of this process: tests run on parallel
//! threads, and a child another test forks holds every descriptor open at
//! that moment until its exec, so running a file this process had open for
//! writing can fail with "Text file busy" (ETXTBSY; seen in CI).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Copies `from` to `to` with mode 0755.
pub fn copy_executable(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg(from)
        .arg(to)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cp {} {}", from.display(), to.display());
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Writes `body` as the executable `to` (through a `.src` file beside it).
pub fn write_executable(to: &Path, body: &str) {
    let mut src = to.as_os_str().to_owned();
    src.push(".src");
    std::fs::write(&src, body).unwrap();
    copy_executable(Path::new(&src), to);
    std::fs::remove_file(&src).unwrap();
}
