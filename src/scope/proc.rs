//! What the scope reads about a process from `/proc`: identity (start time), kernel-thread
//! flag, command name, pid namespace and the pids it has in nested namespaces (NSpid).
//!
//! Every reader takes the proc root, so tests can point it at a fake tree. A process that
//! exits between the directory listing and a read is not an error: the reader returns `None`.
//! `stat` and `status` are parsed by the `procfs` crate from bytes read with
//! [`safefs::read_proc`] (a regular file, bounded); `comm` is not parsed at all, only trimmed.

use std::path::{Path, PathBuf};

use procfs::FromRead;
use procfs::process::{MemoryMap, MemoryMaps, Stat, Status};

use crate::safefs::{self, limit};

/// PF_KTHREAD in `/proc/PID/stat` field 9 (include/linux/sched.h).
const PF_KTHREAD: u32 = 0x0020_0000;

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
        let stat = read_stat(&self.path(pid, "stat"))?;
        Some(proc_stat(pid, &stat))
    }

    /// The command name (`/proc/PID/comm`, at most 15 bytes). Not parsed, so read directly:
    /// the crate has no reader for this file (its `Stat::comm` is another file's copy).
    pub fn comm(&self, pid: u32) -> Option<String> {
        read_comm(&self.path(pid, "comm"))
    }

    /// The pid namespace, as the kernel names it (`pid:[4026531836]`).
    pub fn pid_namespace(&self, pid: u32) -> Option<String> {
        let link = std::fs::read_link(self.path(pid, "ns/pid")).ok()?;
        Some(link.to_string_lossy().into_owned())
    }

    /// The process's pid in each pid namespace it is in, from the namespace of this `/proc`
    /// mount down to its own (the `NSpid:` line of `/proc/PID/status`, Linux 4.1).
    pub fn nspids(&self, pid: u32) -> Option<Vec<u32>> {
        let status: Status = safefs::read_proc(&self.path(pid, "status"), limit::STATUS).ok()?;
        nspids_of(&status)
    }
}

/// A `/proc/PID/stat` file, parsed by the crate; `None` if it cannot be read or parsed.
pub fn read_stat(path: &Path) -> Option<Stat> {
    let bytes = safefs::read_bounded(path, limit::STAT).ok()?;
    stat_of_text(&String::from_utf8_lossy(&bytes))
}

/// A `/proc/PID/comm` file without its newline.
pub fn read_comm(path: &Path) -> Option<String> {
    let bytes = safefs::read_bounded(path, limit::COMM).ok()?;
    Some(
        String::from_utf8_lossy(&bytes)
            .trim_end_matches('\n')
            .to_string(),
    )
}

/// Parses a `/proc/PID/stat` line with the crate. The crate slices around the command name's
/// parentheses without checking that anything follows them (it would panic on `1 (x)`), which
/// no kernel writes but a truncated fixture could: such text is refused here first.
pub fn stat_of_text(text: &str) -> Option<Stat> {
    let text = text.trim();
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if open == 0 || close + 2 > text.len() {
        return None;
    }
    Stat::from_read(text.as_bytes()).ok()
}

fn proc_stat(pid: u32, stat: &Stat) -> ProcStat {
    ProcStat {
        identity: Identity {
            pid,
            start_ticks: stat.starttime,
        },
        kernel_thread: stat.flags & PF_KTHREAD != 0,
        exited: matches!(stat.state, 'Z' | 'X' | 'x'),
    }
}

pub fn parse_stat(pid: u32, text: &str) -> Option<ProcStat> {
    Some(proc_stat(pid, &stat_of_text(text)?))
}

pub fn parse_nspid(status: &str) -> Option<Vec<u32>> {
    nspids_of(&Status::from_read(status.as_bytes()).ok()?)
}

fn nspids_of(status: &Status) -> Option<Vec<u32>> {
    status
        .nspid
        .as_ref()?
        .iter()
        .map(|&p| u32::try_from(p).ok())
        .collect()
}

