//! The settings' documentation, written from the table: each flag's help, the README's settings
//! tables and the pghotd.toml(5) man page. A test compares the README with what is generated
//! here, so the two cannot drift.

use std::fmt::Write as _;

use super::Config;
use super::defs::SETTINGS;
use super::setting::{Kind, Setting, Written};

/// How the default reads: the row's words, else the value `Config::default()` holds (the
/// stages' own defaults). `code` puts strings in backticks (Markdown).
fn default_text(s: &Setting, code: bool) -> String {
    if let Some(words) = s.default {
        return words.to_string();
    }
    let quote = |t: &str| {
        if code {
            format!("`{t}`")
        } else {
            t.to_string()
        }
    };
    match (s.field.get)(&Config::default()) {
        Some(Written::Int(n)) => n.to_string(),
        Some(Written::Bool(b)) => b.to_string(),
        Some(Written::Text(t)) => quote(&t),
        Some(Written::Ints(v)) if !v.is_empty() => {
            let v: Vec<String> = v.iter().map(|n| n.to_string()).collect();
            v.join(", ")
        }
        Some(Written::Texts(v)) if !v.is_empty() => {
            let v: Vec<String> = v.iter().map(|t| quote(t)).collect();
            v.join(", ")
        }
        // No value to show: the row must say in words what happens (a test checks it does).
        _ => String::new(),
    }
}

/// `min..=max`, with large powers of two as `2^n` the way the ranges were chosen.
fn range_text(s: &Setting) -> String {
    let n = |v: i64| {
        if v >= 1 << 20 && v.count_ones() == 1 {
            format!("2^{}", v.trailing_zeros())
        } else {
            v.to_string()
        }
    };
    s.kind
        .range()
        .map(|(min, max)| format!("{}..={}", n(min), n(max)))
        .unwrap_or_default()
}

fn allowed_text(s: &Setting) -> String {
    let words = s.allowed.unwrap_or(match s.kind {
        Kind::Bool | Kind::Switch => "`true`, `false`",
        _ if s.kind.range().is_some() => "{range}",
        _ => "",
    });
    words.replace("{range}", &range_text(s))
}

/// The flag's help, as `--help` and pghotd(8) show it.
pub fn flag_help(s: &Setting) -> String {
    s.help
        .replace("{default}", &default_text(s, false))
        .replace("{range}", &range_text(s))
}

/// The README's table of the settings in `sections` (`""`: the top-level keys), one row each.
pub fn readme_table(sections: &[&str]) -> String {
    let cell = |t: &str| t.replace('|', "\\|");
    let mut out = String::from(
        "| key | default | allowed | flag | `config set` | meaning |\n|---|---|---|---|---|---|\n",
    );
    for s in SETTINGS.iter().filter(|s| sections.contains(&s.section())) {
        let key = match s.section() {
            "" => format!("`{}`", s.key),
            table => format!("`[{table}] {}`", s.name()),
        };
        let mut flag = format!("`--{}`", s.flag);
        if let Some(alias) = s.alias {
            let _ = write!(flag, " (`--{alias}`)");
        }
        if s.kind.repeats() {
            flag.push_str(", repeatable");
        }
        let _ = writeln!(
            out,
            "| {key} | {} | {} | {flag} | {} | {} |",
            cell(&default_text(s, true)),
            cell(&allowed_text(s)),
            if s.runtime { "yes" } else { "restart" },
            cell(s.doc),
        );
    }
    out
}

/// The README's generated tables, by the name in their `<!-- settings: NAME -->` marker.
pub const README_TABLES: &[(&str, &[&str])] = &[
    ("general", &[""]),
    ("hardware", &["perf", "pagefault", "ibs", "pebs"]),
    ("admission", &["admission"]),
];

/// Roff for running text: escapes, and `code` spans in bold.
pub fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    let mut out = String::new();
    for (i, part) in escaped.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "\\fB{part}\\fR");
        } else {
            out.push_str(part);
        }
    }
    // A line starting with a dot or a quote would be read as a request.
    if out.starts_with(['.', '\'']) {
        out.insert_str(0, "\\&");
    }
    out
}

