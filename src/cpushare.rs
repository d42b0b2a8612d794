//! How pghotd's worker threads share the CPU with the programs it manages (`cpu_policy`).
//!
//! pghotd's work can wait; a program's request cannot. Beside MariaDB in the Debian rig (a
//! program that cannot gain from placement) pghotd at the unit's SCHED_BATCH cost it about 2 %
//! of its speed, and halving pghotd's CPU did not lower that; with its threads at SCHED_IDLE,
//! next to nothing, with the same placement, and Redis kept its gain (BENCHMARKS.md, issue 18,
//! "Half of pghotd's CPU beside MariaDB" and "pghotd at SCHED_IDLE by itself", which also has
//! what `auto` measured there). The kernel's side: a CPU running
//! only SCHED_IDLE tasks counts as idle when a waking task is placed (kernel/sched/fair.c
//! `select_idle_sibling`, `sched_idle_cpu`), and a waking task preempts a SCHED_IDLE one at
//! once (`check_preempt_wakeup_fair`).
//!
//! But a SCHED_IDLE thread runs only when a CPU has nothing else to do (its weight is 3 against
//! nice 0's 1024: kernel/sched/core.c `sched_prio_to_weight`, `WEIGHT_IDLEPRIO`), so on a
//! machine whose CPUs are all busy it would promote nothing and its perf rings would overflow.
//! So [`CpuPolicy::Auto`], the default, lowers each worker thread to SCHED_IDLE and raises it
//! back to the policy it started with (the unit's SCHED_BATCH) while it waits too long to run:
//! on each wake-up, at most once a second, a thread reads its own run-queue wait from
//! `/proc/thread-self/schedstat` (fs/proc/base.c `proc_pid_schedstat`: time on the CPU, time
//! waiting on a run queue, in ns, and the number of times it ran) and, if since its last look
//! it waited more than [`STARVED_WAIT`] a run on average and [`STARVED_SHARE_PCT`] of the
//! time, raises itself for [`RAISE_HOLD`] (doubled each time it must be raised again at its
//! first look after lowering, up to [`MAX_HOLD_DOUBLINGS`] times). The check costs no wake-up of its own: it runs where the
//! thread woke anyway or made progress ([`crate::heartbeat::beat`]).
//!
//! Only the threads that [`join`] (the sources', the per-CPU samplers' and the migrators',
//! through [`crate::heartbeat::attach`], and the conflict check's rescans) change policy; the
//! control, metrics and sd_notify threads keep the process's, so that `pghotctl` answers and
//! the watchdog is fed on a busy machine.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// The `cpu_policy` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuPolicy {
    /// Keep the policy pghotd was started with (the unit's `CPUSchedulingPolicy=batch`).
    Inherit,
    /// SCHED_IDLE always: pghotd runs only on CPUs nothing else wants.
    Idle,
    /// SCHED_IDLE, raised back to the inherited policy while a thread waits too long to run.
    #[default]
    Auto,
}

impl CpuPolicy {
    pub fn name(self) -> &'static str {
        match self {
            CpuPolicy::Inherit => "inherit",
            CpuPolicy::Idle => "idle",
            CpuPolicy::Auto => "auto",
        }
    }

    pub fn parse(word: &str) -> Result<CpuPolicy, String> {
        match word {
            "inherit" => Ok(CpuPolicy::Inherit),
            "idle" => Ok(CpuPolicy::Idle),
            "auto" => Ok(CpuPolicy::Auto),
            other => Err(format!(
                "'{other}' is not \"auto\", \"idle\" or \"inherit\""
            )),
        }
    }

    fn code(self) -> u8 {
        match self {
            CpuPolicy::Inherit => 0,
            CpuPolicy::Idle => 1,
            CpuPolicy::Auto => 2,
        }
    }

    fn from_code(code: u8) -> CpuPolicy {
        match code {
            1 => CpuPolicy::Idle,
            2 => CpuPolicy::Auto,
            _ => CpuPolicy::Inherit,
        }
    }
}

