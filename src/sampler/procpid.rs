//! What the software sources (DAMON, soft-dirty) share: the managed pids and their exits, the
//! accessing CPU, and a stop-aware wait. Their samples carry no node: the sink finds it (the
//! table's last known node, else batched, cached move_pages queries; see `ingest::resolve`),
//! and each source ends a scan with [`SampleSink::end_batch`] so nothing waits for the next.
//!
//! DAMON watches explicit pids; soft-dirty watches explicit pids or, when the scope follows
//! cgroups or a command regex, whatever the scope holds at each pass ([`Watched`]). An
//! explicit pid that exits (or turns zombie) is dropped, counted in `source_pid_exits` and
//! logged once; when the last one is gone the source ends, like a trace at its end of file,
//! and the daemon drains its migrators and exits. A followed scope never ends the source: an
//! empty cgroup may fill again.

use std::sync::Arc;

use super::{OpenContext, SourceError};
use crate::sample::{AccessOp, Sample, SourceKind};
use crate::sampler::SampleSink;
use crate::scope::Scope;
use crate::scope::proc::read_stat;
use crate::stats::Counter;

/// The processes a software source watches.
#[derive(Debug, Clone)]
pub enum Watched {
    /// `--pid`: fixed; the source ends when all have exited.
    Pids(Vec<u32>),
    /// `--cgroup` / `--comm`: the scope's members, re-read at every pass.
    Scope(Arc<Scope>),
}

impl Watched {
    /// What `ctx` asks `name` to watch: the followed scope if there is one (it already holds
    /// the explicit pids that pass its filters), else the explicit pids, which must be alive.
    pub fn from_context(name: &'static str, ctx: &OpenContext) -> Result<Watched, SourceError> {
        if let Some(scope) = &ctx.followed_scope {
            return Ok(Watched::Scope(Arc::clone(scope)));
        }
        if ctx.pids.is_empty() {
            return Err(SourceError::NeedsPids {
                name,
                what: "explicit pids (--pid), a cgroup (--cgroup) or a command regex (--comm)",
            });
        }
        require_alive(&ctx.pids)?;
        Ok(Watched::Pids(ctx.pids.clone()))
    }

    pub fn describe(&self) -> String {
        match self {
            Watched::Pids(pids) => format!("pids {pids:?}"),
            Watched::Scope(_) => "the processes in scope".to_string(),
        }
    }
}

/// Fails the open when a pid does not exist (now), rather than leaving it to the first pass.
pub fn require_alive(pids: &[u32]) -> Result<(), SourceError> {
    match pids.iter().find(|&&p| !pid_alive(p)) {
        Some(&pid) => Err(SourceError::NoSuchPid { pid }),
        None => Ok(()),
    }
}

/// True while `/proc/PID` exists and is not a zombie (a zombie has no memory left to watch).
pub fn pid_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|stat| stat.state != 'Z' && stat.state != 'X')
}

/// The CPU the process last ran on (`/proc/PID/stat` field 39): the sources' stand-in for the
/// accessing CPU, which picks the nearest top-tier node. `u32::MAX` (no CPU) when unknown, so
/// the page's own node picks it instead.
pub fn last_cpu(pid: u32) -> u32 {
    stat(pid)
        .and_then(|stat| u32::try_from(stat.processor?).ok())
        .unwrap_or(u32::MAX)
}

fn stat(pid: u32) -> Option<procfs::process::Stat> {
    read_stat(std::path::Path::new(&format!("/proc/{pid}/stat")))
}

/// The managed pids of one source, and the exits it has seen.
#[derive(Debug)]
pub struct ManagedPids {
    source: &'static str,
    pids: Vec<u32>,
}

impl ManagedPids {
    pub fn new(source: &'static str, pids: &[u32]) -> ManagedPids {
        let mut pids = pids.to_vec();
        pids.sort_unstable();
        pids.dedup();
        ManagedPids { source, pids }
    }

    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    pub fn is_empty(&self) -> bool {
        self.pids.is_empty()
    }

    /// Drops `pid` (it exited): counted and logged once.
    pub fn exited(&mut self, pid: u32, sink: &mut dyn SampleSink) {
        if let Some(i) = self.pids.iter().position(|&p| p == pid) {
            self.pids.remove(i);
            sink.count(Counter::SourcePidExits, 1);
            tracing::info!(
                "{}: pid {pid} exited; {} pid(s) left",
                self.source,
                self.pids.len()
            );
        }
    }

    /// Drops every pid that is no longer alive.
    pub fn reap(&mut self, sink: &mut dyn SampleSink) {
        let gone: Vec<u32> = self
            .pids
            .iter()
            .copied()
            .filter(|&p| !pid_alive(p))
            .collect();
        for pid in gone {
            self.exited(pid, sink);
        }
    }
}

/// Records one sample per page of `pid`: now, on the CPU the process last ran on, with no
/// node (the sink finds it).
pub fn emit_pages(
    sink: &mut dyn SampleSink,
    pid: u32,
    pages: &[u64],
    op: AccessOp,
    source: SourceKind,
) {
    let time_ns = crate::clock::monotonic_ns();
    let cpu = last_cpu(pid);
    for &vaddr in pages {
        sink.record(&Sample::at_address(
            (time_ns, cpu),
            (pid, pid),
            vaddr,
            op,
            source,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_is_not_alive() {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not waited for: once `true` exits it stays a zombie (state Z, proc(5)) until reaped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pid_alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let raw = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        assert!(raw[raw.rfind(')').unwrap()..].starts_with(") Z "), "{raw}");
        assert!(!pid_alive(pid));
        // The CPU it last ran on is still there: field 39 counted by hand.
        let cpu: u32 = raw[raw.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .nth(39 - 3)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(last_cpu(pid), cpu);
        let mut child = child;
        child.wait().unwrap();
    }

    #[test]
    fn this_process_is_alive_and_runs_on_a_cpu() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(u32::MAX));
        assert!(last_cpu(std::process::id()) < 4096);
        assert_eq!(last_cpu(u32::MAX), u32::MAX);
    }

    #[test]
    fn exited_pids_are_dropped_counted_once_and_the_rest_kept() {
        use crate::sampler::collect::Collector;
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let sink = Collector::default();
        let mut pids = ManagedPids::new("test", &[gone, me, gone]);
        let mut s = sink.clone();
        pids.reap(&mut s);
        pids.reap(&mut s);
        assert_eq!(pids.pids(), &[me]);
        assert_eq!(sink.take().count_of(Counter::SourcePidExits), 1);
        pids.exited(me, &mut s);
        assert!(pids.is_empty());
    }

    #[test]
    fn a_dead_pid_is_named() {
        assert!(require_alive(&[std::process::id()]).is_ok());
        let err = require_alive(&[u32::MAX]).unwrap_err().to_string();
        assert!(err.contains("4294967295"), "{err}");
    }
}
