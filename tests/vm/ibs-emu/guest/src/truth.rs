//! Ground truth for a program nobody here wrote: which of its pages were hot in a measured
//! phase (from the plugin's per-frame access counts) and where they were at each moment (from
//! snapshots of its page table).
//!
//! `pgibs-guest snap PID FILE` DUMPs the plugin's counts since its last RESET into
//! FILE.counts and records every present page of PID's user mappings with its frame
//! (/proc/PID/pagemap: bit 63 present, bits 0-54 the PFN; Documentation/admin-guide/mm/
//! pagemap.rst). `pgibs-guest truth SNAP...` then gives each round's count of a frame (the
//! difference of two snapshots' counts) to the page that held the frame at that round's end,
//! or at its start (see `compute`): a promoted page has two frames in the phase, its slow one
//! and its fast one, and both counts go to that one page, but not what a client did with the
//! fast frame before the page moved into it.
//!
//! The hot set is the fewest pages holding 80 % of the program's counted accesses (issue 18's
//! definition). Pages that other processes map too (libc's), or may (a file's page cache), are
//! kept out: the plugin counts a frame's accesses whoever makes them, so a shared page's count
//! is not the program's (when the rig's `migratepages` still moved shared pages, libc's symbol
//! tables, read by every new redis-benchmark, came out as Redis's hot pages with no Redis
//! sample on them; later libssl's and libstdc++'s, which only Redis mapped between rounds). Over-promotion is the pages moved from a lower-tier node to a top-tier node
//! between the first and the last snapshot that are not in the hot set, per hot page.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use pghotd::topology::{SysfsRoot, Topology};

use crate::{Ctl, Res};

/// Mappings larger than this are skipped (reservations nobody populates; their pagemap
/// would be gigabytes of zeros to read).
const MAX_MAPPING: u64 = 8 << 30;
const HOT_SHARE: f64 = 0.8;
/// A wider cut, to tell over-promoted pages that were nearly hot (in the pages holding 95 %
/// of the accesses) from those that were not.
const WARM_SHARE: f64 = 0.95;
/// The plugin's default latencies of its modelled clock (the seed's DRAM and CXL figures).
const FAST_MODEL_NS: u64 = 143;
const SLOW_MODEL_NS: u64 = 320;

/// The `[lo, hi)` of each of `pid`'s user mappings (lower half, at most `max` bytes long),
/// from /proc/PID/maps.
pub fn user_mappings(pid: u32, max: u64) -> Res<Vec<(u64, u64)>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("/proc/{pid}/maps: {e}"))?;
    Ok(maps
        .lines()
        .filter_map(|line| {
            let (lo, hi) = line.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(lo, 16).ok()?,
                u64::from_str_radix(hi, 16).ok()?,
            ))
        })
        .filter(|&(lo, hi)| hi > lo && lo < 0x8000_0000_0000 && hi - lo <= max)
        .collect())
}

/// (virtual page number, pfn) of every present page of `pid`'s user mappings.
pub fn snapshot(pid: u32) -> Res<Vec<(u64, u64)>> {
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap"))
        .map_err(|e| format!("/proc/{pid}/pagemap: {e}"))?;
    let mut out = Vec::new();
    for (lo, hi) in user_mappings(pid, MAX_MAPPING)? {
        // A mapping that went away meanwhile reads short: skip it.
        let Ok(frames) = crate::pagemap::frames(&pagemap, lo, hi) else {
            continue;
        };
        let pages = frames.into_iter().enumerate();
        out.extend(pages.filter_map(|(i, f)| Some(((lo >> 12) + i as u64, f?))));
    }
    Ok(out)
}

pub fn write_snapshot(pid: u32, path: &str) -> Res<usize> {
    // The plugin's counts since RESET first, then the page table: the round's accesses are
    // given to the pages as they are at its end (see `compute`).
    let (_, counts) = Ctl::open_retrying()?.dump()?;
    let mut raw = Vec::with_capacity(counts.len() * 8);
    for (pfn, n) in &counts {
        raw.extend_from_slice(&pfn.to_le_bytes());
        raw.extend_from_slice(&n.to_le_bytes());
    }
    let counts_path = counts_path(path);
    std::fs::write(&counts_path, raw).map_err(|e| format!("{counts_path}: {e}"))?;
    let snap = snapshot(pid)?;
    let mut bytes = Vec::with_capacity(snap.len() * 16);
    for (vpn, pfn) in &snap {
        bytes.extend_from_slice(&vpn.to_le_bytes());
        bytes.extend_from_slice(&pfn.to_le_bytes());
    }
    std::fs::File::create(path)
        .and_then(|mut f| f.write_all(&bytes))
        .map_err(|e| format!("{path}: {e}"))?;
    Ok(snap.len())
}

