//! The scope keys' own checks (`cgroups`, `comm`; their rows are in `defs`), and the
//! [`ScopeSelector`] they make with `pids` and `pid_namespace_of`.

use std::path::Path;

use super::Config;
use super::setting::{Field, Written, text, texts};
use crate::scope::{CGROUP_ROOT, ScopeSelector, cgroup};

/// Each entry must be a cgroup directory now (it has `cgroup.procs`); relative entries are
/// under [`CGROUP_ROOT`].
pub(super) const CGROUPS: Field = Field {
    get: |c| {
        Some(Written::Texts(
            c.cgroups.iter().map(|p| p.display().to_string()).collect(),
        ))
    },
    set: |c, value| {
        let mut dirs = Vec::new();
        for entry in texts(value)? {
            let dir = Path::new(CGROUP_ROOT).join(entry);
            if !cgroup::is_cgroup_dir(&dir) {
                return Err(format!(
                    "{} is not a cgroup directory (it has no cgroup.procs); give a directory of \
                     a mounted cgroup v2 or v1 hierarchy, absolute or relative to {CGROUP_ROOT}",
                    dir.display()
                ));
            }
            dirs.push(dir);
        }
        c.cgroups = dirs;
        Ok(())
    },
    copy: |from, to| to.cgroups = from.cgroups.clone(),
};

/// A regex, checked when set so the daemon's [`Config::scope_selector`] cannot fail later;
/// `""` is none.
pub(super) const COMM: Field = Field {
    get: |c| c.comm.clone().map(Written::Text),
    set: |c, value| {
        c.comm = match text(value)?.as_str() {
            "" => None,
            re => {
                regex::Regex::new(re).map_err(|e| format!("not a regex: {e}"))?;
                Some(re.to_string())
            }
        };
        Ok(())
    },
    copy: |from, to| to.comm = from.comm.clone(),
};

impl Config {
    /// The processes this configuration selects. The regex was checked when it was set.
    pub fn scope_selector(&self) -> Result<ScopeSelector, regex::Error> {
        Ok(ScopeSelector {
            pids: self.pids.clone(),
            pid_namespace_of: self.pid_namespace_of,
            cgroups: self.cgroups.clone(),
            comm: self.comm.as_deref().map(regex::Regex::new).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::from_file;

    #[test]
    fn scope_keys_are_checked_with_key_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let cg = dir.path().join("work");
        std::fs::create_dir(&cg).unwrap();
        let text = format!(
            "pids = [7]\ncgroups = [\"{}\"]\ncomm = \"^java$\"\npid_namespace_of = 42\nscope_refresh_ms = 250\n",
            cg.display()
        );
        let err = from_file(&text).unwrap_err().to_string();
        assert!(err.contains("line 2: cgroups"), "{err}");
        assert!(err.contains("not a cgroup directory"), "{err}");
        std::fs::write(cg.join("cgroup.procs"), "").unwrap();
        let c = from_file(&text).unwrap();
        assert_eq!(c.cgroups, vec![cg]);
        assert_eq!(c.comm.as_deref(), Some("^java$"));
        assert_eq!((c.pid_namespace_of, c.scope_refresh_ms), (Some(42), 250));
        let sel = c.scope_selector().unwrap();
        assert_eq!(sel.pids, vec![7]);
        assert!(!sel.is_everything());

        let err = from_file("comm = \"(java\"").unwrap_err().to_string();
        assert!(err.contains("line 1: comm: not a regex"), "{err}");
        let err = from_file("scope_refresh_ms = 1").unwrap_err().to_string();
        assert!(err.contains("allowed 10..=600000"), "{err}");
    }
}
