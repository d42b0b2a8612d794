//! Scope on a live kernel: cgroup v2 and v1 subtrees followed as processes come and go, a
//! process in its own pid namespace (unshare), pids read inside a namespace through NSpid,
//! and the move-time check: only in-scope, still-identical processes reach move_pages.
//!
//! These need root (cgroup writes, unshare --pid); without it they say so loudly and return.

mod util;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use pghotd::movepages::Mover;
use pghotd::scope::guard::GuardedMover;
use pghotd::scope::{ProcFs, ScopeSelector, ScopeTracker};
use pghotd::stats::{Counter, Stats};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn skip(why: &str) {
    eprintln!("\n*** SKIPPED: {why} ***\n");
}

/// A cgroup made for one test, removed when dropped (after its processes are gone).
struct TestCgroup {
    dir: PathBuf,
    mounted: Option<tempfile::TempDir>,
}

impl TestCgroup {
    /// A new cgroup in the cgroup2 hierarchy; one is mounted for the test if none is.
    fn v2(name: &str) -> TestCgroup {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let existing = mountinfo.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mount_point = left.split_whitespace().nth(4)?;
            (right.split_whitespace().next() == Some("cgroup2")).then(|| PathBuf::from(mount_point))
        });
        let (root, mounted) = match existing {
            Some(root) => (root, None),
            None => {
                let dir = tempfile::tempdir().unwrap();
                util::run(
                    Command::new("mount")
                        .args(["-t", "cgroup2", "none"])
                        .arg(dir.path()),
                    true,
                );
                (dir.path().to_path_buf(), Some(dir))
            }
        };
        TestCgroup::create(root.join(name), mounted)
    }

    /// A new cgroup in a v1 hierarchy (the `pids` controller's), if this machine has one.
    fn v1(name: &str) -> Option<TestCgroup> {
        let root = Path::new("/sys/fs/cgroup/pids");
        root.join("cgroup.procs")
            .is_file()
            .then(|| TestCgroup::create(root.join(name), None))
    }

    fn create(dir: PathBuf, mounted: Option<tempfile::TempDir>) -> TestCgroup {
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        TestCgroup { dir, mounted }
    }

    fn sub(&self, name: &str) -> PathBuf {
        let d = self.dir.join(name);
        std::fs::create_dir(&d).unwrap();
        d
    }

    /// `sleep 60` started inside `cgroup` (it moves itself before exec, so nothing it forks
    /// starts outside), optionally under `unshare --pid --fork`.
    fn spawn_in(cgroup: &Path, unshare: bool) -> Child {
        let exec = if unshare {
            "exec unshare --pid --fork --kill-child sleep 60"
        } else {
            "exec sleep 60"
        };
        let script = format!("echo $$ > {}/cgroup.procs && {exec}", cgroup.display());
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Children first; a cgroup with processes cannot be removed, so wait for them to go.
        let mut dirs = vec![];
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()));
            }
            dirs.push(d);
        }
        for d in dirs.iter().rev() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(d).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some(m) = &self.mounted {
            let _ = Command::new("umount").arg(m.path()).status();
        }
    }
}