/// Where `write_snapshot` puts the plugin's counts beside a snapshot.
fn counts_path(snap: &str) -> String {
    format!("{snap}.counts")
}

/// The pairs of little-endian `width`-byte numbers `write_snapshot` wrote to `path`.
fn read_pairs<T>(path: &str, width: usize, number: impl Fn(&[u8]) -> T) -> Res<Vec<(T, T)>> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if bytes.len() % (2 * width) != 0 {
        return Err(format!(
            "{path}: {} bytes is not a whole number of entries",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(2 * width)
        .map(|c| (number(&c[..width]), number(&c[width..])))
        .collect())
}

/// The (pfn, count) records `write_snapshot` wrote: counts since the plugin's RESET.
fn read_counts(path: &str) -> Res<HashMap<u32, u32>> {
    let pairs = read_pairs(path, 4, |b| u32::from_le_bytes(b.try_into().unwrap()))?;
    Ok(pairs.into_iter().collect())
}

/// Each round's counts from the cumulative ones at each snapshot: frame by frame, what the
/// later snapshot's count adds to the earlier one's.
fn per_round(cumulative: &[HashMap<u32, u32>]) -> Vec<Vec<(u32, u32)>> {
    cumulative
        .windows(2)
        .map(|w| {
            let mut round: Vec<(u32, u32)> = w[1]
                .iter()
                .map(|(&pfn, &n)| (pfn, n.wrapping_sub(w[0].get(&pfn).copied().unwrap_or(0))))
                .filter(|&(_, n)| n != 0)
                .collect();
            round.sort_unstable();
            round
        })
        .collect()
}

fn read_snapshot(path: &str) -> Res<Vec<(u64, u64)>> {
    read_pairs(path, 8, |b| u64::from_le_bytes(b.try_into().unwrap()))
}

/// What the ground truth says about one measured phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Truth {
    pub pages: usize,
    pub accesses: u64,
    pub hot_pages: usize,
    /// The hot set's share of the accesses (>= 80 %, the last page's count tips it over).
    pub hot_share_pct: f64,
    /// Per snapshot: the hot pages on a top-tier node, % of the hot set.
    pub hot_fast_pct: Vec<f64>,
    pub hot_slow_at_start: usize,
    /// Accesses to the program's pages that were not on a lower-tier node at the start (on a
    /// top tier, or mapped later): a promoter that tracks only pages it saw on a lower tier
    /// (pghotd's `hot_share_pct`) ranks against a total without them.
    pub not_slow_at_start_accesses: u64,
    /// Pages on a lower-tier node in the first snapshot and a top-tier one in the last.
    pub promoted: usize,
    pub promoted_hot: usize,
    pub over_promotion_pct: f64,
    /// Pages holding 95 % of the accesses (a superset of the hot set).
    pub warm_pages: usize,
    /// Of the promoted pages that are not hot: those in the 95 % set, and those with no
    /// counted access in the phase at all.
    pub promoted_warm: usize,
    pub promoted_untouched: usize,
    /// The first few untouched promoted pages (virtual page numbers), to find their mapping.
    pub untouched_examples: Vec<u64>,
    /// The program's counted accesses on top-tier and lower-tier frames: with the plugin's
    /// latencies, its own modelled memory time (the guest-wide clock also holds every
    /// other process's, the promoter's included).
    pub app_fast_accesses: u64,
    pub app_slow_accesses: u64,
    /// What any sampler had to tell apart: the hot pages and the others that sat on a
    /// lower-tier node at the start, with their accesses in the phase.
    pub contest: Contest,
    /// Hot pages still on a lower-tier node in the last snapshot: (frame, accesses, virtual
    /// page), in frame order.
    pub left_hot: Vec<(u64, u64, u64)>,
    /// Pages mapped by other processes too at the end, and the accesses to their frames
    /// (anyone's): not in `pages`, `accesses` or the hot set.
    pub shared_pages: usize,
    pub shared_accesses: u64,
}

