//! The destination's watermark and the capacity-aware heat cut.

use super::*;

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn the_watermark_admits_only_what_keeps_the_reserve_free() {
    // node0 of the fixture has 1030716 kB; a 2% reserve is 20614 kB. Leave room for
    // exactly two pages above it.
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/qemu-3node");
    copy_tree(&fixture, dir.path());
    let meminfo = dir.path().join("devices/system/node/node0/meminfo");
    std::fs::write(
        &meminfo,
        "Node 0 MemTotal: 1030716 kB\nNode 0 MemFree: 20622 kB\n",
    )
    .unwrap();
    let topology = Arc::new(Topology::read(SysfsRoot::new(dir.path())).unwrap());
    let mut rig = rig(MigratorConfig::default());
    rig.migrator.free = Arc::clone(&topology) as Arc<dyn FreeMemory>;
    rig.migrator.topology = topology;
    map(&rig, 10, 0..5);
    let mut batch: Vec<_> = (0..5).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(counter(&rig, Counter::PgpromoteFailWatermark), 3);
    // node1 is not under pressure.
    map(&rig, 11, 0..5);
    let mut batch: Vec<_> = (0..5).map(|p| cand(11, p, 1)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 7);
}

#[test]
fn a_tight_fast_node_takes_the_hottest_candidates_first() {
    let (mut rig, free) = rig_with_free(MigratorConfig::default());
    // Room for exactly two pages above the reserve.
    free.0.lock().insert(0, NODE0_RESERVE_KB + 8);
    map(&rig, 10, 0..5);
    // Low addresses are lukewarm, high ones hot: first-come would pick 0 and 1.
    for (page, heat) in [(0, 2), (1, 2), (2, 3), (3, 9), (4, 6)] {
        sample(&rig, 10, page, heat, 0);
    }
    let mut batch: Vec<_> = (0..5).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    let mem = rig.mover.0.lock();
    assert_eq!(mem.pages[&(10, 3 * PAGE_SIZE)], 0);
    assert_eq!(mem.pages[&(10, 4 * PAGE_SIZE)], 0);
    assert_eq!(mem.pages[&(10, 0)], SLOW);
    drop(mem);
    assert_eq!(outcomes(&rig), 5);
}

#[test]
fn the_heat_cut_keeps_room_for_hotter_pages_across_batches() {
    let (mut rig, free) = rig_with_free(MigratorConfig::default());
    // Room for four pages, which the fake keeps (its free memory does not move).
    free.0.lock().insert(0, NODE0_RESERVE_KB + 4 * 4);
    map(&rig, 10, 0..100);
    for page in 0..40 {
        sample(&rig, 10, page, 1, 0);
    }
    for page in 60..70 {
        sample(&rig, 10, page, 8, 0);
    }
    // Interval 1: 30 lukewarm and 4 hot candidates in one batch: the hot four get the room.
    let mut mixed: Vec<_> = (0..30).chain(60..64).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut mixed);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 4);
    assert_eq!(counter(&rig, Counter::PgpromoteFailWatermark), 30);
    rig.migrator.maintain();
    // Interval 2: lukewarm pages come first. There is room, but recent demand says hotter
    // pages arrive too, so the room is kept for them ...
    let mut lukewarm: Vec<_> = (30..40).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut lukewarm);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 4);
    assert_eq!(counter(&rig, Counter::PgpromoteFailCold), 10);
    // ... and the hot ones that follow take it.
    let mut hot: Vec<_> = (64..66).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut hot);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 6);
    assert_eq!(outcomes(&rig), 46);
}

/// Free memory is read once per destination and batch; the groups after the first see that
/// reading less what the batch admitted there before them. By hand: room for three 4 KiB
/// pages above the reserve (12 kB); pid 10 offers two pages, pid 11 two more in the same
/// batch. Pid 10's group takes two (8 kB), pid 11's sees 4 kB of room: one page moves and one
/// is held at the watermark. The fake's memory never shrinks, so before this each group saw
/// 12 kB and all four moved. The same holds for two sizes of one process, whose groups are cut
/// before its one move: a 64 KiB folio and a base page with room for the folio alone.
#[test]
fn one_free_memory_read_per_batch_less_what_the_batch_admitted() {
    let (mut rig, free) = rig_with_free(MigratorConfig::default());
    free.0.lock().insert(0, NODE0_RESERVE_KB + 3 * 4);
    map(&rig, 10, 0..2);
    map(&rig, 11, 0..2);
    let mut batch: Vec<_> = (0..2).map(|p| cand(10, p, 0)).collect();
    batch.extend((0..2).map(|p| cand(11, p, 0)));
    rig.migrator.process(&mut batch);
    assert_eq!(free.1.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 3);
    assert_eq!(counter(&rig, Counter::PgpromoteFailWatermark), 1);
    // The next batch reads again.
    let mut next = vec![cand(11, 1, 0)];
    rig.migrator.process(&mut next);
    assert_eq!(free.1.load(std::sync::atomic::Ordering::Relaxed), 2);

    // Room for 64 kB: the base page's group (the smaller size sorts first) takes 4 kB, so the
    // 64 KiB folio's group, cut before either moves, finds 60 kB and waits at the watermark.
    let (mut rig, free) = rig_with_free(MigratorConfig::default());
    free.0.lock().insert(0, NODE0_RESERVE_KB + 64);
    map(&rig, 10, 0..32);
    let folio = Candidate {
        bytes: 16 * PAGE_SIZE,
        ..cand(10, 16, 0)
    };
    let mut batch = vec![folio, cand(10, 3, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteFailWatermark), 1);
    assert_eq!(rig.stats.promoted_bytes(0), PAGE_SIZE);
}
