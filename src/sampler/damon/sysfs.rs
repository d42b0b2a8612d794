//! The DAMON sysfs driver: claim a kdamond nobody else uses, configure it for the managed pids
//! (vaddr ops, one `stat` scheme per pid), take snapshots, and give it back.
//!
//! Ownership rules (pghotd never touches a kdamond it did not create):
//! - A free index is one whose kdamond is off and has no context (`nr_contexts` 0). The kernel
//!   adds kdamonds only by re-creating every kdamond directory when `nr_kdamonds` is written
//!   (and refuses with EBUSY while any runs), which would wipe others' configuration; so
//!   pghotd writes `nr_kdamonds` only when it is 0.
//! - Before configuring, pghotd writes `RUN_DIR/damon-kdamond-K` (its pid and the target pids).
//!   A later run that finds such a file whose pghotd is dead checks that kdamond K still has
//!   exactly that configuration (vaddr, those targets, `stat` schemes) and turns it off; a
//!   kdamond that does not match is left alone. The file goes either way.
//! - On exit (or drop) pghotd turns its kdamond off, sets `nr_contexts` back to 0 (so the index
//!   is free again) and removes the file.

use std::path::{Path, PathBuf};

use crate::sampler::SourceError;

/// One region of a snapshot (`tried_regions/<R>`), virtual addresses `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    /// Sampling intervals (of one aggregation interval) in which an access was seen.
    pub nr_accesses: u32,
}

/// How a kdamond is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KdamondSpec {
    pub pids: Vec<u32>,
    pub sample_us: u64,
    pub aggr_us: u64,
    /// How often vaddr re-reads the targets' mappings.
    pub update_us: u64,
    pub min_regions: u64,
    pub max_regions: u64,
}

const U64_MAX: &str = "18446744073709551615";
const U32_MAX: &str = "4294967295";

/// `/sys/kernel/mm/damon/admin` (under a sysfs root that tests point at a fixture).
#[derive(Debug, Clone)]
pub struct Admin {
    root: PathBuf,
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SourceError {
    let path = path.display().to_string();
    move |source| SourceError::Io { op, path, source }
}

fn damon_err(detail: String) -> SourceError {
    SourceError::Damon(detail)
}

impl Admin {
    /// Checks that DAMON's sysfs interface is there.
    pub fn open(sysfs_root: &Path) -> Result<Admin, SourceError> {
        let root = sysfs_root.join("kernel/mm/damon/admin");
        if !root.join("kdamonds/nr_kdamonds").exists() {
            return Err(SourceError::Unsupported {
                what: "DAMON",
                detail: format!("{} does not exist", root.display()),
                option: "CONFIG_DAMON_SYSFS and CONFIG_DAMON_VADDR",
            });
        }
        // A tree pghotd cannot write (sysfs mounted read-only, as container runtimes mount it,
        // or no CAP_DAC_OVERRIDE over its root-owned 0600 files) fails here, at the open, so
        // that `auto` takes the next source instead of the source failing once it runs.
        let nr = root.join("kdamonds/nr_kdamonds");
        nix::unistd::faccessat(
            nix::fcntl::AT_FDCWD,
            &nr,
            nix::unistd::AccessFlags::W_OK,
            nix::fcntl::AtFlags::AT_EACCESS,
        )
        .map_err(|errno| {
            damon_err(format!(
                "{} is not writable ({}): the damon source configures DAMON there, which \
                 needs root or CAP_DAC_OVERRIDE, and /sys mounted read-write",
                nr.display(),
                std::io::Error::from_raw_os_error(errno as i32)
            ))
        })?;
        Ok(Admin { root })
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join("kdamonds").join(rel)
    }

    pub fn read(&self, rel: &str) -> Result<String, SourceError> {
        let path = self.path(rel);
        crate::safefs::read_text(&path, crate::safefs::limit::ATTRIBUTE)
            .map(|s| s.trim().to_string())
            .map_err(io("reading", &path))
    }

    fn read_u64(&self, rel: &str) -> Result<u64, SourceError> {
        let text = self.read(rel)?;
        text.parse().map_err(|_| {
            damon_err(format!(
                "{}: '{text}' is not a number",
                self.path(rel).display()
            ))
        })
    }

    pub fn write(&self, rel: &str, value: &str) -> Result<(), SourceError> {
        let path = self.path(rel);
        // One write(2) of the whole value, as sysfs wants; the attribute must exist (no
        // create, no truncate, no symlink followed).
        use std::io::Write;
        #[cfg(test)]
        fixture::injected_write_error(&path, value).map_err(io("writing", &path))?;
        crate::safefs::open_existing_for_write(&path, true)
            .and_then(|mut f| f.write_all(value.as_bytes()))
            .map_err(io("writing", &path))
    }