/// The pages a promoter had to find (hot, on a lower tier at the start) and those it had to
/// leave (the rest on a lower tier at the start), by their accesses in the phase.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Contest {
    /// Hot pages already on a top-tier node at the start (or mapped later): placed for free.
    pub hot_placed: usize,
    pub hot: Vec<u64>,
    pub other: Vec<u64>,
}

/// `rounds[r]`: (pfn, accesses) the plugin counted between snapshots `r` and `r + 1`;
/// `snaps`: (vpn, pfn) per snapshot, oldest first (one more than `rounds`); `fast`: whether a
/// pfn is on a top-tier node.
///
/// A round's count of a frame goes to the page that held the frame at the round's end, or, if
/// none did, at its start (the page moved away during the round, and its accesses there were
/// made before the move). A frame the program held at neither is not counted: frames are
/// reused, and a promoted page's new frame may have been a client's a round before, whose
/// accesses a whole-phase count would have given to the promoted page.
pub fn compute(
    rounds: &[Vec<(u32, u32)>],
    snaps: &[Vec<(u64, u64)>],
    fast: impl Fn(u64) -> bool,
    shared: &HashSet<u64>,
) -> Res<Truth> {
    let (Some(first), Some(last)) = (snaps.first(), snaps.last()) else {
        return Err("truth needs at least one snapshot".into());
    };
    if rounds.len() + 1 != snaps.len() {
        return Err(format!(
            "truth needs one count per round: {} counts for {} snapshots",
            rounds.len(),
            snaps.len()
        ));
    }
    let (mut per_page, app_fast_accesses, app_slow_accesses) = count_per_page(rounds, snaps, &fast);
    // Pages other processes map too (libc's, a shared segment's): the plugin counts every
    // process's accesses to a frame, so theirs are not the program's alone; kept out of the
    // hot set and of over-promotion, and reported apart.
    let shared_accesses = per_page
        .iter()
        .filter(|(v, _)| shared.contains(v))
        .map(|(_, &n)| n)
        .sum();
    let shared_pages = per_page.keys().filter(|v| shared.contains(v)).count();
    per_page.retain(|v, _| !shared.contains(v));
    let accesses: u64 = per_page.values().sum();
    if accesses == 0 {
        return Err("none of the program's pages was accessed in the phase".into());
    }
    let mut ranked: Vec<(u64, u64)> = per_page.iter().map(|(&v, &n)| (v, n)).collect();
    ranked.sort_by_key(|&(v, n)| (std::cmp::Reverse(n), v));
    let (hot, sum) = fewest_holding(&ranked, HOT_SHARE, accesses);
    let (warm, _) = fewest_holding(&ranked, WARM_SHARE, accesses);
    let on_fast = |snap: &Vec<(u64, u64)>| -> HashMap<u64, bool> {
        snap.iter().map(|&(v, p)| (v, fast(p))).collect()
    };
    let where_first = on_fast(first);
    let where_last = on_fast(last);
    let hot_fast_pct = snaps
        .iter()
        .map(|s| {
            let n = s
                .iter()
                .filter(|&&(v, p)| hot.contains(&v) && fast(p))
                .count();
            100.0 * n as f64 / hot.len() as f64
        })
        .collect();
    let promoted: Vec<u64> = where_first
        .iter()
        .filter(|&(v, &f)| !f && where_last.get(v) == Some(&true) && !shared.contains(v))
        .map(|(&v, _)| v)
        .collect();
    let promoted_hot = promoted.iter().filter(|v| hot.contains(v)).count();
    let mut left_hot: Vec<(u64, u64, u64)> = last
        .iter()
        .filter(|&&(v, p)| hot.contains(&v) && !fast(p))
        .map(|&(v, p)| (p, per_page[&v], v))
        .collect();
    left_hot.sort_unstable();
    let contest = contest(&per_page, &hot, &where_first);
    let slow_at_start_accesses: u64 = contest.hot.iter().chain(&contest.other).sum();
    let not_hot = || promoted.iter().filter(|v| !hot.contains(v));
    let promoted_warm = not_hot().filter(|v| warm.contains(v)).count();
    let mut untouched: Vec<u64> = not_hot().filter(|v| per_page[v] == 0).copied().collect();
    untouched.sort_unstable();
    let promoted_untouched = untouched.len();
    untouched.truncate(12);
    Ok(Truth {
        pages: per_page.len(),
        accesses,
        hot_pages: hot.len(),
        hot_share_pct: 100.0 * sum as f64 / accesses as f64,
        hot_fast_pct,
        hot_slow_at_start: hot
            .iter()
            .filter(|v| where_first.get(v) == Some(&false))
            .count(),
        not_slow_at_start_accesses: accesses - slow_at_start_accesses,
        promoted: promoted.len(),
        promoted_hot,
        over_promotion_pct: 100.0 * (promoted.len() - promoted_hot) as f64 / hot.len() as f64,
        warm_pages: warm.len(),
        promoted_warm,
        promoted_untouched,
        untouched_examples: untouched,
        app_fast_accesses,
        app_slow_accesses,
        contest,
        left_hot,
        shared_pages,
        shared_accesses,
    })
}

