//! The plugin's arguments (`-plugin libpghot_ibs_emu.so,key=value,...`).
//!
//! QEMU 7.2 hands a plugin every `key=value` after `file=` as one argv string; the older
//! `arg=key=value` form is still accepted there (with a deprecation warning) and arrives the
//! same way, as `key=value`. See README.md for the list.

use std::path::PathBuf;

/// Parsed and checked plugin arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Mean user-mode memory operations between two samples, per vCPU (>= 16).
    pub period: u64,
    /// Guest-physical range of the slow node, `[slow_lo, slow_hi)`.
    pub slow_lo: u64,
    pub slow_hi: u64,
    /// Host nanoseconds spun on every access to the slow range (0: off).
    pub slow_ns: u64,
    /// Host nanoseconds spun on every access elsewhere in RAM (0: off): with a modelled
    /// cache, the memory time of a fast-tier miss (README.md, "Time dilation").
    pub fast_ns: u64,
    /// Latencies of the modelled memory clock, per user-mode access.
    pub fast_model_ns: u64,
    pub slow_model_ns: u64,
    /// Guest RAM in MiB: the size of the per-page counter arrays.
    pub ram_mb: u64,
    /// Slots of each vCPU's sample ring (a power of two).
    pub ring: usize,
    /// Unix sockets the plugin connects to (QEMU's chardev servers); `None`: not used.
    pub samples: Option<PathBuf>,
    pub ctl: Option<PathBuf>,
    /// Seed of the per-vCPU PRNGs that randomise the sampling period's low bits.
    pub seed: u64,
    /// Sizes in MiB of the guest's per-node memory backends, in command-line order
    /// (`memdev_mb=1024:1024:1024`; QEMU splits plugin options at commas): turns on the QEMU 7.2 address correction, see [`PhysFix`].
    pub memdev_mb: Vec<u64>,
    /// How much of the per-access work to do, for measuring its cost (README.md, "Cost"):
    /// 0 return at once, 1 also look up the hwaddr, 2 also ask for the physical address,
    /// 3 everything (the default).
    pub probe: u8,
    /// Whether accesses are counted, sampled and slowed from the start (`armed=1`, the
    /// default). `armed=0` leaves every callback returning at once until the control command
    /// `ARM`: a guest's boot (the kernel unpacking a large initramfs) then pays only for the
    /// callbacks themselves, not for the address lookup.
    pub armed: bool,
    /// KiB of the modelled cache per vCPU (0: none, every access is a memory access). With
    /// one, only accesses that miss it are counted per page, add to the modelled clock, pay
    /// the slow node's delay and are sampled (README.md, "The modelled cache").
    pub cache_kb: u64,
    /// Ways per set of the modelled cache (a power of two, 1..=16; 1 is direct-mapped).
    pub cache_ways: usize,
    /// Count the modelled cache's misses per task and cause (`by_task=1`; needs `cache_kb`
    /// and the task channel to name anyone): README.md, "Whose misses".
    pub by_task: bool,
    /// On a miss of a vCPU's modelled cache, look the line up in the other vCPUs' caches; a
    /// line found there is a hit, served cache to cache as a real core's miss is served from
    /// its neighbours' caches (`snoop=1`; needs `cache_kb`): README.md, "The modelled cache".
    pub snoop: bool,
}

/// Undoes QEMU 7.2's `qemu_plugin_hwaddr_phys_addr` for RAM in `-object memory-backend-*`
/// blocks: it returns `block->offset + offset + block->mr->addr`, the block's offset in QEMU's
/// internal ram_addr space *plus* its offset in the guest's memory container, so a backend that
/// is not first is counted twice (plugins/api.c in 7.2; later QEMUs return the address the
/// softmmu TLB recorded). The backends get their ram_addr in command-line order before any other
/// RAM block, at the same offsets as in the NUMA memory container, so block k (base b_k = the
/// sizes before it) reports `2 b_k + off` for guest-physical `b_k + off`. Measured: with
/// lib.sh's 3node topology, node 1's pages came back at 2-3 GiB (the slow node's range) and
/// node 2's at 4-5 GiB (beyond RAM) without it; the guest check (check.sh) maps its buffer
/// through /proc/PID/pagemap and confirms the corrected addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhysFix {
    /// (reported start, length, guest-physical start) per backend after the first.
    blocks: Vec<(u64, u64, u64)>,
}

impl PhysFix {
    pub fn new(memdev_mb: &[u64]) -> PhysFix {
        let mut base = 0u64;
        let mut blocks = Vec::new();
        for (k, &mb) in memdev_mb.iter().enumerate() {
            let len = mb << 20;
            if k > 0 {
                blocks.push((2 * base, len, base));
            }
            base += len;
        }
        PhysFix { blocks }
    }

    /// The guest-physical address of a reported one (unchanged outside the later blocks).
    #[inline(always)]
    pub fn apply(&self, reported: u64) -> u64 {
        for &(rep, len, phys) in &self.blocks {
            if reported.wrapping_sub(rep) < len {
                return reported - rep + phys;
            }
        }
        reported
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            period: 10_000,
            // Node 2 of tests/vm/lib.sh's 3node topology.
            slow_lo: 0x8000_0000,
            slow_hi: 0xc000_0000,
            slow_ns: 0,
            fast_ns: 0,
            // The seed's DRAM and CXL load latencies.
            fast_model_ns: 143,
            slow_model_ns: 320,
            ram_mb: 3072,
            ring: 8192,
            samples: None,
            ctl: None,
            seed: 0x5eed,
            memdev_mb: Vec::new(),
            probe: 3,
            armed: true,
            cache_kb: 0,
            cache_ways: 1,
            by_task: false,
            snoop: false,
        }
    }
}

