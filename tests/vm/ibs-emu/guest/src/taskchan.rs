//! `pgibs-guest taskchan`: tells the plugin which process each vCPU runs, as the kernel's IBS
//! handler knows it from `current` (arch/x86/events/amd/ibs.c `perf_ibs_handle_irq` hands the
//! sample to perf, which records the running task's pid and tid).
//!
//! Plugin API v1 gives a memory callback no register and no task, so the process has to reach
//! the plugin through what it does see: the virtual address of every guest access. A BPF
//! program on the `sched_switch` raw tracepoint (include/trace/events/sched.h, `TP_PROTO(bool
//! preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)`)
//! stores one byte at `channel + next->tgid`, where `channel` is the value of a BPF array map
//! nobody else writes. The plugin, told the channel's kernel address (`TASKCHAN BASE LEN` on
//! the control port), takes a kernel store in that range as "this vCPU now runs tgid
//! (address - BASE)" and puts that pid into each sample it takes until the next switch; the
//! relay then needs no pagemap lookups to find whose a sample is.
//!
//! The program also stores the channel's address into a second map, which this tool reads:
//! storing a pointer into a map is allowed to a loader with CAP_PERFMON
//! (kernel/bpf/verifier.c, `check_mem_access`, "leaks addr into map"). `tgid`'s offset in
//! `task_struct` is read from the kernel's BTF (btf.rs). The program and its maps live as
//! long as this process; on SIGTERM it first tells the plugin to stop (`TASKCHAN 0 0`), so
//! that nothing the kernel later puts at that address is taken for a switch.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pghotd::safefs::{read_bounded, read_text};

use crate::{Ctl, Res};

// include/uapi/linux/bpf.h: commands, types, the pseudo source and the helper used.
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
const BPF_PSEUDO_MAP_VALUE: u8 = 2;
const BPF_FUNC_PROBE_READ_KERNEL: i32 = 113;
/// `sizeof(union bpf_attr)` of the uapi header this was written against; the kernel takes a
/// shorter attr as long as the fields it knows past the end are zero.
const ATTR_BYTES: usize = 144;

/// Largest channel: `PID_MAX_LIMIT` on 64-bit (include/linux/threads.h, 4 * 1024 * 1024), and
/// also KMALLOC_MAX_SIZE, the largest array value (kernel/bpf/arraymap.c
/// `array_map_alloc_check`).
const CHANNEL_MAX: u32 = 4 << 20;

/// One `struct bpf_insn`: opcode, dst and src registers, offset, immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// The 8 bytes the kernel reads (little-endian; dst in the low nibble of byte 1).
    pub fn bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0xf) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

// Opcodes from include/uapi/linux/bpf.h and bpf_common.h (class | op | source / size | mode).
const MOV64_REG: u8 = 0x07 | 0xb0 | 0x08;
const MOV64_IMM: u8 = 0x07 | 0xb0;
const ADD64_IMM: u8 = 0x07;
const ADD64_REG: u8 = 0x07 | 0x08;
const LDX_DW: u8 = 0x01 | 0x60 | 0x18;
const LDX_W: u8 = 0x01 | 0x60;
const ST_DW: u8 = 0x02 | 0x60 | 0x18;
const ST_B: u8 = 0x02 | 0x60 | 0x10;
const STX_DW: u8 = 0x03 | 0x60 | 0x18;
const JGE_IMM: u8 = 0x05 | 0x30;
const CALL: u8 = 0x05 | 0x80;
const EXIT: u8 = 0x05 | 0x90;
const LD_IMM64: u8 = 0x18;

/// The program, for a channel of `len` bytes: its map-value loads name the channel map by
/// `chan_fd` and the address map by `addr_fd`.
pub fn program(tgid_off: u32, len: u32, chan_fd: i32, addr_fd: i32) -> Vec<Insn> {
    let i = Insn::new;
    vec![
        // r6 = ctx (struct bpf_raw_tracepoint_args: u64 args[])
        i(MOV64_REG, 6, 1, 0, 0),
        // u64 tgid at fp-8 = 0 (the helper writes 4 bytes of it)
        i(ST_DW, 10, 0, -8, 0),
        // r3 = args[2] (next) + offsetof(task_struct, tgid)
        i(LDX_DW, 3, 6, 16, 0),
        i(ADD64_IMM, 3, 0, 0, tgid_off as i32),
        // bpf_probe_read_kernel(fp-8, 4, r3)
        i(MOV64_REG, 1, 10, 0, 0),
        i(ADD64_IMM, 1, 0, 0, -8),
        i(MOV64_IMM, 2, 0, 0, 4),
        i(CALL, 0, 0, 0, BPF_FUNC_PROBE_READ_KERNEL),
        i(LDX_W, 7, 10, -8, 0),
        // r1 = &channel[0]; r2 = &address[0]
        i(LD_IMM64, 1, BPF_PSEUDO_MAP_VALUE, 0, chan_fd),
        i(0, 0, 0, 0, 0),
        i(LD_IMM64, 2, BPF_PSEUDO_MAP_VALUE, 0, addr_fd),
        i(0, 0, 0, 0, 0),
        // address[0] = r1 (what the plugin is told)
        i(STX_DW, 2, 1, 0, 0),
        // if tgid >= len: skip (also the verifier's bound for the store)
        i(JGE_IMM, 7, 0, 2, len as i32),
        // channel[tgid] = 1
        i(ADD64_REG, 1, 7, 0, 0),
        i(ST_B, 1, 0, 0, 1),
        i(MOV64_IMM, 0, 0, 0, 0),
        i(EXIT, 0, 0, 0, 0),
    ]
}