/// Each round's counts given to the program's pages as `compute` says (the page that held the
/// frame at the round's end, else at its start); every page a snapshot shows, with 0 if never
/// counted; and the counted accesses on fast and on slow frames.
fn count_per_page(
    rounds: &[Vec<(u32, u32)>],
    snaps: &[Vec<(u64, u64)>],
    fast: impl Fn(u64) -> bool,
) -> (HashMap<u64, u64>, u64, u64) {
    let page_of: Vec<HashMap<u64, u64>> = snaps
        .iter()
        .map(|snap| snap.iter().map(|&(vpn, pfn)| (pfn, vpn)).collect())
        .collect();
    let (mut app_fast_accesses, mut app_slow_accesses) = (0, 0);
    let mut per_page: HashMap<u64, u64> = HashMap::new();
    for snap in snaps {
        for &(vpn, _) in snap {
            per_page.entry(vpn).or_default();
        }
    }
    for (r, counts) in rounds.iter().enumerate() {
        for &(pfn, n) in counts {
            let pfn64 = u64::from(pfn);
            let Some(vpn) = page_of[r + 1]
                .get(&pfn64)
                .or_else(|| page_of[r].get(&pfn64))
            else {
                continue;
            };
            *per_page.get_mut(vpn).unwrap() += u64::from(n);
            if fast(pfn64) {
                app_fast_accesses += u64::from(n);
            } else {
                app_slow_accesses += u64::from(n);
            }
        }
    }
    (per_page, app_fast_accesses, app_slow_accesses)
}

/// The program's pages by what a promoter had to do with them (see `Contest`).
fn contest(
    per_page: &HashMap<u64, u64>,
    hot: &HashSet<u64>,
    where_first: &HashMap<u64, bool>,
) -> Contest {
    let mut contest = Contest::default();
    for (v, &n) in per_page {
        match (hot.contains(v), where_first.get(v) == Some(&false)) {
            (true, true) => contest.hot.push(n),
            (true, false) => contest.hot_placed += 1,
            (false, true) => contest.other.push(n),
            (false, false) => {}
        }
    }
    contest
}

/// The fewest pages of `ranked` (hottest first) holding `share` of `accesses`, and their sum.
fn fewest_holding(ranked: &[(u64, u64)], share: f64, accesses: u64) -> (HashSet<u64>, u64) {
    let mut set = HashSet::new();
    let mut sum = 0u64;
    for &(vpn, n) in ranked {
        if sum as f64 >= share * accesses as f64 {
            break;
        }
        set.insert(vpn);
        sum += n;
    }
    (set, sum)
}

