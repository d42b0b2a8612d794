//! Security: a trace naming a process outside `--pid` never reaches move_pages for it, and
//! `--record` cannot be redirected through a symlink or hard link.

mod util;

use std::process::{Child, Command};

struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("30").spawn().unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `pages` pages of `pid` on node 2 (the QEMU snapshot's lower tier), each sampled twice.
fn trace_of(pid: u32, pages: u64, t: &mut String, time: &mut u64) {
    for _ in 0..2 {
        for page in 0..pages {
            *time += 100;
            t.push_str(&format!(
                "{time} 0 {pid} {pid} {:#x} - L extmem 2\n",
                0x7f00_0000_0000u64 + page * 4096
            ));
        }
    }
}

#[test]
fn samples_of_a_live_process_outside_the_scope_are_dropped_before_any_move() {
    let inside = Sleeper::start();
    let outside = Sleeper::start();
    let mut trace = String::from("# pghot-trace v1\n");
    let mut time = 1_000_000_000;
    trace_of(inside.pid(), 3, &mut trace, &mut time);
    trace_of(outside.pid(), 5, &mut trace, &mut time);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.trace");
    std::fs::write(&path, trace).unwrap();
    let stats = dir.path().join("stats.json");
    util::run(
        util::replay(&path)
            .arg("--pid")
            .arg(inside.pid().to_string())
            .arg("--freq-threshold")
            .arg("1")
            .arg("--stats-json")
            .arg(&stats),
        true,
    );
    let c = util::counters(&stats);
    let get = |k: &str| c[k].as_u64().unwrap();
    // All 10 samples of the outside process dropped as out of scope, before the table.
    assert_eq!(get("pghot_drop_out_of_scope"), 10, "{c:#?}");
    assert_eq!(get("pghot_recorded_accesses"), 6, "{c:#?}");
    // Only the inside process's 3 pages became candidates and reached the kernel (the
    // addresses are not mapped in `sleep`, so the query reports them gone); one query each.
    assert_eq!(get("pgpromote_candidate"), 3, "{c:#?}");
    let failed: u64 = c
        .iter()
        .filter(|(k, _)| k.starts_with("pgpromote_fail_"))
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    assert_eq!(failed + get("pgpromote_success"), 3, "{c:#?}");
    assert_eq!(get("migrator_move_pages_calls"), 1, "{c:#?}");
}

#[test]
fn record_refuses_a_symlink_or_hard_link_and_leaves_the_target_alone() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious");
    std::fs::write(&target, "keep me\n").unwrap();
    let trace = dir.path().join("in.trace");
    std::fs::write(&trace, "# empty\n").unwrap();
    let symlink = dir.path().join("by-symlink.trace");
    std::os::unix::fs::symlink(&target, &symlink).unwrap();
    let hardlink = dir.path().join("by-hardlink.trace");
    std::fs::hard_link(&target, &hardlink).unwrap();
    for (path, why) in [(&symlink, "symbolic link"), (&hardlink, "hard links")] {
        let out = util::run(util::replay(&trace).arg("--record").arg(path), false);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{why}: {err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");
    }
}

/// pghotd under a seccomp filter that denies move_pages(2) with EPERM, as the default profiles
/// of Docker, containerd and podman do (packaging/README.md, "Container"): every move would
/// fail, so the start fails at once with exit 3 and says why and what to use instead, rather
/// than running and counting `pgpromote_fail_permission` forever. `dry_run` still runs.
#[test]
fn a_seccomp_filter_denying_move_pages_ends_the_start_naming_it() {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
    use std::os::unix::process::CommandExt;

    let filter = SeccompFilter::new(
        [(libc::SYS_move_pages, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .unwrap();
    let program: BpfProgram = filter.try_into().unwrap();
    let under_filter = |cmd: &mut Command| {
        let program = program.clone();
        // SAFETY: the closure runs in the forked child before exec; it only makes the
        // prctl(2)/seccomp(2) calls of apply_filter on a program built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                seccompiler::apply_filter(&program).map_err(std::io::Error::other)
            });
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.trace");
    let sleeper = Sleeper::start();
    let mut trace = String::from("# pghot-trace v1\n");
    trace_of(sleeper.pid(), 2, &mut trace, &mut 1_000_000_000);
    std::fs::write(&path, trace).unwrap();

    let mut cmd = util::replay(&path);
    under_filter(&mut cmd);
    let out = util::run_code(&mut cmd, 3);
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "move_pages(2) is refused (EPERM)",
        "Seccomp: 2",
        "packaging/container/seccomp.json",
    ] {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }

    let mut cmd = util::replay(&path);
    cmd.arg("--dry-run");
    under_filter(&mut cmd);
    util::run(&mut cmd, true);
    // The same run without the filter starts (the filter, not the trace, ended the first).
    util::run(&mut util::replay(&path), true);
}