/// A thread at SCHED_IDLE that waited longer than this on a run queue per run, on average,
/// and for at least [`STARVED_SHARE_PCT`] of the time since its last look, is starved. A
/// fair-class thread waits at most about a slice for a busy CPU (0.75 ms times 1 + log2 of the
/// CPUs, kernel/sched/fair.c `sysctl_sched_base_slice`, `get_update_sysctl_factor`); tens of
/// milliseconds is longer than a migrator's hold or a sampler's pace can absorb
/// (`sampler/pace.rs`: a ring drained every 100 ms at the fastest).
pub const STARVED_WAIT: Duration = Duration::from_millis(50);

/// The share of the time since its last look a starved thread spent waiting for a CPU. A thread
/// that wakes once in a few seconds and once waited 60 ms lost nothing that matters (beside
/// MariaDB in the Debian rig, the mean alone raised a migrator once in a phase,
/// BENCHMARKS.md, issue 18, "pghotd at SCHED_IDLE by itself"); one that wants the CPU and does
/// not get it waits most of the time (nearly all of it beside busy CPUs: tests/cpushare.rs).
pub const STARVED_SHARE_PCT: u64 = 25;

/// How long a starved thread stays raised before it tries SCHED_IDLE again.
pub const RAISE_HOLD: Duration = Duration::from_secs(30);

/// A thread raised again at its first look after lowering doubles its hold, up to this many
/// times (30 s to 8 min): on a machine that stays busy it tries SCHED_IDLE rarely.
pub const MAX_HOLD_DOUBLINGS: u32 = 4;

/// How often a thread looks at its wait, at most (on a wake-up it makes anyway).
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// One reading of `/proc/thread-self/schedstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Schedstat {
    /// Time on a CPU, ns.
    pub run_ns: u64,
    /// Time runnable but waiting on a run queue, ns.
    pub wait_ns: u64,
    /// Times the thread was put on a CPU.
    pub runs: u64,
}

impl Schedstat {
    /// Parses the file's one line, `"%llu %llu %lu\n"` (fs/proc/base.c `proc_pid_schedstat`).
    /// Fields a later kernel appends are ignored; fewer than three, or one not a number, is an
    /// error naming it.
    pub fn parse(text: &str) -> Result<Schedstat, String> {
        let mut fields = text.split_ascii_whitespace();
        let mut next = |what: &str| -> Result<u64, String> {
            let word = fields
                .next()
                .ok_or_else(|| format!("schedstat {text:?}: no {what} field"))?;
            word.parse()
                .map_err(|_| format!("schedstat {text:?}: {what} {word:?} is not a number"))
        };
        Ok(Schedstat {
            run_ns: next("run time")?,
            wait_ns: next("run-queue wait")?,
            runs: next("run count")?,
        })
    }

    /// The mean run-queue wait per run between `earlier` and `self`; `None` if the thread did
    /// not run in between (or the counters went back: another thread's reading).
    pub fn wait_per_run_since(&self, earlier: &Schedstat) -> Option<Duration> {
        let runs = self.runs.checked_sub(earlier.runs).filter(|&r| r > 0)?;
        let waited = self.wait_ns.checked_sub(earlier.wait_ns)?;
        Some(Duration::from_nanos(waited / runs))
    }
}

/// Where a thread's policy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placed {
    /// At the policy it started with.
    Inherited,
    /// At SCHED_IDLE; `calm` once a look found it not starved.
    Lowered { calm: bool },
    /// Raised back to the inherited policy until then.
    Raised { until: Instant },
}

/// What a thread should do with its policy now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Go to SCHED_IDLE.
    Lower,
    /// Go back to the policy it started with, having waited this long a run (None: not
    /// starved, a change of setting).
    Raise(Option<Duration>),
}

