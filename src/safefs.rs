//! Writing files a root daemon creates at paths an operator chose (the `--record` trace, DAMON
//! state files under `run_dir`) without being redirected, and reading kernel files (`/proc`)
//! with a type check and a bound.
//!
//! A path in a world-writable directory such as /tmp can be prepared by another user: a
//! symlink to /etc/shadow, or a hard link to it, would make a plain `File::create` truncate
//! and overwrite the target as root. [`create_private`] refuses a symlink as the last
//! component (`O_NOFOLLOW`), a file another user owns or one with other hard links, and only
//! truncates after those checks, on the descriptor it checked.
//!
//! [`read_bounded`] reads a file that must be a regular file and at most `limit` bytes long;
//! [`read_proc`] hands those bytes to a parser of the `procfs` crate. The crate's own readers
//! (`Process::stat()`, `FromRead::from_file`) read to the end of whatever the path names,
//! however long; pghotd runs as root and some of these files grow with what a watched process
//! does (`maps` holds a line per mapping, up to `vm.max_map_count`), so the bytes are read here
//! and only the parsing is the crate's.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Bounds for the `/proc` files pghotd reads: each well above what a kernel writes there.
pub mod limit {
    /// `/proc/PID/stat`: 52 numbers and a 15-byte command name (about 350 bytes).
    pub const STAT: usize = 4096;
    /// `/proc/PID/comm`: 16 bytes at most.
    pub const COMM: usize = 256;
    /// `/proc/PID/status`: about 1.5 KiB, more with a long `Groups:` (up to NGROUPS_MAX = 65536
    /// groups of at most 11 bytes each) or many `Cpus_allowed` words.
    pub const STATUS: usize = 1 << 20;
    /// `/proc/PID/schedstat`: three numbers.
    pub const SCHEDSTAT: usize = 256;
    /// `/proc/cpuinfo`: about 1.5 KiB per CPU on x86, for up to 8192 CPUs.
    pub const CPUINFO: usize = 16 << 20;
    /// `/proc/PID/maps` and `numa_maps`: a line per mapping (at most `vm.max_map_count`, 65530
    /// by default) of about 75 bytes plus the file's path (at most PATH_MAX, 4096).
    pub const MAPS: usize = 256 << 20;
    /// One sysfs or sysctl attribute (a number, a CPU list, a node's meminfo): sysfs attributes
    /// are at most a page (Documentation/filesystems/sysfs.rst), this leaves room to spare.
    pub const ATTRIBUTE: usize = 64 << 10;
    /// A cgroup's `cgroup.procs`: a pid per line, up to PID_MAX_LIMIT (4 Mi) pids of at most 8
    /// bytes each.
    pub const CGROUP_PROCS: usize = 32 << 20;
    /// `/etc/group` (static builds read it themselves).
    pub const GROUP_FILE: usize = 16 << 20;
}

/// Opens `path` for writing, created with mode 0600 or truncated, refusing a symlink, a file
/// owned by another user, a file with more than one link, and anything but a regular file or a
/// character device (`/dev/null`). Opened without blocking, so a FIFO planted at the path fails
/// (ENXIO without a reader, the type check with one) instead of hanging the daemon; the
/// descriptor is made blocking again once it passed the checks.
pub fn create_private(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(open_error)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if !kind.is_file() && !kind.is_char_device() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "is {}, not a regular file; refusing to write to it",
                kind_name(&meta)
            ),
        ));
    }
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
    if kind.is_file() && meta.nlink() > 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("has {} hard links; refusing to overwrite it", meta.nlink()),
        ));
    }
    set_blocking(&file)?;
    if kind.is_file() {
        file.set_len(0)?;
    }
    Ok(file)
}

/// Opens an existing regular file for writing without creating it or following a symlink as
/// the last component: the kernel's attribute files pghotd writes (DAMON's sysfs, debugfs's
/// `split_huge_pages`). `truncate` as `O_TRUNC` (which sysfs ignores, and which a directory of
/// plain files standing in for sysfs needs). Not blocking on open, for the same reason as
/// [`create_private`].
pub fn open_existing_for_write(path: &Path, truncate: bool) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(truncate)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(open_error)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "is {}, not a regular file; refusing to write to it",
                kind_name(&meta)
            ),
        ));
    }
    set_blocking(&file)?;
    Ok(file)
}

