//! sysfs PMU discovery: reads `/sys/bus/event_source/devices/<name>/` and turns named fields
//! into `perf_event_attr` config words.
//!
//! In: a [`SysfsRoot`] (the live `/sys` or a test fixture) and a PMU name (`ibs_op`, `cpu`,
//! `cpu_core`, ...). Out: a [`Pmu`] holding the dynamic type id, every `format/*` field,
//! `caps/*` value and `events/*` alias, which places values into [`ConfigWords`].
//!
//! sysfs layout (`Documentation/ABI/testing/sysfs-bus-event_source-devices-format` and
//! `-events`): `type` is a decimal id; each `format/<field>` file reads
//! `configN:bit`, `configN:lo-hi` or a list of those (`config:0-7,32-35`); value bits fill the
//! listed bits low to high, as the perf tool does. `events/<alias>` reads comma-separated terms
//! `field=value` (hex with `0x` or decimal) or a bare `field` meaning 1.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::topology::SysfsRoot;
use crate::topology::TopologyError;

/// Where PMUs live under the sysfs root.
pub const PMU_DIR: &str = "bus/event_source/devices";

/// The four `perf_event_attr` config words a format field can live in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConfigWords {
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    pub config3: u64,
}

/// Which of the [`ConfigWords`] a field lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigWord {
    Config,
    Config1,
    Config2,
    Config3,
}

impl ConfigWord {
    fn parse(word: &str) -> Option<ConfigWord> {
        match word {
            "config" => Some(ConfigWord::Config),
            "config1" => Some(ConfigWord::Config1),
            "config2" => Some(ConfigWord::Config2),
            "config3" => Some(ConfigWord::Config3),
            _ => None,
        }
    }

    fn slot(self, words: &mut ConfigWords) -> &mut u64 {
        match self {
            ConfigWord::Config => &mut words.config,
            ConfigWord::Config1 => &mut words.config1,
            ConfigWord::Config2 => &mut words.config2,
            ConfigWord::Config3 => &mut words.config3,
        }
    }
}

/// One `format/<field>`: the bits of one config word the field occupies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatField {
    pub word: ConfigWord,
    /// Mask of the occupied bits; value bits fill them from the lowest up.
    pub mask: u64,
}

impl FormatField {
    /// Parses `config:19`, `config1:0-11` or `config:0-7,32-35`.
    pub fn parse(text: &str) -> Option<FormatField> {
        let (word, ranges) = text.trim().split_once(':')?;
        let word = ConfigWord::parse(word)?;
        let mut mask = 0u64;
        for range in ranges.split(',') {
            let (lo, hi) = match range.split_once('-') {
                Some((lo, hi)) => (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?),
                None => {
                    let bit = range.parse::<u32>().ok()?;
                    (bit, bit)
                }
            };
            if lo > hi || hi > 63 {
                return None;
            }
            mask |= (u64::MAX >> (63 - hi)) & (u64::MAX << lo);
        }
        Some(FormatField { word, mask })
    }

    /// How many value bits the field holds.
    pub fn width(&self) -> u32 {
        self.mask.count_ones()
    }

    /// Spreads `value` over the field's bits, low bits first; `None` if it does not fit.
    fn place(&self, value: u64) -> Option<u64> {
        if self.width() < 64 && value >> self.width() != 0 {
            return None;
        }
        let mut out = 0u64;
        let mut rest = value;
        let mut bits = self.mask;
        while bits != 0 {
            let lowest = bits & bits.wrapping_neg();
            if rest & 1 == 1 {
                out |= lowest;
            }
            rest >>= 1;
            bits &= !lowest;
        }
        Some(out)
    }
}