/// One thread's decisions, apart from the system calls: the time and the readings are passed
/// in, so the rules run on a fake clock in tests.
#[derive(Debug, Clone)]
pub struct Share {
    placed: Placed,
    /// The reading the next look compares against, and when it was taken: at the last look or
    /// policy change.
    last: Option<(Instant, Schedstat)>,
    next_look: Instant,
    /// Raises in a row that came at the first look after lowering, since the last calm look.
    raises_in_a_row: u32,
}

impl Share {
    pub fn new(now: Instant) -> Share {
        Share {
            placed: Placed::Inherited,
            last: None,
            next_look: now,
            raises_in_a_row: 0,
        }
    }

    /// Whether a look is due at `now` under `policy` (a cheap check for every wake-up).
    pub fn due(&self, policy: CpuPolicy, now: Instant) -> bool {
        match (policy, self.placed) {
            (CpuPolicy::Inherit, Placed::Inherited) => false,
            (CpuPolicy::Inherit, _) => true,
            (CpuPolicy::Idle, Placed::Lowered { .. }) => false,
            (CpuPolicy::Idle, _) => true,
            (CpuPolicy::Auto, Placed::Inherited) => true,
            (CpuPolicy::Auto, _) => now >= self.next_look,
        }
    }

    /// What to do at `now` under `policy`, given the thread's reading (`None` if it could not be
    /// read). The caller applies the change and reports it with [`Share::applied`].
    pub fn look(
        &mut self,
        policy: CpuPolicy,
        now: Instant,
        reading: Option<Schedstat>,
    ) -> Option<Change> {
        self.next_look = now + CHECK_EVERY;
        match (policy, self.placed) {
            (CpuPolicy::Inherit, Placed::Inherited) => None,
            (CpuPolicy::Inherit, _) => Some(Change::Raise(None)),
            (CpuPolicy::Idle, Placed::Lowered { .. }) => None,
            (CpuPolicy::Idle, _) => Some(Change::Lower),
            (CpuPolicy::Auto, Placed::Inherited) => Some(Change::Lower),
            (CpuPolicy::Auto, Placed::Raised { until }) => (now >= until).then_some(Change::Lower),
            (CpuPolicy::Auto, Placed::Lowered { .. }) => {
                let (Some(now_read), Some((at, before))) = (reading, self.last) else {
                    self.last = reading.map(|r| (now, r));
                    return None;
                };
                self.last = Some((now, now_read));
                let waited = now_read.wait_ns.saturating_sub(before.wait_ns);
                let span =
                    u64::try_from(now.saturating_duration_since(at).as_nanos()).unwrap_or(u64::MAX);
                let most_of_the_time = waited.saturating_mul(100) >= span * STARVED_SHARE_PCT;
                match now_read.wait_per_run_since(&before) {
                    Some(wait) if wait > STARVED_WAIT && most_of_the_time => {
                        Some(Change::Raise(Some(wait)))
                    }
                    Some(_) => {
                        self.placed = Placed::Lowered { calm: true };
                        self.raises_in_a_row = 0;
                        None
                    }
                    None => None,
                }
            }
        }
    }

    /// The change was made at `now`; `reading` is the thread's schedstat right after it (the
    /// next look compares against it, so that waits at the other policy do not count).
    pub fn applied(&mut self, change: Change, now: Instant, reading: Option<Schedstat>) {
        self.last = reading.map(|r| (now, r));
        self.next_look = now + CHECK_EVERY;
        self.placed = match change {
            Change::Lower => Placed::Lowered { calm: false },
            Change::Raise(None) => Placed::Inherited,
            Change::Raise(Some(_)) => {
                if let Placed::Lowered { calm: false } = self.placed {
                    self.raises_in_a_row = self.raises_in_a_row.saturating_add(1);
                }
                Placed::Raised {
                    until: now + self.hold(),
                }
            }
        };
    }

    /// How long a raise lasts now: [`RAISE_HOLD`], doubled for each raise in a row after the
    /// first that came at the first look after lowering, up to [`MAX_HOLD_DOUBLINGS`] times.
    fn hold(&self) -> Duration {
        RAISE_HOLD
            * (1 << self
                .raises_in_a_row
                .saturating_sub(1)
                .min(MAX_HOLD_DOUBLINGS))
    }

