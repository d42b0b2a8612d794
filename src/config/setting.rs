//! What one setting is: the descriptor each row of [`super::defs::SETTINGS`] fills in, and the
//! conversions between a value as written (file, flag, `config set`) and the field of a stage's
//! settings struct that holds it.

use super::Config;

/// A value as written in the file, on the command line or in `config set`, before validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    Int(i64),
    Bool(bool),
    Ints(Vec<i64>),
    Text(String),
    Texts(Vec<String>),
}

impl Written {
    /// As `config get` shows it.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Written::Int(n) => json!(n),
            Written::Bool(b) => json!(b),
            Written::Ints(v) => json!(v),
            Written::Text(s) => json!(s),
            Written::Texts(v) => json!(v),
        }
    }
}

/// How a setting is written: its TOML type, its flag's form, and the range a number must be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An integer in `min..=max`; the range also keeps the store into a narrower field lossless.
    Int { min: i64, max: i64 },
    /// An integer in `min..=max`, or the one word `word` (`ibs.period = "auto"`).
    IntOrWord {
        min: i64,
        max: i64,
        word: &'static str,
    },
    /// `true` or `false`; the flag takes the value (`--ibs-count-ops false`).
    Bool,
    /// `true` or `false` in the file; the flag takes no value and means `true` (`--dry-run`).
    Switch,
    /// A list of integers, each in `min..=max`; the flag repeats.
    Ints { min: i64, max: i64 },
    /// A string.
    Text,
    /// A string naming a file; the flag's completion offers paths.
    Path,
    /// A list of strings; the flag repeats.
    Texts,
    /// A list of paths; the flag repeats and completes paths.
    Paths,
}

impl Kind {
    /// The numeric range a value (or each element) must be in.
    pub fn range(self) -> Option<(i64, i64)> {
        match self {
            Kind::Int { min, max } | Kind::IntOrWord { min, max, .. } | Kind::Ints { min, max } => {
                Some((min, max))
            }
            _ => None,
        }
    }

    /// Whether the flag may be given several times.
    pub fn repeats(self) -> bool {
        matches!(self, Kind::Ints { .. } | Kind::Texts | Kind::Paths)
    }
}

/// Where a setting's value lives in [`Config`]: read it as written, store a validated value,
/// and copy it from one configuration to another (what a runtime change applies).
#[derive(Clone, Copy)]
pub struct Field {
    /// `None`: unset (no value to show; the stage decides, e.g. the nearest node).
    pub get: fn(&Config) -> Option<Written>,
    /// Stores a value that passed the kind's range; `Err` is the detail of an invalid value.
    pub set: fn(&mut Config, Written) -> Result<(), String>,
    pub copy: fn(&Config, &mut Config),
}

/// A field type a setting can store into directly (see [`field!`]).
pub trait Stored: Sized {
    fn written(&self) -> Option<Written>;
    fn store(value: Written) -> Result<Self, String>;
}

fn mismatch(value: &Written, expected: &str) -> String {
    format!("{value:?} is not {expected}")
}

macro_rules! stored_int {
    ($($t:ty),*) => {$(
        impl Stored for $t {
            fn written(&self) -> Option<Written> {
                i64::try_from(*self).ok().map(Written::Int)
            }
            fn store(value: Written) -> Result<Self, String> {
                match value {
                    // The setting's range is checked first; a range wider than the field is
                    // a bug in its row, which the tests' round trip of every row catches.
                    Written::Int(n) => <$t>::try_from(n)
                        .map_err(|_| format!("{n} does not fit in {}", stringify!($t))),
                    other => Err(mismatch(&other, "an integer")),
                }
            }
        }
    )*};
}
stored_int!(u8, u16, u32, u64, usize);

impl Stored for bool {
    fn written(&self) -> Option<Written> {
        Some(Written::Bool(*self))
    }
    fn store(value: Written) -> Result<Self, String> {
        match value {
            Written::Bool(b) => Ok(b),
            other => Err(mismatch(&other, "a boolean")),
        }
    }
}

/// An optional field: unset until a value is written (there is no way to write "unset").
impl<T: Stored> Stored for Option<T> {
    fn written(&self) -> Option<Written> {
        self.as_ref().and_then(T::written)
    }
    fn store(value: Written) -> Result<Self, String> {
        T::store(value).map(Some)
    }
}

/// A list of numbers (`pids`, `full_duplex_nodes`).
impl<T: Stored> Stored for Vec<T> {
    fn written(&self) -> Option<Written> {
        let mut out = Vec::with_capacity(self.len());
        for v in self {
            match v.written()? {
                Written::Int(n) => out.push(n),
                _ => return None,
            }
        }
        Some(Written::Ints(out))
    }
    fn store(value: Written) -> Result<Self, String> {
        match value {
            Written::Ints(v) => v.into_iter().map(|n| T::store(Written::Int(n))).collect(),
            other => Err(mismatch(&other, "a list of integers")),
        }
    }
}

/// The [`Field`] of a plain field of [`Config`], e.g. `field!(migrator.migrate_batch)`: its
/// type's [`Stored`] impl does the conversions, so the compiler checks the path and the type.
macro_rules! field {
    ($($path:ident).+) => {
        $crate::config::setting::Field {
            get: |c| $crate::config::setting::Stored::written(&c.$($path).+),
            set: |c, value| {
                c.$($path).+ = $crate::config::setting::Stored::store(value)?;
                Ok(())
            },
            copy: |from, to| to.$($path).+ = from.$($path).+.clone(),
        }
    };
}
pub(crate) use field;

