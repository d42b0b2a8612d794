//! The machine's memory, which bounds the hotness table (`max_tracked_pages`): the table is
//! allocated whole when the daemon starts, so a value the machine cannot hold would take its
//! memory before the first sample.

use std::path::Path;

use super::{Config, ConfigError};
use crate::hotness::BYTES_PER_TRACKED_PAGE;

/// Where the machine's memory is read.
const MEMINFO: &str = "/proc/meminfo";
/// `/proc/meminfo` is some 50 lines of under 40 bytes each.
const MEMINFO_LIMIT: usize = 64 << 10;

/// The most of the machine's memory the table may take: a quarter. pghotd is there to speed up
/// the workloads that use that memory; a table that takes more than a quarter of it leaves them
/// less room than it can win back, and the default (2^20 pages, 32 MiB) is far below it on
/// any machine with a lower tier to promote from.
const TABLE_SHARE_DIVISOR: u64 = 4;

/// MemTotal of `/proc/meminfo`, in bytes.
pub(super) fn mem_total_bytes() -> Result<u64, ConfigError> {
    read_mem_total(Path::new(MEMINFO))
}

/// MemTotal of a meminfo file, parsed by the `procfs` crate from a bounded read.
pub(super) fn read_mem_total(path: &Path) -> Result<u64, ConfigError> {
    crate::safefs::read_proc::<procfs::Meminfo>(path, MEMINFO_LIMIT)
        .map(|m| m.mem_total)
        .map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })
}

impl Config {
    /// `max_tracked_pages` must fit in a quarter of `mem_total` bytes (see
    /// [`TABLE_SHARE_DIVISOR`]).
    pub(super) fn check_table_fits(&self, mem_total: u64) -> Result<(), ConfigError> {
        let table = (self.max_tracked_pages as u64).saturating_mul(BYTES_PER_TRACKED_PAGE);
        let allowed = mem_total / TABLE_SHARE_DIVISOR;
        if table <= allowed {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            origin: self.origins.of("max_tracked_pages"),
            key: "max_tracked_pages",
            detail: format!(
                "{} pages take {table} bytes ({} MiB, {BYTES_PER_TRACKED_PAGE} bytes each), more \
                 than a quarter of this machine's memory ({mem_total} bytes, {} MiB; the table \
                 must leave the workloads the rest); at most {} pages here",
                self.max_tracked_pages,
                table >> 20,
                mem_total >> 20,
                allowed / BYTES_PER_TRACKED_PAGE
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_must_fit_in_a_quarter_of_the_machine() {
        let mut c = Config::default()
            .with_setting("max_tracked_pages", "4294967296")
            .unwrap();
        // 2^32 pages x 32 bytes = 128 GiB: refused on a 23 GiB machine, with the figures.
        let err = c.check_table_fits(23 << 30).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "config set: max_tracked_pages: 4294967296 pages take 137438953472 bytes"
            ),
            "{err}"
        );
        assert!(
            err.contains("this machine's memory (24696061952 bytes"),
            "{err}"
        );
        assert!(err.contains("at most 192937984 pages here"), "{err}");
        // Exactly a quarter fits; one page more does not.
        c.max_tracked_pages = 1 << 20;
        assert!(c.check_table_fits(128 << 20).is_ok());
        assert!(c.check_table_fits((128 << 20) - 1).is_err());
        // The default names itself as the origin.
        let err = Config::default().check_table_fits(1 << 20).unwrap_err();
        assert!(err.to_string().starts_with("built-in default: "), "{err}");
    }

    #[test]
    fn mem_total_is_read_from_meminfo() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meminfo");
        let text = "MemTotal:       24117248 kB\nMemFree:  1 kB\nBuffers: 1 kB\nCached: 1 kB\n\
                    SwapCached: 0 kB\nActive: 1 kB\nInactive: 1 kB\nActive(anon): 1 kB\n\
                    Inactive(anon): 1 kB\nActive(file): 1 kB\nInactive(file): 1 kB\n\
                    Unevictable: 0 kB\nMlocked: 0 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n\
                    Dirty: 0 kB\nWriteback: 0 kB\nAnonPages: 1 kB\nMapped: 1 kB\nShmem: 1 kB\n\
                    Slab: 1 kB\nSReclaimable: 1 kB\nSUnreclaim: 1 kB\nKernelStack: 1 kB\n\
                    PageTables: 1 kB\nNFS_Unstable: 0 kB\nBounce: 0 kB\nWritebackTmp: 0 kB\n\
                    CommitLimit: 1 kB\nCommitted_AS: 1 kB\nVmallocTotal: 1 kB\nVmallocUsed: 1 kB\n\
                    VmallocChunk: 0 kB\n";
        std::fs::write(&path, text).unwrap();
        assert_eq!(read_mem_total(&path).unwrap(), 24117248 * 1024);
        assert!(mem_total_bytes().unwrap() > 0);
        let err = read_mem_total(&dir.path().join("absent")).unwrap_err();
        assert!(err.to_string().contains("absent"), "{err}");
    }
}
