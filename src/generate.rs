//! Man pages and shell completions, generated from the binaries' clap definitions, so
//! `--help`, the man page and the completions never disagree. The packages ship them:
//! `packaging/build-packages.sh` writes them with `pghotd --generate KIND` and
//! `pghotctl generate KIND` (and gzips the pages). pghotd.toml(5) comes from the settings table
//! instead ([`crate::config::docs::man_page`]), so it lists every key the file takes.
//!
//! A binary's EXIT STATUS and FILES come from [`ManSections`]: the same exit status table
//! its `--help` prints after the options ([`ManSections::exit_status_help`]).

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

/// What a man page says besides what clap knows.
pub struct ManSections {
    /// (status, when it comes), every status the program exits with.
    pub exit_status: &'static [(u8, &'static str)],
    /// (path, what it is).
    pub files: &'static [(&'static str, &'static str)],
}

impl ManSections {
    /// The exit status table as `--help` shows it after the options (`after_help`).
    pub fn exit_status_help(&self) -> String {
        let mut text = String::from("Exit status:\n");
        for (code, meaning) in self.exit_status {
            text.push_str(&format!("  {code}  {meaning}\n"));
        }
        text
    }

    fn roff(&self) -> String {
        use crate::config::docs::roff;
        let mut out = String::from(".SH \"EXIT STATUS\"\n");
        for (code, meaning) in self.exit_status {
            out.push_str(&format!(".TP\n.B {code}\n{}\n", roff(meaning)));
        }
        out.push_str(".SH FILES\n");
        for (path, what) in self.files {
            out.push_str(&format!(".TP\n.I {}\n{}\n", roff(path), roff(what)));
        }
        out
    }
}

/// Writes `kind` for `cmd`; `section` is the man section (8 for the daemon, 1 for tools).
pub fn write(
    kind: Generated,
    mut cmd: clap::Command,
    section: &'static str,
    sections: &ManSections,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let name = cmd.get_name().to_string();
    let shell = match kind {
        Generated::Man => return man_page(cmd, section, sections, out),
        Generated::Bash => Shell::Bash,
        Generated::Zsh => Shell::Zsh,
        Generated::Fish => Shell::Fish,
        Generated::TomlMan => return out.write_all(crate::config::docs::man_page().as_bytes()),
    };
    clap_complete::generate(shell, &mut cmd, name, out);
    Ok(())
}

/// clap_mangen's page with EXIT STATUS and FILES where man-pages(7) puts them, after the
/// options and subcommands. The `after_help` text (the exit status table of `--help`) is not
/// repeated as an extra section.
fn man_page(
    cmd: clap::Command,
    section: &'static str,
    sections: &ManSections,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let has_options = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subcommands = cmd.get_subcommands().any(|c| !c.is_hide_set());
    let has_version = cmd.get_version().is_some() || cmd.get_long_version().is_some();
    let man = clap_mangen::Man::new(cmd).section(section);
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    if has_options {
        man.render_options_section(out)?;
    }
    if has_subcommands {
        man.render_subcommands_section(out)?;
    }
    out.write_all(sections.roff().as_bytes())?;
    if has_version {
        man.render_version_section(out)?;
    }
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

    const SECTIONS: ManSections = ManSections {
        exit_status: &[(0, "done"), (4, "the `socket` is gone")],
        files: &[("/run/demo.sock", "the demo's socket")],
    };

    #[test]
    fn man_page_and_completions_name_the_options() {
        let render = |kind| {
            let mut out = Vec::new();
            write(kind, demo(), "8", &SECTIONS, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let man = render(Generated::Man);
        assert!(man.contains(".TH demo 8"), "{man}");
        assert!(man.contains("socket"), "{man}");
        let exit = man.find(".SH \"EXIT STATUS\"").expect("EXIT STATUS");
        let files = man.find(".SH FILES").expect("FILES");
        assert!(
            man.find(".SH OPTIONS").unwrap() < exit && exit < files,
            "{man}"
        );
        assert!(
            man.contains(".TP\n.B 4\nthe \\fBsocket\\fR is gone\n"),
            "{man}"
        );
        assert!(
            man.contains(".TP\n.I /run/demo.sock\nthe demo's socket\n"),
            "{man}"
        );
        assert_eq!(
            SECTIONS.exit_status_help(),
            "Exit status:\n  0  done\n  4  the `socket` is gone\n"
        );
        assert!(render(Generated::Bash).contains("--socket"));
        assert!(render(Generated::Zsh).contains("--socket"));
        assert!(render(Generated::Fish).contains("-l socket"));
    }
}
