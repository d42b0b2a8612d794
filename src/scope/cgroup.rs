//! Processes of a cgroup subtree, for cgroup v2 and v1 alike: every directory of a cgroup
//! hierarchy has a `cgroup.procs` listing its processes, so the subtree's processes are the
//! union over the directory and its descendants. The kernel translates the pids into the
//! reader's pid namespace and writes 0 for a process outside it; those are skipped, so a
//! containerised pghotd never sees, let alone acts on, a process it cannot name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Cgroup directories nested deeper than this are not followed (the kernel's own default
/// `cgroup.max.depth` is unlimited, but a real tree is a few levels deep; this bounds a walk
/// over a looping bind mount).
const MAX_DEPTH: usize = 64;

/// Whether `dir` looks like a cgroup directory of either version.
pub fn is_cgroup_dir(dir: &Path) -> bool {
    dir.join("cgroup.procs").is_file()
}

/// Adds the pids of every process in `dir` and its descendant cgroups to `out`. A cgroup
/// removed during the walk contributes what was read before it went. Returns false when `dir`
/// itself is gone.
pub fn collect_procs(dir: &Path, out: &mut BTreeSet<u32>) -> bool {
    if !is_cgroup_dir(dir) {
        return false;
    }
    let mut stack: Vec<(PathBuf, usize)> = vec![(dir.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        if let Ok(text) = crate::safefs::read_text(
            &dir.join("cgroup.procs"),
            crate::safefs::limit::CGROUP_PROCS,
        ) {
            out.extend(
                text.lines()
                    .filter_map(|l| l.trim().parse::<u32>().ok())
                    .filter(|&p| p != 0),
            );
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            // Child cgroups are directories; file_type does not follow symlinks.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtree_is_the_union_of_its_procs_files_without_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("work");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("c")).unwrap();
        std::fs::write(root.join("cgroup.procs"), "10\n").unwrap();
        std::fs::write(root.join("a/cgroup.procs"), "11\n0\n").unwrap();
        std::fs::write(root.join("a/b/cgroup.procs"), "12\n").unwrap();
        // A directory without cgroup.procs of its own still holds child cgroups' files in a
        // real tree only if it is a cgroup; here it is read as empty.
        std::fs::write(root.join("c/cgroup.procs"), "").unwrap();
        let mut pids = BTreeSet::new();
        assert!(collect_procs(&root, &mut pids));
        assert_eq!(pids.into_iter().collect::<Vec<_>>(), vec![10, 11, 12]);
        let mut none = BTreeSet::new();
        assert!(!collect_procs(&root.join("gone"), &mut none));
        assert!(none.is_empty());
    }
}