    fn nr_kdamonds(&self) -> Result<u32, SourceError> {
        Ok(self.read_u64("nr_kdamonds")? as u32)
    }

    fn is_free(&self, k: u32) -> Result<bool, SourceError> {
        Ok(self.read(&format!("{k}/state"))? == "off"
            && self.read_u64(&format!("{k}/contexts/nr_contexts"))? == 0)
    }

    /// An index nobody uses (`Some`), or `None` when there are no kdamonds at all; an error
    /// naming who holds each when every index is taken. Writes nothing.
    pub fn find_free(&self) -> Result<Option<u32>, SourceError> {
        let n = self.nr_kdamonds()?;
        if n == 0 {
            return Ok(None);
        }
        let mut used = Vec::new();
        for k in 0..n {
            if self.is_free(k)? {
                return Ok(Some(k));
            }
            used.push(format!(
                "{k} ({}, {} context(s))",
                self.read(&format!("{k}/state"))?,
                self.read(&format!("{k}/contexts/nr_contexts"))?
            ));
        }
        Err(damon_err(format!(
            "no free kdamond: {} in use by others; the kernel adds kdamonds only by \
             re-creating all of them (writing nr_kdamonds, EBUSY while any runs), which would \
             wipe their configuration, so pghotd will not. Free one (off, contexts/nr_contexts 0) \
             or add one while none runs",
            used.join(", ")
        )))
    }

    /// An index nobody uses, creating the first kdamond if there are none.
    fn free_index(&self) -> Result<u32, SourceError> {
        match self.find_free()? {
            Some(k) => Ok(k),
            None => {
                self.write("nr_kdamonds", "1")?;
                Ok(0)
            }
        }
    }

    /// True if kdamond `k` is configured exactly as pghotd configures one for `pids`.
    fn looks_like_ours(&self, k: u32, pids: &[u32]) -> bool {
        let ctx = format!("{k}/contexts/0");
        let check = || -> Result<bool, SourceError> {
            if self.read_u64(&format!("{k}/contexts/nr_contexts"))? != 1
                || self.read(&format!("{ctx}/operations"))? != "vaddr"
                || self.read_u64(&format!("{ctx}/targets/nr_targets"))? != pids.len() as u64
                || self.read_u64(&format!("{ctx}/schemes/nr_schemes"))? != pids.len() as u64
            {
                return Ok(false);
            }
            for (i, &pid) in pids.iter().enumerate() {
                if self.read_u64(&format!("{ctx}/targets/{i}/pid_target"))? != u64::from(pid)
                    || self.read(&format!("{ctx}/schemes/{i}/action"))? != "stat"
                {
                    return Ok(false);
                }
            }
            Ok(true)
        };
        check().unwrap_or(false)
    }
}

/// The state file naming a kdamond pghotd configured.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StateFile {
    pghotd_pid: u32,
    kdamond: u32,
    pids: Vec<u32>,
}

impl StateFile {
    fn render(&self) -> String {
        let pids: Vec<String> = self.pids.iter().map(u32::to_string).collect();
        format!(
            "# written by pghotd: the DAMON kdamond it configured\npghotd_pid={}\nkdamond={}\npids={}\n",
            self.pghotd_pid,
            self.kdamond,
            pids.join(",")
        )
    }

    fn parse(text: &str) -> Option<StateFile> {
        let (mut pghotd_pid, mut kdamond, mut pids) = (None, None, None);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            match line.split_once('=')? {
                ("pghotd_pid", v) => pghotd_pid = v.parse().ok(),
                ("kdamond", v) => kdamond = v.parse().ok(),
                // Empty: claimed while a followed scope had no process.
                ("pids", "") => pids = Some(Vec::new()),
                ("pids", v) => {
                    pids = v
                        .split(',')
                        .map(str::parse)
                        .collect::<Result<Vec<u32>, _>>()
                        .ok()
                }
                _ => {}
            }
        }
        Some(StateFile {
            pghotd_pid: pghotd_pid?,
            kdamond: kdamond?,
            pids: pids?,
        })
    }

    fn path(run_dir: &Path, kdamond: u32) -> PathBuf {
        run_dir.join(format!("damon-kdamond-{kdamond}"))
    }
}

