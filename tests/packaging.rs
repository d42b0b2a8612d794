//! The packages: the shipped config's comments show the real defaults; the .deb installs
//! with dpkg into a scratch root (maintainer scripts included) and its pghotd and pghotctl
//! run from there; the .rpm lists the right files (`rpm -qpl`) and installs with
//! `rpm --root` into a scratch root.
//!
//! The packages are built by packaging/build-packages.sh (CI runs it before the tests; here
//! it runs once per test binary, a no-op when they are fresh). Missing tools skip loudly, or
//! fail under PGHOTD_REQUIRE_TOOLS=1 as in CI.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use pghotd::config::Config;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_shipped_config_parses_and_its_comments_are_the_defaults() {
    let path = repo().join("packaging/pghotd.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut shipped = Config::default();
    shipped.apply_file(&path, &text).unwrap();
    assert_eq!(
        shipped,
        Config::default(),
        "the file as shipped sets nothing"
    );
    let uncommented: String = text
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let mut all = Config::default();
    all.apply_file(&path, &uncommented)
        .unwrap_or_else(|e| panic!("uncommented {}: {e}", path.display()));
    assert_eq!(
        all,
        Config::default(),
        "a '# key = value' line is not the default"
    );
    // Every key `config get` knows is shown, except those without a default value.
    let no_default = [
        "target_nid",
        "pid_namespace_of",
        "ibs.l3miss_only",
        "ibs.ldlat",
        "admission.sample_period",
    ];
    for (key, _) in Config::default().values() {
        if no_default.contains(&key) {
            continue;
        }
        let key = key.rsplit('.').next().unwrap_or(key);
        assert!(
            uncommented
                .lines()
                .any(|l| l.starts_with(&format!("{key} = "))),
            "{key} is missing from {}",
            path.display()
        );
    }
}

/// The .deb and .rpm, built once for this test binary.
fn packages() -> Option<&'static (PathBuf, PathBuf)> {
    static BUILT: OnceLock<Option<(PathBuf, PathBuf)>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            for tool in ["cargo-deb", "cargo-generate-rpm"] {
                if !util::tool_present(tool) {
                    return None;
                }
            }
            // target/debug/pghotd -> target
            let target = Path::new(env!("CARGO_BIN_EXE_pghotd"))
                .ancestors()
                .nth(2)
                .unwrap()
                .to_path_buf();
            let out = util::run(
                Command::new(repo().join("packaging/build-packages.sh"))
                    .env("CARGO_TARGET_DIR", &target),
                true,
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            let paths: Vec<PathBuf> = stdout.lines().map(PathBuf::from).collect();
            assert_eq!(paths.len(), 2, "build-packages.sh printed {stdout}");
            Some((paths[0].clone(), paths[1].clone()))
        })
        .as_ref()
}

fn run_text(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&util::run(cmd, true).stdout).into_owned()
}

/// The installed binaries answer, and the installed pghotd accepts the installed config.
fn check_installed_binaries(root: &Path) {
    let version = run_text(Command::new(root.join("usr/bin/pghotd")).arg("--version"));
    assert_eq!(
        version.trim(),
        format!("pghotd {}", env!("CARGO_PKG_VERSION"))
    );
    let help = run_text(Command::new(root.join("usr/bin/pghotctl")).arg("--help"));
    assert!(help.contains("Usage: pghotctl"), "{help}");
    let check = run_text(
        Command::new(root.join("usr/bin/pghotd"))
            .arg("--config")
            .arg(root.join("etc/pghotd/pghotd.toml"))
            .arg("--check-config"),
    );
    assert!(check.starts_with("config ok"), "{check}");
    let man = std::fs::read_to_string(root.join("usr/share/man/man8/pghotd.8")).unwrap();
    assert!(man.contains(".TH pghotd 8"), "{man}");
    // The config file's page, with a key of the top level and one of a table (by hand, from
    // the README's tables).
    let man5 = std::fs::read_to_string(root.join("usr/share/man/man5/pghotd.toml.5")).unwrap();
    assert!(man5.starts_with(".TH pghotd.toml 5"), "{man5}");
    assert!(man5.contains(".B migrate_batch\n"), "{man5}");
    assert!(man5.contains(".SH [admission]"), "{man5}");
    assert!(man5.contains(".B split_min_samples\n"), "{man5}");
}

