//! Opening one CPU's events: perf_event_open through perf-event2, the ring, and errors that say
//! exactly which CPU, which event and which errno, with the likely remedy.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use perf_event::Builder;
use perf_event::events::Event;
use perf_event_open_sys::bindings::perf_event_attr;

use super::ring::{Ring, RingError};
use super::{EventSpec, Group, PerfPlan};

/// Why one CPU's sampler could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cpu {cpu}: opening {event}: {source} ({hint})")]
    Event {
        cpu: u32,
        event: String,
        source: io::Error,
        hint: String,
    },
    #[error("cpu {cpu}: {source}")]
    Ring { cpu: u32, source: RingError },
    #[error("cpu {cpu}: no event of this source covers it")]
    NotCovered { cpu: u32 },
    #[error("cpu {cpu}: {what} {event}: {source}")]
    Ioctl {
        cpu: u32,
        what: &'static str,
        event: String,
        source: io::Error,
    },
}

/// One CPU's open events and their shared ring.
pub struct CpuEvents {
    pub cpu: u32,
    /// Kernel ids of the events, in plan order (samples name theirs with IDENTIFIER).
    pub ids: Vec<u64>,
    pub ring: Ring,
    /// Kept open for as long as the ring is read; closing them stops the sampling.
    counters: Vec<perf_event::Counter>,
    /// Which of `counters` sample (the others only lead a group).
    sampling: Vec<bool>,
}