/// Parses `0x`-prefixed hex or decimal.
pub fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16).ok(),
        None => s.replace('_', "").parse().ok(),
    }
}

impl Config {
    /// Parses the plugin's argv strings (`key=value` each).
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Config, String> {
        let mut c = Config::default();
        for arg in args {
            let arg = arg.as_ref();
            // `arg=key=value` (the pre-6.1 spelling), should a QEMU pass it through unchanged.
            let arg = arg.strip_prefix("arg=").unwrap_or(arg);
            let (key, value) = arg
                .split_once('=')
                .ok_or_else(|| format!("argument '{arg}' is not key=value"))?;
            let num = || parse_u64(value).ok_or_else(|| format!("{key}={value}: not a number"));
            match key {
                "period" => c.period = num()?,
                "slow_lo" => c.slow_lo = num()?,
                "slow_hi" => c.slow_hi = num()?,
                "slow_ns" => c.slow_ns = num()?,
                "fast_ns" => c.fast_ns = num()?,
                "fast_model_ns" => c.fast_model_ns = num()?,
                "slow_model_ns" => c.slow_model_ns = num()?,
                "ram_mb" => c.ram_mb = num()?,
                "ring" => c.ring = num()? as usize,
                "seed" => c.seed = num()?,
                "probe" => c.probe = num()?.min(3) as u8,
                "armed" => c.armed = num()? != 0,
                "cache_kb" => c.cache_kb = num()?,
                "cache_ways" => c.cache_ways = num()? as usize,
                "by_task" => c.by_task = num()? != 0,
                "snoop" => c.snoop = num()? != 0,
                "samples" => c.samples = Some(PathBuf::from(value)),
                "ctl" => c.ctl = Some(PathBuf::from(value)),
                "memdev_mb" => {
                    c.memdev_mb = value
                        .split(['/', ':', ';'])
                        .map(|v| parse_u64(v).filter(|&mb| mb > 0))
                        .collect::<Option<_>>()
                        .ok_or_else(|| {
                            format!("memdev_mb={value}: sizes in MiB, e.g. 1024:1024:1024")
                        })?;
                }
                _ => return Err(format!("unknown argument '{key}'")),
            }
        }
        if c.period < 16 {
            return Err(format!("period={}: must be at least 16", c.period));
        }
        if c.slow_hi < c.slow_lo {
            return Err(format!(
                "slow_hi={:#x} is below slow_lo={:#x}",
                c.slow_hi, c.slow_lo
            ));
        }
        if c.ram_mb == 0 || c.ram_mb > 1 << 20 {
            return Err(format!("ram_mb={}: 1..=1048576", c.ram_mb));
        }
        if c.cache_kb != 0 && (!c.cache_kb.is_power_of_two() || c.cache_kb > 1 << 20) {
            return Err(format!(
                "cache_kb={}: 0 (none) or a power of two up to 1048576",
                c.cache_kb
            ));
        }
        if !c.cache_ways.is_power_of_two() || c.cache_ways > 16 {
            return Err(format!(
                "cache_ways={}: a power of two from 1 to 16",
                c.cache_ways
            ));
        }
        if c.cache_kb != 0 && (c.cache_kb << 10) / 64 < c.cache_ways as u64 {
            return Err(format!(
                "cache_kb={} holds fewer lines than cache_ways={}",
                c.cache_kb, c.cache_ways
            ));
        }
        if c.by_task && c.cache_kb == 0 {
            return Err("by_task=1 counts the modelled cache's misses: it needs cache_kb".into());
        }
        if c.snoop && c.cache_kb == 0 {
            return Err(
                "snoop=1 looks misses up in the other vCPUs' modelled caches: it needs cache_kb"
                    .into(),
            );
        }
        if !c.ring.is_power_of_two() || c.ring < 2 {
            return Err(format!("ring={}: a power of two >= 2", c.ring));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c = Config::parse(&["period=4096", "slow_lo=0x80000000", "arg=slow_ns=150"]).unwrap();
        assert_eq!(c.period, 4096);
        assert_eq!(c.slow_lo, 0x8000_0000);
        assert_eq!(c.slow_ns, 150);
        assert_eq!(c.slow_hi, 0xc000_0000);
        assert!(Config::parse(&["period=8"]).is_err());
        assert!(Config::parse(&["bogus=1"]).is_err());
        assert!(Config::parse(&["period"]).is_err());
        let c = Config::parse(&["memdev_mb=1024:1024:1024"]).unwrap();
        assert_eq!(c.memdev_mb, vec![1024, 1024, 1024]);
        assert!(
            Config::parse(&["by_task=1"]).is_err(),
            "no cache to attribute"
        );
        assert!(
            Config::parse(&["by_task=1", "cache_kb=1024"])
                .unwrap()
                .by_task
        );
        assert!(Config::parse(&["snoop=1"]).is_err(), "no caches to snoop");
        assert!(Config::parse(&["snoop=1", "cache_kb=1024"]).unwrap().snoop);
    }

    #[test]
    fn phys_fix_undoes_the_double_offset() {
        const G: u64 = 1 << 30;
        let f = PhysFix::new(&[1024, 1024, 1024]);
        assert_eq!(f.apply(0x1234), 0x1234);
        assert_eq!(f.apply(2 * G + 0x5000), G + 0x5000);
        assert_eq!(f.apply(4 * G + 0x5000), 2 * G + 0x5000);
        assert_eq!(f.apply(5 * G + 1), 5 * G + 1);
        assert_eq!(PhysFix::new(&[]).apply(4 * G), 4 * G);
    }
}