    pub fn is_lowered(&self) -> bool {
        matches!(self.placed, Placed::Lowered { .. })
    }

    pub fn is_raised(&self) -> bool {
        matches!(self.placed, Placed::Raised { .. })
    }
}

/// The process-wide setting, which every joined thread follows at its next wake-up.
static POLICY: AtomicU8 = AtomicU8::new(0);
/// Whether [`install`] ran: before it (tests, tools), joining changes nothing.
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// What a raise of a starved thread reports to: its name and its wait per run.
type OnRaise = Box<dyn Fn(&str, Duration) + Send + Sync>;
/// Called once per raise of a starved thread (the daemon counts it in its stats).
static ON_RAISE: OnceLock<OnRaise> = OnceLock::new();

/// Sets the process's policy; a thread that joined follows it at its next wake-up. The first
/// call also sets what a raise of a starved thread reports to (`on_raise(thread, wait)`).
/// Call it before the first worker thread starts.
pub fn install(policy: CpuPolicy, on_raise: impl Fn(&str, Duration) + Send + Sync + 'static) {
    let _ = ON_RAISE.set(Box::new(on_raise));
    set_policy(policy);
    INSTALLED.store(true, Ordering::Release);
}

/// A new `cpu_policy` (at start, a reload or `config set`). With "auto" a thread must be able
/// to leave SCHED_IDLE again; where it cannot ([`can_raise`]), "auto" would leave a starved
/// thread starving, so the threads keep the policy they started with, and a warning says so.
pub fn set_policy(policy: CpuPolicy) {
    static CAN_RAISE: OnceLock<bool> = OnceLock::new();
    let can_raise = || {
        *CAN_RAISE.get_or_init(|| match can_raise() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    "cpu_policy \"auto\": a thread could not leave SCHED_IDLE again ({e}; needs \
                     CAP_SYS_NICE or RLIMIT_NICE 20); the worker threads keep the policy pghotd \
                     started with"
                );
                false
            }
        })
    };
    let policy = if policy == CpuPolicy::Auto && !can_raise() {
        CpuPolicy::Inherit
    } else {
        policy
    };
    POLICY.store(policy.code(), Ordering::Relaxed);
}

pub fn policy() -> CpuPolicy {
    CpuPolicy::from_code(POLICY.load(Ordering::Relaxed))
}

/// Whether a thread that started with this process's policy can be raised back from
/// SCHED_IDLE: the kernel lets a thread leave SCHED_IDLE only with CAP_SYS_NICE or an
/// RLIMIT_NICE that allows its nice value (kernel/sched/syscalls.c
/// `user_check_sched_setscheduler`, "Treat SCHED_IDLE as nice 20"). Tried on a thread of its
/// own, so that a failure leaves no thread behind at SCHED_IDLE.
pub fn can_raise() -> io::Result<()> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let inherited = sys::current()?;
            sys::set(sys::IDLE)?;
            sys::set(inherited)
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the probe thread panicked")))
    })
}

/// A joined thread: its policy as it started, its schedstat file and its decisions.
struct Joined {
    name: String,
    inherited: sys::Policy,
    schedstat: Option<File>,
    share: Share,
}

thread_local! {
    static JOINED: RefCell<Option<Joined>> = const { RefCell::new(None) };
}

/// The current thread (a worker, `name` for logs) follows `cpu_policy` from now on; it takes
/// its first step at once.
pub fn join(name: &str) {
    if !INSTALLED.load(Ordering::Acquire) {
        return;
    }
    let inherited = match sys::current() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("{name}: its scheduling policy could not be read ({e}); left as it is");
            return;
        }
    };
    let schedstat = match open_schedstat() {
        Ok(f) => Some(f),
        Err(e) => {
            warn_once(&format!(
                "/proc/thread-self/schedstat could not be read ({e}): with cpu_policy \
                 \"auto\" the worker threads keep the policy they started with"
            ));
            None
        }
    };
    JOINED.with(|j| {
        *j.borrow_mut() = Some(Joined {
            name: name.to_string(),
            inherited,
            schedstat,
            share: Share::new(Instant::now()),
        })
    });
    step();
}

