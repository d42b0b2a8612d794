//! The packages: the shipped config's comments show the real defaults; the .deb installs
//! with dpkg into a scratch root (maintainer scripts included) and its pghotd and pghotctl
//! run from there; the .rpm lists the right files (`rpm -qpl`) and installs, upgrades and
//! erases with `rpm --root` in scratch roots where its systemd scriptlets run against a
//! recording `systemctl`; the man pages ship gzip'ed with EXIT STATUS and FILES.
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
    // gzip'ed pages, with the sections man-pages(7) asks for.
    let page = |path: &str| run_text(Command::new("gzip").arg("-dc").arg(root.join(path)));
    let man = page("usr/share/man/man8/pghotd.8.gz");
    assert!(man.contains(".TH pghotd 8"), "{man}");
    let man1 = page("usr/share/man/man1/pghotctl.1.gz");
    assert!(man1.contains(".TH pghotctl 1"), "{man1}");
    for (name, text) in [("pghotd.8", &man), ("pghotctl.1", &man1)] {
        assert!(
            text.contains(".SH \"EXIT STATUS\"\n.TP\n.B 0\n"),
            "{name}: {text}"
        );
        assert!(text.contains(".SH FILES\n.TP\n.I /"), "{name}: {text}");
    }
    assert!(man.contains(".I /etc/pghotd/pghotd.toml\n"), "{man}");
    assert!(man1.contains(".B 7\n"), "{man1}");
    // The config file's page, with a key of the top level and one of a table (by hand, from
    // the README's tables).
    let man5 = page("usr/share/man/man5/pghotd.toml.5.gz");
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
    assert!(
        group.lines().any(|l| l.starts_with("pghot-monitor:")),
        "{group}"
    );
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
            "/usr/share/man/man1/pghotctl.1.gz",
            "/usr/share/man/man5/pghotd.toml.5.gz",
            "/usr/share/man/man8/pghotd.8.gz",
            "/usr/share/zsh/site-functions/_pghotctl",
            "/usr/share/zsh/site-functions/_pghotd",
        ]
    );
    let config = run_text(Command::new("rpm").arg("-qpc").arg(rpm));
    assert_eq!(config.trim(), "/etc/pghotd/pghotd.toml");

    // A booted systemd with systemd-sysusers: install, upgrade (the same package again),
    // erase. The expected commands are those of Fedora's %systemd_post, %systemd_preun and
    // %systemd_postun_with_restart, written out here.
    let root = ScriptletRoot::new(true, true);
    root.rpm(&["-i", "--nodeps"], rpm);
    assert_eq!(
        root.new_log(),
        [
            "systemd-sysusers /usr/lib/sysusers.d/pghotd.conf",
            "systemctl --no-reload preset pghotd.service",
        ]
    );
    let q = run_text(root.cmd().args(["-q", "pghotd"]));
    assert!(q.starts_with("pghotd-0.1.0"), "{q}");
    check_installed_binaries(root.path());
    // Upgrade: the new %post ($1 = 2: no preset), the old %preun ($1 = 1: nothing), the old
    // %postun ($1 = 1: reload and restart a running service).
    root.rpm(&["-U", "--replacepkgs", "--nodeps"], rpm);
    assert_eq!(
        root.new_log(),
        [
            "systemd-sysusers /usr/lib/sysusers.d/pghotd.conf",
            "systemctl daemon-reload",
            "systemctl try-restart pghotd.service",
        ]
    );
    root.rpm(&["-e"], Path::new("pghotd"));
    assert_eq!(
        root.new_log(),
        [
            "systemctl --no-reload disable --now pghotd.service",
            "systemctl daemon-reload",
        ]
    );
    assert!(!root.path().join("usr/bin/pghotd").exists());

    // No booted systemd (an image build) and no systemd-sysusers: the groups by hand, and no
    // daemon-reload.
    let root = ScriptletRoot::new(false, false);
    root.rpm(&["-i", "--nodeps"], rpm);
    assert_eq!(
        root.new_log(),
        [
            "getent group pghot",
            "groupadd -r pghot",
            "getent group pghot-monitor",
            "groupadd -r pghot-monitor",
            "systemctl --no-reload preset pghotd.service",
        ]
    );
    root.rpm(&["-e"], Path::new("pghotd"));
    assert_eq!(
        root.new_log(),
        ["systemctl --no-reload disable --now pghotd.service"]
    );
}

/// An rpm root the scriptlets can run in: this machine's dash as /bin/sh with its libraries,
/// and `systemctl`, `getent`, `groupadd` (and `systemd-sysusers` if `sysusers`) that append
/// their command line to /var/log/scriptlets. `booted` makes /run/systemd/system.
struct ScriptletRoot {
    dir: tempfile::TempDir,
    seen: std::cell::Cell<usize>,
}