/// True if `pid` is a live pghotd (this one included: its kdamonds are in use).
fn pghotd_alive(pid: u32) -> bool {
    pid == std::process::id()
        || crate::scope::proc::read_comm(Path::new(&format!("/proc/{pid}/comm")))
            .is_some_and(|comm| comm.trim() == "pghotd")
}

/// Turns off the kdamonds that crashed pghotd runs left behind (see the module doc).
pub fn recover(admin: &Admin, run_dir: &Path) -> Result<(), SourceError> {
    let entries = match std::fs::read_dir(run_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("listing", run_dir)(e)),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry
            .file_name()
            .to_string_lossy()
            .starts_with("damon-kdamond-")
        {
            continue;
        }
        let Some(state) = crate::safefs::read_text(&path, crate::safefs::limit::ATTRIBUTE)
            .ok()
            .and_then(|t| StateFile::parse(&t))
        else {
            tracing::warn!("damon: {}: unreadable state file; removed", path.display());
            let _ = std::fs::remove_file(&path);
            continue;
        };
        if pghotd_alive(state.pghotd_pid) {
            continue;
        }
        let k = state.kdamond;
        if k < admin.nr_kdamonds()? && admin.looks_like_ours(k, &state.pids) {
            tracing::warn!(
                "damon: kdamond {k} was left by pghotd pid {} (for pids {:?}); turning it off",
                state.pghotd_pid,
                state.pids
            );
            if admin.read(&format!("{k}/state"))? == "on" {
                admin.write(&format!("{k}/state"), "off")?;
            }
            admin.write(&format!("{k}/contexts/nr_contexts"), "0")?;
        } else {
            tracing::warn!(
                "damon: {} names kdamond {k}, which is no longer configured as pghotd left it; \
                 not touching it",
                path.display()
            );
        }
        std::fs::remove_file(&path).map_err(io("removing", &path))?;
    }
    Ok(())
}

/// A kdamond pghotd configured; turned off and freed when dropped.
#[derive(Debug)]
pub struct Kdamond {
    admin: Admin,
    index: u32,
    state_file: PathBuf,
    released: bool,
}

impl Kdamond {
    /// Recovers stale kdamonds, claims a free index and configures it (not started yet).
    pub fn claim(admin: Admin, run_dir: &Path, spec: &KdamondSpec) -> Result<Kdamond, SourceError> {
        recover(&admin, run_dir)?;
        let index = admin.free_index()?;
        std::fs::create_dir_all(run_dir).map_err(io("creating", run_dir))?;
        let kdamond = Kdamond {
            admin,
            index,
            state_file: StateFile::path(run_dir, index),
            released: false,
        };
        kdamond.write_state(&spec.pids)?;
        kdamond.configure(spec)?;
        Ok(kdamond)
    }

