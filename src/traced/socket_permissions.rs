//! `--set-socket-permissions PRODUCER_GROUP:PRODUCER_MODE:CONSUMER_GROUP:CONSUMER_MODE`
//! (modes in octal), applied to filesystem sockets after bind.

use std::io;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketPermissions {
    pub producer_group: String,
    pub producer_mode: u32,
    pub consumer_group: String,
    pub consumer_mode: u32,
}

impl SocketPermissions {
    pub fn parse(s: &str) -> Result<SocketPermissions, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let [pg, pm, cg, cm] = parts[..] else {
            return Err(format!(
                "--set-socket-permissions wants PRODUCER_GROUP:MODE:CONSUMER_GROUP:MODE, got {s:?}"
            ));
        };
        let mode = |m: &str| {
            u32::from_str_radix(m, 8)
                .ok()
                .filter(|&v| v <= 0o7777)
                .ok_or_else(|| format!("--set-socket-permissions: bad octal mode {m:?}"))
        };
        if pg.is_empty() || cg.is_empty() {
            return Err("--set-socket-permissions: empty group name".into());
        }
        Ok(SocketPermissions {
            producer_group: pg.to_string(),
            producer_mode: mode(pm)?,
            consumer_group: cg.to_string(),
            consumer_mode: mode(cm)?,
        })
    }
}

/// chgrp (when a group is named) + chmod of a socket file.
pub fn apply(path: &Path, group: Option<&str>, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let what = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    if let Some(group) = group {
        let gid = nix::unistd::Group::from_name(group)
            .map_err(io::Error::from)?
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("--set-socket-permissions: no group named {group:?}"),
                )
            })?
            .gid;
        nix::unistd::chown(path, None, Some(gid)).map_err(|e| what(e.into()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let p = SocketPermissions::parse("traced-producer:0660:traced-consumer:0600").unwrap();
        assert_eq!(p.producer_mode, 0o660);
        assert_eq!(p.consumer_group, "traced-consumer");
        assert!(SocketPermissions::parse("a:0660:b").is_err());
        assert!(SocketPermissions::parse("a:999:b:0600").is_err());
        assert!(SocketPermissions::parse(":0660:b:0600").is_err());
    }

    #[test]
    fn applies_to_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("sock");
        std::fs::write(&f, b"").unwrap();
        apply(&f, Some("root"), 0o640).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
            0o640
        );
        let err = apply(&f, Some("no-such-group-xyz"), 0o600).unwrap_err();
        assert!(err.to_string().contains("no-such-group-xyz"), "{err}");
        apply(&f, None, 0o666).unwrap();
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
            0o666
        );
    }
}
