use std::io::Cursor;
use std::path::Path;

use super::build::{Event, PerfDataFile};
use super::*;
use crate::sample::{AccessOp, DataSource};
use crate::sampler::collect::{Collected, Collector};
use crate::sampler::hwplan::ibs_raw;
use crate::sampler::perf::record::{SampleFormat, SampleRecord, build as rec};

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/perfdata")
        .join(name)
}

fn replay_bytes(bytes: Vec<u8>) -> Result<(Replayed, Collected), PerfDataError> {
    let len = bytes.len() as u64;
    let mut data = PerfData::open(Cursor::new(bytes), len, "test")?;
    let sinks = Collector::default();
    let mut sink = sinks.sink();
    let done = data.replay(&mut *sink, &StopToken::new())?;
    drop(sink);
    Ok((done, sinks.take()))
}

#[test]
fn the_file_perf_wrote_here_decodes_to_what_perf_script_lists() {
    // tests/fixtures/perfdata/README.md: `perf record -e page-faults -c 1 -d` of /bin/true,
    // and `perf script -F pid,tid,time,addr` of that file.
    let bytes = std::fs::read(fixture("pagefaults.data")).unwrap();
    let script = std::fs::read_to_string(fixture("pagefaults.script")).unwrap();
    // `  PID/TID  SECS.USECS:  ADDR`
    let listed: Vec<(u32, u32, u64, u64)> = script
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (pid, tid) = f[0].split_once('/').unwrap();
            let (secs, usecs) = f[1].trim_end_matches(':').split_once('.').unwrap();
            let micros = secs.parse::<u64>().unwrap() * 1_000_000 + usecs.parse::<u64>().unwrap();
            let addr = u64::from_str_radix(f[2], 16).unwrap();
            (pid.parse().unwrap(), tid.parse().unwrap(), micros, addr)
        })
        .collect();
    assert_eq!(listed.len(), 51, "the fixture's README says 51 samples");
    let (done, got) = replay_bytes(bytes).unwrap();
    assert_eq!(done.samples, listed.len() as u64);
    assert_eq!(done.skipped, 0);
    let decoded: Vec<(u32, u32, u64, u64)> = got
        .samples
        .iter()
        .map(|s| (s.pid, s.tid, s.time_ns / 1000, s.vaddr))
        .collect();
    assert_eq!(decoded, listed);
    assert!(
        got.samples
            .iter()
            .all(|s| s.source == SourceKind::PageFault)
    );
    assert_eq!(got.count_of(Counter::PerfBadRecords), 0);
    // `perf record -c 1`: each sample stands for one fault.
    assert_eq!(got.periods, vec![(0, 1)]);
}

/// Writes `bytes` as `dir/name` and returns the path, for `PerfDataSource::open`.
fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

/// A PMU type number this machine does not have (its perf lists software 1, tracepoint 2,
/// breakpoint 5, uprobe 8, power 9 and msr 10 in `perf report --header-only`).
const FOREIGN_IBS_TYPE: u32 = 61;
/// `IP|TID|TIME|ADDR|CPU|WEIGHT|DATA_SRC|PHYS_ADDR|RAW` (`enum perf_event_sample_format` in
/// `include/uapi/linux/perf_event.h`: bits 0, 1, 2, 3, 7, 14, 15, 19 and 10), what
/// `perf record -e ibs_op// -d --phys-data --raw-samples -W --data-src` asks for.
const IBS_SAMPLE_TYPE: u64 = 0x1 | 0x2 | 0x4 | 0x8 | 0x80 | 0x4000 | 0x8000 | 0x8_0000 | 0x400;
const VADDR: u64 = 0x7f00_1234_5000;
const PADDR: u64 = 0x20_4000_5000;

