//! The two background threads: the sample writer and the control server. Both connect as
//! clients to unix sockets that QEMU serves (`-chardev socket,server=on,wait=off`), retrying
//! until QEMU listens and reconnecting if the connection drops; the vCPUs never wait for them.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::thread;
use std::time::Duration;

use crate::ring::{HEADER, encode};
use crate::state::State;

/// The writer flushes the rings this often (the samples' delay on the host side). Each write
/// reaches the guest as its own virtio receive buffer, with an interrupt, and costs the relay
/// one read of the port, a system call (a read returns one buffer at most): flushing every
/// 1 ms, a Redis phase's 41,084 records came in 29,393 buffers, 1.4 records each; every 25 ms,
/// 164,304 came in 11,957 buffers, seven and a half times the relay's 1,591 batches (t33a,
/// BENCHMARKS.md "Fewer wake-ups"). The relay reads every 100 ms
/// (tests/vm/ibs-emu/guest/src/relay.rs `GATHER`), so a sample waits at most 200 ms of guest
/// time before it is read, 4 ms of the program's at the rig's dilation; a vCPU's ring (8,192
/// records) that fills between two flushes drops and counts (`samples_dropped` in the rig's
/// RESULT).
const FLUSH_EVERY: Duration = Duration::from_millis(100);
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// (task, cause) pairs a MISSES answer lists one by one (the rest summed): a Redis phase has
/// a few hundred, most of them one-round redis-benchmark processes.
const MISSES_LISTED: usize = 1024;

fn connect(path: &Path) -> UnixStream {
    loop {
        if let Ok(s) = UnixStream::connect(path) {
            return s;
        }
        thread::sleep(RETRY_EVERY);
    }
}

pub fn spawn(state: &'static State) -> std::io::Result<()> {
    if let Some(path) = state.cfg.samples.clone() {
        thread::Builder::new()
            .name("pgibs-samples".into())
            .spawn(move || writer(state, &path))?;
    }
    if let Some(path) = state.cfg.ctl.clone() {
        thread::Builder::new()
            .name("pgibs-ctl".into())
            .spawn(move || control(state, &path))?;
    }
    Ok(())
}

/// Drains every vCPU's ring every [`FLUSH_EVERY`] onto the samples socket, after a header when
/// the connection is new or the guest asked for one (SYNC): Linux discards what arrives on a
/// virtio port while no process has it open, so a reader that opens the port later needs a
/// fresh record boundary to find. A blocking write (the
/// guest not reading: QEMU stops taking bytes) only stalls this thread; the rings then fill
/// and the vCPUs drop and count.
fn writer(state: &'static State, path: &Path) {
    let mut buf = Vec::with_capacity(1 << 16);
    loop {
        let mut sock = connect(path);
        if sock.write_all(HEADER).is_err() {
            continue;
        }
        loop {
            buf.clear();
            if state.sync.swap(false, Relaxed) {
                buf.extend_from_slice(HEADER);
            }
            let mut n = 0;
            for v in state.vcpus.iter() {
                v.ring.drain(|s| {
                    if encode(s, &mut buf) {
                        n += 1;
                    } else {
                        state.header_like.fetch_add(1, Relaxed);
                    }
                });
            }
            if !buf.is_empty() {
                if sock.write_all(&buf).is_err() {
                    // The connection broke: these records are lost and not counted as sent;
                    // the next connection starts with a header again.
                    break;
                }
                state.add_sent(n);
            }
            thread::sleep(FLUSH_EVERY);
        }
    }
}

/// Answers the control protocol (README.md) on the control socket.
fn control(state: &'static State, path: &Path) {
    loop {
        let sock = connect(path);
        let Ok(mut out) = sock.try_clone() else {
            continue;
        };
        for line in BufReader::new(sock).lines() {
            let Ok(line) = line else { break };
            let reply = answer(state, line.trim());
            if out.write_all(&reply).is_err() {
                break;
            }
        }
        // EOF or an error: QEMU went away or the chardev reset; connect again.
        thread::sleep(RETRY_EVERY);
    }
}

