//! What the scope reads about a process from `/proc`: identity (start time), kernel-thread
//! flag, command name, pid namespace and the pids it has in nested namespaces (NSpid).
//!
//! Every reader takes the proc root, so tests can point it at a fake tree. A process that
//! exits between the directory listing and a read is not an error: the reader returns `None`.

use std::path::{Path, PathBuf};

/// PF_KTHREAD in `/proc/PID/stat` field 9 (include/linux/sched.h).
const PF_KTHREAD: u64 = 0x0020_0000;

/// What tells one process apart from a later one that reuses its pid: its start time, in
/// clock ticks after boot (`/proc/PID/stat` field 22). Two processes can share a pid number
/// only one after the other, and then their start times differ unless the pid space wrapped
/// around within one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    pub pid: u32,
    pub start_ticks: u64,
}

/// The fields of `/proc/PID/stat` the scope uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub identity: Identity,
    pub kernel_thread: bool,
    /// Zombie or dead: no memory left to manage.
    pub exited: bool,
}

/// A `/proc` mount (normally `/proc`).
#[derive(Debug, Clone)]
pub struct ProcFs {
    root: PathBuf,
}

impl Default for ProcFs {
    fn default() -> Self {
        ProcFs::new("/proc")
    }
}

impl ProcFs {
    pub fn new(root: impl Into<PathBuf>) -> ProcFs {
        ProcFs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, pid: u32, file: &str) -> PathBuf {
        self.root.join(pid.to_string()).join(file)
    }

    /// Every pid listed (processes, not threads: `/proc` lists thread groups only).
    pub fn pids(&self) -> std::io::Result<Vec<u32>> {
        let mut pids: Vec<u32> = std::fs::read_dir(&self.root)?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        Ok(pids)
    }

    pub fn stat(&self, pid: u32) -> Option<ProcStat> {
        let text = std::fs::read_to_string(self.path(pid, "stat")).ok()?;
        parse_stat(pid, &text)
    }

    /// The command name (`/proc/PID/comm`, at most 15 bytes).
    pub fn comm(&self, pid: u32) -> Option<String> {
        let text = std::fs::read_to_string(self.path(pid, "comm")).ok()?;
        Some(text.trim_end_matches('\n').to_string())
    }

    /// The pid namespace, as the kernel names it (`pid:[4026531836]`).
    pub fn pid_namespace(&self, pid: u32) -> Option<String> {
        let link = std::fs::read_link(self.path(pid, "ns/pid")).ok()?;
        Some(link.to_string_lossy().into_owned())
    }

    /// The process's pid in each pid namespace it is in, from the namespace of this `/proc`
    /// mount down to its own (the `NSpid:` line of `/proc/PID/status`, Linux 4.1).
    pub fn nspids(&self, pid: u32) -> Option<Vec<u32>> {
        let text = std::fs::read_to_string(self.path(pid, "status")).ok()?;
        parse_nspid(&text)
    }
}

pub fn parse_stat(pid: u32, text: &str) -> Option<ProcStat> {
    let state = stat_field(text, 3)?;
    let flags: u64 = stat_field(text, 9)?.parse().ok()?;
    let start_ticks = stat_field(text, 22)?.parse().ok()?;
    Some(ProcStat {
        identity: Identity { pid, start_ticks },
        kernel_thread: flags & PF_KTHREAD != 0,
        exited: matches!(state, "Z" | "X" | "x"),
    })
}

pub fn parse_nspid(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_ascii_whitespace()
        .map(|p| p.parse().ok())
        .collect()
}

/// Field `n` (1-based, as in proc(5)) of a `/proc/PID/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields after it are counted from its last `)`.
pub(crate) fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_ascii_whitespace().nth(n.checked_sub(3)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 100 1000 \
                    200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0";
        assert_eq!(stat_field(stat, 3), Some("S"));
        assert_eq!(stat_field(stat, 4), Some("1"));
        assert_eq!(stat_field(stat, 39), Some("3"));
        assert_eq!(stat_field("garbage", 3), None);
    }

    #[test]
    fn stat_gives_start_time_kernel_thread_and_state() {
        let user = "42 (my (prog)) S 1 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 777 1000";
        let s = parse_stat(42, user).unwrap();
        assert_eq!(s.identity.start_ticks, 777);
        assert!(!s.kernel_thread && !s.exited);
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 3 0";
        assert!(parse_stat(2, kthread).unwrap().kernel_thread);
        let zombie = "9 (z) Z 1 9 9 0 -1 4194564 0 0 0 0 0 0 0 0 20 0 1 0 5 0";
        assert!(parse_stat(9, zombie).unwrap().exited);
        assert_eq!(parse_stat(1, "1 (short) S 0"), None);
    }

    #[test]
    fn nspid_lists_outer_to_inner() {
        let status = "Name:\tsleep\nTgid:\t5123\nPid:\t5123\nNSpid:\t5123\t1\nNSsid:\t1\n";
        assert_eq!(parse_nspid(status), Some(vec![5123, 1]));
        assert_eq!(parse_nspid("Name:\tx\nNSpid:\t7\n"), Some(vec![7]));
        assert_eq!(parse_nspid("Name:\tx\n"), None);
        assert_eq!(parse_nspid("NSpid:\t7\tx\n"), None);
    }

    #[test]
    fn this_process_reads_back() {
        let proc = ProcFs::default();
        let me = std::process::id();
        let stat = proc.stat(me).unwrap();
        assert!(!stat.kernel_thread && !stat.exited);
        assert_eq!(proc.nspids(me).unwrap().first(), Some(&me));
        assert!(proc.pid_namespace(me).unwrap().starts_with("pid:["));
        assert!(proc.pids().unwrap().contains(&me));
        assert!(proc.comm(me).is_some());
        assert_eq!(proc.stat(u32::MAX), None);
    }
}
