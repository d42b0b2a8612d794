//! The TOML file, read through the settings table: each key is looked up in [`SETTINGS`] as it
//! is met and its value read as its kind says, so serde and the toml crate report unknown keys
//! and wrong types with their line, column and key, as a derived struct with
//! `deny_unknown_fields` would.

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use toml::Spanned;

use super::apply::Given;
use super::defs::SETTINGS;
use super::setting::{Kind, Setting, Written};
use super::{ConfigError, Origin};

/// Parses `text` into the settings it gives, each with its origin (`origin` turns a line
/// into one); `path` names the text in parse errors.
pub(super) fn parse(
    text: &str,
    path: &Path,
    origin: impl Fn(usize) -> Origin,
) -> Result<Vec<Given>, ConfigError> {
    let mut found = Vec::new();
    let parsed = toml::de::Deserializer::parse(text).and_then(|doc| {
        Table {
            section: "",
            out: &mut found,
        }
        .deserialize(doc)
    });
    parsed.map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string().trim_end().to_string(),
    })?;
    Ok(found
        .into_iter()
        .map(|(setting, value)| Given {
            setting,
            origin: origin(line_of(text, value.span().start)),
            value: value.into_inner(),
        })
        .collect())
}

/// Line (1-based) of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

type Found = Vec<(&'static Setting, Spanned<Written>)>;

/// The document (`section` empty) or one `[table]` of it.
struct Table<'a> {
    section: &'static str,
    out: &'a mut Found,
}

impl<'de> DeserializeSeed<'de> for Table<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Table<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.section {
            "" => f.write_str("a table of settings"),
            s => write!(f, "the [{s}] table"),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let section = self.section;
        while let Some(entry) = map.next_key_seed(Key { section })? {
            match entry {
                Entry::Table(name) => map.next_value_seed(Table {
                    section: name,
                    out: &mut *self.out,
                })?,
                Entry::Setting(setting) => {
                    let value = map.next_value_seed(Value(setting))?;
                    self.out.push((setting, value));
                }
            }
        }
        Ok(())
    }
}

enum Entry {
    Table(&'static str),
    Setting(&'static Setting),
}

/// A key of `section`: a setting, or (at the top level) a table of settings.
struct Key {
    section: &'static str,
}

impl Key {
    /// What the table may hold, in the order of the table of settings.
    fn expected(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        for s in SETTINGS {
            let name = if s.section() == self.section {
                s.name()
            } else if self.section.is_empty() {
                s.section()
            } else {
                continue;
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }
}

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Entry;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Entry, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a setting's name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Entry, E> {
        let found = SETTINGS
            .iter()
            .find(|s| s.section() == self.section && s.name() == name);
        if let Some(setting) = found {
            return Ok(Entry::Setting(setting));
        }
        if self.section.is_empty()
            && let Some(s) = SETTINGS.iter().find(|s| s.section() == name)
        {
            return Ok(Entry::Table(s.section()));
        }
        Err(E::custom(format_args!(
            "unknown field `{name}`, {}",
            one_of(&self.expected())
        )))
    }
}

/// serde's own wording for the fields a struct expects (`de::Error::unknown_field`), which
/// needs a `'static` list; ours is built from the table.
fn one_of(names: &[&str]) -> String {
    match names {
        [] => "there are no fields".to_string(),
        [one] => format!("expected `{one}`"),
        [a, b] => format!("expected `{a}` or `{b}`"),
        many => {
            let list: Vec<String> = many.iter().map(|n| format!("`{n}`")).collect();
            format!("expected one of {}", list.join(", "))
        }
    }
}

/// A setting's value, read as its kind says.
struct Value(&'static Setting);

/// `ibs.period`: a number or a word.
#[derive(Deserialize)]
#[serde(untagged)]
enum IntOrWord {
    Int(i64),
    Word(String),
}

impl<'de> DeserializeSeed<'de> for Value {
    type Value = Spanned<Written>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Spanned<Written>, D::Error> {
        fn read<'de, T: Deserialize<'de>, D: de::Deserializer<'de>>(
            d: D,
            written: fn(T) -> Written,
        ) -> Result<Spanned<Written>, D::Error> {
            let v = Spanned::<T>::deserialize(d)?;
            Ok(Spanned::new(v.span(), written(v.into_inner())))
        }
        match self.0.kind {
            Kind::Int { .. } => read(d, Written::Int),
            Kind::IntOrWord { .. } => read(d, |v| match v {
                IntOrWord::Int(n) => Written::Int(n),
                IntOrWord::Word(w) => Written::Text(w),
            }),
            Kind::Bool | Kind::Switch => read(d, Written::Bool),
            Kind::Ints { .. } => read(d, Written::Ints),
            Kind::Text | Kind::Path => read(d, Written::Text),
            Kind::Texts | Kind::Paths => read(d, Written::Texts),
        }
    }
}

/// One value as `config set` gives it: exactly one TOML value of the setting's type, parsed as
/// a value and never as a document, so a newline, a `[table]`, a comment or a second
/// `key = value` inside it can set nothing else. A bare word that is not TOML (`auto`, a path)
/// is taken as a string where the setting takes one string.
pub(super) fn parse_value(setting: &'static Setting, value: &str) -> Result<Written, String> {
    let toml = value.trim_matches([' ', '\t']);
    let parsed = toml::de::ValueDeserializer::parse(toml)
        .map_err(|e| e.message().to_string())
        .and_then(|d| {
            Value(setting)
                .deserialize(d)
                .map(Spanned::into_inner)
                .map_err(|e| e.message().to_string())
        });
    match parsed {
        Ok(written) => Ok(written),
        Err(e)
            if takes_a_word(setting.kind) && toml::de::ValueDeserializer::parse(toml).is_err() =>
        {
            quoted_or_bare_word(value, toml, &e)
        }
        Err(e) => Err(format!(
            "{value:?} is not one TOML value of this key's type: {e}"
        )),
    }
}

/// A text value that is not TOML. `config get` shows values as JSON, whose strings may hold
/// characters a TOML basic string must escape (DEL, say), so a JSON string is taken as the text
/// it spells. Any other quoted text is refused: taking it whole, quotes included, would set a
/// value nobody typed. Unquoted text is the bare word itself (`config set log_format json`).
fn quoted_or_bare_word(value: &str, trimmed: &str, toml_error: &str) -> Result<Written, String> {
    if !trimmed.starts_with(['"', '\'']) {
        return Ok(Written::Text(value.to_string()));
    }
    match serde_json::from_str::<String>(trimmed) {
        Ok(text) => Ok(Written::Text(text)),
        Err(_) => Err(format!(
            "{value:?} is quoted but is neither a TOML nor a JSON string: {toml_error}"
        )),
    }
}

/// Whether a setting's value may be one bare string.
fn takes_a_word(kind: Kind) -> bool {
    matches!(kind, Kind::Text | Kind::Path | Kind::IntOrWord { .. })
}
