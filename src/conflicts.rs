//! Competing promoters: what else moves the pages pghotd moves. Checked at start and every
//! [`RECHECK_EVERY`] while running (`pghot-conflicts`); each new one is logged once with its
//! remedy, and shown in `pghotctl status` and the `pghotd_conflicts{kind}` metric.
//!
//! - `kernel.numa_balancing` with NUMA_BALANCING_MEMORY_TIERING (bit value 2,
//!   include/linux/sched/sysctl.h): the kernel promotes on NUMA hint faults too (double work,
//!   hint faults on every scanned page).
//! - `/sys/kernel/mm/numa/demotion_enabled` true: reclaim demotes to the lower tier, pages
//!   pghotd promoted included (what `pghot_audit_moved_back` counts).
//! - A kdamond that is on with a `migrate_hot` or `migrate_cold` scheme (DAMON sysfs,
//!   Documentation/admin-guide/mm/damon/usage.rst). pghotd's own kdamonds run `stat` schemes
//!   only, so they never match.
//! - Another pghotd: a process whose comm is `pghotd`, as the DAMON claim's liveness check
//!   (`sampler::damon::sysfs`) recognises one. The control socket refuses a second daemon on
//!   the same path already; this finds one on another socket, or with none.
//!
//! Every file is read with `safefs` (a regular file, bounded); a file that is missing means the
//! kernel lacks the feature, so no conflict.
//!
//! `conflicts = "refuse"` ([`ConflictPolicy`]) makes the daemon exit 3 at start when any is
//! found; what appears later is logged either way (stopping a running daemon for it would drop
//! what it promoted in flight for no gain).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pghot_protocol::{Conflict, ConflictKind};

use crate::safefs::{self, limit};
use crate::stop::StopToken;
use crate::topology::SysfsRoot;

/// How often the running daemon looks again: each check reads a handful of sysfs files and
/// one `comm` per process.
pub const RECHECK_EVERY: Duration = Duration::from_secs(30);

/// `NUMA_BALANCING_MEMORY_TIERING` in include/linux/sched/sysctl.h.
const NUMA_BALANCING_MEMORY_TIERING: u64 = 2;

/// DAMOS actions that move pages between nodes (Linux 6.11+).
const MIGRATING_ACTIONS: [&str; 2] = ["migrate_hot", "migrate_cold"];

const DEMOTION: &str = "kernel/mm/numa/demotion_enabled";
const KDAMONDS: &str = "kernel/mm/damon/admin/kdamonds";

/// What the daemon does when it finds a competing promoter at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConflictPolicy {
    /// Log each one (once) and run.
    #[default]
    Warn,
    /// Exit 3 at start naming them.
    Refuse,
}

impl ConflictPolicy {
    pub fn name(self) -> &'static str {
        match self {
            ConflictPolicy::Warn => "warn",
            ConflictPolicy::Refuse => "refuse",
        }
    }

    pub fn parse(word: &str) -> Result<ConflictPolicy, String> {
        match word {
            "warn" => Ok(ConflictPolicy::Warn),
            "refuse" => Ok(ConflictPolicy::Refuse),
            other => Err(format!("'{other}' is not \"warn\" or \"refuse\"")),
        }
    }
}

/// Where the checks read: `/sys` (or the configured `sysfs_root`) and `/proc`.
#[derive(Debug, Clone)]
pub struct Probe {
    sysfs: SysfsRoot,
    proc_root: PathBuf,
    /// This daemon, which is not another pghotd.
    self_pid: u32,
}

impl Probe {
    /// The machine's own `/proc`, and `sysfs_root`.
    pub fn system(sysfs_root: &Path) -> Probe {
        Probe::new(sysfs_root, Path::new("/proc"), std::process::id())
    }

    pub fn new(sysfs_root: &Path, proc_root: &Path, self_pid: u32) -> Probe {
        Probe {
            sysfs: SysfsRoot::new(sysfs_root),
            proc_root: proc_root.to_path_buf(),
            self_pid,
        }
    }

    /// Every competing promoter found now, sorted.
    pub fn find(&self) -> Vec<Conflict> {
        let mut found: Vec<Conflict> = self
            .numa_balancing()
            .into_iter()
            .chain(self.demotion())
            .chain(self.damon())
            .chain(self.pghotd())
            .collect();
        found.sort();
        found
    }