    /// Names this kdamond and the pids it watches in the state file crash recovery reads.
    fn write_state(&self, pids: &[u32]) -> Result<(), SourceError> {
        let state = StateFile {
            pghotd_pid: std::process::id(),
            kdamond: self.index,
            pids: pids.to_vec(),
        };
        crate::safefs::create_private(&self.state_file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, state.render().as_bytes()))
            .map_err(io("writing", &self.state_file))
    }

    /// Watches `spec.pids` from now on: turns the kdamond off, rewrites its state file, targets
    /// and schemes, and starts it again. DAMON builds its regions anew. A crash between the
    /// state file and the targets leaves a kdamond recovery does not recognize, so it leaves
    /// it alone (it never turns off what it cannot prove is pghotd's).
    pub fn retarget(&self, spec: &KdamondSpec) -> Result<(), SourceError> {
        self.stop()?;
        self.write_state(&spec.pids)?;
        self.configure(spec)?;
        self.start()
    }

    /// Turns the kdamond off but keeps it (and its index) claimed.
    pub fn stop(&self) -> Result<(), SourceError> {
        if self.admin.read(&format!("{}/state", self.index))? == "on" {
            self.admin.write(&format!("{}/state", self.index), "off")?;
        }
        Ok(())
    }

    pub fn index(&self) -> u32 {
        self.index
    }

    fn configure(&self, spec: &KdamondSpec) -> Result<(), SourceError> {
        let a = &self.admin;
        let k = self.index;
        a.write(&format!("{k}/contexts/nr_contexts"), "1")?;
        let ctx = format!("{k}/contexts/0");
        let avail = a.read(&format!("{ctx}/avail_operations"))?;
        if !avail.split_ascii_whitespace().any(|op| op == "vaddr") {
            return Err(SourceError::Unsupported {
                what: "DAMON virtual-address monitoring",
                detail: format!("avail_operations is '{avail}'"),
                option: "CONFIG_DAMON_VADDR",
            });
        }
        a.write(&format!("{ctx}/operations"), "vaddr")?;
        let attrs = format!("{ctx}/monitoring_attrs");
        a.write(
            &format!("{attrs}/intervals/sample_us"),
            &spec.sample_us.to_string(),
        )?;
        a.write(
            &format!("{attrs}/intervals/aggr_us"),
            &spec.aggr_us.to_string(),
        )?;
        a.write(
            &format!("{attrs}/intervals/update_us"),
            &spec.update_us.to_string(),
        )?;
        // max first: the kernel checks min <= max only when the kdamond starts, but keep the
        // files consistent at every step.
        a.write(
            &format!("{attrs}/nr_regions/max"),
            &spec.max_regions.to_string(),
        )?;
        a.write(
            &format!("{attrs}/nr_regions/min"),
            &spec.min_regions.to_string(),
        )?;
        let n = spec.pids.len();
        a.write(&format!("{ctx}/targets/nr_targets"), &n.to_string())?;
        for (i, pid) in spec.pids.iter().enumerate() {
            a.write(&format!("{ctx}/targets/{i}/pid_target"), &pid.to_string())?;
        }
        // One scheme per target: tried_regions do not say which target a region belongs to,
        // so with several pids each scheme filters out every target but its own.
        a.write(&format!("{ctx}/schemes/nr_schemes"), &n.to_string())?;
        for i in 0..n {
            let s = format!("{ctx}/schemes/{i}");
            a.write(&format!("{s}/action"), "stat")?;
            // Every min/max defaults to 0/0, which matches nothing: set all six. Only regions
            // with accesses are of interest (and fewer regions are cheaper to read).
            let p = format!("{s}/access_pattern");
            a.write(&format!("{p}/sz/min"), "0")?;
            a.write(&format!("{p}/sz/max"), U64_MAX)?;
            a.write(&format!("{p}/nr_accesses/min"), "1")?;
            a.write(&format!("{p}/nr_accesses/max"), U32_MAX)?;
            a.write(&format!("{p}/age/min"), "0")?;
            a.write(&format!("{p}/age/max"), U32_MAX)?;
            if n == 1 {
                a.write(&format!("{s}/filters/nr_filters"), "0")?;
            } else {
                a.write(&format!("{s}/filters/nr_filters"), "1")?;
                a.write(&format!("{s}/filters/0/type"), "target")?;
                a.write(&format!("{s}/filters/0/damon_target_idx"), &i.to_string())?;
                // matching N: filter out regions whose target is not i.
                a.write(&format!("{s}/filters/0/matching"), "N")?;
            }
        }
        Ok(())
    }

    pub fn start(&self) -> Result<(), SourceError> {
        self.admin.write(&format!("{}/state", self.index), "on")
    }

    pub fn is_on(&self) -> bool {
        self.admin
            .read(&format!("{}/state", self.index))
            .is_ok_and(|s| s == "on")
    }

    /// The kdamond thread's pid, for logs.
    pub fn thread_pid(&self) -> Option<u32> {
        self.admin
            .read(&format!("{}/pid", self.index))
            .ok()?
            .parse()
            .ok()
    }

    /// Asks the kdamond for a fresh snapshot (blocks for up to one aggregation interval).
    pub fn update_snapshot(&self) -> Result<(), SourceError> {
        self.admin.write(
            &format!("{}/state", self.index),
            "update_schemes_tried_regions",
        )
    }

    /// Reads scheme `scheme`'s tried regions into `out` (cleared first).
    pub fn read_regions(&self, scheme: usize, out: &mut Vec<Region>) -> Result<(), SourceError> {
        read_regions(
            &self
                .admin
                .path(&format!("{}/contexts/0/schemes/{scheme}", self.index)),
            out,
        )
    }

    /// Turns the kdamond off and frees its index. Idempotent.
    pub fn release(&mut self) -> Result<(), SourceError> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        let k = self.index;
        if self.admin.read(&format!("{k}/state"))? == "on" {
            self.admin.write(&format!("{k}/state"), "off")?;
        }
        self.admin
            .write(&format!("{k}/contexts/nr_contexts"), "0")?;
        std::fs::remove_file(&self.state_file).map_err(io("removing", &self.state_file))?;
        tracing::info!("damon: kdamond {k} turned off and freed");
        Ok(())
    }
}

impl Drop for Kdamond {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::error!("damon: releasing kdamond {}: {e}", self.index);
        }
    }
}

