//! Man pages and shell completions, generated from the binaries' clap definitions, so
//! `--help`, the man page and the completions never disagree. The packages ship them:
//! `packaging/build-packages.sh` writes them with `pghotd --generate KIND` and
//! `pghotctl generate KIND`. pghotd.toml(5) comes from the settings table instead
//! ([`crate::config::docs::man_page`]), so it lists every key the file takes.

use std::io::Write;

use clap_complete::Shell;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Generated {
    /// roff man page
    Man,
    Bash,
    Zsh,
    Fish,
    /// pghotd.toml(5), the config file's man page (the same whatever the command)
    TomlMan,
}

/// Writes `kind` for `cmd`; `section` is the man section (8 for the daemon, 1 for tools).
pub fn write(
    kind: Generated,
    mut cmd: clap::Command,
    section: &'static str,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let name = cmd.get_name().to_string();
    let shell = match kind {
        Generated::Man => return clap_mangen::Man::new(cmd).section(section).render(out),
        Generated::Bash => Shell::Bash,
        Generated::Zsh => Shell::Zsh,
        Generated::Fish => Shell::Fish,
        Generated::TomlMan => return out.write_all(crate::config::docs::man_page().as_bytes()),
    };
    clap_complete::generate(shell, &mut cmd, name, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> clap::Command {
        clap::Command::new("demo")
            .about("Does a demo")
            .arg(clap::Arg::new("socket").long("socket").help("The socket"))
    }

    #[test]
    fn man_page_and_completions_name_the_options() {
        let render = |kind| {
            let mut out = Vec::new();
            write(kind, demo(), "8", &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let man = render(Generated::Man);
        assert!(man.contains(".TH demo 8"), "{man}");
        assert!(man.contains("socket"), "{man}");
        assert!(render(Generated::Bash).contains("--socket"));
        assert!(render(Generated::Zsh).contains("--socket"));
        assert!(render(Generated::Fish).contains("-l socket"));
    }
}