/// A user-mode load that missed L1 and L2 and was served from extension (CXL) memory, with
/// DcMissNoMabAlloc set: erratum #1293 territory. Bits from `arch/x86/include/asm/amd-ibs.h`:
/// `union ibs_op_ctl` op_en 17, op_val 18; `union ibs_op_data2` data_src_lo 0-2, data_src_hi
/// 6-7 (DataSrc 8 = `IBS_DATA_SRC_EXT_EXT_MEM`: lo 0, hi 1); `union ibs_op_data3` ld_op 0,
/// dc_miss 7, dc_miss_no_mab_alloc 16, dc_lin_addr_valid 17, dc_phy_addr_valid 18, l2_miss 20,
/// dc_miss_lat 32-47. The caps word: IBS_CAPS_AVAIL 0, OPSAM 2, OPCNT 4, RIPINVALIDCHK 7, ZEN4
/// 11 (`arch/x86/include/asm/perf_event.h`).
fn cxl_load_past_l2() -> Vec<u8> {
    let caps = 1 | 1 << 2 | 1 << 4 | 1 << 7 | 1 << 11;
    let ctl = 1 << 17 | 1 << 18;
    let data2 = 1 << 6;
    let data3 = 1 | 1 << 7 | 1 << 16 | 1 << 17 | 1 << 18 | 1 << 20 | 420 << 32;
    ibs_raw(caps, [ctl, 0x40_1000, 0, data2, data3, VADDR, PADDR])
}

fn ibs_file(cpuid: &str, pmus: Vec<(u32, String)>) -> Vec<u8> {
    let raw = cxl_load_past_l2();
    let format = SampleFormat::new(IBS_SAMPLE_TYPE).unwrap();
    let sample = SampleRecord {
        misc: 2, // PERF_RECORD_MISC_USER
        ip: 0x40_1000,
        pid: 4321,
        tid: 4322,
        time: 1_000_000,
        addr: VADDR,
        cpu: 5,
        raw: Some(&raw),
        phys_addr: PADDR,
        ..rec::empty()
    };
    PerfDataFile {
        events: vec![Event {
            name: "ibs_op//".into(),
            pmu_type: FOREIGN_IBS_TYPE,
            config: 0,
            sample_type: IBS_SAMPLE_TYPE,
            period: 100_000,
            ids: vec![900, 901],
        }],
        pmus,
        cpuid: Some(cpuid.into()),
        records: vec![rec::sample(format, &sample), rec::lost(3)],
    }
    .to_bytes()
}

fn amd_pmus() -> Vec<(u32, String)> {
    vec![
        (1, "software".into()),
        (4, "cpu".into()),
        (FOREIGN_IBS_TYPE, "ibs_op".into()),
    ]
}

#[test]
fn ibs_from_another_machine_is_found_by_pmu_name_and_decoded_with_its_cpus_errata() {
    // Genoa: family 25 (0x19), model 17 (0x11): no erratum, DataSrc 8 is extension memory.
    let (done, got) = replay_bytes(ibs_file("AuthenticAMD,25,17,1", amd_pmus())).unwrap();
    assert_eq!((done.samples, done.skipped), (1, 0));
    let s = got.samples[0];
    assert_eq!((s.pid, s.tid, s.cpu), (4321, 4322, 5));
    assert_eq!((s.vaddr, s.paddr), (VADDR, Some(PADDR)));
    assert_eq!((s.op, s.served_from), (AccessOp::Load, DataSource::ExtMem));
    assert_eq!((s.latency, s.source), (Some(420), SourceKind::Ibs));
    assert_eq!(got.count_of(Counter::SourceLostRecords), 3);
    assert_eq!(got.periods, vec![(0, 100_000)]);

    // Milan: family 25, model 1. Erratum #1293: with DcMissNoMabAlloc, OpData2 is invalid
    // (`perf_ibs_get_op_data2()` in arch/x86/events/amd/ibs.c), so no source is claimed.
    let (_, got) = replay_bytes(ibs_file("AuthenticAMD,25,1,1", amd_pmus())).unwrap();
    assert_eq!(got.samples[0].served_from, DataSource::Unknown);
}

