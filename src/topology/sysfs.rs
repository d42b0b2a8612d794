//! Reading sysfs under a root prefix, so tests and replays can point at a copied tree.

use std::path::{Path, PathBuf};

use super::TopologyError;

/// A sysfs tree: `/sys` on a live system, or a plain copy of the files pghotd needs.
#[derive(Debug, Clone)]
pub struct SysfsRoot {
    root: PathBuf,
}

impl SysfsRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SysfsRoot { root: root.into() }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file's contents, trimmed.
    pub fn read(&self, rel: &str) -> Result<String, TopologyError> {
        let path = self.path(rel);
        crate::safefs::read_text(&path, crate::safefs::limit::ATTRIBUTE)
            .map(|s| s.trim().to_string())
            .map_err(|source| TopologyError::Read { path, source })
    }

    /// Like [`read`](Self::read), but a missing file is `None`.
    pub fn read_optional(&self, rel: &str) -> Result<Option<String>, TopologyError> {
        match self.read(rel) {
            Ok(s) => Ok(Some(s)),
            Err(TopologyError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The names in a directory, sorted. A missing directory is an empty list.
    pub fn entry_names(&self, rel: &str) -> Result<Vec<String>, TopologyError> {
        let path = self.path(rel);
        let dir = match std::fs::read_dir(&path) {
            Ok(dir) => dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(TopologyError::Read { path, source }),
        };
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|source| TopologyError::Read {
                path: path.clone(),
                source,
            })?;
            // sysfs names are ASCII; anything else is not a name pghotd looks for.
            if let Ok(name) = entry.file_name().into_string() {
                out.push(name);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Names in a directory that are `<prefix><number>`, as numbers, sorted. A missing directory
    /// is an empty list.
    pub fn numbered_entries(&self, rel: &str, prefix: &str) -> Result<Vec<u64>, TopologyError> {
        let mut out: Vec<u64> = self
            .entry_names(rel)?
            .iter()
            .filter_map(|name| name.strip_prefix(prefix)?.parse().ok())
            .collect();
        out.sort_unstable();
        Ok(out)
    }
}

/// Parses a kernel cpu/node list such as `0-3,8,10-11` (empty means none).
pub fn parse_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?);
                if lo > hi || hi - lo > 1 << 20 {
                    return None;
                }
                out.extend(lo..=hi);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_lists() {
        assert_eq!(parse_list(""), Some(vec![]));
        assert_eq!(parse_list("0\n"), Some(vec![0]));
        assert_eq!(parse_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("a"), None);
    }
}