/// ELOOP from `O_NOFOLLOW` said in words; ENXIO (a FIFO nobody reads) too.
fn open_error(e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) => io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a symbolic link; refusing to write through it",
        ),
        Some(libc::ENXIO) => io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a FIFO or socket, not a regular file; refusing to write to it",
        ),
        _ => e,
    }
}

fn set_blocking(file: &File) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(file, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
    fcntl(file, FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(())
}

/// "a directory", "a FIFO", ... for messages.
pub fn kind_name(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// Reads all of `path`, which must be a regular file of at most `limit` bytes. Opened without
/// blocking (a FIFO put in a fixture's place fails the type check instead of hanging the
/// reader).
pub fn read_bounded(path: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is not a regular file; not read",
        ));
    }
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is longer than {limit} bytes; not read"),
        ));
    }
    Ok(bytes)
}

/// [`read_bounded`] as text; bytes that are not UTF-8 are an error.
pub fn read_text(path: &Path, limit: usize) -> io::Result<String> {
    String::from_utf8(read_bounded(path, limit)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not UTF-8 text; not read"))
}

/// Reads `path` with [`read_bounded`] and parses it with the `procfs` crate's parser for `T`.
/// Errors carry no path: callers name it in their own error types.
pub fn read_proc<T: procfs::FromRead>(path: &Path, limit: usize) -> procfs::ProcResult<T> {
    let bytes = read_bounded(path, limit)?;
    T::from_read(bytes.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn text_reads_are_bounded_and_refuse_bytes_that_are_not_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attr");
        std::fs::write(&path, "0-3\n").unwrap();
        assert_eq!(read_text(&path, 16).unwrap(), "0-3\n");
        assert!(read_text(&path, 3).is_err());
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        let err = read_text(&path, 16).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }

    #[test]
    fn bounded_reads_refuse_long_files_and_non_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "12345").unwrap();
        assert_eq!(read_bounded(&path, 5).unwrap(), b"12345");
        let err = read_bounded(&path, 4).unwrap_err();
        assert!(err.to_string().contains("longer than 4 bytes"), "{err}");
        let err = read_bounded(dir.path(), 4096).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = read_bounded(&fifo, 4096).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        assert_eq!(
            read_bounded(&dir.path().join("absent"), 1)
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn proc_files_parse_through_the_crate() {
        // This process's stat: the pid is field 1 (proc(5)), the state one of its letters.
        let stat: procfs::process::Stat =
            read_proc(Path::new("/proc/self/stat"), limit::STAT).unwrap();
        assert_eq!(stat.pid, std::process::id() as i32);
        assert!("RSDTtWXZPI".contains(stat.state), "{}", stat.state);
        let too_small = read_proc::<procfs::process::Stat>(Path::new("/proc/self/stat"), 8);
        assert!(too_small.is_err());
    }

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
    fn a_fifo_or_directory_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // No reader: ENXIO rather than a wait for one.
        let err = create_private(&fifo).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        // A reader waiting (as an attacker would hold one): the type check refuses it.
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let err = create_private(&fifo).unwrap_err();
        assert!(
            err.to_string().contains("a FIFO, not a regular file"),
            "{err}"
        );
        let err = open_existing_for_write(&fifo, false).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        assert!(create_private(dir.path()).is_err());
        // /dev/null stays usable as a sink.
        assert!(create_private(Path::new("/dev/null")).is_ok());
    }

    #[test]
    fn an_existing_file_is_written_in_place_and_nothing_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attr");
        std::fs::write(&path, "0\n").unwrap();
        let mut f = open_existing_for_write(&path, false).unwrap();
        f.write_all(b"1").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
        let absent = dir.path().join("absent");
        assert!(open_existing_for_write(&absent, true).is_err());
        assert!(!absent.exists());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let err = open_existing_for_write(&link, true).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
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