/// The current thread woke or made progress: if a look is due, it looks and changes its
/// policy. A relaxed load and a clock read otherwise; a no-op on a thread that did not
/// [`join`].
pub fn step() {
    JOINED.with(|j| {
        if let Some(joined) = j.borrow_mut().as_mut() {
            joined.step(policy(), Instant::now());
        }
    });
}

impl Joined {
    fn read(&self) -> Option<Schedstat> {
        read_schedstat(self.schedstat.as_ref()?).ok()
    }

    fn step(&mut self, mut policy: CpuPolicy, now: Instant) {
        if !self.share.due(policy, now) {
            return;
        }
        // Without its wait, a thread cannot tell that it starves: auto keeps what it inherited.
        if policy == CpuPolicy::Auto && self.schedstat.is_none() {
            policy = CpuPolicy::Inherit;
        }
        let reading = if policy == CpuPolicy::Auto {
            self.read()
        } else {
            None
        };
        let Some(change) = self.share.look(policy, now, reading) else {
            return;
        };
        let to = match change {
            Change::Lower => sys::IDLE,
            Change::Raise(_) => self.inherited,
        };
        if let Err(e) = sys::set(to) {
            tracing::warn!(
                "{}: its scheduling policy could not be set to {} ({e}); left as it is",
                self.name,
                to.name()
            );
            // Not again every second: as if done, with the next look's rules.
            self.share.applied(change, now, None);
            return;
        }
        let after = if policy == CpuPolicy::Auto {
            self.read()
        } else {
            None
        };
        self.share.applied(change, now, after);
        if let Change::Raise(Some(wait)) = change {
            if let Some(report) = ON_RAISE.get() {
                report(&self.name, wait);
            }
            tracing::debug!(
                "{} waited {} ms a run at SCHED_IDLE: {} again for {} s",
                self.name,
                wait.as_millis(),
                to.name(),
                self.share.hold().as_secs()
            );
        }
    }
}

/// Kept open for one `pread` per look: the `procfs` crate's `Task::schedstat` opens and parses
/// the file on each call, and nix 0.32 has no sched_setscheduler(2), hence `sys` below.
fn open_schedstat() -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
        .open("/proc/thread-self/schedstat")?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {}", crate::safefs::kind_name(&meta)),
        ));
    }
    // A kernel without CONFIG_SCHED_INFO has no such file; one whose line does not parse is
    // as good as none.
    read_schedstat(&file)?;
    Ok(file)
}