impl CpuEvents {
    /// Sets the sampling period of every event (PERF_EVENT_IOC_PERIOD); the kernel applies it
    /// from the event's next overflow.
    pub fn set_period(&self, period: u64) -> io::Result<()> {
        // Only the sampling events: a counting group leader (PEBS mem-loads-aux) has none.
        let sampling = self.sampling.iter().copied();
        for counter in self
            .counters
            .iter()
            .zip(sampling)
            .filter(|(_, s)| *s)
            .map(|(c, _)| c)
        {
            // SAFETY: the fd is an open perf event owned by `counter`; PERF_EVENT_IOC_PERIOD
            // reads one u64 through the pointer, which points at a live local for the call.
            // (perf-event-open-sys types this ioctl's argument as a u64 value, not a pointer,
            // so it is called through libc.)
            let rc = unsafe {
                libc::ioctl(
                    counter.as_raw_fd(),
                    perf_event_open_sys::bindings::PERIOD as _,
                    &period as *const u64,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The fd of the event that owns the ring (poll it for POLLIN).
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the counter owns this open fd and lives as long as `self`, which the returned
        // borrow cannot outlive.
        unsafe { BorrowedFd::borrow_raw(self.counters[0].as_raw_fd()) }
    }
}

/// Which event of the plan wrote a sample with this id (the only one, when there is one).
pub fn slot_of(ids: &[u64], id: u64) -> Option<usize> {
    if ids.len() == 1 {
        return Some(0);
    }
    ids.iter().position(|&i| i == id)
}

/// A perf-event2 `Event` for any PMU: type and config words as the plan computed them.
struct RawPmuEvent<'a>(&'a EventSpec);

impl Event for RawPmuEvent<'_> {
    fn update_attrs(self, attr: &mut perf_event_attr) {
        attr.type_ = self.0.pmu_type;
        attr.config = self.0.config;
        attr.__bindgen_anon_3.config1 = self.0.config1;
        attr.__bindgen_anon_4.config2 = self.0.config2;
    }
}

/// Opens every event of `plan` on `cpu`, maps the ring and enables sampling.
pub fn open_cpu(plan: &PerfPlan, cpu: u32, ring_pages: usize) -> Result<CpuEvents, OpenError> {
    let specs = plan.events_for(cpu).ok_or(OpenError::NotCovered { cpu })?;
    let wakeup = (ring_pages * super::ring::page_size() / 4).max(4096);
    let mut counters: Vec<perf_event::Counter> = Vec::with_capacity(specs.len());
    let mut leader: Option<usize> = None;
    for spec in specs {
        let mut b = Builder::new(RawPmuEvent(spec));
        b.any_pid().one_cpu(cpu as usize);
        if spec.sampling {
            b.sample_period(spec.period);
        }
        b.exclude_kernel(spec.exclude_kernel)
            .exclude_hv(spec.exclude_kernel)
            .sample_id_all(true)
            .wakeup_watermark(wakeup)
            .clockid(perf_event::Clock::MONOTONIC);
        let attrs = b.attrs_mut();
        attrs.sample_type = plan.format.bits();
        attrs.read_format = 0;
        attrs.set_precise_ip(u64::from(spec.precise_ip));
        let built = match (spec.group, leader) {
            (Group::Member, Some(at)) => b.build_with_group(&mut counters[at]),
            _ => b.build(),
        };
        if spec.group == Group::Leader {
            leader = Some(counters.len());
        }
        let counter = built.map_err(|source| OpenError::Event {
            cpu,
            event: spec.name.clone(),
            hint: hint(source.raw_os_error(), cpu),
            source,
        })?;
        counters.push(counter);
    }
    let ring =
        Ring::map(&counters[0], ring_pages).map_err(|source| OpenError::Ring { cpu, source })?;
    let leader_fd = counters[0].as_raw_fd();
    for (spec, counter) in specs.iter().zip(&counters).skip(1) {
        // SAFETY: both fds are open perf events on the same CPU owned by `counters`; SET_OUTPUT
        // only redirects this event's records into the leader's ring.
        let rc = unsafe { perf_event_open_sys::ioctls::SET_OUTPUT(counter.as_raw_fd(), leader_fd) };
        if rc != 0 {
            return Err(OpenError::Ioctl {
                cpu,
                what: "redirecting output of",
                event: spec.name.clone(),
                source: io::Error::last_os_error(),
            });
        }
    }
    let ids = counters.iter().map(|c| c.id()).collect();
    for (spec, counter) in specs.iter().zip(counters.iter_mut()) {
        counter.enable().map_err(|source| OpenError::Ioctl {
            cpu,
            what: "enabling",
            event: spec.name.clone(),
            source,
        })?;
    }
    Ok(CpuEvents {
        cpu,
        ids,
        ring,
        counters,
        sampling: specs.iter().map(|s| s.sampling).collect(),
    })
}

/// `kernel.perf_event_paranoid`, one integer in a sysctl file.
fn read_paranoid() -> std::io::Result<String> {
    crate::safefs::read_text(
        std::path::Path::new("/proc/sys/kernel/perf_event_paranoid"),
        crate::safefs::limit::ATTRIBUTE,
    )
}

/// The likely cause of a perf_event_open errno, in the words an operator can act on.
pub fn hint(errno: Option<i32>, cpu: u32) -> String {
    let paranoid = read_paranoid()
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    match errno {
        Some(libc::EACCES | libc::EPERM) => format!(
            "not permitted: system-wide sampling needs root, CAP_PERFMON (CAP_SYS_ADMIN before \
             Linux 5.8) or kernel.perf_event_paranoid <= 0 (it is {paranoid})"
        ),
        Some(libc::ENOENT) => "this kernel or CPU does not provide the event".into(),
        Some(libc::ENODEV) => format!("cpu {cpu} is offline or its PMU does not cover it"),
        Some(libc::EINVAL) => "the kernel rejected the event's settings: period, config bits, \
                               or exclude_* flags this PMU cannot honour"
            .into(),
        Some(libc::EOPNOTSUPP) => "the PMU cannot sample with these options".into(),
        Some(libc::EMFILE | libc::ENFILE) => {
            "too many open files: raise RLIMIT_NOFILE (LimitNOFILE= in the unit)".into()
        }
        Some(libc::EBUSY | libc::ENOSPC) => {
            "another user holds this PMU (perf record, another sampler)".into()
        }
        Some(libc::E2BIG) => "this kernel is too old for the event's attributes".into(),
        Some(libc::ENODATA) => {
            "the PMU needs an auxiliary event as group leader (mem-loads-aux)".into()
        }
        _ => "see perf_event_open(2)".into(),
    }
}

/// CAP_SYS_ADMIN and CAP_PERFMON in `capabilities(7)` numbering.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

/// Says up front when system-wide sampling will be refused: `perf_event_paranoid` above 0 and
/// neither CAP_PERFMON nor CAP_SYS_ADMIN in the effective set (perf_event_open(2)). The opens
/// still run, so a kernel that decides otherwise wins; their errors repeat the reason.
pub fn privilege_warning() -> Option<String> {
    // One integer in a sysctl file; the procfs crate has no reader for this one.
    let paranoid: i32 = read_paranoid().ok()?.trim().parse().ok()?;
    let status: procfs::process::Status = crate::safefs::read_proc(
        std::path::Path::new("/proc/self/status"),
        crate::safefs::limit::STATUS,
    )
    .ok()?;
    let cap_eff = status.capeff;
    let has = |cap: u32| cap_eff >> cap & 1 == 1;
    (paranoid > 0 && !has(CAP_PERFMON) && !has(CAP_SYS_ADMIN)).then(|| {
        format!(
            "kernel.perf_event_paranoid is {paranoid} and this process has neither CAP_PERFMON \
             nor CAP_SYS_ADMIN: system-wide sampling will be refused (EACCES); run as root, \
             grant CAP_PERFMON, or set kernel.perf_event_paranoid to 0"
        )
    })
}

/// Makes sure the process may hold `needed` more fds, raising the soft RLIMIT_NOFILE up to the
/// hard limit when that is enough. perf needs one fd per event per CPU.
pub fn ensure_fd_budget(needed: u64) -> Result<(), String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) =
        getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("reading RLIMIT_NOFILE: {e}"))?;
    // Leave room for the sockets, files and pipes the rest of the daemon uses.
    let wanted = needed + 256;
    if soft >= wanted {
        return Ok(());
    }
    if hard < wanted {
        return Err(format!(
            "RLIMIT_NOFILE is {soft} (hard {hard}) but perf sampling needs about {wanted} fds; \
             raise it (ulimit -n, or LimitNOFILE= in the systemd unit)"
        ));
    }
    setrlimit(Resource::RLIMIT_NOFILE, wanted, hard)
        .map_err(|e| format!("raising RLIMIT_NOFILE from {soft} to {wanted}: {e}"))
}