    /// An attribute's trimmed text; `None` when missing (the kernel lacks it) or unreadable.
    fn read(&self, path: &Path) -> Option<String> {
        self.read_within(path, limit::ATTRIBUTE)
    }

    fn read_within(&self, path: &Path, limit: usize) -> Option<String> {
        match safefs::read_text(path, limit) {
            Ok(text) => Some(text.trim().to_string()),
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::debug!("conflicts: {}: {e}", path.display());
                }
                None
            }
        }
    }

    fn numa_balancing(&self) -> Option<Conflict> {
        let value: u64 = self
            .read(&self.proc_root.join("sys/kernel/numa_balancing"))?
            .parse()
            .ok()?;
        (value & NUMA_BALANCING_MEMORY_TIERING != 0).then(|| Conflict {
            kind: ConflictKind::NumaBalancing,
            detail: format!(
                "kernel.numa_balancing = {value}: the kernel's memory tiering mode promotes on \
                 NUMA hint faults too"
            ),
            // Keeps plain NUMA balancing (bit 1) if it was on.
            remedy: format!(
                "sysctl kernel.numa_balancing={}",
                value & !NUMA_BALANCING_MEMORY_TIERING
            ),
        })
    }

    fn demotion(&self) -> Option<Conflict> {
        let path = self.sysfs.path(DEMOTION);
        // demotion_enabled_show() writes "true" or "false"; kstrtobool() words for older text.
        let on = matches!(self.read(&path)?.as_str(), "true" | "1" | "y" | "Y");
        on.then(|| Conflict {
            kind: ConflictKind::Demotion,
            detail: format!(
                "{} is true: reclaim demotes pages to the lower tier, promoted ones included",
                path.display()
            ),
            remedy: format!("echo false > {}", path.display()),
        })
    }

    /// Numbered subdirectories (`0`, `1`, ...) of a sysfs directory.
    fn numbered(&self, rel: &str) -> Vec<u64> {
        self.sysfs.numbered_entries(rel, "").unwrap_or_default()
    }

    fn damon(&self) -> Vec<Conflict> {
        let mut out = Vec::new();
        for k in self.numbered(KDAMONDS) {
            let kdamond = format!("{KDAMONDS}/{k}");
            if self
                .read(&self.sysfs.path(&format!("{kdamond}/state")))
                .as_deref()
                != Some("on")
            {
                continue;
            }
            for c in self.numbered(&format!("{kdamond}/contexts")) {
                let schemes = format!("{kdamond}/contexts/{c}/schemes");
                for s in self.numbered(&schemes) {
                    let Some(action) =
                        self.read(&self.sysfs.path(&format!("{schemes}/{s}/action")))
                    else {
                        continue;
                    };
                    if MIGRATING_ACTIONS.contains(&action.as_str()) {
                        out.push(Conflict {
                            kind: ConflictKind::Damon,
                            detail: format!(
                                "DAMON kdamond {k} runs a {action} scheme (context {c}, scheme \
                                 {s})"
                            ),
                            remedy: format!(
                                "echo off > {}",
                                self.sysfs.path(&format!("{kdamond}/state")).display()
                            ),
                        });
                    }
                }
            }
        }
        out
    }

    fn pghotd(&self) -> Vec<Conflict> {
        let Ok(dir) = std::fs::read_dir(&self.proc_root) else {
            return Vec::new();
        };
        let mut pids: Vec<u32> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != self.self_pid)
            .filter(|pid| {
                self.read_within(
                    &self.proc_root.join(pid.to_string()).join("comm"),
                    limit::COMM,
                )
                .is_some_and(|comm| comm == "pghotd")
            })
            .collect();
        pids.sort_unstable();
        pids.into_iter()
            .map(|pid| Conflict {
                kind: ConflictKind::Pghotd,
                detail: format!("another pghotd runs (pid {pid})"),
                remedy: "stop one of them, or give each its own processes (pids, cgroups, comm)"
                    .into(),
            })
            .collect()
    }
}