fn counts_line(state: &State, counts: &[(u32, u32)]) -> String {
    let t = state.totals(counts);
    format!(
        "COUNTS pages={} accesses={} fast_user={} slow_user={} modelled_ns={} samples_sent={} samples_dropped={} outside_ram={} slow_ns={} period={} cache_hits={} samples_filtered={} fast_ns={} task_switches={} samples_with_task={} cache_kb={} cache_ways={} peer_hits={} snoop={}\n",
        t.pages,
        t.accesses,
        t.fast_user,
        t.slow_user,
        t.modelled_ns,
        t.samples_sent,
        t.samples_dropped,
        t.outside,
        state.slow_ns.load(Relaxed),
        state.cfg.period,
        t.cache_hits,
        t.samples_filtered,
        state.fast_ns.load(Relaxed),
        t.switches,
        t.with_task,
        state.cfg.cache_kb,
        state.cfg.cache_ways,
        t.peer_hits,
        u8::from(state.cfg.snoop),
    )
}

/// The reply to one command line.
pub fn answer(state: &State, cmd: &str) -> Vec<u8> {
    let mut words = cmd.split_ascii_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("RESET"), None, _) => {
            state.reset();
            b"OK\n".to_vec()
        }
        (Some("STATS"), None, _) => counts_line(state, &state.page_counts()).into_bytes(),
        (Some("MISSES"), None, _) => match state.by_task() {
            Some((tally, overflow)) => {
                crate::bytask::misses_line(&tally, overflow, MISSES_LISTED).into_bytes()
            }
            None => b"ERR MISSES needs the plugin argument by_task=1\n".to_vec(),
        },
        (Some("DUMP"), None, _) => {
            let counts = state.page_counts();
            let mut out = counts_line(state, &counts).into_bytes();
            out.reserve(counts.len() * 8);
            for (pfn, count) in counts {
                out.extend_from_slice(&pfn.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
            }
            out
        }
        (Some("ARM"), None, _) => {
            state.armed.store(true, Relaxed);
            b"OK\n".to_vec()
        }
        (Some("DISARM"), None, _) => {
            state.armed.store(false, Relaxed);
            b"OK\n".to_vec()
        }
        (Some("SYNC"), None, _) => {
            state.sync.store(true, Relaxed);
            b"OK\n".to_vec()
        }
        (Some(cmd @ ("SLOW_NS" | "FAST_NS")), Some(n), None) => {
            match crate::config::parse_u64(n) {
                Some(ns) if ns <= 1_000_000 => {
                    let target = if cmd == "SLOW_NS" {
                        &state.slow_ns
                    } else {
                        &state.fast_ns
                    };
                    target.store(ns, Relaxed);
                    b"OK\n".to_vec()
                }
                _ => format!("ERR {cmd} takes 0..=1000000\n").into_bytes(),
            }
        }
        (Some("TASKCHAN"), Some(base), Some(len)) if words.next().is_none() => {
            match (crate::config::parse_u64(base), crate::config::parse_u64(len)) {
                // Not a user address as the plugin judges one (the guest's kernel runs with
                // 5-level paging under TCG: its direct map starts at 0xff11_0000_0000_0000,
                // Documentation/arch/x86/x86_64/mm.rst), at most PID_MAX_LIMIT long; or off.
                (Some(b), Some(l)) if (l == 0 && b == 0) || (b >= crate::state::USER_TOP && (1..=1 << 22).contains(&l) && b.checked_add(l).is_some()) => {
                    state.set_task_channel(b, l);
                    b"OK\n".to_vec()
                }
                _ => b"ERR TASKCHAN takes a kernel address and a length in 1..=4194304, or 0 0\n".to_vec(),
            }
        }
        (None, _, _) => Vec::new(),
        _ => format!(
            "ERR unknown command '{cmd}' (RESET, DUMP, STATS, MISSES, SYNC, SLOW_NS n, FAST_NS n, ARM, DISARM, TASKCHAN base len)\n"
        )
        .into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// The Debian rig reads `peer_hits` and `snoop` out of STATS by name: one line, first
    /// touched on vCPU 0, then on vCPU 1, is one peer hit with snoop on.
    #[test]
    fn stats_give_peer_hits_and_whether_snoop_is_on() {
        let s = State::new(
            Config {
                ram_mb: 1,
                ring: 16,
                cache_kb: 1,
                snoop: true,
                ..Config::default()
            },
            2,
        );
        s.on_access(0, 0x1000, 0x3000, || false);
        s.on_access(1, 0x1000, 0x3000, || false);
        let line = String::from_utf8(answer(&s, "STATS")).unwrap();
        assert!(line.contains(" cache_hits=1 "), "{line}");
        assert!(line.ends_with(" peer_hits=1 snoop=1\n"), "{line}");
    }

    #[test]
    fn protocol() {
        let cfg = Config {
            ram_mb: 1,
            ring: 16,
            ..Config::default()
        };
        let s = State::new(cfg, 1);
        s.on_access(0, 0x1000, 0x3000, || false);
        s.on_access(0, 0x1000, 0x3000, || false);
        let dump = answer(&s, "DUMP");
        let nl = dump.iter().position(|&b| b == b'\n').unwrap();
        let line = std::str::from_utf8(&dump[..nl]).unwrap();
        assert!(
            line.starts_with("COUNTS pages=1 accesses=2 fast_user=2 slow_user=0 modelled_ns=286 "),
            "{line}"
        );
        assert_eq!(&dump[nl + 1..], &[3, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(answer(&s, "SLOW_NS 250"), b"OK\n");
        assert_eq!(answer(&s, "FAST_NS 120"), b"OK\n");
        assert_eq!(s.fast_ns.load(Relaxed), 120);
        assert!(answer(&s, "FAST_NS 1000001").starts_with(b"ERR FAST_NS"));
        assert!(
            String::from_utf8(answer(&s, "STATS"))
                .unwrap()
                .contains(" slow_ns=250 ")
        );
        assert_eq!(answer(&s, "RESET"), b"OK\n");
        assert!(
            String::from_utf8(answer(&s, "STATS"))
                .unwrap()
                .starts_with("COUNTS pages=0 accesses=0 ")
        );
        assert!(s.armed.load(Relaxed), "armed from the start by default");
        assert_eq!(answer(&s, "DISARM"), b"OK\n");
        assert!(!s.armed.load(Relaxed));
        assert_eq!(answer(&s, "ARM"), b"OK\n");
        assert!(s.armed.load(Relaxed));
        assert!(answer(&s, "FOO").starts_with(b"ERR"));
        assert!(answer(&s, "MISSES").starts_with(b"ERR MISSES needs"));
        assert_eq!(answer(&s, "TASKCHAN 0xffffc90000100000 4194304"), b"OK\n");
        // As the guest's 5-level-paging kernel gave it (its direct map).
        assert_eq!(answer(&s, "TASKCHAN 0xff6a1fb1012c1108 4194304"), b"OK\n");
        assert!(
            String::from_utf8(answer(&s, "STATS"))
                .unwrap()
                .contains(" task_switches=0 ")
        );
        for bad in [
            "TASKCHAN 0x7f0000000000 4096",
            "TASKCHAN 0xffffc90000100000 4194305",
            "TASKCHAN 0xffffffffffffff00 4096",
            "TASKCHAN 0xffffc90000100000 0",
            "TASKCHAN 0xffffc90000100000",
            "TASKCHAN 0xffffc90000100000 1 2",
        ] {
            assert!(answer(&s, bad).starts_with(b"ERR"), "{bad}");
        }
        assert_eq!(answer(&s, "TASKCHAN 0 0"), b"OK\n");
        assert!(answer(&s, "").is_empty());
    }
}