/// The hot pages a promoter left on a lower tier, as JSON: how many, the samples the plugin's
/// rate gave each on average over the phase, how many of those had two or more expected
/// (a promoter at threshold 2 should have found them), how many sit in a THP (from
/// /proc/kpageflags; null where it cannot be read), the addresses of the most accessed (to
/// find their mappings in the rig's `maps:` lines) and, per 2 MiB region, how many were left
/// and how many of those were in a THP.
fn left_summary(left: &[(u64, u64, u64)], interval: f64) -> String {
    let expected = |n: u64| n as f64 / interval;
    let mean = left.iter().map(|&(_, n, _)| expected(n)).sum::<f64>() / left.len().max(1) as f64;
    let two_plus = left.iter().filter(|&&(_, n, _)| expected(n) >= 2.0).count();
    let mut hottest: Vec<&(u64, u64, u64)> = left.iter().collect();
    hottest.sort_unstable_by_key(|&&(_, n, v)| (std::cmp::Reverse(n), v));
    let examples: Vec<String> = hottest
        .iter()
        .take(12)
        .map(|&&(_, n, v)| format!("\"{:#x}:{:.0}\"", v << 12, expected(n)))
        .collect();
    let kpageflags = std::fs::File::open("/proc/kpageflags").ok();
    let in_thp = |pfn: u64| {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 8];
        kpageflags.as_ref().is_some_and(|f| {
            f.read_exact_at(&mut b, pfn * 8).is_ok()
                && pghotd::admission::thp::in_large_thp_folio(u64::from_le_bytes(b))
        })
    };
    // 2 MiB region -> (pages left, of them in a THP).
    let mut regions: std::collections::BTreeMap<u64, (usize, usize)> = Default::default();
    for &(pfn, _, v) in left {
        let r = regions.entry((v << 12) & !((2 << 20) - 1)).or_default();
        r.0 += 1;
        r.1 += usize::from(in_thp(pfn));
    }
    let thp_total: usize = regions.values().map(|&(_, thp)| thp).sum();
    let mut by_left: Vec<(u64, (usize, usize))> = regions.into_iter().collect();
    by_left.sort_by_key(|&(start, (n, _))| (std::cmp::Reverse(n), start));
    let regions: Vec<String> = by_left
        .iter()
        .take(12)
        .map(|(start, (n, thp))| format!("\"{start:#x}:{n}:{thp}\""))
        .collect();
    format!(
        "{{\"pages\":{},\"mean_expected_samples\":{mean:.2},\"expected_two_or_more\":{two_plus},\"in_thp\":{},\"examples\":[{}],\"regions_left_thp\":[{}]}}",
        left.len(),
        if kpageflags.is_some() {
            thp_total.to_string()
        } else {
            "null".into()
        },
        examples.join(","),
        regions.join(","),
    )
}

/// kpageflags' bit for an anonymous page (include/uapi/linux/kernel-page-flags.h `KPF_ANON`).
const KPF_ANON: u64 = 1 << 12;

/// The virtual pages of `snap` whose frame other processes map or may map: more than one
/// mapping holds it now (/proc/kpagecount: one u64 per PFN, the page's map count), or it is
/// not anonymous (/proc/kpageflags without `KPF_ANON`): a file's page cache, which every
/// process that maps the file reads through its own mapping. The program may be the only one
/// mapping a library page at the end and yet not its only reader: each round's redis-benchmark
/// maps libssl and libstdc++ and its loader reads their symbol tables, through frames the rig's
/// `migratepages` moved with Redis's (Documentation/admin-guide/mm/pagemap.rst). Returns the
/// set and how many of it were file pages; empty where the files cannot be read.
fn shared_pages(snap: &[(u64, u64)]) -> (HashSet<u64>, usize) {
    use std::os::unix::fs::FileExt;
    let read = |f: &std::fs::File, pfn: u64| {
        let mut b = [0u8; 8];
        f.read_exact_at(&mut b, pfn * 8)
            .ok()
            .map(|()| u64::from_le_bytes(b))
    };
    let counts = std::fs::File::open("/proc/kpagecount").ok();
    let flags = std::fs::File::open("/proc/kpageflags").ok();
    let mut shared = HashSet::new();
    let mut file = 0;
    for &(vpn, pfn) in snap {
        let mapped_more = counts
            .as_ref()
            .and_then(|f| read(f, pfn))
            .is_some_and(|n| n > 1);
        let not_anon = flags
            .as_ref()
            .and_then(|f| read(f, pfn))
            .is_some_and(|fl| fl & KPF_ANON == 0);
        if mapped_more || not_anon {
            shared.insert(vpn);
            file += usize::from(not_anon && !mapped_more);
        }
    }
    (shared, file)
}