#[test]
fn the_deb_installs_into_a_scratch_root_with_dpkg_and_runs() {
    if !util::tool_present("dpkg") {
        return;
    }
    let Some((deb, _)) = packages() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for dir in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"] {
        std::fs::create_dir_all(r.join(dir)).unwrap();
    }
    for file in ["var/lib/dpkg/status", "var/lib/dpkg/available"] {
        std::fs::write(r.join(file), "").unwrap();
    }
    // Maintainer scripts run on this machine with DPKG_ROOT set (the root has no shell);
    // libc6 and systemd are this machine's, hence --force-depends.
    let dpkg = |args: &[&str]| {
        let mut cmd = Command::new("dpkg");
        cmd.arg(format!("--root={}", r.display()))
            .arg("--force-script-chrootless")
            .args(args);
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{path}:/usr/sbin:/sbin"));
        cmd
    };
    util::run(dpkg(&["--force-depends", "-i"]).arg(deb.as_os_str()), true);
    check_installed_binaries(r);
    let group = std::fs::read_to_string(r.join("etc/group")).unwrap();
    assert!(group.lines().any(|l| l.starts_with("pghot:")), "{group}");
    let conffiles = run_text(&mut dpkg(&["-s", "pghotd"]));
    assert!(
        conffiles.contains("Status: install ok installed"),
        "{conffiles}"
    );
    assert!(
        conffiles.contains(" /etc/pghotd/pghotd.toml "),
        "{conffiles}"
    );
    let unit = r.join("usr/lib/systemd/system/pghotd.service");
    assert!(unit.is_file());
    if util::tool_present("systemd-analyze") {
        // The installed unit, with its installed man pages found through MANPATH.
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(&unit).unwrap().replace(
            "/usr/bin/pghotd ",
            &format!("{} ", r.join("usr/bin/pghotd").display()),
        );
        let copy = dir.path().join("pghotd.service");
        std::fs::write(&copy, text).unwrap();
        let out = util::run(
            Command::new("systemd-analyze")
                .args(["verify", "--man=no"])
                .arg(&copy),
            true,
        );
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    util::run(&mut dpkg(&["--purge", "pghotd"]), true);
    assert!(!r.join("usr/bin/pghotd").exists());
    assert!(
        !r.join("etc/pghotd/pghotd.toml").exists(),
        "purge removes the conffile"
    );
}

#[test]
fn the_rpm_lists_its_files_and_installs_into_a_scratch_root() {
    if !util::tool_present("rpm") {
        return;
    }
    let Some((_, rpm)) = packages() else {
        return;
    };
    let listed = run_text(Command::new("rpm").arg("-qpl").arg(rpm));
    let mut files: Vec<&str> = listed.lines().collect();
    files.sort_unstable();
    assert_eq!(
        files,
        [
            "/etc/pghotd/pghotd.toml",
            "/usr/bin/pghotctl",
            "/usr/bin/pghotd",
            "/usr/lib/systemd/system/pghotd.service",
            "/usr/lib/sysusers.d/pghotd.conf",
            "/usr/share/bash-completion/completions/pghotctl",
            "/usr/share/bash-completion/completions/pghotd",
            "/usr/share/fish/vendor_completions.d/pghotctl.fish",
            "/usr/share/fish/vendor_completions.d/pghotd.fish",
            "/usr/share/man/man1/pghotctl.1",
            "/usr/share/man/man5/pghotd.toml.5",
            "/usr/share/man/man8/pghotd.8",
            "/usr/share/zsh/site-functions/_pghotctl",
            "/usr/share/zsh/site-functions/_pghotd",
        ]
    );
    let config = run_text(Command::new("rpm").arg("-qpc").arg(rpm));
    assert_eq!(config.trim(), "/etc/pghotd/pghotd.toml");
    let scripts = run_text(Command::new("rpm").args(["-qp", "--scripts"]).arg(rpm));
    assert!(
        scripts.contains("systemd-sysusers /usr/lib/sysusers.d/pghotd.conf"),
        "{scripts}"
    );

    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let rpm_root = || {
        let mut cmd = Command::new("rpm");
        cmd.arg("--root").arg(r);
        cmd
    };
    util::run(rpm_root().arg("--initdb"), true);
    // rpm runs scriptlets chrooted into the root, which has no shell: they are checked as
    // text above and skipped here. Dependencies are this machine's.
    util::run(
        rpm_root().args(["-i", "--nodeps", "--noscripts"]).arg(rpm),
        true,
    );
    let q = run_text(rpm_root().args(["-q", "pghotd"]));
    assert!(q.starts_with("pghotd-0.1.0"), "{q}");
    check_installed_binaries(r);
    util::run(rpm_root().args(["-e", "--noscripts", "pghotd"]), true);
    assert!(!r.join("usr/bin/pghotd").exists());
}