/// Reads `SCHEME/tried_regions/<R>/{start,end,nr_accesses}` for every numbered `R`.
pub fn read_regions(scheme_dir: &Path, out: &mut Vec<Region>) -> Result<(), SourceError> {
    out.clear();
    let dir = scheme_dir.join("tried_regions");
    let entries = std::fs::read_dir(&dir).map_err(io("listing", &dir))?;
    let num = |path: PathBuf| -> Result<u64, SourceError> {
        let text = crate::safefs::read_text(&path, crate::safefs::limit::ATTRIBUTE)
            .map_err(io("reading", &path))?;
        text.trim().parse().map_err(|_| {
            damon_err(format!(
                "{}: '{}' is not a number",
                path.display(),
                text.trim()
            ))
        })
    };
    let mut numbered = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io("listing", &dir))?;
        if let Ok(i) = entry.file_name().to_string_lossy().parse::<u64>() {
            numbered.push((i, entry.path()));
        }
    }
    numbered.sort_unstable_by_key(|(i, _)| *i);
    for (_, r) in numbered {
        // A region directory can vanish under us if another update runs; skip it then.
        let region = (|| -> Result<Region, SourceError> {
            Ok(Region {
                start: num(r.join("start"))?,
                end: num(r.join("end"))?,
                nr_accesses: num(r.join("nr_accesses"))?.min(u64::from(u32::MAX)) as u32,
            })
        })();
        match region {
            Ok(region) if region.start < region.end => out.push(region),
            Ok(_) => {}
            Err(e) if !r.exists() => tracing::debug!("damon: region vanished: {e}"),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod fixture {
    //! A writable imitation of DAMON's sysfs tree: files only, no kernel behind them.

    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    /// A write that fails as the kernel's would.
    struct Fault {
        /// The attribute's full path: tests on different temporary trees do not meet.
        path: PathBuf,
        value: String,
        times: u32,
        errno: i32,
        /// What the attribute reads after the failure (a kdamond that stopped reads "off").
        then: Option<String>,
    }

    static FAULTS: Mutex<Vec<Fault>> = Mutex::new(Vec::new());

    /// The next `times` writes of `value` to `rel` (under `kdamonds/`) fail with `errno`, as
    /// DAMON's `state` file answers EBUSY while the kdamond holds `damon_sysfs_lock`.
    pub(crate) fn fail_writes(sysfs: &Path, rel: &str, value: &str, times: u32, errno: i32) {
        fail_writes_then(sysfs, rel, value, (times, errno), None);
    }

    /// As [`fail_writes`], and each failure leaves `then` in the attribute.
    pub(crate) fn fail_writes_then(
        sysfs: &Path,
        rel: &str,
        value: &str,
        (times, errno): (u32, i32),
        then: Option<&str>,
    ) {
        FAULTS.lock().unwrap().push(Fault {
            path: sysfs.join("kernel/mm/damon/admin/kdamonds").join(rel),
            value: value.to_string(),
            times,
            errno,
            then: then.map(str::to_string),
        });
    }

    /// How many injected failures of `rel` are still to come.
    pub(crate) fn pending_faults(sysfs: &Path, rel: &str) -> u32 {
        let path = sysfs.join("kernel/mm/damon/admin/kdamonds").join(rel);
        FAULTS
            .lock()
            .unwrap()
            .iter()
            .filter(|f| f.path == path)
            .map(|f| f.times)
            .sum()
    }

    /// The injected error for this write, if one is due.
    pub(super) fn injected_write_error(path: &Path, value: &str) -> std::io::Result<()> {
        let mut faults = FAULTS.lock().unwrap();
        if let Some(f) = faults
            .iter_mut()
            .find(|f| f.path == path && f.value == value && f.times > 0)
        {
            f.times -= 1;
            if let Some(then) = &f.then {
                put(path, then);
            }
            return Err(std::io::Error::from_raw_os_error(f.errno));
        }
        Ok(())
    }

    fn put(path: &Path, value: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{value}\n")).unwrap();
    }

    /// `nr` kdamonds, each off and without contexts; every file pghotd writes exists.
    pub(crate) fn tree(sysfs: &Path, nr: u32, max_targets: usize) {
        let k = sysfs.join("kernel/mm/damon/admin/kdamonds");
        put(&k.join("nr_kdamonds"), &nr.to_string());
        for i in 0..nr {
            kdamond(&k.join(i.to_string()), max_targets);
        }
    }

    pub(crate) fn kdamond(dir: &Path, max_targets: usize) {
        put(&dir.join("state"), "off");
        put(&dir.join("pid"), "-1");
        put(&dir.join("contexts/nr_contexts"), "0");
        let c = dir.join("contexts/0");
        put(&c.join("avail_operations"), "vaddr fvaddr paddr");
        put(&c.join("operations"), "vaddr");
        for f in ["sample_us", "aggr_us", "update_us"] {
            put(&c.join("monitoring_attrs/intervals").join(f), "0");
        }
        for f in ["min", "max"] {
            put(&c.join("monitoring_attrs/nr_regions").join(f), "0");
        }
        put(&c.join("targets/nr_targets"), "0");
        put(&c.join("schemes/nr_schemes"), "0");
        for i in 0..max_targets {
            put(&c.join(format!("targets/{i}/pid_target")), "0");
            let s = c.join(format!("schemes/{i}"));
            put(&s.join("action"), "pageout");
            for p in ["sz", "nr_accesses", "age"] {
                for m in ["min", "max"] {
                    put(&s.join("access_pattern").join(p).join(m), "0");
                }
            }
            put(&s.join("filters/nr_filters"), "0");
            for f in ["type", "damon_target_idx", "matching"] {
                put(&s.join("filters/0").join(f), "");
            }
            std::fs::create_dir_all(s.join("tried_regions")).unwrap();
        }
    }

    /// Adds a tried region to scheme `scheme` of kdamond `k`.
    pub(crate) fn region(
        sysfs: &Path,
        k: u32,
        scheme: usize,
        r: usize,
        (start, end, nr): (u64, u64, u32),
    ) {
        let d = sysfs.join(format!(
            "kernel/mm/damon/admin/kdamonds/{k}/contexts/0/schemes/{scheme}/tried_regions/{r}"
        ));
        put(&d.join("start"), &start.to_string());
        put(&d.join("end"), &end.to_string());
        put(&d.join("nr_accesses"), &nr.to_string());
        put(&d.join("age"), "3");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pids: &[u32]) -> KdamondSpec {
        KdamondSpec {
            pids: pids.to_vec(),
            sample_us: 5000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            min_regions: 10,
            max_regions: 1000,
        }
    }

    fn read(sysfs: &Path, rel: &str) -> String {
        std::fs::read_to_string(sysfs.join("kernel/mm/damon/admin/kdamonds").join(rel))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn missing_damon_names_the_kernel_options() {
        let dir = tempfile::tempdir().unwrap();
        let err = Admin::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("CONFIG_DAMON_SYSFS"), "{err}");
        assert!(err.contains("CONFIG_DAMON_VADDR"), "{err}");
    }

    #[test]
    fn missing_vaddr_names_its_option() {
        let dir = tempfile::tempdir().unwrap();
        fixture::tree(dir.path(), 1, 1);
        std::fs::write(
            dir.path()
                .join("kernel/mm/damon/admin/kdamonds/0/contexts/0/avail_operations"),
            "paddr\n",
        )
        .unwrap();
        let run = dir.path().join("run");
        let admin = Admin::open(dir.path()).unwrap();
        let err = Kdamond::claim(admin, &run, &spec(&[42])).unwrap_err();
        assert!(err.to_string().contains("CONFIG_DAMON_VADDR"), "{err}");
        // The failed claim gave the index back.
        assert_eq!(read(dir.path(), "0/contexts/nr_contexts"), "0");
    }

    #[test]
    fn claim_configures_an_explicit_stat_scheme_per_pid_and_release_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path();
        fixture::tree(sysfs, 2, 2);
        // kdamond 0 belongs to someone else: configured, off.
        std::fs::write(
            sysfs.join("kernel/mm/damon/admin/kdamonds/0/contexts/nr_contexts"),
            "1\n",
        )
        .unwrap();
        let run = dir.path().join("run");
        let mut k = Kdamond::claim(Admin::open(sysfs).unwrap(), &run, &spec(&[42, 43])).unwrap();
        assert_eq!(k.index(), 1);
        let c = "1/contexts/0";
        assert_eq!(read(sysfs, &format!("{c}/operations")), "vaddr");
        assert_eq!(read(sysfs, &format!("{c}/targets/nr_targets")), "2");
        assert_eq!(read(sysfs, &format!("{c}/targets/1/pid_target")), "43");
        assert_eq!(
            read(sysfs, &format!("{c}/monitoring_attrs/intervals/aggr_us")),
            "100000"
        );
        assert_eq!(
            read(sysfs, &format!("{c}/monitoring_attrs/nr_regions/min")),
            "10"
        );
        for i in 0..2 {
            let s = format!("{c}/schemes/{i}");
            assert_eq!(read(sysfs, &format!("{s}/action")), "stat");
            assert_eq!(read(sysfs, &format!("{s}/access_pattern/sz/max")), U64_MAX);
            assert_eq!(
                read(sysfs, &format!("{s}/access_pattern/nr_accesses/min")),
                "1"
            );
            assert_eq!(
                read(sysfs, &format!("{s}/access_pattern/nr_accesses/max")),
                U32_MAX
            );
            assert_eq!(read(sysfs, &format!("{s}/access_pattern/age/max")), U32_MAX);
            assert_eq!(read(sysfs, &format!("{s}/filters/0/type")), "target");
            assert_eq!(
                read(sysfs, &format!("{s}/filters/0/damon_target_idx")),
                i.to_string()
            );
            assert_eq!(read(sysfs, &format!("{s}/filters/0/matching")), "N");
        }
        let state = std::fs::read_to_string(run.join("damon-kdamond-1")).unwrap();
        assert!(state.contains("kdamond=1\npids=42,43"), "{state}");
        // kdamond 0 untouched.
        assert_eq!(read(sysfs, "0/contexts/nr_contexts"), "1");
        assert_eq!(read(sysfs, "0/contexts/0/schemes/0/action"), "pageout");
        k.start().unwrap();
        assert!(k.is_on());
        k.release().unwrap();
        assert_eq!(read(sysfs, "1/state"), "off");
        assert_eq!(read(sysfs, "1/contexts/nr_contexts"), "0");
        assert!(!run.join("damon-kdamond-1").exists());
    }

    #[test]
    fn no_free_kdamond_is_an_error_that_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path();
        fixture::tree(sysfs, 1, 1);
        let k = sysfs.join("kernel/mm/damon/admin/kdamonds");
        std::fs::write(k.join("0/state"), "on\n").unwrap();
        std::fs::write(k.join("0/contexts/nr_contexts"), "1\n").unwrap();
        let before = read(sysfs, "0/contexts/0/schemes/0/action");
        let err = Kdamond::claim(
            Admin::open(sysfs).unwrap(),
            &dir.path().join("run"),
            &spec(&[7]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("no free kdamond: 0 (on, 1 context(s)) in use by others"),
            "{err}"
        );
        assert_eq!(read(sysfs, "nr_kdamonds"), "1");
        assert_eq!(read(sysfs, "0/state"), "on");
        assert_eq!(read(sysfs, "0/contexts/0/schemes/0/action"), before);
    }

    #[test]
    fn the_first_kdamond_is_created_when_there_are_none() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path();
        fixture::tree(sysfs, 0, 1);
        // The kernel would create kdamond 0's directory on the write; the fixture has it ready.
        fixture::kdamond(&sysfs.join("kernel/mm/damon/admin/kdamonds/0"), 1);
        let k = Kdamond::claim(
            Admin::open(sysfs).unwrap(),
            &dir.path().join("run"),
            &spec(&[7]),
        )
        .unwrap();
        assert_eq!(k.index(), 0);
        assert_eq!(read(sysfs, "nr_kdamonds"), "1");
        // One pid: no filter needed.
        assert_eq!(
            read(sysfs, "0/contexts/0/schemes/0/filters/nr_filters"),
            "0"
        );
    }

    #[test]
    fn a_crashed_runs_kdamond_is_turned_off_and_a_changed_one_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path();
        fixture::tree(sysfs, 2, 1);
        let run = dir.path().join("run");
        let admin = Admin::open(sysfs).unwrap();
        // Two claims whose pghotd "crashed" (leaked, never released); pid 1 is init, not pghotd.
        let a = Kdamond::claim(admin.clone(), &run, &spec(&[7])).unwrap();
        a.start().unwrap();
        let b = Kdamond::claim(admin.clone(), &run, &spec(&[8])).unwrap();
        b.start().unwrap();
        std::mem::forget(a);
        std::mem::forget(b);
        for k in 0..2 {
            let f = run.join(format!("damon-kdamond-{k}"));
            let text = std::fs::read_to_string(&f).unwrap();
            let text = text.replace(
                &format!("pghotd_pid={}", std::process::id()),
                "pghotd_pid=1",
            );
            std::fs::write(&f, text).unwrap();
        }
        // Someone else re-used kdamond 1 for their own pid since.
        std::fs::write(
            sysfs.join("kernel/mm/damon/admin/kdamonds/1/contexts/0/targets/0/pid_target"),
            "99\n",
        )
        .unwrap();
        recover(&admin, &run).unwrap();
        assert_eq!(read(sysfs, "0/state"), "off");
        assert_eq!(read(sysfs, "0/contexts/nr_contexts"), "0");
        assert_eq!(read(sysfs, "1/state"), "on");
        assert_eq!(read(sysfs, "1/contexts/nr_contexts"), "1");
        assert!(std::fs::read_dir(&run).unwrap().next().is_none());
    }

    #[test]
    fn regions_are_read_in_order_and_bad_ones_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path();
        fixture::tree(sysfs, 1, 1);
        for (r, region) in [
            (0, (0x1000, 0x3000, 5)),
            (2, (0x8000, 0x9000, 0)),
            (1, (0x3000, 0x5000, 20)),
        ] {
            fixture::region(sysfs, 0, 0, r, region);
        }
        let scheme = sysfs.join("kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/0");
        let mut out = Vec::new();
        read_regions(&scheme, &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                Region {
                    start: 0x1000,
                    end: 0x3000,
                    nr_accesses: 5
                },
                Region {
                    start: 0x3000,
                    end: 0x5000,
                    nr_accesses: 20
                },
                Region {
                    start: 0x8000,
                    end: 0x9000,
                    nr_accesses: 0
                },
            ]
        );
        std::fs::write(scheme.join("tried_regions/1/end"), "lots\n").unwrap();
        let err = read_regions(&scheme, &mut out).unwrap_err().to_string();
        assert!(
            err.contains("tried_regions/1/end: 'lots' is not a number"),
            "{err}"
        );
    }

    #[test]
    fn state_files_round_trip() {
        let s = StateFile {
            pghotd_pid: 12,
            kdamond: 3,
            pids: vec![4, 5],
        };
        assert_eq!(StateFile::parse(&s.render()), Some(s));
        // A kdamond claimed while a followed scope was empty.
        let idle = StateFile {
            pghotd_pid: 12,
            kdamond: 0,
            pids: vec![],
        };
        assert_eq!(StateFile::parse(&idle.render()), Some(idle));
        assert_eq!(StateFile::parse("kdamond=1\n"), None);
        assert_eq!(
            StateFile::parse("pghotd_pid=1\nkdamond=1\npids=4,x\n"),
            None
        );
    }

    #[test]
    fn retarget_restarts_the_kdamond_on_the_new_pids_and_its_state_file_follows() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path();
        fixture::tree(sysfs, 1, 3);
        let run = dir.path().join("run");
        let admin = Admin::open(sysfs).unwrap();
        // Claimed for an empty scope: configured, no targets, off.
        let mut k = Kdamond::claim(admin.clone(), &run, &spec(&[])).unwrap();
        let c = "0/contexts/0";
        assert_eq!(read(sysfs, &format!("{c}/targets/nr_targets")), "0");
        assert_eq!(read(sysfs, &format!("{c}/schemes/nr_schemes")), "0");
        assert!(!k.is_on());
        let state = || std::fs::read_to_string(run.join("damon-kdamond-0")).unwrap();
        assert!(state().contains("pids=\n"), "{}", state());

        k.retarget(&spec(&[42, 43, 44])).unwrap();
        assert!(k.is_on());
        assert_eq!(read(sysfs, &format!("{c}/targets/nr_targets")), "3");
        assert_eq!(read(sysfs, &format!("{c}/targets/2/pid_target")), "44");
        assert_eq!(read(sysfs, &format!("{c}/schemes/nr_schemes")), "3");
        assert_eq!(
            read(sysfs, &format!("{c}/schemes/1/filters/nr_filters")),
            "1"
        );
        assert!(state().contains("pids=42,43,44"), "{}", state());

        // Down to one pid: one scheme, which needs no target filter.
        k.retarget(&spec(&[43])).unwrap();
        assert!(k.is_on());
        assert_eq!(read(sysfs, &format!("{c}/targets/nr_targets")), "1");
        assert_eq!(read(sysfs, &format!("{c}/targets/0/pid_target")), "43");
        assert_eq!(read(sysfs, &format!("{c}/schemes/nr_schemes")), "1");
        assert_eq!(
            read(sysfs, &format!("{c}/schemes/0/filters/nr_filters")),
            "0"
        );
        assert!(state().contains("pids=43\n"), "{}", state());
        // A crashed run's re-targeted kdamond is still recognized as pghotd's.
        assert!(admin.looks_like_ours(0, &[43]));

        // Stopped (the scope emptied): off but still claimed.
        k.stop().unwrap();
        assert!(!k.is_on());
        assert_eq!(read(sysfs, "0/contexts/nr_contexts"), "1");
        k.release().unwrap();
        assert_eq!(read(sysfs, "0/contexts/nr_contexts"), "0");
    }
}
