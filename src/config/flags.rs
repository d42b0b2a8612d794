//! The settings as command-line flags, built with clap's builder API from the table and
//! flattened into the daemon's derived `Cli` (`#[command(flatten)] tunables: SettingArgs`), so
//! `--help`, the man page and the completions list them like any other flag.

use std::path::PathBuf;

use clap::builder::{OsStringValueParser, TypedValueParser};
use clap::{Arg, ArgAction, ArgMatches, Command, ValueHint, value_parser};

use super::apply::Given;
use super::defs::SETTINGS;
use super::docs;
use super::setting::{Kind, Setting, Written};
use super::{Config, ConfigError, Origin};

/// The setting flags that were given (a flag wins over the file).
#[derive(Debug, Default, Clone)]
pub struct SettingArgs {
    given: Vec<Given>,
}

impl SettingArgs {
    /// Parses setting flags alone, e.g. `["--migrate-batch", "64"]` (tests, tools).
    pub fn parse_from<I, T>(flags: I) -> Result<SettingArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{Args, FromArgMatches};
        let cmd = SettingArgs::augment_args(Command::new("pghotd").no_binary_name(true));
        SettingArgs::from_arg_matches(&cmd.try_get_matches_from(flags)?)
    }
}

impl SettingArgs {
    /// Whether the flag of the setting `key` was given.
    pub fn gives(&self, key: &str) -> bool {
        self.given.iter().any(|g| g.setting.key == key)
    }
}

impl Config {
    /// Applies the flags that were given.
    pub fn apply_args(&mut self, args: &SettingArgs) -> Result<(), ConfigError> {
        self.apply(&args.given)
    }
}

/// The flag of one setting, as clap's derive would build it from a field of the same type
/// (`Option<i64>`, `bool`, `Vec<PathBuf>`, ...), so help and completions read alike.
fn arg(s: &'static Setting) -> Arg {
    let mut arg = Arg::new(s.key)
        .long(s.flag)
        .help(docs::flag_help(s))
        .required(false);
    if let Some(alias) = s.alias {
        arg = arg.visible_alias(alias);
    }
    if s.kind == Kind::Switch {
        return arg.action(ArgAction::SetTrue);
    }
    arg = arg.value_name(s.value_name).action(if s.kind.repeats() {
        ArgAction::Append
    } else {
        ArgAction::Set
    });
    match s.kind {
        Kind::Int { .. } | Kind::Ints { .. } => arg.value_parser(value_parser!(i64)),
        Kind::Bool => arg.value_parser(value_parser!(bool)),
        // clap's PathBuf parser refuses an empty value, which `--control-socket ''` needs (it
        // turns the socket off, as `control_socket = ""` does); the value is still a PathBuf,
        // so clap_complete offers file names.
        Kind::Path | Kind::Paths => arg
            .value_parser(OsStringValueParser::new().map(PathBuf::from))
            .value_hint(ValueHint::AnyPath),
        Kind::IntOrWord { .. } | Kind::Text | Kind::Texts | Kind::Switch => {
            arg.value_parser(value_parser!(String))
        }
    }
}

/// The value of one setting's flag, if it was given.
fn given(s: &'static Setting, m: &ArgMatches) -> Option<Written> {
    let path = |p: &PathBuf| p.display().to_string();
    let id = s.key;
    match s.kind {
        Kind::Switch => m.get_flag(id).then_some(Written::Bool(true)),
        Kind::Int { .. } => m.get_one::<i64>(id).copied().map(Written::Int),
        Kind::Bool => m.get_one::<bool>(id).copied().map(Written::Bool),
        Kind::IntOrWord { .. } => m.get_one::<String>(id).map(|v| match v.parse::<i64>() {
            Ok(n) => Written::Int(n),
            Err(_) => Written::Text(v.clone()),
        }),
        Kind::Text => m.get_one::<String>(id).cloned().map(Written::Text),
        Kind::Path => m.get_one::<PathBuf>(id).map(|p| Written::Text(path(p))),
        Kind::Ints { .. } => m
            .get_many::<i64>(id)
            .map(|v| Written::Ints(v.copied().collect())),
        Kind::Texts => m
            .get_many::<String>(id)
            .map(|v| Written::Texts(v.cloned().collect())),
        Kind::Paths => m
            .get_many::<PathBuf>(id)
            .map(|v| Written::Texts(v.map(path).collect())),
    }
}

impl clap::Args for SettingArgs {
    fn augment_args(cmd: Command) -> Command {
        SETTINGS.iter().fold(cmd, |cmd, s| cmd.arg(arg(s)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for SettingArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = SettingArgs::default();
        args.update_from_arg_matches(m)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for s in SETTINGS {
            if let Some(value) = given(s, m) {
                self.given.retain(|g| g.setting.key != s.key);
                self.given.push(Given {
                    setting: s,
                    value,
                    origin: Origin::Flag(s.flag),
                });
            }
        }
        Ok(())
    }
}