fn bpf(cmd: libc::c_long, attr: &mut [u8; ATTR_BYTES]) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, writable buffer of ATTR_BYTES bytes laid out as `union
    // bpf_attr` for `cmd`; every pointer stored in it points to memory that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR_BYTES) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn put32(a: &mut [u8; ATTR_BYTES], at: usize, v: u32) {
    a[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(a: &mut [u8; ATTR_BYTES], at: usize, v: u64) {
    a[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn fd(r: libc::c_long) -> OwnedFd {
    // SAFETY: a successful BPF_MAP_CREATE / PROG_LOAD / RAW_TRACEPOINT_OPEN returns a new file
    // descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(r as RawFd) }
}

/// A one-entry array map of `value_size` bytes.
fn array_map(value_size: u32) -> Res<OwnedFd> {
    let mut a = [0u8; ATTR_BYTES];
    put32(&mut a, 0, BPF_MAP_TYPE_ARRAY);
    put32(&mut a, 4, 4);
    put32(&mut a, 8, value_size);
    put32(&mut a, 12, 1);
    bpf(BPF_MAP_CREATE, &mut a)
        .map(fd)
        .map_err(|e| format!("taskchan: BPF_MAP_CREATE of {value_size} bytes: {e}"))
}

/// Copies the map's one value into `value`, which must be its size.
fn lookup(map: &OwnedFd, value: &mut [u8]) -> Res<()> {
    use std::os::fd::AsRawFd;
    let key = 0u32;
    let mut a = [0u8; ATTR_BYTES];
    put32(&mut a, 0, map.as_raw_fd() as u32);
    put64(&mut a, 8, std::ptr::from_ref(&key) as u64);
    put64(&mut a, 16, value.as_mut_ptr() as u64);
    bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map_err(|e| format!("taskchan: BPF_MAP_LOOKUP_ELEM: {e}"))?;
    Ok(())
}

/// The loaded program, attached; detached when dropped.
pub struct TaskChan {
    pub base: u64,
    pub len: u32,
    pub tgid_off: u32,
    _chan: OwnedFd,
    _addr: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
}

/// `/proc/sys/kernel/pid_max`: every tgid is below it.
fn pid_max() -> Res<u32> {
    let path = "/proc/sys/kernel/pid_max";
    let s = read_text(Path::new(path), 32).map_err(|e| format!("taskchan: {path}: {e}"))?;
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=CHANNEL_MAX).contains(&n) => Ok(n),
        _ => Err(format!(
            "taskchan: pid_max {:?} is not in 1..={CHANNEL_MAX}",
            s.trim()
        )),
    }
}

/// The kernel's BTF, read with a bound (vmlinux's is a few MB).
fn kernel_btf() -> Res<Vec<u8>> {
    let path = "/sys/kernel/btf/vmlinux";
    read_bounded(Path::new(path), 64 << 20)
        .map_err(|e| format!("taskchan: {path}: {e} (a kernel without CONFIG_DEBUG_INFO_BTF?)"))
}

impl TaskChan {
    pub fn attach() -> Res<TaskChan> {
        use std::os::fd::AsRawFd;
        let tgid_off = crate::btf::member_offset(&kernel_btf()?, "task_struct", "tgid")?;
        let len = pid_max()?;
        let chan = array_map(len)?;
        let addr = array_map(8)?;
        let insns: Vec<u8> = program(tgid_off, len, chan.as_raw_fd(), addr.as_raw_fd())
            .iter()
            .flat_map(Insn::bytes)
            .collect();
        let license = CString::new("GPL").unwrap();
        let mut log = vec![0u8; 64 << 10];
        let mut a = [0u8; ATTR_BYTES];
        put32(&mut a, 0, BPF_PROG_TYPE_RAW_TRACEPOINT);
        put32(&mut a, 4, (insns.len() / 8) as u32);
        put64(&mut a, 8, insns.as_ptr() as u64);
        put64(&mut a, 16, license.as_ptr() as u64);
        put32(&mut a, 24, 1);
        put32(&mut a, 28, log.len() as u32);
        put64(&mut a, 32, log.as_mut_ptr() as u64);
        a[48..56].copy_from_slice(b"pgibs_tc");
        let prog = bpf(BPF_PROG_LOAD, &mut a).map(fd).map_err(|e| {
            let end = log.iter().position(|&c| c == 0).unwrap_or(log.len());
            format!(
                "taskchan: BPF_PROG_LOAD: {e}; verifier: {}",
                String::from_utf8_lossy(&log[..end]).trim()
            )
        })?;
        let tp = CString::new("sched_switch").unwrap();
        let mut a = [0u8; ATTR_BYTES];
        put64(&mut a, 0, tp.as_ptr() as u64);
        put32(&mut a, 8, prog.as_raw_fd() as u32);
        let link = bpf(BPF_RAW_TRACEPOINT_OPEN, &mut a)
            .map(fd)
            .map_err(|e| format!("taskchan: BPF_RAW_TRACEPOINT_OPEN sched_switch: {e}"))?;
        // Any switch on any CPU runs the program; sleeping makes at least ours.
        let mut base = 0;
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(1));
            let mut value = [0u8; 8];
            lookup(&addr, &mut value)?;
            base = u64::from_le_bytes(value);
            if base != 0 {
                break;
            }
        }
        if base == 0 {
            return Err("taskchan: the program has not run after 100 sleeps".into());
        }
        Ok(TaskChan {
            base,
            len,
            tgid_off,
            _chan: chan,
            _addr: addr,
            _prog: prog,
            _link: link,
        })
    }
}