/// `detail (remedy: ...)` for each, `; `-separated, for an error message.
pub fn listed(found: &[Conflict]) -> String {
    found
        .iter()
        .map(|c| format!("{} (remedy: {})", c.detail, c.remedy))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The competing promoters found at the last check, shared with the control plane.
#[derive(Debug, Default)]
pub struct Conflicts {
    current: Mutex<Vec<Conflict>>,
}

impl Conflicts {
    pub fn current(&self) -> Vec<Conflict> {
        self.current.lock().clone()
    }

    /// Stores a check's result; logs each conflict not in the previous one (once, with its
    /// remedy) and each that went away. Returns the new ones.
    pub fn update(&self, found: Vec<Conflict>) -> Vec<Conflict> {
        let mut current = self.current.lock();
        let before: BTreeSet<&Conflict> = current.iter().collect();
        let after: BTreeSet<&Conflict> = found.iter().collect();
        let new: Vec<Conflict> = after.difference(&before).map(|&c| c.clone()).collect();
        for c in &new {
            tracing::warn!(
                "competing promoter: {}; pghotd and it move the same pages. Remedy: {}",
                c.detail,
                c.remedy
            );
        }
        for c in before.difference(&after) {
            tracing::info!("competing promoter gone: {}", c.detail);
        }
        *current = found;
        new
    }
}

/// The `pghot-conflicts` thread: checks every `every` until `stop`.
pub fn spawn_watch(
    probe: Probe,
    conflicts: Arc<Conflicts>,
    every: Duration,
    stop: StopToken,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("pghot-conflicts".into())
        .spawn(move || {
            // A rescan of /proc and /sys can wait for a CPU the managed programs want.
            crate::cpushare::join("pghot-conflicts");
            while crate::stop::wait_until(Instant::now() + every, &stop) {
                conflicts.update(probe.find());
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/sys` and `/proc`, each in its own directory.
    struct Fake {
        sys: tempfile::TempDir,
        proc: tempfile::TempDir,
    }

    impl Fake {
        fn new() -> Fake {
            Fake {
                sys: tempfile::tempdir().unwrap(),
                proc: tempfile::tempdir().unwrap(),
            }
        }

        fn write(root: &Path, rel: &str, text: &str) {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }

        fn sys(&self, rel: &str, text: &str) -> &Fake {
            Fake::write(self.sys.path(), rel, text);
            self
        }

        fn proc(&self, rel: &str, text: &str) -> &Fake {
            Fake::write(self.proc.path(), rel, text);
            self
        }

        /// As pid 100.
        fn probe(&self) -> Probe {
            Probe::new(self.sys.path(), self.proc.path(), 100)
        }

        fn kinds(&self) -> Vec<ConflictKind> {
            self.probe().find().iter().map(|c| c.kind).collect()
        }
    }

    #[test]
    fn a_quiet_machine_and_one_without_the_files_have_no_conflicts() {
        let fake = Fake::new();
        assert!(fake.probe().find().is_empty());
        fake.proc("sys/kernel/numa_balancing", "1\n")
            .sys(DEMOTION, "false\n")
            .sys(&format!("{KDAMONDS}/nr_kdamonds"), "1\n")
            .sys(&format!("{KDAMONDS}/0/state"), "off\n")
            .sys(
                &format!("{KDAMONDS}/0/contexts/0/schemes/0/action"),
                "migrate_hot\n",
            )
            .proc("100/comm", "pghotd\n")
            .proc("200/comm", "postgres\n");
        assert!(fake.probe().find().is_empty(), "{:?}", fake.probe().find());
    }

    #[test]
    fn numa_balancing_tiering_is_found_and_the_remedy_keeps_plain_balancing() {
        let fake = Fake::new();
        fake.proc("sys/kernel/numa_balancing", "2\n");
        let found = fake.probe().find();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, ConflictKind::NumaBalancing);
        assert_eq!(found[0].remedy, "sysctl kernel.numa_balancing=0");
        fake.proc("sys/kernel/numa_balancing", "3\n");
        assert_eq!(
            fake.probe().find()[0].remedy,
            "sysctl kernel.numa_balancing=1"
        );
        // Garbage is no conflict (and no panic).
        fake.proc("sys/kernel/numa_balancing", "x\n");
        assert!(fake.probe().find().is_empty());
    }

    #[test]
    fn demotion_migrating_kdamonds_and_other_pghotds_are_found() {
        let fake = Fake::new();
        fake.sys(DEMOTION, "true\n")
            .sys(&format!("{KDAMONDS}/nr_kdamonds"), "3\n")
            // pghotd's own kind of kdamond: stat only.
            .sys(&format!("{KDAMONDS}/0/state"), "on\n")
            .sys(
                &format!("{KDAMONDS}/0/contexts/0/schemes/0/action"),
                "stat\n",
            )
            .sys(&format!("{KDAMONDS}/1/state"), "on\n")
            .sys(
                &format!("{KDAMONDS}/1/contexts/0/schemes/0/action"),
                "pageout\n",
            )
            .sys(
                &format!("{KDAMONDS}/1/contexts/0/schemes/1/action"),
                "migrate_cold\n",
            )
            .sys(&format!("{KDAMONDS}/2/state"), "on\n")
            .sys(
                &format!("{KDAMONDS}/2/contexts/0/schemes/0/action"),
                "migrate_hot\n",
            )
            .proc("100/comm", "pghotd\n")
            .proc("4242/comm", "pghotd\n")
            .proc("4243/comm", "pghotd-replay\n");
        let found = fake.probe().find();
        assert_eq!(
            fake.kinds(),
            [
                ConflictKind::Demotion,
                ConflictKind::Damon,
                ConflictKind::Damon,
                ConflictKind::Pghotd
            ],
            "{found:#?}"
        );
        assert!(
            found[1]
                .detail
                .contains("kdamond 1 runs a migrate_cold scheme (context 0, scheme 1)")
        );
        assert!(found[1].remedy.starts_with("echo off > "));
        assert!(found[1].remedy.ends_with("kdamonds/1/state"));
        assert!(found[2].detail.contains("kdamond 2 runs a migrate_hot"));
        assert!(found[3].detail.contains("pid 4242"), "{found:#?}");
        assert!(found[0].remedy.ends_with("demotion_enabled"));
    }

    #[test]
    fn files_that_are_not_regular_files_are_not_read() {
        let fake = Fake::new();
        // A directory where the attribute should be: the safe read refuses it.
        std::fs::create_dir_all(fake.sys.path().join(DEMOTION)).unwrap();
        std::fs::create_dir_all(fake.proc.path().join("sys/kernel/numa_balancing")).unwrap();
        assert!(fake.probe().find().is_empty());
        // Past the bound: not read.
        std::fs::remove_dir(fake.proc.path().join("sys/kernel/numa_balancing")).unwrap();
        fake.proc(
            "sys/kernel/numa_balancing",
            &"2".repeat(limit::ATTRIBUTE + 1),
        );
        assert!(fake.probe().find().is_empty());
    }

    #[test]
    fn each_conflict_is_new_once_and_again_after_it_went_away() {
        let fake = Fake::new();
        let conflicts = Conflicts::default();
        fake.proc("sys/kernel/numa_balancing", "2\n");
        assert_eq!(conflicts.update(fake.probe().find()).len(), 1);
        assert!(conflicts.update(fake.probe().find()).is_empty());
        fake.sys(DEMOTION, "true\n");
        let new = conflicts.update(fake.probe().find());
        assert_eq!(new.len(), 1);
        assert_eq!(new[0].kind, ConflictKind::Demotion);
        assert_eq!(conflicts.current().len(), 2);
        fake.proc("sys/kernel/numa_balancing", "0\n");
        assert!(conflicts.update(fake.probe().find()).is_empty());
        assert_eq!(conflicts.current().len(), 1);
        fake.proc("sys/kernel/numa_balancing", "2\n");
        assert_eq!(conflicts.update(fake.probe().find()).len(), 1);
    }

    #[test]
    fn the_watch_thread_sees_one_that_appears_while_running_and_stops() {
        let fake = Fake::new();
        let conflicts = Arc::new(Conflicts::default());
        let stop = StopToken::new();
        let thread = spawn_watch(
            fake.probe(),
            Arc::clone(&conflicts),
            Duration::from_millis(10),
            stop.clone(),
        )
        .unwrap();
        fake.proc("sys/kernel/numa_balancing", "2\n");
        let deadline = Instant::now() + Duration::from_secs(10);
        while conflicts.current().is_empty() {
            assert!(Instant::now() < deadline, "not seen");
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.stop();
        thread.join().unwrap();
    }

    #[test]
    fn the_policy_words() {
        for p in [ConflictPolicy::Warn, ConflictPolicy::Refuse] {
            assert_eq!(ConflictPolicy::parse(p.name()), Ok(p));
        }
        assert!(
            ConflictPolicy::parse("ignore")
                .unwrap_err()
                .contains("\"warn\"")
        );
    }
}