#[test]
fn an_event_whose_pmu_the_file_does_not_name_is_refused_with_the_reason() {
    let without_ibs = vec![(1, "software".to_string()), (4, "cpu".to_string())];
    let err = replay_bytes(ibs_file("AuthenticAMD,25,17,1", without_ibs))
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(matches!(err, PerfDataError::NothingReadable(_)), "{text}");
    assert!(
        text.contains("ibs_op//") && text.contains("PMU type 61"),
        "{text}"
    );
    // The same type number named as another PMU is not read as IBS.
    let other = vec![(FOREIGN_IBS_TYPE, "uprobe".to_string())];
    let text = replay_bytes(ibs_file("AuthenticAMD,25,17,1", other))
        .err()
        .unwrap()
        .to_string();
    assert!(text.contains("PMU uprobe (type 61)"), "{text}");
}

#[test]
fn cut_files_name_the_part_that_is_missing() {
    let whole = ibs_file("AuthenticAMD,25,17,1", amd_pmus());
    let dir = tempfile::tempdir().unwrap();
    for cut in [0, 50, 104, 300, whole.len() - 200, whole.len() - 1] {
        let path = write(dir.path(), "cut.data", &whole[..cut]);
        let err = PerfDataSource::open(&path)
            .err()
            .expect("a cut file is refused");
        let text = err.to_string();
        assert!(text.contains(&path), "{cut}: {text}");
        assert!(
            text.contains("too short") || text.contains("cut short"),
            "{cut}: {text}"
        );
    }
    let path = write(dir.path(), "whole.data", &whole);
    assert!(PerfDataSource::open(&path).is_ok());
}

#[test]
fn corrupt_files_get_an_error_that_says_what_is_wrong_never_a_panic() {
    let whole = ibs_file("AuthenticAMD,25,17,1", amd_pmus());
    let patched = |at: usize, bytes: &[u8]| {
        let mut b = whole.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    };
    let attrs_end = 104 + 144;
    let ids_end = attrs_end + 16;
    let cases: [(Vec<u8>, &str); 6] = [
        (patched(0, b"NOTPERF!"), "not a perf.data file"),
        (patched(0, b"2ELIFREP"), "big-endian"),
        (patched(16, &0u64.to_le_bytes()), "attr_size 0"),
        // The data section's first record claims 4 bytes, less than its own header.
        (patched(ids_end + 6, &4u16.to_le_bytes()), "claims 4 bytes"),
        // A data section that runs past the end of the file.
        (patched(48, &(1u64 << 40).to_le_bytes()), "cut short"),
        // HEADER_EVENT_DESC (the feature after CPUID) claims 2^32-1 events.
        (
            patched(whole.len() - feature_offset_from_end(&whole, 1), &[0xff; 4]),
            "feature 12 section: an attr of 128 bytes at byte 224 runs past",
        ),
    ];
    for (bytes, expected) in cases {
        let err = replay_bytes(bytes)
            .err()
            .expect("a corrupt file is refused");
        assert!(err.to_string().contains(expected), "{expected}: {err}");
    }
}

/// How far from the end of the file the `index`th feature section starts.
fn feature_offset_from_end(file: &[u8], index: usize) -> usize {
    let word = |at: usize| u64::from_le_bytes(file[at..at + 8].try_into().unwrap());
    let table = (word(40) + word(48)) as usize;
    file.len() - word(table + 16 * index) as usize
}

#[test]
fn a_directory_or_a_missing_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let text = PerfDataSource::open(path).err().unwrap().to_string();
    assert!(
        text.contains(path) && text.contains("a directory"),
        "{text}"
    );
    let missing = dir.path().join("none.data");
    let text = PerfDataSource::open(missing.to_str().unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(
        text.contains("none.data") && text.contains("No such file"),
        "{text}"
    );
}

