//! Validating settings from one origin (the file, the flags, one `config set`) into a
//! [`Config`]: each value against its row's range and checks, then the checks that tie several
//! keys together.

use super::setting::{Kind, Setting, Written};
use super::{Config, ConfigError, Origin};

/// One setting as given, with where it came from.
#[derive(Debug, Clone)]
pub struct Given {
    pub setting: &'static Setting,
    pub value: Written,
    pub origin: Origin,
}

/// Validates a number against its allowed range.
pub(crate) fn ranged(
    origin: &Origin,
    key: &'static str,
    value: i64,
    min: i64,
    max: i64,
) -> Result<i64, ConfigError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::Range {
            origin: origin.clone(),
            key,
            value: value.to_string(),
            min,
            max,
        })
    }
}

impl Config {
    /// Applies settings from one origin; later ones win over earlier ones and over what `self`
    /// holds. The checks across keys run once all are in.
    pub(super) fn apply(&mut self, given: &[Given]) -> Result<(), ConfigError> {
        for g in given {
            self.apply_one(g)?;
        }
        self.check_across(given)
    }

    fn apply_one(&mut self, g: &Given) -> Result<(), ConfigError> {
        let s = g.setting;
        let invalid = |detail: String| ConfigError::Invalid {
            origin: g.origin.clone(),
            key: s.key,
            detail,
        };
        match (s.kind, &g.value) {
            (Kind::Int { min, max }, Written::Int(n))
            | (Kind::IntOrWord { min, max, .. }, Written::Int(n)) => {
                ranged(&g.origin, s.key, *n, min, max)?;
                if let Some(check) = s.check {
                    check(*n).map_err(invalid)?;
                }
            }
            (Kind::IntOrWord { min, max, word }, Written::Text(w)) if w != word => {
                return Err(invalid(format!(
                    "'{w}' is neither a number ({min}..={max}) nor \"{word}\""
                )));
            }
            (Kind::Ints { min, max }, Written::Ints(v)) => {
                for &n in v {
                    ranged(&g.origin, s.key, n, min, max)?;
                }
            }
            _ => {}
        }
        (s.field.set)(self, g.value.clone()).map_err(invalid)?;
        self.origins.set(s.key, g.origin.clone());
        Ok(())
    }

    /// Checks between keys, where one of their keys was given here: an earlier origin passed
    /// them already, and the error names what broke them.
    fn check_across(&self, given: &[Given]) -> Result<(), ConfigError> {
        let here = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| given.iter().rev().find(|g| g.setting.key == *k))
                .map(|g| g.origin.clone())
        };
        let damon = &self.damon;
        if damon.sample_us > damon.aggr_us
            && let Some(origin) = here(&["damon_sample_us", "damon_aggr_us"])
        {
            return Err(ConfigError::Invalid {
                origin,
                key: "damon_sample_us",
                detail: format!(
                    "the sampling interval ({} us) must not exceed the aggregation interval ({} us)",
                    damon.sample_us, damon.aggr_us
                ),
            });
        }
        if damon.min_regions > damon.max_regions
            && let Some(origin) = here(&["damon_min_regions", "damon_max_regions"])
        {
            return Err(ConfigError::Invalid {
                origin,
                key: "damon_min_regions",
                detail: format!(
                    "damon_min_regions ({}) must not exceed damon_max_regions ({})",
                    damon.min_regions, damon.max_regions
                ),
            });
        }
        // Settings that refine hot_share_pct's floor, each meaningless while it draws none.
        let p = &self.policy;
        let needs_share = [
            (
                p.demote_below_floor_pct > 0,
                "demote_below_floor_pct",
                format!(
                    "{} moves pages back under a share of the heat floor",
                    p.demote_below_floor_pct
                ),
            ),
            (
                p.hot_share_room_mb > 0,
                "hot_share_room_mb",
                format!(
                    "{} MiB lets hot_share_pct stand aside while the fast tier has room",
                    p.hot_share_room_mb
                ),
            ),
        ];
        let share_off = p.hot_share_pct == 0 || p.hot_share_pct >= 100;
        for (set, key, what) in needs_share {
            if set
                && share_off
                && let Some(origin) = here(&[key, "hot_share_pct"])
            {
                return Err(ConfigError::Invalid {
                    origin,
                    key,
                    detail: format!(
                        "{what}, and hot_share_pct ({}) draws none: set hot_share_pct to 1..=99 \
                         first",
                        p.hot_share_pct
                    ),
                });
            }
        }
        let m = &self.migrator;
        if m.demote
            && m.demote_free_pct <= m.promote_min_free_pct
            && let Some(origin) = here(&["demote_free_pct", "demote", "promote_min_free_pct"])
        {
            return Err(ConfigError::Invalid {
                origin,
                key: "demote_free_pct",
                detail: format!(
                    "{} must be above promote_min_free_pct ({}): demotion frees what promotion \
                     keeps in reserve",
                    m.demote_free_pct, m.promote_min_free_pct
                ),
            });
        }
        Ok(())
    }
}
