//! Which processes pghotd may act on, and the check before each move that the process is
//! still the one that was sampled.
//!
//! Selection (`pids`, `cgroups`, `comm`, `pid_namespace_of` in the config): the explicit pids
//! and the processes of the cgroup subtrees (v2 or v1 directories, followed as processes come
//! and go) form the set; with neither, every process. A `comm` regex then keeps only the
//! processes whose command name matches. Kernel threads, exited processes and pghotd itself
//! are never in scope. With `pid_namespace_of = P`, the `pids` are read as pids inside P's pid
//! namespace and translated through `/proc/PID/status` NSpid into pghotd's own.
//!
//! Threads: the [`ScopeTracker`] runs on `pghot-scope`, re-reading `/proc` and the cgroups
//! every `scope_refresh_ms` (with `pids` alone, when one of them exits) and publishing the
//! result into the shared [`Scope`]: a bitmap of pids (one relaxed load per sample in
//! `ingest`) and each member's [`Identity`] (start time). The first refresh runs before any
//! source starts.
//!
//! Before every move, [`guard::GuardedMover`] opens a pidfd on the pid, compares the
//! process's start time with the identity the tracker recorded and checks through the pidfd
//! that the process it read is still alive; only then does move_pages(2) run. A pid whose
//! number now belongs to another process is refused (`scope_refused_pid_reused`).

pub mod cgroup;
pub mod guard;
pub mod proc;
mod sys;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use regex::Regex;

pub use proc::{Identity, ProcFs};

use crate::stop::StopToken;

/// `PROC_PID_INIT_INO` (include/linux/proc_ns.h): the inode number every kernel gives the
/// initial pid namespace, as `readlink /proc/self/ns/pid` shows it (`pid:[4026531836]`).
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// Whether `link`, the target of `/proc/self/ns/pid`, names the initial pid namespace. A link
/// that does not parse counts as the initial one: the safe reading for a scope of "every
/// process".
pub fn is_initial_pid_namespace(link: &str) -> bool {
    link.strip_prefix("pid:[")
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|ino| ino.parse::<u64>().ok())
        .is_none_or(|ino| ino == PROC_PID_INIT_INO)
}