/// pghotd.toml(5), generated so it lists every key with its default, range and flag.
pub fn man_page() -> String {
    let mut out = String::new();
    let version = env!("CARGO_PKG_VERSION");
    let _ = writeln!(
        out,
        ".TH pghotd.toml 5 \"\" \"pghotd {version}\" \"File Formats Manual\""
    );
    out.push_str(
        ".SH NAME\npghotd.toml \\- configuration file of the pghotd memory\\-tiering daemon\n\
         .SH SYNOPSIS\n/etc/pghotd/pghotd.toml\n.SH DESCRIPTION\n\
         pghotd reads this TOML file when it starts (or the file \\fB\\-\\-config\\fR names; an \
         explicit path must exist), then its flags, which win over the file. Every key is also \
         a flag, shown with it below. Unknown keys, wrong types and out\\-of\\-range values are \
         errors that name the key, the line and the allowed range.\n\
         .PP\nKeys marked \\fIchanges while running\\fR take a new value from \
         \\fBpghotctl config set\\fR and from a reload (\\fBsystemctl reload pghotd\\fR, SIGHUP, \
         \\fBpghotctl reload\\fR); the others keep their running value until a restart.\n\
         .PP\nKeys under a table header, such as \\fB[ibs]\\fR, belong to that table: write \
         the tables after the top\\-level keys. \\fBpghotctl config\\fR spells them with a dot, \
         as in \\fBibs.period\\fR.\n",
    );
    // By table, in the order tables first appear; the top-level keys first.
    let mut sections: Vec<&str> = Vec::new();
    for s in SETTINGS {
        if !sections.contains(&s.section()) {
            sections.push(s.section());
        }
    }
    for section in sections {
        match section {
            "" => out.push_str(".SH KEYS\n"),
            table => {
                let _ = writeln!(out, ".SH [{table}]");
            }
        }
        for s in SETTINGS.iter().filter(|s| s.section() == section) {
            man_entry(&mut out, s);
        }
    }
    out.push_str(
        ".SH EXAMPLE\n.nf\nenabled_sources = [\"ibs\"]\ncgroups = [\"system.slice/db.service\"]\n\
         freq_threshold = 3\n\n[admission]\nsplit = true\n.fi\n\
         .SH FILES\n/etc/pghotd/pghotd.toml\n\
         .SH SEE ALSO\n\\fBpghotd\\fR(8), \\fBpghotctl\\fR(1)\n",
    );
    out
}

fn man_entry(out: &mut String, s: &Setting) {
    let _ = writeln!(out, ".TP\n.B {}", roff(s.name()));
    let _ = writeln!(out, "{}", roff(s.doc));
    let _ = writeln!(out, ".br\nDefault: {}.", roff(&default_text(s, false)));
    let allowed = allowed_text(s);
    if !allowed.is_empty() {
        let _ = writeln!(out, ".br\nAllowed: {}.", roff(&allowed));
    }
    let repeat = if s.kind.repeats() {
        ", once per element"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        ".br\nFlag: {}{repeat}.",
        roff(&format!("`--{}`", s.flag))
    );
    if s.runtime {
        out.push_str(".br\n\\fIChanges while running.\\fR\n");
    }
}

/// The marker a generated README table starts after (`<!-- settings: NAME ... -->`).
const BEGIN: &str = "<!-- settings: ";
const END: &str = "<!-- end settings -->";

/// `readme` with each generated table replaced by what the table of settings says now.
pub fn readme_with_tables(readme: &str) -> String {
    replace_generated(readme, BEGIN, END, |rest| {
        let name = rest.split_whitespace().next().unwrap_or_default();
        README_TABLES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, sections)| readme_table(sections))
            .unwrap_or_default()
    })
}

/// Tests that README.md is what `generate` makes of it (its tables, `what`, generated from
/// `source`), or with `PGHOTD_UPDATE_README=1` makes it so; `test` is the test's path, for the
/// command the failure suggests.
#[cfg(test)]
pub fn assert_readme_generated(
    generate: impl Fn(&str) -> String,
    what: &str,
    source: &str,
    test: &str,
) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let generated = generate(&readme);
    if generated == readme {
        return;
    }
    if std::env::var_os("PGHOTD_UPDATE_README").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let differ: Vec<(&str, &str)> = readme
        .lines()
        .zip(generated.lines())
        .filter(|(a, b)| a != b)
        .take(3)
        .collect();
    panic!(
        "README.md's {what} do not match {source} (first differences: {differ:#?}); \
         rewrite them with PGHOTD_UPDATE_README=1 cargo test --lib {test}"
    );
}

/// `readme` with what follows each line starting with `begin`, up to the next line starting
/// with `end`, replaced by `generate(the rest of the begin line)`: README.md's generated
/// tables (settings here, metrics in `control::metrics`).
pub fn replace_generated(
    readme: &str,
    begin: &str,
    end: &str,
    generate: impl Fn(&str) -> String,
) -> String {
    let mut out = String::with_capacity(readme.len());
    let mut lines = readme.split_inclusive('\n');
    while let Some(line) = lines.next() {
        out.push_str(line);
        let Some(rest) = line.strip_prefix(begin) else {
            continue;
        };
        out.push_str(&generate(rest));
        for skipped in lines.by_ref() {
            if skipped.starts_with(end) {
                out.push_str(skipped);
                break;
            }
        }
    }
    out
}