/// `taskchan`: attach, tell the plugin, wait for SIGTERM or SIGINT, tell the plugin to stop.
pub fn run() -> Res<()> {
    let chan = TaskChan::attach()?;
    let mut ctl = Ctl::open_retrying()?;
    ctl.ok(&format!("TASKCHAN {:#x} {}", chan.base, chan.len))?;
    drop(ctl);
    println!(
        "PGIBS-TASKCHAN base={:#x} len={} tgid_off={}",
        chan.base, chan.len, chan.tgid_off
    );
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| format!("taskchan: signal {sig}: {e}"))?;
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut ctl = Ctl::open_retrying()?;
    ctl.ok("TASKCHAN 0 0")?;
    drop(chan);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodings worked out by hand from include/uapi/linux/bpf.h and bpf_common.h:
    /// `r6 = r1` is BPF_ALU64 (0x07) | BPF_MOV (0xb0) | BPF_X (0x08) = 0xbf, dst 6, src 1;
    /// `*(u8 *)(r1 + 0) = 1` is BPF_ST (0x02) | BPF_MEM (0x60) | BPF_B (0x10) = 0x72;
    /// `r7 = *(u32 *)(r10 - 8)` is BPF_LDX (0x01) | BPF_MEM | BPF_W (0x00) = 0x61, off 0xfff8.
    #[test]
    fn encodes_as_the_uapi_header_says() {
        let p = program(2400, 4194304, 5, 6);
        assert_eq!(p[0].bytes(), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]);
        assert_eq!(p[8].bytes(), [0x61, 0xa7, 0xf8, 0xff, 0, 0, 0, 0]);
        // ld_imm64 r1 = map_value(fd 5) + 0: src 2 (BPF_PSEUDO_MAP_VALUE), next imm the offset.
        assert_eq!(p[9].bytes(), [0x18, 0x21, 0, 0, 5, 0, 0, 0]);
        assert_eq!(p[10].bytes(), [0; 8]);
        // 2400 = 0x960 added to r3.
        assert_eq!(p[3].bytes(), [0x07, 0x03, 0, 0, 0x60, 0x09, 0, 0]);
        // if r7 >= 0x400000 skip 2: BPF_JMP (0x05) | BPF_JGE (0x30) | BPF_K.
        assert_eq!(p[14].bytes(), [0x35, 0x07, 2, 0, 0, 0, 0x40, 0]);
        assert_eq!(p[16].bytes(), [0x72, 0x01, 0, 0, 1, 0, 0, 0]);
        assert_eq!(p.last().unwrap().bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        // The jump lands on `r0 = 0`.
        assert_eq!(p[14 + 1 + 2].code, MOV64_IMM);
    }

    /// On a kernel that allows it (root, BPF, BTF), the program loads, and after this thread
    /// has slept the channel holds a 1 at this process's tgid and the address map a kernel
    /// address.
    #[test]
    fn marks_this_process_when_it_is_switched_in() {
        let chan = match TaskChan::attach() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("\n*** SKIPPED: cannot attach a BPF program here ({e}) ***\n");
                return;
            }
        };
        // The kernel half with 4-level or 5-level paging (Documentation/arch/x86/x86_64/mm.rst).
        assert!(chan.base >= 0xff00_0000_0000_0000, "{:#x}", chan.base);
        std::thread::sleep(Duration::from_millis(20));
        let tgid = std::process::id() as usize;
        // The whole value (pid_max bytes) through the syscall.
        let mut value = vec![0u8; chan.len as usize];
        lookup(&chan._chan, &mut value).unwrap();
        assert_eq!(value[tgid], 1, "tgid {tgid} not marked");
    }
}