/// One reading from the open file: a `pread` at 0 makes the kernel print the line afresh
/// (a seq_file read at another position than the last restarts it). At most 128 bytes: three
/// 20-digit numbers and whatever a later kernel appends that fits.
fn read_schedstat(file: &File) -> io::Result<Schedstat> {
    let mut buf = [0u8; 128];
    let n = file.read_at(&mut buf, 0)?;
    let text = std::str::from_utf8(&buf[..n])
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not text"))?;
    Schedstat::parse(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn warn_once(message: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!("{message}");
    }
}

/// sched_getscheduler(2), sched_getparam(2) and sched_setscheduler(2) on the calling thread.
mod sys {
    use std::io;

    /// A policy and its static priority (non-zero only for the realtime policies).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Policy {
        pub policy: libc::c_int,
        pub priority: libc::c_int,
    }

    pub const IDLE: Policy = Policy {
        policy: libc::SCHED_IDLE,
        priority: 0,
    };

    impl Policy {
        pub fn name(self) -> &'static str {
            match self.policy {
                libc::SCHED_OTHER => "SCHED_OTHER",
                libc::SCHED_BATCH => "SCHED_BATCH",
                libc::SCHED_IDLE => "SCHED_IDLE",
                libc::SCHED_FIFO => "SCHED_FIFO",
                libc::SCHED_RR => "SCHED_RR",
                _ => "its policy",
            }
        }
    }

    /// The calling thread's policy (pid 0: the caller, a thread on Linux).
    pub fn current() -> io::Result<Policy> {
        // SAFETY: sched_getscheduler takes a pid and touches no memory of ours.
        let policy = unsafe { libc::sched_getscheduler(0) };
        if policy < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid, writable sched_param for the call's duration.
        if unsafe { libc::sched_getparam(0, &mut param) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Policy {
            // SCHED_RESET_ON_FORK is returned or-ed in (sched_getscheduler(2)).
            policy: policy & !libc::SCHED_RESET_ON_FORK,
            priority: param.sched_priority,
        })
    }

    pub fn set(to: Policy) -> io::Result<()> {
        let param = libc::sched_param {
            sched_priority: to.priority,
        };
        // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is the caller.
        if unsafe { libc::sched_setscheduler(0, to.policy, &param) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    fn stat(wait_ms: u64, runs: u64) -> Option<Schedstat> {
        Some(Schedstat {
            run_ns: 0,
            wait_ns: wait_ms * 1_000_000,
            runs,
        })
    }

    #[test]
    fn the_schedstat_line_parses_as_the_kernel_prints_it() {
        // From this kernel's /proc/self/schedstat (a `cat` that had just started).
        assert_eq!(
            Schedstat::parse("507461 0 1\n"),
            Ok(Schedstat {
                run_ns: 507_461,
                wait_ns: 0,
                runs: 1
            })
        );
        // A field appended by a later kernel is ignored.
        assert_eq!(Schedstat::parse("1 2 3 4\n").map(|s| s.runs), Ok(3));
        let short = Schedstat::parse("1 2\n").unwrap_err();
        assert!(short.contains("no run count field"), "{short}");
        let bad = Schedstat::parse("1 x 3\n").unwrap_err();
        assert!(bad.contains("run-queue wait \"x\""), "{bad}");
    }

    #[test]
    fn the_wait_per_run_is_the_waits_growth_over_the_runs() {
        let a = stat(10, 100).unwrap();
        // 300 ms more waiting over 4 more runs: 75 ms a run.
        assert_eq!(
            stat(310, 104).unwrap().wait_per_run_since(&a),
            Some(Duration::from_millis(75))
        );
        assert_eq!(stat(20, 100).unwrap().wait_per_run_since(&a), None);
        assert_eq!(stat(5, 101).unwrap().wait_per_run_since(&a), None);
    }

    #[test]
    fn auto_lowers_at_once_and_raises_a_thread_that_waits_over_50_ms_a_run_a_quarter_of_the_time() {
        let t0 = Instant::now();
        let mut s = Share::new(t0);
        assert!(s.due(CpuPolicy::Auto, t0));
        assert_eq!(s.look(CpuPolicy::Auto, t0, stat(0, 0)), Some(Change::Lower));
        s.applied(Change::Lower, t0, stat(0, 10));
        assert!(s.is_lowered());
        // Not again before a second has passed.
        assert!(!s.due(CpuPolicy::Auto, at(t0, 999)));
        assert!(s.due(CpuPolicy::Auto, at(t0, 1000)));
        // 10 runs, 400 ms waited: 40 ms a run, not starved.
        assert_eq!(s.look(CpuPolicy::Auto, at(t0, 1000), stat(400, 20)), None);
        assert!(s.is_lowered());
        // 2 runs, 120 ms: 60 ms a run, but only 12 % of the second: not starved either.
        assert_eq!(s.look(CpuPolicy::Auto, at(t0, 2000), stat(520, 22)), None);
        // 2 runs, 500 ms: 250 ms a run, half of the second.
        let change = s.look(CpuPolicy::Auto, at(t0, 3000), stat(1020, 24));
        assert_eq!(
            change,
            Some(Change::Raise(Some(Duration::from_millis(250))))
        );
        s.applied(change.unwrap(), at(t0, 3000), stat(1020, 24));
        assert!(s.is_raised());
        // Raised for 30 s: looks in between change nothing, whatever the wait.
        assert_eq!(
            s.look(CpuPolicy::Auto, at(t0, 32_999), stat(9_000, 25)),
            None
        );
        assert_eq!(
            s.look(CpuPolicy::Auto, at(t0, 33_000), stat(9_000, 25)),
            Some(Change::Lower)
        );
    }

    #[test]
    fn a_thread_starved_again_at_its_first_look_doubles_its_hold_up_to_eight_minutes() {
        let t0 = Instant::now();
        let mut s = Share::new(t0);
        let mut now = t0;
        let mut wait = 0;
        let mut holds = Vec::new();
        s.applied(Change::Lower, now, stat(wait, 0));
        for _ in 0..7 {
            // Its first look after lowering finds it starved: 1 s waited over one run.
            now += CHECK_EVERY;
            wait += 1000;
            let change = s.look(CpuPolicy::Auto, now, stat(wait, 1 + wait / 1000));
            assert!(matches!(change, Some(Change::Raise(Some(_)))));
            s.applied(change.unwrap(), now, stat(wait, 1 + wait / 1000));
            holds.push(s.hold().as_secs());
            now += s.hold();
            assert_eq!(s.look(CpuPolicy::Auto, now, None), Some(Change::Lower));
            s.applied(Change::Lower, now, stat(wait, 1 + wait / 1000));
        }
        assert_eq!(holds, [30, 60, 120, 240, 480, 480, 480]);
        // A calm look (1 ms a run) starts again from 30 s.
        now += CHECK_EVERY;
        let runs = 1 + wait / 1000;
        assert_eq!(
            s.look(CpuPolicy::Auto, now, stat(wait + 10, runs + 10)),
            None
        );
        now += CHECK_EVERY;
        let change = s.look(CpuPolicy::Auto, now, stat(wait + 1010, runs + 11));
        s.applied(change.unwrap(), now, None);
        assert_eq!(s.hold(), RAISE_HOLD);
    }

    #[test]
    fn idle_and_inherit_only_follow_the_setting_and_never_read_the_wait() {
        let t0 = Instant::now();
        let mut s = Share::new(t0);
        assert!(!s.due(CpuPolicy::Inherit, t0));
        assert_eq!(s.look(CpuPolicy::Idle, t0, None), Some(Change::Lower));
        s.applied(Change::Lower, t0, None);
        assert!(!s.due(CpuPolicy::Idle, at(t0, 60_000)));
        // A change of setting is followed at the next wake-up, however recent the last look.
        assert!(s.due(CpuPolicy::Inherit, at(t0, 1)));
        assert_eq!(
            s.look(CpuPolicy::Inherit, at(t0, 1), None),
            Some(Change::Raise(None))
        );
        s.applied(Change::Raise(None), at(t0, 1), None);
        assert!(!s.is_lowered() && !s.is_raised());
        // Auto without a reading never raises (nor counts a raise).
        s.applied(Change::Lower, at(t0, 2), None);
        assert_eq!(s.look(CpuPolicy::Auto, at(t0, 5_000), None), None);
        assert!(s.is_lowered());
    }

    #[test]
    fn the_setting_reads_its_three_words_and_names_a_wrong_one() {
        for p in [CpuPolicy::Inherit, CpuPolicy::Idle, CpuPolicy::Auto] {
            assert_eq!(CpuPolicy::parse(p.name()), Ok(p));
            assert_eq!(CpuPolicy::from_code(p.code()), p);
        }
        assert_eq!(
            CpuPolicy::parse("batch"),
            Err("'batch' is not \"auto\", \"idle\" or \"inherit\"".into())
        );
    }
}