/// Errors from PMU discovery and config building.
#[derive(Debug, thiserror::Error)]
pub enum PmuError {
    #[error("opening PMU {name}: {} does not exist; {}", path.display(), absent_hint(name))]
    Missing { name: String, path: PathBuf },
    #[error(transparent)]
    Sysfs(#[from] TopologyError),
    #[error("parsing {}: unexpected content '{content}' (expected {expected})", path.display())]
    Parse {
        path: PathBuf,
        content: String,
        expected: &'static str,
    },
    #[error("PMU {pmu} has no format field '{field}' (it has: {})", known.join(", "))]
    UnknownField {
        pmu: String,
        field: String,
        known: Vec<String>,
    },
    #[error("PMU {pmu} field '{field}': value {value:#x} does not fit in its {width} bits")]
    ValueTooWide {
        pmu: String,
        field: String,
        value: u64,
        width: u32,
    },
    #[error("PMU {pmu} has no event alias '{event}' in {} (it has: {})", path.display(), known.join(", "))]
    UnknownEvent {
        pmu: String,
        event: String,
        path: PathBuf,
        known: Vec<String>,
    },
    #[error("term '{term}' is not field=number (0x-prefixed hex or decimal) or a bare field name")]
    BadTerm { term: String },
    #[error("resolving event alias {} ('{text}'): {source}", path.display())]
    EventTerm {
        path: PathBuf,
        text: String,
        source: Box<PmuError>,
    },
}

/// Why a PMU directory may be absent (for IBS: the checks and warnings of `amd_ibs_init()`,
/// `ibs_eilvt_valid()` and `setup_APIC_ibs()` in `arch/x86/events/amd/ibs.c`).
fn absent_hint(name: &str) -> &'static str {
    match name {
        "ibs_op" | "ibs_fetch" => {
            "IBS is absent: not an AMD CPU, a VM that does not expose IBS, a kernel without \
             CONFIG_CPU_SUP_AMD, or firmware left no valid IBS LVT offset (see dmesg for \
             'invalid IBS interrupt offset' or 'IBS APIC setup failed')"
        }
        "cpu" | "cpu_core" | "cpu_atom" => {
            "no core PMU for PEBS: not an Intel CPU (or not a hybrid one, for cpu_core/cpu_atom), \
             or a VM without a virtual PMU"
        }
        _ => "the kernel does not provide this PMU",
    }
}

/// A PMU as published in sysfs.
#[derive(Debug, Clone)]
pub struct Pmu {
    name: String,
    dir: PathBuf,
    pmu_type: u32,
    formats: BTreeMap<String, FormatField>,
    caps: BTreeMap<String, String>,
    events: BTreeMap<String, String>,
}