#[test]
fn records_go_to_their_event_by_id_and_a_longer_raw_is_still_decoded() {
    // Two events, as `perf record -a` writes them (it adds a `dummy` software event for
    // side-band records): both carry IDENTIFIER (bit 16), the first u64 of each sample, which
    // HEADER_EVENT_DESC's id lists map to the event.
    let sample_type = IBS_SAMPLE_TYPE | 1 << 16;
    let format = SampleFormat::new(sample_type).unwrap();
    let mut longer = cxl_load_past_l2();
    longer.extend_from_slice(&[0xab; 8]); // a register a newer kernel appended
    let sample = |id: u64, raw: &[u8]| {
        rec::sample(
            format,
            &SampleRecord {
                misc: 2,
                id,
                pid: 77,
                addr: VADDR,
                raw: Some(raw),
                ..rec::empty()
            },
        )
    };
    let plain = cxl_load_past_l2();
    let file = PerfDataFile {
        events: vec![
            Event {
                name: "ibs_op//".into(),
                pmu_type: FOREIGN_IBS_TYPE,
                config: 0,
                sample_type,
                period: 4096,
                ids: vec![10, 11],
            },
            Event {
                name: "dummy:HG".into(),
                pmu_type: 1, // PERF_TYPE_SOFTWARE
                config: 9,   // PERF_COUNT_SW_DUMMY (include/uapi/linux/perf_event.h)
                sample_type,
                period: 1,
                ids: vec![20, 21],
            },
        ],
        pmus: amd_pmus(),
        cpuid: Some("AuthenticAMD,25,17,1".into()),
        records: vec![sample(11, &plain), sample(21, &plain), sample(10, &longer)],
    };
    let (done, got) = replay_bytes(file.to_bytes()).unwrap();
    assert_eq!((done.samples, done.skipped), (2, 1));
    assert_eq!(got.count_of(Counter::PerfDataSkippedSamples), 1);
    let sources: Vec<DataSource> = got.samples.iter().map(|s| s.served_from).collect();
    assert_eq!(sources, [DataSource::ExtMem; 2]);
    assert_eq!(got.count_of(Counter::IbsRawLongerThanKnown), 1);
}

#[test]
fn pebs_from_a_hybrid_intel_box_is_read_by_its_core_pmus_name() {
    // `perf mem record` on a hybrid part: mem-loads on `cpu_core`, whose type number there (8
    // here, made up) is not this VM's. sample_type IP|TID|TIME|ADDR|CPU|WEIGHT|DATA_SRC|
    // PHYS_ADDR|IDENTIFIER.
    let sample_type = IBS_SAMPLE_TYPE & !0x400 | 1 << 16;
    let format = SampleFormat::new(sample_type).unwrap();
    // A load served by local RAM, by `union perf_mem_data_src` in include/uapi/linux/perf_event.h:
    // mem_op bits 0-4 = PERF_MEM_OP_LOAD 0x02; mem_lvl bits 5-18 = PERF_MEM_LVL_HIT 0x02 |
    // PERF_MEM_LVL_LOC_RAM 0x40; mem_lvl_num bits 33-36 = PERF_MEM_LVLNUM_RAM 0x0d.
    let local_ram = 0x02 | (0x02 | 0x40) << 5 | 0x0d << 33;
    let record = rec::sample(
        format,
        &SampleRecord {
            misc: 2,
            id: 30,
            pid: 99,
            addr: VADDR,
            weight: 250,
            data_src: local_ram,
            ..rec::empty()
        },
    );
    let file = PerfDataFile {
        events: vec![Event {
            name: "cpu_core/mem-loads,ldlat=30/P".into(),
            pmu_type: 8,
            config: 0x1cd,
            sample_type,
            period: 4000,
            ids: vec![30],
        }],
        pmus: vec![(8, "cpu_core".into()), (10, "cpu_atom".into())],
        cpuid: Some("GenuineIntel,6,183,1".into()),
        records: vec![record],
    };
    let (done, got) = replay_bytes(file.to_bytes()).unwrap();
    assert_eq!(done.samples, 1);
    let s = got.samples[0];
    assert_eq!((s.source, s.op), (SourceKind::Pebs, AccessOp::Load));
    assert_eq!(
        (s.served_from, s.latency),
        (DataSource::LocalDram, Some(250))
    );
    assert_eq!((s.pid, s.vaddr), (99, VADDR));
}
