//! The scope keys (`cgroups`, `comm`, `pid_namespace_of`, `scope_refresh_ms`): validation, and
//! the [`ScopeSelector`] they make with `pids`.

use std::path::Path;

use super::{Config, ConfigError, Settings, limits, ranged};
use crate::scope::{CGROUP_ROOT, ScopeSelector, cgroup};

impl Config {
    pub(super) fn apply_scope(&mut self, s: &Settings) -> Result<(), ConfigError> {
        if let Some(v) = &s.cgroups {
            let mut dirs = Vec::with_capacity(v.value.len());
            for entry in &v.value {
                let dir = Path::new(CGROUP_ROOT).join(entry);
                if !cgroup::is_cgroup_dir(&dir) {
                    return Err(ConfigError::Invalid {
                        origin: v.origin.clone(),
                        key: "cgroups",
                        detail: format!(
                            "{} is not a cgroup directory (it has no cgroup.procs); give a \
                             directory of a mounted cgroup v2 or v1 hierarchy, absolute or \
                             relative to {CGROUP_ROOT}",
                            dir.display()
                        ),
                    });
                }
                dirs.push(dir);
            }
            self.cgroups = dirs;
        }
        if let Some(v) = &s.comm {
            self.comm = match v.value.as_str() {
                "" => None,
                text => {
                    regex::Regex::new(text).map_err(|e| ConfigError::Invalid {
                        origin: v.origin.clone(),
                        key: "comm",
                        detail: format!("not a regex: {e}"),
                    })?;
                    Some(text.to_string())
                }
            };
        }
        if let Some(v) = &s.pid_namespace_of {
            let (min, max) = limits::PID;
            self.pid_namespace_of =
                Some(ranged(&v.origin, "pid_namespace_of", v.value, min, max)? as u32);
        }
        if let Some(v) = &s.scope_refresh_ms {
            let (min, max) = limits::SCOPE_REFRESH_MS;
            self.scope_refresh_ms =
                ranged(&v.origin, "scope_refresh_ms", v.value, min, max)? as u32;
        }
        Ok(())
    }

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