impl Pmu {
    /// Reads `<root>/bus/event_source/devices/<name>/`.
    pub fn open(root: &SysfsRoot, name: &str) -> Result<Pmu, PmuError> {
        let rel = format!("{PMU_DIR}/{name}");
        let dir = root.path(&rel);
        if !dir.is_dir() {
            return Err(PmuError::Missing {
                name: name.to_string(),
                path: dir,
            });
        }
        let type_rel = format!("{rel}/type");
        let type_text = root.read(&type_rel)?;
        let pmu_type = type_text.parse().map_err(|_| PmuError::Parse {
            path: root.path(&type_rel),
            content: type_text.clone(),
            expected: "a decimal PMU type id",
        })?;
        let mut formats = BTreeMap::new();
        for (field, text) in read_dir_files(root, &format!("{rel}/format"))? {
            let parsed = FormatField::parse(&text).ok_or_else(|| PmuError::Parse {
                path: root.path(&format!("{rel}/format/{field}")),
                content: text.clone(),
                expected: "configN:bit, configN:lo-hi or a comma list of those",
            })?;
            formats.insert(field, parsed);
        }
        Ok(Pmu {
            name: name.to_string(),
            dir,
            pmu_type,
            formats,
            caps: read_dir_files(root, &format!("{rel}/caps"))?,
            events: read_dir_files(root, &format!("{rel}/events"))?,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The dynamic type id for `perf_event_attr.type`.
    pub fn pmu_type(&self) -> u32 {
        self.pmu_type
    }

    pub fn has_format(&self, field: &str) -> bool {
        self.formats.contains_key(field)
    }

    pub fn format(&self, field: &str) -> Option<&FormatField> {
        self.formats.get(field)
    }

    /// The names of every format field, sorted.
    pub fn format_names(&self) -> Vec<String> {
        self.formats.keys().cloned().collect()
    }

    /// A `caps/<name>` value, trimmed.
    pub fn cap(&self, name: &str) -> Option<&str> {
        self.caps.get(name).map(String::as_str)
    }

    pub fn has_event(&self, name: &str) -> bool {
        self.events.contains_key(name)
    }

    /// Places `value` into `field`'s bits of `words`, replacing what was there.
    pub fn set(&self, words: &mut ConfigWords, field: &str, value: u64) -> Result<(), PmuError> {
        let format = self
            .formats
            .get(field)
            .ok_or_else(|| PmuError::UnknownField {
                pmu: self.name.clone(),
                field: field.to_string(),
                known: self.format_names(),
            })?;
        let bits = format.place(value).ok_or_else(|| PmuError::ValueTooWide {
            pmu: self.name.clone(),
            field: field.to_string(),
            value,
            width: format.width(),
        })?;
        let slot = format.word.slot(words);
        *slot = (*slot & !format.mask) | bits;
        Ok(())
    }

    /// Resolves an `events/<name>` alias through the format fields. Terms naming a config word
    /// directly (`config=0x1`) set the whole word, as the perf tool allows.
    pub fn event(&self, name: &str) -> Result<ConfigWords, PmuError> {
        let path = self.dir.join("events").join(name);
        let text = self
            .events
            .get(name)
            .ok_or_else(|| PmuError::UnknownEvent {
                pmu: self.name.clone(),
                event: name.to_string(),
                path: path.clone(),
                known: self.events.keys().cloned().collect(),
            })?;
        let mut words = ConfigWords::default();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            self.apply_term(&mut words, term)
                .map_err(|source| PmuError::EventTerm {
                    path: path.clone(),
                    text: text.clone(),
                    source: Box::new(source),
                })?;
        }
        Ok(words)
    }

    fn apply_term(&self, words: &mut ConfigWords, term: &str) -> Result<(), PmuError> {
        let (field, value) = match term.split_once('=') {
            Some((field, value)) => (field.trim(), parse_number(value.trim())),
            None => (term, Some(1)),
        };
        let value = value.ok_or_else(|| PmuError::BadTerm {
            term: term.to_string(),
        })?;
        match ConfigWord::parse(field) {
            Some(word) if !self.has_format(field) => {
                *word.slot(words) = value;
                Ok(())
            }
            _ => self.set(words, field, value),
        }
    }
}

/// `0x1f` or `31`.
fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// Every file in a directory with its trimmed contents; a missing directory is empty (old
/// kernels have no `caps/`, and `ibs_op` has no `events/`).
fn read_dir_files(root: &SysfsRoot, rel: &str) -> Result<BTreeMap<String, String>, PmuError> {
    let mut out = BTreeMap::new();
    for name in root.entry_names(rel)? {
        let text = root.read(&format!("{rel}/{name}"))?;
        out.insert(name, text);
    }
    Ok(out)
}

/// Test fixtures: PMU directories laid out as the kernel does.
#[cfg(test)]
pub(crate) mod fixture {
    use std::path::Path;

    use tempfile::TempDir;

    use crate::topology::SysfsRoot;

    /// Writes `files` (relative to the PMU dir) under `<tmp>/bus/event_source/devices/<pmu>/`.
    pub fn write_pmu(tmp: &Path, pmu: &str, files: &[(&str, &str)]) {
        let dir = tmp.join(super::PMU_DIR).join(pmu);
        for (rel, text) in files {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{text}\n")).unwrap();
        }
    }

    /// A current-kernel Zen5 `ibs_op`: every format and cap pghotd uses.
    pub const IBS_OP_FULL: &[(&str, &str)] = &[
        ("type", "11"),
        ("format/cnt_ctl", "config:19"),
        ("format/l3missonly", "config:16"),
        ("format/swfilt", "config2:0"),
        ("format/ldlat", "config1:0-11"),
        ("caps/zen4_ibs_extensions", "1"),
        ("caps/ldlat", "1"),
    ];

    /// An older kernel (< v5.19) on a pre-Zen4 CPU: only cnt_ctl.
    pub const IBS_OP_OLD: &[(&str, &str)] = &[("type", "9"), ("format/cnt_ctl", "config:19")];

    /// An Intel core PMU with the PEBS memory aliases (Golden Cove: with mem-loads-aux).
    pub const INTEL_CPU: &[(&str, &str)] = &[
        ("type", "4"),
        ("format/event", "config:0-7"),
        ("format/umask", "config:8-15"),
        ("format/ldlat", "config1:0-15"),
        ("events/mem-loads", "event=0xcd,umask=0x1,ldlat=3"),
        ("events/mem-stores", "event=0xcd,umask=0x2"),
        ("events/mem-loads-aux", "event=0x03,umask=0x82"),
    ];

    pub fn root_with(pmus: &[(&str, &[(&str, &str)])]) -> (TempDir, SysfsRoot) {
        let tmp = TempDir::new().unwrap();
        for (name, files) in pmus {
            write_pmu(tmp.path(), name, files);
        }
        let root = SysfsRoot::new(tmp.path());
        (tmp, root)
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::*;
    use super::*;

    #[test]
    fn format_fields_parse_single_bits_ranges_and_lists() {
        let f = FormatField::parse("config:19").unwrap();
        assert_eq!(
            (f.word, f.mask, f.width()),
            (ConfigWord::Config, 1 << 19, 1)
        );
        let f = FormatField::parse("config1:0-11").unwrap();
        assert_eq!(
            (f.word, f.mask, f.width()),
            (ConfigWord::Config1, 0xfff, 12)
        );
        let f = FormatField::parse("config:0-7,32-35").unwrap();
        assert_eq!((f.mask, f.width()), (0xf_0000_00ff, 12));
        let f = FormatField::parse("config3:63").unwrap();
        assert_eq!((f.word, f.mask), (ConfigWord::Config3, 1 << 63));
        assert_eq!(FormatField::parse("config:0-63").unwrap().mask, u64::MAX);
        for bad in [
            "",
            "config",
            "config4:1",
            "config:64",
            "config:5-2",
            "config:a",
            "cfg:1",
        ] {
            assert_eq!(FormatField::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn opens_ibs_op_with_formats_and_caps() {
        let (_tmp, root) = root_with(&[("ibs_op", IBS_OP_FULL)]);
        let pmu = Pmu::open(&root, "ibs_op").unwrap();
        assert_eq!((pmu.name(), pmu.pmu_type()), ("ibs_op", 11));
        assert_eq!(
            pmu.format_names(),
            ["cnt_ctl", "l3missonly", "ldlat", "swfilt"]
        );
        assert!(pmu.has_format("swfilt") && !pmu.has_format("strmst"));
        assert_eq!(pmu.cap("zen4_ibs_extensions"), Some("1"));
        assert_eq!(pmu.cap("dtlb_pgsize"), None);
        assert!(!pmu.has_event("mem-loads"));
    }

    #[test]
    fn an_older_kernel_has_no_caps_dir_and_fewer_formats() {
        let (_tmp, root) = root_with(&[("ibs_op", IBS_OP_OLD)]);
        let pmu = Pmu::open(&root, "ibs_op").unwrap();
        assert_eq!(
            (pmu.pmu_type(), pmu.format_names()),
            (9, vec!["cnt_ctl".to_string()])
        );
        assert_eq!(pmu.cap("zen4_ibs_extensions"), None);
        let err = pmu
            .set(&mut ConfigWords::default(), "l3missonly", 1)
            .unwrap_err();
        assert!(err.to_string().contains("(it has: cnt_ctl)"), "{err}");
    }

    #[test]
    fn set_places_values_and_names_what_is_wrong() {
        let (_tmp, root) = root_with(&[("ibs_op", IBS_OP_FULL)]);
        let pmu = Pmu::open(&root, "ibs_op").unwrap();
        let mut w = ConfigWords::default();
        pmu.set(&mut w, "cnt_ctl", 1).unwrap();
        pmu.set(&mut w, "l3missonly", 1).unwrap();
        pmu.set(&mut w, "ldlat", 2048).unwrap();
        pmu.set(&mut w, "swfilt", 1).unwrap();
        assert_eq!(w.config, (1 << 19) | (1 << 16));
        assert_eq!((w.config1, w.config2, w.config3), (2048, 1, 0));
        pmu.set(&mut w, "ldlat", 128).unwrap();
        assert_eq!(w.config1, 128, "set replaces the field");

        let err = pmu.set(&mut w, "strmst", 1).unwrap_err().to_string();
        assert!(err.contains("ibs_op has no format field 'strmst'"), "{err}");
        assert!(err.contains("cnt_ctl, l3missonly, ldlat, swfilt"), "{err}");
        let err = pmu.set(&mut w, "ldlat", 4096).unwrap_err().to_string();
        assert!(err.contains("0x1000 does not fit in its 12 bits"), "{err}");
    }

    #[test]
    fn multi_range_fields_fill_low_bits_first() {
        let (_tmp, root) = root_with(&[(
            "cpu",
            &[("type", "4"), ("format/event", "config:0-7,32-35")],
        )]);
        let pmu = Pmu::open(&root, "cpu").unwrap();
        let mut w = ConfigWords::default();
        pmu.set(&mut w, "event", 0xabc).unwrap();
        assert_eq!(w.config, 0xa_0000_00bc);
        assert!(pmu.set(&mut w, "event", 0x1000).is_err());
    }

    #[test]
    fn events_resolve_through_formats() {
        let (_tmp, root) = root_with(&[("cpu", INTEL_CPU)]);
        let pmu = Pmu::open(&root, "cpu").unwrap();
        let w = pmu.event("mem-loads").unwrap();
        assert_eq!((w.config, w.config1), (0x01cd, 3));
        assert_eq!(pmu.event("mem-loads-aux").unwrap().config, 0x8203);
        let err = pmu.event("mem-foo").unwrap_err().to_string();
        assert!(err.contains("no event alias 'mem-foo'"), "{err}");
        assert!(
            err.contains("mem-loads, mem-loads-aux, mem-stores"),
            "{err}"
        );
    }

    #[test]
    fn event_terms_bare_names_and_raw_words() {
        let (_tmp, root) = root_with(&[(
            "cpu",
            &[
                ("type", "4"),
                ("format/event", "config:0-7"),
                ("format/any", "config:21"),
                ("events/bare", "event=0x3c,any"),
                ("events/raw", "config=0x1234,config1=7"),
                ("events/unknown", "event=1,bogus=2"),
                ("events/badnum", "event=?"),
            ],
        )]);
        let pmu = Pmu::open(&root, "cpu").unwrap();
        assert_eq!(pmu.event("bare").unwrap().config, 0x3c | 1 << 21);
        let raw = pmu.event("raw").unwrap();
        assert_eq!((raw.config, raw.config1), (0x1234, 7));
        let err = pmu.event("unknown").unwrap_err().to_string();
        assert!(err.contains("events/unknown ('event=1,bogus=2')"), "{err}");
        assert!(err.contains("no format field 'bogus'"), "{err}");
        let err = pmu.event("badnum").unwrap_err().to_string();
        assert!(err.contains("term 'event=?' is not field=number"), "{err}");
    }

    #[test]
    fn missing_pmu_says_why() {
        let (_tmp, root) = root_with(&[]);
        let err = Pmu::open(&root, "ibs_op").unwrap_err();
        assert!(matches!(err, PmuError::Missing { .. }));
        let msg = err.to_string();
        assert!(msg.contains("opening PMU ibs_op"), "{msg}");
        assert!(msg.contains("devices/ibs_op does not exist"), "{msg}");
        for reason in ["not an AMD CPU", "VM", "CONFIG_CPU_SUP_AMD", "dmesg"] {
            assert!(msg.contains(reason), "{msg}");
        }
        let msg = Pmu::open(&root, "cpu").unwrap_err().to_string();
        assert!(msg.contains("not an Intel CPU"), "{msg}");
    }

    #[test]
    fn unparseable_files_name_path_and_content() {
        let (_tmp, root) = root_with(&[("ibs_op", &[("type", "eleven")])]);
        let msg = Pmu::open(&root, "ibs_op").unwrap_err().to_string();
        assert!(
            msg.contains("ibs_op/type: unexpected content 'eleven'"),
            "{msg}"
        );

        let (_tmp, root) = root_with(&[(
            "ibs_op",
            &[("type", "11"), ("format/cnt_ctl", "config9:19")],
        )]);
        let msg = Pmu::open(&root, "ibs_op").unwrap_err().to_string();
        assert!(
            msg.contains("format/cnt_ctl: unexpected content 'config9:19'"),
            "{msg}"
        );

        let (_tmp, root) = root_with(&[("ibs_op", &[("format/cnt_ctl", "config:19")])]);
        let msg = Pmu::open(&root, "ibs_op").unwrap_err().to_string();
        assert!(
            msg.contains("reading") && msg.contains("ibs_op/type"),
            "{msg}"
        );
    }
}