/// DUMPs the plugin's counts and prints the truth for the snapshots as one line of JSON.
pub fn report(snap_paths: &[String]) -> Res<()> {
    let topo = Topology::read(SysfsRoot::new("/sys")).map_err(|e| format!("topology: {e}"))?;
    let (plugin, _) = Ctl::open_retrying()?.dump()?;
    let interval = crate::reach::mean_interval(plugin.get("period").copied().unwrap_or(0));
    let snaps = snap_paths
        .iter()
        .map(|p| read_snapshot(p))
        .collect::<Res<Vec<_>>>()?;
    let fast = |pfn: u64| {
        topo.physmap()
            .node_of(pfn << 12)
            .is_some_and(|n| !topo.is_lower_tier(n))
    };
    let cumulative = snap_paths
        .iter()
        .map(|p| read_counts(&counts_path(p)))
        .collect::<Res<Vec<_>>>()?;
    let (shared, file_pages) = shared_pages(snaps.last().map_or(&[][..], |s| &s[..]));
    let t = compute(&per_round(&cumulative), &snaps, fast, &shared)?;
    let series: Vec<String> = t.hot_fast_pct.iter().map(|p| format!("{p:.1}")).collect();
    let left = left_summary(&t.left_hot, interval);
    let reach: Vec<String> = [1, 2, 4, 8]
        .map(|x| crate::reach::reach(&t.contest, interval, x))
        .iter()
        .map(|r| {
            format!(
                "{{\"phase_x\":{},\"k1_hot_pct\":{:.1},\"k1_over_pct\":{:.1},\"k2_hot_pct\":{:.1},\"k2_over_pct\":{:.1},\"over_pct_at_95\":{:.1},\"hot_pct_at_10\":{}}}",
                r.phase_x,
                r.k1_hot_pct,
                r.k1_over_pct,
                r.k2_hot_pct,
                r.k2_over_pct,
                r.over_pct_at_95,
                r.hot_pct_at_10.map_or("null".into(), |h| format!("{h:.1}")),
            )
        })
        .collect();
    let first_sample: Vec<String> =
        crate::reach::first_sample_series(&t.contest, interval, snaps.len().saturating_sub(1))
            .iter()
            .map(|p| format!("{p:.1}"))
            .collect();
    println!(
        "PGIBS-GROUND {{\"pages\":{},\"accesses\":{},\"hot_pages\":{},\"hot_mb\":{:.1},\"hot_share_pct\":{:.1},\"hot_slow_at_start\":{},\"not_slow_at_start_accesses\":{},\"hot_fast_pct\":{:.1},\"hot_fast_pct_series\":[{}],\"promoted_pages\":{},\"promoted_hot_pages\":{},\"over_promotion_pct\":{:.1},\"warm_pages\":{},\"promoted_warm_pages\":{},\"promoted_untouched_pages\":{},\"untouched_examples\":[{}],\"app_fast_accesses\":{},\"app_slow_accesses\":{},\"app_modelled_mem_ms\":{:.1},\"shared_pages\":{},\"shared_file_pages\":{file_pages},\"shared_accesses\":{},\"sample_interval\":{interval},\"reach\":[{}],\"first_sample_series\":[{}],\"left_hot\":{left}}}",
        t.pages,
        t.accesses,
        t.hot_pages,
        t.hot_pages as f64 * 4.0 / 1024.0,
        t.hot_share_pct,
        t.hot_slow_at_start,
        t.not_slow_at_start_accesses,
        t.hot_fast_pct.last().copied().unwrap_or(0.0),
        series.join(","),
        t.promoted,
        t.promoted_hot,
        t.over_promotion_pct,
        t.warm_pages,
        t.promoted_warm,
        t.promoted_untouched,
        t.untouched_examples
            .iter()
            .map(|v| format!("\"{:#x}\"", v << 12))
            .collect::<Vec<_>>()
            .join(","),
        t.app_fast_accesses,
        t.app_slow_accesses,
        (t.app_fast_accesses * FAST_MODEL_NS + t.app_slow_accesses * SLOW_MODEL_NS) as f64 / 1e6,
        t.shared_pages,
        t.shared_accesses,
        reach.join(","),
        first_sample.join(","),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worked by hand: four pages A-D (vpn 1-4) on slow frames 100-103 at the start; A and C
    /// move to fast frames 10 and 12 by the end. Counts 50 (A: 30 on its slow frame, 20 on its
    /// fast one), 30 (B), 15 (C), 5 (D): total 100; 80 % is reached after A (50) and B (80),
    /// so the hot set is {A, B}. At the end A is fast and B slow: 50 % placed. Promoted: A
    /// and C; C is not hot, so over-promotion is 1 / 2 = 50 %. Frame 7 is nobody's.
    #[test]
    fn hot_set_placement_and_over_promotion_by_hand() {
        let start = vec![(1, 100), (2, 101), (3, 102), (4, 103)];
        let end = vec![(1, 10), (2, 101), (3, 12), (4, 103)];
        let counts = vec![(100, 30), (10, 20), (101, 30), (12, 15), (103, 5), (7, 999)];
        let t = compute(&[counts], &[start, end], |pfn| pfn < 100, &HashSet::new()).unwrap();
        assert_eq!(t.pages, 4);
        assert_eq!(t.accesses, 100);
        assert_eq!(t.hot_pages, 2);
        assert_eq!(t.hot_share_pct, 80.0);
        assert_eq!(t.hot_fast_pct, vec![0.0, 50.0]);
        assert_eq!(t.hot_slow_at_start, 2);
        assert_eq!(t.not_slow_at_start_accesses, 0);
        assert_eq!((t.promoted, t.promoted_hot), (2, 1));
        assert_eq!(t.over_promotion_pct, 50.0);
        // B, hot, stays on its slow frame 101 with its 30 accesses.
        assert_eq!(t.left_hot, vec![(101, 30, 2)]);
        // 95 % of 100 is reached after A, B and C (95): C, the one page promoted but not hot,
        // was nearly hot; none promoted was untouched.
        assert_eq!(t.warm_pages, 3);
        assert_eq!((t.promoted_warm, t.promoted_untouched), (1, 0));
        // Frames below 100 are fast: 20 (A's fast frame) + 15 (C's); the rest slow.
        assert_eq!((t.app_fast_accesses, t.app_slow_accesses), (35, 65));
    }

    /// By hand: A (vpn 1, 10 accesses) stays on slow frame 100; B (vpn 2) moves from slow
    /// frame 101 to fast frame 11 with no access at all. The hot set and the 95 % set are
    /// {A}; B is over-promotion (100 %), untouched, not warm.
    #[test]
    fn a_promoted_page_nobody_touched_is_counted_apart() {
        let start = vec![(1, 100), (2, 101)];
        let end = vec![(1, 100), (2, 11)];
        let t = compute(
            &[vec![(100, 10)]],
            &[start, end],
            |pfn| pfn < 100,
            &HashSet::new(),
        )
        .unwrap();
        assert_eq!((t.hot_pages, t.warm_pages), (1, 1));
        assert_eq!((t.promoted, t.promoted_hot), (1, 0));
        assert_eq!(t.over_promotion_pct, 100.0);
        assert_eq!((t.promoted_warm, t.promoted_untouched), (0, 1));
    }

    /// By hand: A (vpn 1) sits on fast frame 10 from the start with 50 accesses, B and C on
    /// slow frames 100 and 101 with 30 and 20: 50 of the 100 accesses were never on the slow
    /// tier. The hot set (80: A and B) holds one page placed for free.
    #[test]
    fn accesses_to_pages_never_on_the_slow_tier_are_counted_apart() {
        let start = vec![(1, 10), (2, 100), (3, 101)];
        let counts = vec![(10, 50), (100, 30), (101, 20)];
        let t = compute(
            &[counts],
            &[start.clone(), start],
            |pfn| pfn < 100,
            &HashSet::new(),
        )
        .unwrap();
        assert_eq!((t.accesses, t.not_slow_at_start_accesses), (100, 50));
        assert_eq!((t.hot_pages, t.hot_slow_at_start), (2, 1));
    }

    /// By hand: A (vpn 1, 60 accesses on slow frame 100) is libc's, shared; B (vpn 2, 30)
    /// and C (vpn 3, 10) are private. Without A: 40 accesses, 80 % = 32 is reached after B
    /// (30) and C (40), so the hot set is {B, C}; A, promoted to fast frame 10, is neither
    /// hot nor over-promotion. The shared figures hold A's 60 + 5 (its fast frame).
    #[test]
    fn pages_other_processes_map_are_kept_apart() {
        let start = vec![(1, 100), (2, 101), (3, 102)];
        let end = vec![(1, 10), (2, 101), (3, 102)];
        let counts = vec![(100, 60), (10, 5), (101, 30), (102, 10)];
        let shared: HashSet<u64> = [1].into();
        let t = compute(&[counts], &[start, end], |pfn| pfn < 100, &shared).unwrap();
        assert_eq!((t.pages, t.accesses, t.hot_pages), (2, 40, 2));
        assert_eq!((t.promoted, t.over_promotion_pct), (0, 0.0));
        assert_eq!((t.shared_pages, t.shared_accesses), (1, 65));
    }

    /// By hand, two rounds: A (vpn 1) on slow frame 100 moves to fast frame 10 during round 2;
    /// B (vpn 2) stays on slow frame 101. In round 1 frame 10 was another process's, with 500
    /// accesses. Round 1: 100 -> 5, 10 -> 500; round 2: 100 -> 2 (before the move: frame 100
    /// is A's at the round's start), 10 -> 3, 101 -> 40. A has 5 + 2 + 3 = 10, B 40, not 510
    /// for A as a count over the whole phase would give. 80 % of 50 is B's 40: the hot set is
    /// {B}, and A, promoted, is over-promotion.
    #[test]
    fn a_reused_frame_counts_for_its_page_only_while_the_page_holds_it() {
        let s0 = vec![(1, 100), (2, 101)];
        let s1 = s0.clone();
        let s2 = vec![(1, 10), (2, 101)];
        let rounds = [
            vec![(10, 500), (100, 5)],
            vec![(10, 3), (100, 2), (101, 40)],
        ];
        let t = compute(&rounds, &[s0, s1, s2], |pfn| pfn < 100, &HashSet::new()).unwrap();
        assert_eq!((t.accesses, t.hot_pages), (50, 1));
        assert_eq!(
            (t.promoted, t.promoted_hot, t.over_promotion_pct),
            (1, 0, 100.0)
        );
        assert_eq!((t.app_fast_accesses, t.app_slow_accesses), (3, 47));
    }

    /// Both files as `write_snapshot` lays them out, read back; a torn one is an error.
    #[test]
    fn snapshot_and_counts_files_read_back() {
        let dir = std::env::temp_dir().join(format!("pgibs-truth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let snap = dir.join("snap");
        let mut raw = Vec::new();
        raw.extend_from_slice(&0x7f00_0001_u64.to_le_bytes());
        raw.extend_from_slice(&0x0008_0001_u64.to_le_bytes());
        std::fs::write(&snap, &raw).unwrap();
        let snap = snap.to_str().unwrap();
        assert_eq!(
            read_snapshot(snap).unwrap(),
            vec![(0x7f00_0001, 0x0008_0001)]
        );
        std::fs::write(counts_path(snap), [7, 0, 0, 0, 5, 0, 0, 0, 1]).unwrap();
        assert!(read_counts(&counts_path(snap)).is_err());
        std::fs::write(counts_path(snap), [7, 0, 0, 0, 5, 0, 0, 0]).unwrap();
        assert_eq!(read_counts(&counts_path(snap)).unwrap(), [(7, 5)].into());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Cumulative counts 0 -> {7: 5} -> {7: 9, 8: 1}: rounds {7: 5} and {7: 4, 8: 1}.
    #[test]
    fn rounds_from_cumulative_counts() {
        let c = [HashMap::new(), [(7, 5)].into(), [(7, 9), (8, 1)].into()];
        assert_eq!(per_round(&c), vec![vec![(7, 5)], vec![(7, 4), (8, 1)]]);
    }

    #[test]
    fn no_counted_access_is_an_error_not_a_perfect_score() {
        let snap = vec![(1, 100)];
        assert!(
            compute(
                &[vec![(5, 1)]],
                &[snap.clone(), snap.clone()],
                |_| true,
                &HashSet::new()
            )
            .is_err()
        );
        assert!(compute(&[], &[], |_| true, &HashSet::new()).is_err());
        // One count per round between snapshots, or the attribution has no meaning.
        assert!(compute(&[vec![(100, 1)]], &[snap], |_| true, &HashSet::new()).is_err());
    }
}