/// The mappings of a `/proc/PID/maps` text, each line parsed by the crate. A line the crate
/// does not parse is skipped rather than failing the whole file (the format is the kernel's;
/// a bad line means a kernel we do not understand, not bad input), hence one parse per line
/// instead of `MemoryMaps::from_read` over the text.
///
/// The pathname is left out of what the crate sees (every mapping reads as anonymous): it is
/// the one part of the line the watched process chooses, and the crate slices it unchecked
/// (`/SYSV` followed by fewer than 8 bytes panics in `MMapPath::from`, procfs-core 0.18). No
/// caller needs it.
pub fn memory_maps(maps: &str) -> impl Iterator<Item = MemoryMap> + '_ {
    let mut head = String::with_capacity(96);
    maps.lines().filter_map(move |line| {
        head.clear();
        for field in line.split_ascii_whitespace().take(5) {
            head.push_str(field);
            head.push(' ');
        }
        // A line that starts with a capital letter is an smaps attribute, not a mapping.
        let one = <MemoryMaps as procfs::FromBufRead>::from_buf_read(head.as_bytes()).ok()?;
        one.into_iter().next()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/PID/stat` line as Linux 5.x+ writes it: 52 fields (proc(5)), with the state
    /// (3), flags (9), start time (22) and processor (39) given, the rest made up.
    fn stat_line(pid: u32, comm: &str, state: char, flags: u32, start: u64, cpu: u32) -> String {
        let mut fields: Vec<String> = (1..=52).map(|i| (i * 7).to_string()).collect();
        fields[0] = pid.to_string();
        fields[1] = format!("({comm})");
        fields[2] = state.to_string();
        fields[8] = flags.to_string();
        fields[21] = start.to_string();
        fields[38] = cpu.to_string();
        fields.join(" ") + "\n"
    }

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let stat = stat_of_text(&stat_line(42, "a (b) c", 'S', 4194560, 100, 3)).unwrap();
        assert_eq!(stat.comm, "a (b) c");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 4 * 7);
        assert_eq!(stat.processor, Some(3));
        assert!(stat_of_text("garbage").is_none());
        assert!(stat_of_text("1 (x)").is_none());
        assert!(stat_of_text("(x) S 1").is_none());
    }

    #[test]
    fn stat_gives_start_time_kernel_thread_and_state() {
        let user = stat_line(42, "my (prog)", 'S', 4194560, 777, 0);
        let s = parse_stat(42, &user).unwrap();
        assert_eq!(s.identity.start_ticks, 777);
        assert!(!s.kernel_thread && !s.exited);
        // kthreadd's flags: PF_KTHREAD | PF_NOFREEZE | PF_FORKNOEXEC ...
        let kthread = stat_line(2, "kthreadd", 'S', 2129984, 3, 0);
        assert!(parse_stat(2, &kthread).unwrap().kernel_thread);
        let zombie = stat_line(9, "z", 'Z', 4194564, 5, 0);
        assert!(parse_stat(9, &zombie).unwrap().exited);
        assert_eq!(parse_stat(1, "1 (short) S 0"), None);
    }

    /// A whole `/proc/PID/status` of a `sleep` in a child pid namespace (Linux 6.x), with
    /// the NSpid line given.
    fn status(nspid: &str) -> String {
        format!(
            "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t5123\nNgid:\t0\n\
             Pid:\t5123\nPPid:\t5100\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n\
             FDSize:\t64\nGroups:\t0 \nNStgid:\t5123\t1\n{nspid}NSpgid:\t5123\t1\n\
             NSsid:\t1\t0\nVmPeak:\t    8172 kB\nVmSize:\t    8172 kB\nThreads:\t1\n\
             SigQ:\t0/63360\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n\
             SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n\
             SigCgt:\t0000000000000000\nCapInh:\t0000000000000000\n\
             CapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n\
             CapBnd:\t000001ffffffffff\nvoluntary_ctxt_switches:\t2\n\
             nonvoluntary_ctxt_switches:\t0\n"
        )
    }

    #[test]
    fn nspid_lists_outer_to_inner() {
        assert_eq!(
            parse_nspid(&status("NSpid:\t5123\t1\n")),
            Some(vec![5123, 1])
        );
        assert_eq!(parse_nspid(&status("NSpid:\t7\n")), Some(vec![7]));
        assert_eq!(parse_nspid(&status("")), None);
        assert_eq!(parse_nspid(&status("NSpid:\t7\tx\n")), None);
        assert_eq!(parse_nspid("Name:\tx\nNSpid:\t7\n"), None);
    }

    #[test]
    fn maps_lines_parse_one_by_one() {
        let maps = "\
55d0c0002000-55d0c0003000 rw-p 00002000 fd:01 123                        /usr/bin/x
garbage line
7f0000000000-7f0010000000 rw-p 00000000 00:00 0 
7f0010000000-7f0010001000 rw-s 00000000 00:1a 77                         /SYSVx
7f0010001000-7f0010002000 rw-p 00000000 00:00 0                          [stack:notanumber
";
        let got: Vec<_> = memory_maps(maps).map(|m| m.address).collect();
        assert_eq!(
            got,
            [
                (0x55d0c0002000, 0x55d0c0003000),
                (0x7f0000000000, 0x7f0010000000),
                (0x7f0010000000, 0x7f0010001000),
                (0x7f0010001000, 0x7f0010002000),
            ]
        );
    }

    #[test]
    fn the_crate_alone_panics_on_a_short_sysv_path() {
        // Why memory_maps hides the pathname: given whole, this line panics inside the crate.
        let line = "7f0010000000-7f0010001000 rw-s 00000000 00:1a 77 /SYSVx\n";
        let whole = std::panic::catch_unwind(|| {
            <MemoryMaps as procfs::FromBufRead>::from_buf_read(line.as_bytes()).ok()
        });
        assert!(
            whole.is_err(),
            "procfs no longer panics here: memory_maps may keep paths"
        );
        assert_eq!(memory_maps(line).count(), 1);
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

    #[test]
    fn a_spawned_process_reads_as_the_kernel_wrote_it() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let proc = ProcFs::default();
        // Field 22 of the raw line, counted by hand after the last ')' (proc(5)).
        let raw = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = &raw[raw.rfind(')').unwrap() + 1..];
        let start: u64 = after
            .split_whitespace()
            .nth(22 - 3)
            .unwrap()
            .parse()
            .unwrap();
        let stat = proc.stat(pid).unwrap();
        assert_eq!(
            stat.identity,
            Identity {
                pid,
                start_ticks: start
            }
        );
        assert!(!stat.kernel_thread && !stat.exited);
        assert_eq!(proc.comm(pid).as_deref(), Some("sleep"));
        // Same pid namespace as this test: NSpid holds the one pid.
        assert_eq!(proc.nspids(pid), Some(vec![pid]));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(proc.stat(pid), None);
    }
}