/// One setting: everything the file parser, the flags, `config get`/`set`, `--check-config`,
/// the README's tables and pghotd.toml(5) know about it.
#[derive(Clone, Copy)]
pub struct Setting {
    /// The file's key with its table, dotted: `migrate_batch`, `admission.split_min_samples`.
    pub key: &'static str,
    pub kind: Kind,
    pub field: Field,
    /// `pghotctl config set` (and a reload) may change it while the daemon runs.
    pub runtime: bool,
    /// The long flag, without dashes.
    pub flag: &'static str,
    /// Another spelling of the flag, shown in `--help`.
    pub alias: Option<&'static str>,
    /// The flag's value in `--help` (`--migrate-batch <N>`); unused by a switch.
    pub value_name: &'static str,
    /// The flag's help; `{default}` and `{range}` are filled in from the row.
    pub help: &'static str,
    /// What the key does, for the file's readers (README, pghotd.toml(5)).
    pub doc: &'static str,
    /// The default in words, where the value alone does not say it (`None` = nearest node).
    /// Otherwise the default is read from `Config::default()`, i.e. from the owning stage.
    pub default: Option<&'static str>,
    /// What is allowed, in words; `{range}` is filled in. Numbers default to `{range}`.
    pub allowed: Option<&'static str>,
    /// A check beyond the range (e.g. a power of two); `Err` is the detail.
    pub check: Option<fn(i64) -> Result<(), String>>,
}

impl Setting {
    const fn new(key: &'static str, kind: Kind, field: Field) -> Setting {
        Setting {
            key,
            kind,
            field,
            runtime: false,
            flag: "",
            alias: None,
            value_name: "",
            help: "",
            doc: "",
            default: None,
            allowed: None,
            check: None,
        }
    }

    pub const fn int(key: &'static str, min: i64, max: i64, field: Field) -> Setting {
        Setting::new(key, Kind::Int { min, max }, field)
    }

    pub const fn int_or(
        key: &'static str,
        min: i64,
        max: i64,
        word: &'static str,
        field: Field,
    ) -> Setting {
        Setting::new(key, Kind::IntOrWord { min, max, word }, field)
    }

    pub const fn ints(key: &'static str, min: i64, max: i64, field: Field) -> Setting {
        Setting::new(key, Kind::Ints { min, max }, field)
    }

    pub const fn bool(key: &'static str, field: Field) -> Setting {
        Setting::new(key, Kind::Bool, field)
    }

    pub const fn switch(key: &'static str, field: Field) -> Setting {
        Setting::new(key, Kind::Switch, field)
    }

    pub const fn text(key: &'static str, field: Field) -> Setting {
        Setting::new(key, Kind::Text, field)
    }

    pub const fn path(key: &'static str, field: Field) -> Setting {
        Setting::new(key, Kind::Path, field)
    }

    pub const fn texts(key: &'static str, field: Field) -> Setting {
        Setting::new(key, Kind::Texts, field)
    }

    pub const fn paths(key: &'static str, field: Field) -> Setting {
        Setting::new(key, Kind::Paths, field)
    }

    /// The flag `--long <VALUE>` (a switch ignores the value name).
    pub const fn flag(mut self, long: &'static str, value_name: &'static str) -> Setting {
        self.flag = long;
        self.value_name = value_name;
        self
    }

    pub const fn alias(mut self, alias: &'static str) -> Setting {
        self.alias = Some(alias);
        self
    }

    pub const fn help(mut self, help: &'static str) -> Setting {
        self.help = help;
        self
    }

    pub const fn doc(mut self, doc: &'static str) -> Setting {
        self.doc = doc;
        self
    }

    pub const fn default_is(mut self, words: &'static str) -> Setting {
        self.default = Some(words);
        self
    }

    pub const fn allowed(mut self, words: &'static str) -> Setting {
        self.allowed = Some(words);
        self
    }

    pub const fn check(mut self, check: fn(i64) -> Result<(), String>) -> Setting {
        self.check = Some(check);
        self
    }

    pub const fn runtime(mut self) -> Setting {
        self.runtime = true;
        self
    }

    /// The table part of the key (`admission`), or `""` for a top-level key.
    pub fn section(&self) -> &'static str {
        self.key.rsplit_once('.').map_or("", |(s, _)| s)
    }

    /// The key within its table (`split_min_samples`).
    pub fn name(&self) -> &'static str {
        self.key.rsplit_once('.').map_or(self.key, |(_, n)| n)
    }
}

impl std::fmt::Debug for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setting").field("key", &self.key).finish()
    }
}

/// The text of a written string value, for hand-written fields.
pub(super) fn text(value: Written) -> Result<String, String> {
    match value {
        Written::Text(s) => Ok(s),
        other => Err(format!("{other:?} is not a string")),
    }
}

/// The texts of a written list of strings, for hand-written fields.
pub(super) fn texts(value: Written) -> Result<Vec<String>, String> {
    match value {
        Written::Texts(v) => Ok(v),
        other => Err(format!("{other:?} is not a list of strings")),
    }
}