fn sleeper() -> Child {
    Command::new("sleep").arg("60").spawn().unwrap()
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits until `pid`'s cgroup move (done by its shell) is visible.
fn wait_in(cgroup: &Path, pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut pids = BTreeSet::new();
        pghotd::scope::cgroup::collect_procs(cgroup, &mut pids);
        if pids.contains(&pid) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} never joined {}",
            cgroup.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The children of `pid` (Linux 3.5 `/proc/PID/task/TID/children`), waiting for one.
fn child_of(pid: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(c) = text.split_whitespace().next().and_then(|c| c.parse().ok()) {
            return c;
        }
        assert!(Instant::now() < deadline, "pid {pid} never forked");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Records every pid a move reaches.
#[derive(Default)]
struct LoggingMover {
    moved_pids: Vec<u32>,
}

impl Mover for LoggingMover {
    fn move_pages(
        &mut self,
        pid: u32,
        pages: &[u64],
        nodes: Option<&[i32]>,
        status: &mut [i32],
    ) -> Result<usize, Errno> {
        if nodes.is_some() {
            self.moved_pids.push(pid);
        }
        status[..pages.len()].fill(0);
        Ok(0)
    }
}

fn tracker_of(selector: ScopeSelector) -> ScopeTracker {
    ScopeTracker::new(selector, ProcFs::default()).unwrap()
}

/// A cgroup subtree, followed: members join and leave between refreshes; a process outside
/// it, or gone, never reaches move_pages.
fn cgroup_is_followed(cg: &TestCgroup) {
    let mut inside = TestCgroup::spawn_in(&cg.dir, false);
    let mut outside = sleeper();
    wait_in(&cg.dir, inside.id());
    let mut tracker = tracker_of(ScopeSelector {
        cgroups: vec![cg.dir.clone()],
        ..ScopeSelector::default()
    });
    let r = tracker.refresh().unwrap();
    assert_eq!(r.members, BTreeSet::from([inside.id()]));

    // A process that arrives later, in a child cgroup, is picked up by the next refresh.
    let sub = cg.sub("later");
    let mut later = TestCgroup::spawn_in(&sub, false);
    wait_in(&sub, later.id());
    let r = tracker.refresh().unwrap();
    assert_eq!(r.members, BTreeSet::from([inside.id(), later.id()]));
    assert_eq!(r.added, 1);

    let scope = Arc::clone(tracker.scope());
    let stats = Arc::new(Stats::new());
    let mut mover = GuardedMover::new(LoggingMover::default(), scope, Arc::clone(&stats));
    let mut status = [0i32];
    stop(&mut inside);
    for pid in [inside.id(), outside.id(), later.id()] {
        let _ = mover.move_pages(pid, &[0x1000], Some(&[0]), &mut status);
    }
    assert_eq!(
        mover.inner().moved_pids,
        vec![later.id()],
        "only the live in-scope process may be moved"
    );
    assert_eq!(stats.get(Counter::ScopeRefusedOutOfScope), 1);
    // The exited process is refused by the pidfd/start-time check before a refresh.
    let r = tracker.refresh().unwrap();
    assert_eq!(r.members, BTreeSet::from([later.id()]));
    stop(&mut later);
    stop(&mut outside);
    tracker.refresh().unwrap();
    assert!(!tracker.scope().contains(later.id()));
}

#[test]
fn cgroup_v2_subtree_is_followed_and_only_members_are_moved() {
    if !is_root() {
        return skip("cgroup_v2_subtree: needs root to create cgroups");
    }
    let cg = TestCgroup::v2(&format!("pghotd-test-v2-{}", std::process::id()));
    cgroup_is_followed(&cg);
}

#[test]
fn cgroup_v1_subtree_is_followed_and_only_members_are_moved() {
    if !is_root() {
        return skip("cgroup_v1_subtree: needs root to create cgroups");
    }
    match TestCgroup::v1(&format!("pghotd-test-v1-{}", std::process::id())) {
        Some(cg) => cgroup_is_followed(&cg),
        None => skip("cgroup_v1_subtree: this machine mounts no v1 pids hierarchy"),
    }
}

#[test]
fn a_process_in_its_own_pid_namespace_is_found_by_cgroup_and_by_nspid() {
    if !is_root() {
        return skip("pid namespace: needs root for unshare --pid");
    }
    let cg = TestCgroup::v2(&format!("pghotd-test-ns-{}", std::process::id()));
    let mut unshare = TestCgroup::spawn_in(&cg.dir, true);
    let sleep_pid = child_of(unshare.id());
    let proc = ProcFs::default();
    let deadline = Instant::now() + Duration::from_secs(5);
    while proc.nspids(sleep_pid).is_none_or(|v| v.len() < 2) {
        assert!(
            Instant::now() < deadline,
            "sleep never entered its namespace"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Outer pid first, its pid inside the new namespace (1) last.
    assert_eq!(proc.nspids(sleep_pid), Some(vec![sleep_pid, 1]));

    // By cgroup: the namespaced process is listed under its pid in pghotd's namespace.
    let mut by_cgroup = tracker_of(ScopeSelector {
        cgroups: vec![cg.dir.clone()],
        ..ScopeSelector::default()
    });
    let members = by_cgroup.refresh().unwrap().members;
    assert_eq!(members, BTreeSet::from([unshare.id(), sleep_pid]));

    // By pid inside the namespace: "pid 1 there" is the sleep, never this machine's init.
    let mut by_nspid = tracker_of(ScopeSelector {
        pids: vec![1],
        pid_namespace_of: Some(sleep_pid),
        ..ScopeSelector::default()
    });
    let members = by_nspid.refresh().unwrap().members;
    assert_eq!(members, BTreeSet::from([sleep_pid]));
    assert!(!by_nspid.scope().contains(1));
    assert!(by_nspid.scope().identity(sleep_pid).is_some());
    stop(&mut unshare);
    let deadline = Instant::now() + Duration::from_secs(5);
    while ProcFs::default().stat(sleep_pid).is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(by_nspid.refresh().unwrap().members.is_empty());
}

#[test]
fn pghotd_drops_samples_of_processes_outside_its_cgroup() {
    if !is_root() {
        return skip("pghotd --cgroup: needs root to create cgroups");
    }
    let cg = TestCgroup::v2(&format!("pghotd-test-cli-{}", std::process::id()));
    let mut inside = TestCgroup::spawn_in(&cg.dir, false);
    let mut outside = sleeper();
    wait_in(&cg.dir, inside.id());
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace");
    let stats = dir.path().join("stats.json");
    let mut t = String::new();
    for (pid, page) in [
        (inside.id(), 1u64),
        (outside.id(), 2),
        (inside.id(), 1),
        (outside.id(), 2),
    ] {
        t.push_str(&format!(
            "1000 0 {pid} {pid} {:#x} - L extmem 2\n",
            0x7f00_0000_0000u64 + page * 4096
        ));
    }
    std::fs::write(&trace, t).unwrap();
    let out = util::run(
        util::replay(&trace)
            .arg("--cgroup")
            .arg(&cg.dir)
            .arg("--dry-run")
            .arg("--stats-json")
            .arg(&stats),
        true,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("scope: cgroup {}", cg.dir.display())),
        "{stderr}"
    );
    let c = util::counters(&stats);
    assert_eq!(c["pghot_drop_out_of_scope"], 2, "{c:#?}");
    assert_eq!(c["pghot_recorded_accesses"], 2, "{c:#?}");
    assert_eq!(c["pgpromote_candidate"], 1, "{c:#?}");
    stop(&mut inside);
    stop(&mut outside);
}