/// The target of `/proc/self/ns/pid`, or `None` where it cannot be read.
pub fn own_pid_namespace_link() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Pids are below 2^22 (Linux's PID_MAX_LIMIT); the hotness key has the same bound.
pub const PID_LIMIT: u32 = 1 << 22;

/// Where relative `cgroups` entries are looked up.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// What the configuration selects.
#[derive(Debug, Clone, Default)]
pub struct ScopeSelector {
    pub pids: Vec<u32>,
    /// Read `pids` inside the pid namespace of this process (a pid in pghotd's namespace).
    pub pid_namespace_of: Option<u32>,
    pub cgroups: Vec<PathBuf>,
    pub comm: Option<Regex>,
}

impl ScopeSelector {
    /// No selector: every process except kernel threads and pghotd.
    pub fn is_everything(&self) -> bool {
        self.pids.is_empty() && self.cgroups.is_empty() && self.comm.is_none()
    }

    /// Whether membership changes by itself (processes join and leave cgroups, start and end
    /// with a matching name), so a source that watches processes must re-read the scope.
    pub fn follows(&self) -> bool {
        !self.cgroups.is_empty() || self.comm.is_some()
    }

    /// Whether a source that watches processes (soft-dirty) may follow this selection: a
    /// selection that [`follows`](Self::follows), or every process where "every" is a
    /// container's: in a pid namespace other than the initial one pghotd sees only that
    /// namespace's processes (a pod's, with shareProcessNamespace), not the machine's.
    pub fn followable(&self, pid_namespace_link: Option<&str>) -> bool {
        self.follows()
            || (self.is_everything()
                && pid_namespace_link.is_some_and(|l| !is_initial_pid_namespace(l)))
    }

    /// One line for logs and status.
    pub fn describe(&self) -> String {
        if self.is_everything() {
            return "every process".into();
        }
        let mut parts = Vec::new();
        if !self.pids.is_empty() {
            let ns = self
                .pid_namespace_of
                .map_or(String::new(), |p| format!(" in the pid namespace of {p}"));
            parts.push(format!("pids {:?}{ns}", self.pids));
        }
        for c in &self.cgroups {
            parts.push(format!("cgroup {}", c.display()));
        }
        let mut text = parts.join(" + ");
        if let Some(re) = &self.comm {
            if text.is_empty() {
                text = "every process".into();
            }
            text.push_str(&format!(" with comm matching /{re}/"));
        }
        text
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    #[error("pid_namespace_of: pid {pid} has no readable pid namespace ({})", path.display())]
    Namespace { pid: u32, path: PathBuf },
    #[error("reading {}: {source}", path.display())]
    ListProc {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting thread pghot-scope: {0}")]
    Spawn(std::io::Error),
}

/// One bit per pid, read without locks by every sampler thread.
struct PidBits(Box<[AtomicU64]>);

impl PidBits {
    fn new() -> PidBits {
        PidBits((0..PID_LIMIT / 64).map(|_| AtomicU64::new(0)).collect())
    }

    #[inline]
    fn contains(&self, pid: u32) -> bool {
        self.0
            .get((pid / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (pid % 64)) != 0)
    }

    fn set(&self, pid: u32, on: bool) {
        if let Some(w) = self.0.get((pid / 64) as usize) {
            let bit = 1 << (pid % 64);
            if on {
                w.fetch_or(bit, Ordering::Relaxed);
            } else {
                w.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }
}

/// The scope as the sample path and the migrators see it.
pub struct Scope {
    self_pid: u32,
    /// `None`: every process but pghotd is in scope at the sample path (the move-time check
    /// still wants an identity, which kernel threads never get).
    members: Option<PidBits>,
    identities: Mutex<HashMap<u32, Identity>>,
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("self_pid", &self.self_pid)
            .field("selective", &self.members.is_some())
            .finish()
    }
}

impl Scope {
    /// Every process except `self_pid`.
    pub fn everything(self_pid: u32) -> Scope {
        Scope {
            self_pid,
            members: None,
            identities: Mutex::new(HashMap::new()),
        }
    }

    /// A scope that starts with `pids` in it (a tracker may change it).
    pub fn of_pids(pids: impl IntoIterator<Item = u32>, self_pid: u32) -> Scope {
        let bits = PidBits::new();
        for pid in pids {
            bits.set(pid, true);
        }
        Scope {
            self_pid,
            members: Some(bits),
            identities: Mutex::new(HashMap::new()),
        }
    }

    fn for_selector(selector: &ScopeSelector, self_pid: u32) -> Scope {
        if selector.is_everything() {
            Scope::everything(self_pid)
        } else {
            Scope::of_pids(std::iter::empty(), self_pid)
        }
    }

    /// Whether samples of `pid` are kept: one relaxed load.
    #[inline]
    pub fn contains(&self, pid: u32) -> bool {
        pid != self.self_pid && self.members.as_ref().is_none_or(|m| m.contains(pid))
    }

    /// The process the tracker last saw with this pid, if it is in scope.
    pub fn identity(&self, pid: u32) -> Option<Identity> {
        self.identities.lock().get(&pid).copied()
    }

    /// Records `identity` as the in-scope process of its pid (the tracker does this; tests
    /// and tools may too).
    pub fn set_identity(&self, identity: Identity) {
        self.identities.lock().insert(identity.pid, identity);
    }

    pub fn self_pid(&self) -> u32 {
        self.self_pid
    }

    /// The live processes in scope at the tracker's last refresh, by pid.
    pub fn members(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.identities.lock().keys().copied().collect();
        pids.sort_unstable();
        pids
    }
}

/// Follows the selection: re-reads `/proc` and the cgroups and publishes into the [`Scope`].
pub struct ScopeTracker {
    selector: ScopeSelector,
    scope: Arc<Scope>,
    proc: ProcFs,
    /// The pid namespace `pids` are read in (`pid:[inode]`), when `pid_namespace_of` is set.
    namespace: Option<String>,
    /// Explicit pids: the process first seen with that number.
    first_seen: HashMap<u32, Identity>,
    /// Explicit pids whose process exited: the number is never managed again, whoever gets it.
    retired: HashSet<u32>,
    published: BTreeSet<u32>,
    missing_cgroups: HashSet<PathBuf>,
}

/// How the tracker waits before its next refresh (see `ScopeTracker::next_wait`).
#[derive(Debug)]
enum NextWait {
    /// Until one of these members' pidfds says it exited.
    Exits(Vec<OwnedFd>),
    /// `scope_refresh_ms`.
    Clock,
    /// Not at all: a member exited already.
    Now,
}

/// What one refresh found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refresh {
    pub members: BTreeSet<u32>,
    pub added: usize,
    pub removed: usize,
}

impl ScopeTracker {
    pub fn new(selector: ScopeSelector, proc: ProcFs) -> Result<ScopeTracker, ScopeError> {
        let self_pid = std::process::id();
        let namespace = match selector.pid_namespace_of {
            Some(pid) => Some(proc.pid_namespace(pid).ok_or(ScopeError::Namespace {
                pid,
                path: proc.root().join(pid.to_string()).join("ns/pid"),
            })?),
            None => None,
        };
        let scope = Arc::new(Scope::for_selector(&selector, self_pid));
        Ok(ScopeTracker {
            selector,
            scope,
            proc,
            namespace,
            first_seen: HashMap::new(),
            retired: HashSet::new(),
            published: BTreeSet::new(),
            missing_cgroups: HashSet::new(),
        })
    }

    pub fn scope(&self) -> &Arc<Scope> {
        &self.scope
    }

    pub fn selector(&self) -> &ScopeSelector {
        &self.selector
    }

    /// Re-reads the selection and publishes it.
    pub fn refresh(&mut self) -> Result<Refresh, ScopeError> {
        let listed = if self.only_explicit_pids() {
            // Only these can be chosen: reading every process's stat each refresh is work in
            // proportion to the machine, not to the selection.
            self.selector.pids.clone()
        } else {
            self.proc.pids().map_err(|source| ScopeError::ListProc {
                path: self.proc.root().to_path_buf(),
                source,
            })?
        };
        let self_pid = self.scope.self_pid;
        let live: HashMap<u32, Identity> = listed
            .into_iter()
            .filter(|&pid| pid != self_pid)
            .filter_map(|pid| self.proc.stat(pid))
            .filter(|s| !s.kernel_thread && !s.exited)
            .map(|s| (s.identity.pid, s.identity))
            .collect();
        let scope = Arc::clone(&self.scope);
        let Some(bits) = &scope.members else {
            // Every process: only identities to publish.
            *scope.identities.lock() = live;
            return Ok(Refresh::default());
        };

        let mut chosen = BTreeSet::new();
        // Explicit pids never seen alive stay in scope (a replayed trace in a dry run names
        // processes of another machine); with no identity they are never moved.
        let mut unseen = BTreeSet::new();
        if self.namespace.is_some() {
            self.pids_in_namespace(&live, &mut chosen);
        } else {
            self.explicit_pids(&live, &mut chosen, &mut unseen);
        }
        let mut in_cgroups = BTreeSet::new();
        for cg in &self.selector.cgroups {
            if cgroup::collect_procs(cg, &mut in_cgroups) {
                self.missing_cgroups.remove(cg);
            } else if self.missing_cgroups.insert(cg.clone()) {
                tracing::warn!(
                    "scope: cgroup {} is gone; its processes are not managed until it is back",
                    cg.display()
                );
            }
        }
        chosen.extend(in_cgroups.into_iter().filter(|p| live.contains_key(p)));
        if self.selector.pids.is_empty() && self.selector.cgroups.is_empty() {
            chosen.extend(live.keys().copied());
        }
        if let Some(re) = &self.selector.comm {
            let proc = &self.proc;
            chosen.retain(|&pid| proc.comm(pid).is_some_and(|c| re.is_match(&c)));
        }
        let identities: HashMap<u32, Identity> = chosen
            .iter()
            .filter_map(|p| live.get(p).map(|id| (*p, *id)))
            .collect();
        chosen.extend(unseen);

        // Admit the new members before removing the old, so a process staying in scope is
        // never dropped for a moment.
        let mut report = Refresh::default();
        for &pid in chosen.difference(&self.published) {
            bits.set(pid, true);
            report.added += 1;
        }
        for &pid in self.published.difference(&chosen) {
            bits.set(pid, false);
            report.removed += 1;
        }
        *scope.identities.lock() = identities;
        if report.added + report.removed > 0 {
            tracing::debug!(
                "scope: {} process(es), +{} -{}",
                chosen.len(),
                report.added,
                report.removed
            );
        }
        self.published = chosen.clone();
        report.members = chosen;
        Ok(report)
    }

    /// `pids` as given: the process first seen with each number, until it exits.
    /// The selection is `pids` alone, read in pghotd's own pid namespace: the other processes
    /// need not be looked at.
    fn only_explicit_pids(&self) -> bool {
        !self.selector.pids.is_empty()
            && self.selector.cgroups.is_empty()
            && self.namespace.is_none()
            && self.scope.members.is_some()
    }

    fn explicit_pids(
        &mut self,
        live: &HashMap<u32, Identity>,
        chosen: &mut BTreeSet<u32>,
        unseen: &mut BTreeSet<u32>,
    ) {
        for &pid in &self.selector.pids {
            if self.retired.contains(&pid) {
                continue;
            }
            match (live.get(&pid), self.first_seen.get(&pid)) {
                (Some(now), Some(first)) if now != first => {
                    self.retired.insert(pid);
                    tracing::info!(
                        "scope: pid {pid} exited and its number now belongs to another process; not managed"
                    );
                }
                (Some(now), _) => {
                    self.first_seen.insert(pid, *now);
                    chosen.insert(pid);
                }
                (None, Some(_)) => {
                    self.retired.insert(pid);
                    tracing::info!("scope: pid {pid} exited");
                }
                (None, None) => {
                    unseen.insert(pid);
                }
            }
        }
    }

    /// `pids` read inside the namespace of `pid_namespace_of`: each live process in that
    /// namespace whose innermost NSpid is listed.
    fn pids_in_namespace(&self, live: &HashMap<u32, Identity>, chosen: &mut BTreeSet<u32>) {
        let Some(ns) = &self.namespace else {
            return;
        };
        for &pid in live.keys() {
            if self.proc.pid_namespace(pid).as_ref() != Some(ns) {
                continue;
            }
            let inner = self.proc.nspids(pid).and_then(|v| v.last().copied());
            if inner.is_some_and(|p| self.selector.pids.contains(&p)) {
                chosen.insert(pid);
            }
        }
    }

    /// How the tracker waits for its next refresh. With `pids` alone (no `comm`), each of them
    /// seen alive: on a pidfd of each member, which poll(2) reports readable once that process
    /// exits (pidfd_open(2), "the file descriptor becomes readable when the process
    /// terminates"). Such a set changes only when a member exits, so the tracker need not
    /// re-read /proc every `scope_refresh_ms`: in the Debian rig's TCG guest each refresh took
    /// about 4 ms of a vCPU, once a second beside the program (t33a, BENCHMARKS.md "Fewer
    /// wake-ups"). A member found gone while the pidfds are opened is refreshed at once. The
    /// clock for any other selection, a pid not yet seen, a /proc other than the machine's
    /// (tests' fixtures), or a pidfd that cannot be opened.
    fn next_wait(&self) -> NextWait {
        // A `comm` filter drops a member that execs another program: only the clock sees that.
        if !self.only_explicit_pids()
            || self.selector.comm.is_some()
            || self.proc.root() != std::path::Path::new("/proc")
        {
            return NextWait::Clock;
        }
        let waiting_for_one = self
            .selector
            .pids
            .iter()
            .any(|p| !self.retired.contains(p) && !self.first_seen.contains_key(p));
        if waiting_for_one || self.published.is_empty() {
            return NextWait::Clock;
        }
        let mut fds = Vec::with_capacity(self.published.len());
        for &pid in &self.published {
            let fd = match sys::pidfd_open(pid) {
                Ok(fd) => fd,
                Err(nix::errno::Errno::ESRCH) => return NextWait::Now,
                Err(_) => return NextWait::Clock,
            };
            // Opened before this look: had the member exited and its number been taken in
            // between, the start time would differ; as it does not, the pidfd is the member's.
            let still = self.proc.stat(pid).map(|s| s.identity);
            if crate::stop::readable_now(fd.as_fd())
                || still.is_none()
                || still.as_ref() != self.first_seen.get(&pid)
            {
                return NextWait::Now;
            }
            fds.push(fd);
        }
        NextWait::Exits(fds)
    }

    /// Runs the tracker on `pghot-scope` until `stop`, refreshing every `interval`, or when a
    /// member exits while [`next_wait`](Self::next_wait) watches them.
    pub fn spawn(
        mut self,
        interval: Duration,
        stop: StopToken,
    ) -> Result<std::thread::JoinHandle<()>, ScopeError> {
        std::thread::Builder::new()
            .name("pghot-scope".into())
            .spawn(move || {
                let mut failed = false;
                // Whether the last refresh was one `NextWait::Now` asked for: a second in a
                // row waits for the clock (a member the pidfd calls gone and /proc alive).
                let mut refreshed_now = false;
                loop {
                    let clock = || crate::stop::wait_until(Instant::now() + interval, &stop);
                    let wait = self.next_wait();
                    let go_on = match wait {
                        NextWait::Exits(ref fds) => {
                            let fds: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
                            // A poll error (none is expected of pidfds) falls back to the
                            // clock for one interval.
                            match crate::stop::wait_any(&fds, &stop, None) {
                                Ok(woken) => woken != crate::stop::Woken::Stopped,
                                Err(_) => clock(),
                            }
                        }
                        NextWait::Now if !refreshed_now => !stop.is_stopped(),
                        NextWait::Now | NextWait::Clock => clock(),
                    };
                    refreshed_now = matches!(wait, NextWait::Now) && !refreshed_now;
                    if !go_on {
                        break;
                    }
                    match self.refresh() {
                        Ok(_) => failed = false,
                        // Logged once per run of failures; the last published scope stays.
                        Err(e) if !failed => {
                            failed = true;
                            tracing::error!("scope refresh: {e}");
                        }
                        Err(_) => {}
                    }
                }
            })
            .map_err(ScopeError::Spawn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(selector: ScopeSelector) -> ScopeTracker {
        ScopeTracker::new(selector, ProcFs::default()).unwrap()
    }

    /// A tracker of `pids` alone.
    fn pids_tracker(pids: Vec<u32>) -> ScopeTracker {
        tracker(ScopeSelector {
            pids,
            ..ScopeSelector::default()
        })
    }

    #[test]
    fn a_member_that_exits_leaves_the_scope_without_waiting_for_the_clock() {
        let mut child = sleeper();
        let pid = child.id();
        let mut t = pids_tracker(vec![pid]);
        t.refresh().unwrap();
        assert!(matches!(t.next_wait(), NextWait::Exits(fds) if fds.len() == 1));
        let scope = Arc::clone(t.scope());
        assert!(scope.contains(pid));
        let stop = StopToken::new();
        // An interval no test waits out: only the member's exit can make the tracker look.
        let thread = t.spawn(Duration::from_secs(600), stop.clone()).unwrap();
        // Time for the tracker to open the pidfd and wait on it (killed sooner, the member is
        // found gone as the pidfd is opened: refreshed at once too).
        std::thread::sleep(Duration::from_millis(200));
        child.kill().unwrap();
        child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while scope.contains(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!scope.contains(pid), "the exit was not seen");
        stop.stop();
        thread.join().unwrap();
    }

    #[test]
    fn only_a_set_of_pids_all_seen_alive_is_watched_for_exits() {
        let mut child = sleeper();
        let pid = child.id();
        // A pid not seen yet may still appear: the clock keeps looking.
        let mut t = pids_tracker(vec![pid, PID_LIMIT - 1]);
        t.refresh().unwrap();
        assert!(matches!(t.next_wait(), NextWait::Clock));
        // A name filter drops a member that execs another program: the clock must look.
        let mut t = tracker(ScopeSelector {
            pids: vec![pid],
            comm: Some(Regex::new("^sleep$").unwrap()),
            ..ScopeSelector::default()
        });
        t.refresh().unwrap();
        assert!(matches!(t.next_wait(), NextWait::Clock));
        // A fixture's /proc names no process of this machine.
        let mut t = ScopeTracker::new(
            ScopeSelector {
                pids: vec![pid],
                ..ScopeSelector::default()
            },
            ProcFs::new("/proc/self/.."),
        )
        .unwrap();
        t.refresh().unwrap();
        assert!(matches!(t.next_wait(), NextWait::Clock));
        // The member exited (a zombie until reaped): refreshed at once, which retires it; then
        // nothing is left to watch.
        let mut t = pids_tracker(vec![pid]);
        t.refresh().unwrap();
        child.kill().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(t.next_wait(), NextWait::Exits(_)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(matches!(t.next_wait(), NextWait::Now));
        t.refresh().unwrap();
        assert!(!t.scope().contains(pid));
        assert!(matches!(t.next_wait(), NextWait::Clock));
        child.wait().unwrap();
    }

    pub(super) fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_followed_scope_lists_its_live_members() {
        let mut a = sleeper();
        let selector = ScopeSelector {
            comm: Some(Regex::new("^sleep$").unwrap()),
            ..ScopeSelector::default()
        };
        assert!(selector.follows());
        let fixed = ScopeSelector {
            pids: vec![1],
            ..ScopeSelector::default()
        };
        assert!(!fixed.follows() && !ScopeSelector::default().follows());
        let mut t = tracker(selector);
        t.refresh().unwrap();
        let members = t.scope().members();
        assert!(members.contains(&a.id()), "{members:?}");
        assert!(members.windows(2).all(|w| w[0] < w[1]), "sorted");
        assert!(!members.contains(&std::process::id()));
        a.kill().unwrap();
        a.wait().unwrap();
        t.refresh().unwrap();
        assert!(!t.scope().members().contains(&a.id()));
    }

    #[test]
    fn bits_hold_any_pid_below_the_limit() {
        let bits = PidBits::new();
        for pid in [1, 63, 64, PID_LIMIT - 1] {
            assert!(!bits.contains(pid));
            bits.set(pid, true);
            assert!(bits.contains(pid));
        }
        bits.set(64, false);
        assert!(!bits.contains(64) && bits.contains(63));
        bits.set(PID_LIMIT, true);
        assert!(!bits.contains(PID_LIMIT));
    }

    #[test]
    fn every_process_is_followable_only_in_a_pid_namespace_of_its_own() {
        let every = ScopeSelector::default();
        // 0xEFFFFFFC, PROC_PID_INIT_INO, written out in decimal by hand.
        assert!(is_initial_pid_namespace("pid:[4026531836]"));
        assert!(!every.followable(Some("pid:[4026531836]")));
        assert!(every.followable(Some("pid:[4026532310]")));
        // Unreadable or odd: treated as the whole machine.
        assert!(!every.followable(None));
        assert!(!every.followable(Some("pid:[x]")));
        let comm = ScopeSelector {
            comm: Some(Regex::new("^redis").unwrap()),
            ..ScopeSelector::default()
        };
        assert!(comm.followable(Some("pid:[4026531836]")));
        let pids = ScopeSelector {
            pids: vec![7],
            ..ScopeSelector::default()
        };
        assert!(!pids.followable(Some("pid:[4026532310]")));
    }

    #[test]
    fn everything_contains_all_but_self_and_identifies_no_kernel_thread() {
        let mut t = tracker(ScopeSelector::default());
        t.refresh().unwrap();
        let scope = t.scope();
        let me = std::process::id();
        assert!(!scope.contains(me));
        assert!(scope.contains(1) && scope.contains(4_000_000));
        assert_eq!(scope.identity(me), None, "pghotd itself");
        // kthreadd is pid 2 when this test runs in the initial pid namespace.
        if ProcFs::default().stat(2).is_some_and(|s| s.kernel_thread) {
            assert_eq!(scope.identity(2), None);
        }
    }

    #[test]
    fn explicit_pids_follow_their_process_and_retire_on_exit() {
        let mut a = sleeper();
        let mut b = sleeper();
        let (pa, pb) = (a.id(), b.id());
        let mut t = tracker(ScopeSelector {
            pids: vec![pa, 4_194_000],
            ..ScopeSelector::default()
        });
        let r = t.refresh().unwrap();
        assert_eq!(r.members, BTreeSet::from([pa, 4_194_000]));
        let scope = Arc::clone(t.scope());
        assert!(scope.contains(pa) && !scope.contains(pb));
        assert!(scope.identity(pa).is_some());
        assert_eq!(
            scope.identity(4_194_000),
            None,
            "never seen: in scope, not movable"
        );
        a.kill().unwrap();
        a.wait().unwrap();
        t.refresh().unwrap();
        assert!(!scope.contains(pa));
        assert_eq!(scope.identity(pa), None);
        b.kill().unwrap();
        b.wait().unwrap();
    }

    #[test]
    fn comm_regex_filters_the_selection() {
        let mut child = sleeper();
        let pid = child.id();
        let mut t = tracker(ScopeSelector {
            comm: Some(Regex::new("^sleep$").unwrap()),
            ..ScopeSelector::default()
        });
        let r = t.refresh().unwrap();
        assert!(r.members.contains(&pid));
        assert!(!r.members.contains(&std::process::id()));
        assert!(
            r.members
                .iter()
                .all(|&p| ProcFs::default().comm(p).is_none_or(|c| c == "sleep"))
        );
        child.kill().unwrap();
        child.wait().unwrap();
        t.refresh().unwrap();
        assert!(!t.scope().contains(pid));
    }

    #[test]
    fn describe_names_every_selector() {
        assert_eq!(ScopeSelector::default().describe(), "every process");
        let s = ScopeSelector {
            pids: vec![1],
            pid_namespace_of: Some(77),
            cgroups: vec!["/sys/fs/cgroup/w".into()],
            comm: Some(Regex::new("java").unwrap()),
        };
        assert_eq!(
            s.describe(),
            "pids [1] in the pid namespace of 77 + cgroup /sys/fs/cgroup/w with comm matching /java/"
        );
    }
}
