//! Writing files a root daemon creates at paths an operator chose (the `--record` trace, DAMON
//! state files under `run_dir`) without being redirected.
//!
//! A path in a world-writable directory such as /tmp can be prepared by another user: a
//! symlink to /etc/shadow, or a hard link to it, would make a plain `File::create` truncate
//! and overwrite the target as root. [`create_private`] refuses a symlink as the last
//! component (`O_NOFOLLOW`), a file another user owns or one with other hard links, and only
//! truncates after those checks, on the descriptor it checked.

use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` for writing, created with mode 0600 or truncated, refusing a symlink, a file
/// owned by another user and a file with more than one link.
pub fn create_private(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "is a symbolic link; refusing to write through it",
                )
            } else {
                e
            }
        })?;
    let meta = file.metadata()?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "is owned by uid {}, not by this process (uid {me}); remove it or choose \
                 another path",
                meta.uid()
            ),
        ));
    }
    if meta.nlink() > 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("has {} hard links; refusing to overwrite it", meta.nlink()),
        ));
    }
    file.set_len(0)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_regular_file_is_created_private_and_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace");
        std::fs::write(&path, "old contents that must go").unwrap();
        let mut f = create_private(&path).unwrap();
        f.write_all(b"new").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let fresh = dir.path().join("fresh");
        drop(create_private(&fresh).unwrap());
        let mode = std::fs::metadata(&fresh).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_symlink_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, "keep me").unwrap();
        let link = dir.path().join("trace");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = create_private(&link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
        // A dangling link must not create its target either.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("created"), &dangling).unwrap();
        assert!(create_private(&dangling).is_err());
        assert!(!dir.path().join("created").exists());
    }

    #[test]
    fn a_hard_link_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, "keep me").unwrap();
        let link = dir.path().join("trace");
        std::fs::hard_link(&target, &link).unwrap();
        let err = create_private(&link).unwrap_err();
        assert!(err.to_string().contains("hard links"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    }

    #[test]
    fn a_file_owned_by_another_user_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            return; // only root can give a file away; CI runs as root
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace");
        std::fs::write(&path, "theirs").unwrap();
        nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let err = create_private(&path).unwrap_err();
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "theirs");
    }
}