impl ScriptletRoot {
    fn new(booted: bool, sysusers: bool) -> ScriptletRoot {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in ["bin", "usr/bin", "var/log", "dev", "etc"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        if booted {
            std::fs::create_dir_all(r.join("run/systemd/system")).unwrap();
        }
        let sh = Path::new("/usr/bin/dash");
        std::fs::copy(sh, r.join("bin/sh")).unwrap();
        let ldd = run_text(Command::new("ldd").arg(sh));
        for lib in ldd.split_whitespace().filter(|w| w.starts_with('/')) {
            let to = r.join(lib.trim_start_matches('/'));
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(lib, to).unwrap();
        }
        let mut tools = vec![("systemctl", 0), ("groupadd", 0), ("getent", 2)];
        if sysusers {
            tools.push(("systemd-sysusers", 0));
        }
        for (tool, status) in tools {
            let stub = r.join("usr/bin").join(tool);
            std::fs::write(
                &stub,
                format!("#!/bin/sh\necho \"{tool} $*\" >>/var/log/scriptlets\nexit {status}\n"),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let root = ScriptletRoot {
            dir,
            seen: std::cell::Cell::new(0),
        };
        util::run(root.cmd().arg("--initdb"), true);
        root
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new("rpm");
        cmd.arg("--root").arg(self.path());
        cmd
    }

    fn rpm(&self, args: &[&str], package: &Path) {
        util::run(self.cmd().args(args).arg(package), true);
    }

    /// The commands the scriptlets ran since the last call.
    fn new_log(&self) -> Vec<String> {
        let log =
            std::fs::read_to_string(self.path().join("var/log/scriptlets")).unwrap_or_default();
        let lines: Vec<String> = log.lines().map(String::from).collect();
        let new = lines[self.seen.get()..].to_vec();
        self.seen.set(lines.len());
        new
    }
}

/// The x86-64 system call names of the kernel's uapi header (`__NR_<name>` in
/// asm/unistd_64.h, from linux-libc-dev): the names a seccomp profile may use.
fn kernel_syscall_names() -> std::collections::BTreeSet<String> {
    let header = Path::new("/usr/include/x86_64-linux-gnu/asm/unistd_64.h");
    let text = std::fs::read_to_string(header)
        .unwrap_or_else(|e| panic!("{}: {e} (install linux-libc-dev)", header.display()));
    text.lines()
        .filter_map(|l| l.strip_prefix("#define __NR_"))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The system calls pghotd makes by number (`libc::SYS_<name>` outside tests): the ones no
/// libc wrapper hides, so no observation of libc can be trusted to have found them.
fn raw_syscalls_in_the_code() -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    let mut dirs = vec![repo().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Unit tests sit at the end of a file, after `#[cfg(test)]`.
            let code = text.split("#[cfg(test)]").next().unwrap();
            for (i, _) in code.match_indices("libc::SYS_") {
                let name: String = code[i + "libc::SYS_".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                found.insert(name);
            }
        }
    }
    found
}

#[test]
fn the_seccomp_profile_names_real_calls_and_allows_every_raw_one() {
    let path = repo().join("packaging/container/seccomp.json");
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // Deny by default with EPERM (1), as the runtimes' own profiles do.
    assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(profile["defaultErrnoRet"], 1);
    let mut allowed = std::collections::BTreeSet::new();
    for rule in profile["syscalls"].as_array().unwrap() {
        assert_eq!(rule["action"], "SCMP_ACT_ALLOW", "{rule}");
        assert!(rule.get("args").is_none(), "no argument filters: {rule}");
        for name in rule["names"].as_array().unwrap() {
            assert!(
                allowed.insert(name.as_str().unwrap().to_string()),
                "{name} twice"
            );
        }
    }
    let kernel = kernel_syscall_names();
    let unknown: Vec<_> = allowed.difference(&kernel).collect();
    assert!(unknown.is_empty(), "not x86-64 system calls: {unknown:?}");
    let raw = raw_syscalls_in_the_code();
    assert!(
        raw.contains("move_pages") && raw.contains("pidfd_open"),
        "{raw:?}"
    );
    let missing: Vec<_> = raw.difference(&allowed).collect();
    assert!(
        missing.is_empty(),
        "called by number, not allowed: {missing:?}"
    );
}

#[test]
fn every_pod_manifest_runs_pghotd_under_the_shipped_profile_with_no_capability_left_on() {
    for name in [
        "sidecar.yaml",
        "sidecar-least-privilege.yaml",
        "daemonset.yaml",
    ] {
        let text = std::fs::read_to_string(repo().join("packaging/kubernetes").join(name)).unwrap();
        for want in [
            "type: Localhost",
            "localhostProfile: pghotd.json",
            "drop: [\"ALL\"]",
            "allowPrivilegeEscalation: false",
            "readOnlyRootFilesystem: true",
        ] {
            assert!(text.contains(want), "{name}: no {want:?}");
        }
        if name.starts_with("sidecar") {
            // podman kube play reads the annotation, not the field (packaging/README.md).
            assert!(
                text.contains(
                    "container.seccomp.security.alpha.kubernetes.io/pghotd: localhost/pghotd.json"
                ),
                "{name}"
            );
            assert!(text.contains("shareProcessNamespace: true"), "{name}");
            // The default scope is the pod: a cgroup placeholder cannot be filled statically.
            assert!(!text.contains("cgroups ="), "{name}");
        }
    }
}
