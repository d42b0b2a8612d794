//! The plugin's registration with QEMU and the raw plugin-API calls.

use qemu_plugin::install::{Args, Info};
use qemu_plugin::plugin::{HasCallbacks, Register};
use qemu_plugin::{PluginId, Result};

use crate::config::Config;
use crate::io;
use crate::state::State;

struct IbsEmu;

impl HasCallbacks for IbsEmu {}

impl Register for IbsEmu {
    /// Registers only the translation and exit callbacks (the default would also hook vCPU
    /// init/idle/resume and every syscall, each through a global mutex).
    fn register_default(&mut self, id: PluginId, args: &Args, info: &Info) -> Result<()> {
        let cfg = match Config::parse(&args.raw) {
            Ok(c) => c,
            Err(e) => {
                // A failed install stops QEMU anyway (and the crate would panic on an Err):
                // say why and stop.
                eprintln!("pghot-ibs-emu: {e}");
                std::process::exit(1);
            }
        };
        let Some(system) = &info.system else {
            eprintln!("pghot-ibs-emu: needs system emulation (qemu-system-*), not linux-user");
            std::process::exit(1);
        };
        let n_vcpus = system.max_vcpus.max(1) as usize;
        eprintln!(
            "pghot-ibs-emu: vcpus={n_vcpus} period={} slow={:#x}-{:#x} slow_ns={} ram_mb={} memdev_mb={:?} samples={:?} ctl={:?}",
            cfg.period,
            cfg.slow_lo,
            cfg.slow_hi,
            cfg.slow_ns,
            cfg.ram_mb,
            cfg.memdev_mb,
            cfg.samples,
            cfg.ctl
        );
        // Lives as long as QEMU: callbacks may run until the process exits.
        let state: &'static State = Box::leak(Box::new(State::new(cfg, n_vcpus)));
        if let Err(e) = io::spawn(state) {
            eprintln!("pghot-ibs-emu: cannot start the socket threads: {e}");
            std::process::exit(1);
        }
        ffi::install(id, state);
        Ok(())
    }
}

qemu_plugin::register!(IbsEmu);

/// The raw plugin-API calls: translation-time instrumentation and the per-access callback.
mod ffi {
    use std::ffi::{c_uint, c_void};
    use std::sync::OnceLock;

    use qemu_plugin_sys::{
        qemu_plugin_cb_flags, qemu_plugin_get_hwaddr, qemu_plugin_hwaddr_is_io,
        qemu_plugin_hwaddr_phys_addr, qemu_plugin_id_t, qemu_plugin_mem_is_store,
        qemu_plugin_mem_rw, qemu_plugin_meminfo_t, qemu_plugin_register_atexit_cb,
        qemu_plugin_register_vcpu_mem_cb, qemu_plugin_register_vcpu_tb_trans_cb, qemu_plugin_tb,
        qemu_plugin_tb_get_insn, qemu_plugin_tb_n_insns,
    };

    use crate::state::State;

    /// The translation callback has no user data in API v1.
    static STATE: OnceLock<&'static State> = OnceLock::new();

    pub fn install(id: qemu_plugin_id_t, state: &'static State) {
        if STATE.set(state).is_err() {
            return; // installed twice: keep the first
        }
        // SAFETY: `id` is the id QEMU passed to qemu_plugin_install, and both callbacks are
        // `extern "C"` functions of the signatures the API v1 header declares.
        unsafe {
            qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_tb_translate));
            qemu_plugin_register_atexit_cb(id, Some(on_exit), std::ptr::null_mut());
        }
    }

    /// Instruments every instruction of a new translation block with `on_mem` for loads and
    /// stores; the user data is the `&'static State`.
    extern "C" fn on_tb_translate(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
        let Some(state) = STATE.get() else { return };
        let udata = std::ptr::from_ref::<State>(state)
            .cast_mut()
            .cast::<c_void>();
        // SAFETY: `tb` is valid for the duration of this translation callback; the index is
        // below qemu_plugin_tb_n_insns, and the instruction handle is passed straight back to
        // QEMU within the callback. `udata` points to a leaked State that is never freed.
        unsafe {
            for i in 0..qemu_plugin_tb_n_insns(tb) {
                let insn = qemu_plugin_tb_get_insn(tb, i);
                qemu_plugin_register_vcpu_mem_cb(
                    insn,
                    Some(on_mem),
                    qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
                    qemu_plugin_mem_rw::QEMU_PLUGIN_MEM_RW,
                    udata,
                );
            }
        }
    }

    /// Runs on every guest load and store, on the vCPU's thread.
    extern "C" fn on_mem(
        vcpu: c_uint,
        info: qemu_plugin_meminfo_t,
        vaddr: u64,
        udata: *mut c_void,
    ) {
        // SAFETY: `udata` is the `&'static State` registered in on_tb_translate. `info` is
        // the handle of the access being reported, valid during this callback, as is the
        // hwaddr handle QEMU returns for it (a thread-local it overwrites on the next access;
        // it is used only before we return).
        unsafe {
            let state = &*udata.cast_const().cast::<State>();
            let probe = state.cfg.probe;
            if probe == 0 {
                return;
            }
            // Before the arming test: a switch while disarmed still names the task that runs.
            if vaddr >= crate::state::USER_TOP
                && state.task_switch(vcpu, vaddr, || qemu_plugin_mem_is_store(info))
            {
                return;
            }
            if !state.armed.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let hw = qemu_plugin_get_hwaddr(info, vaddr);
            // NULL: no TLB entry (cannot happen for an access in flight); io: MMIO, not RAM.
            if probe == 1 || hw.is_null() || qemu_plugin_hwaddr_is_io(hw) {
                return;
            }
            let paddr = state.fix.apply(qemu_plugin_hwaddr_phys_addr(hw));
            if probe == 2 {
                std::hint::black_box(paddr);
                return;
            }
            state.on_access(vcpu, vaddr, paddr, || qemu_plugin_mem_is_store(info));
        }
    }

    extern "C" fn on_exit(_id: qemu_plugin_id_t, _udata: *mut c_void) {
        if let Some(state) = STATE.get() {
            let t = state.totals(&state.page_counts());
            eprintln!(
                "pghot-ibs-emu: exit: since the last RESET accesses={} fast_user={} slow_user={} samples_sent={} samples_dropped={} outside_ram={}",
                t.accesses, t.fast_user, t.slow_user, t.samples_sent, t.samples_dropped, t.outside
            );
        }
    }
}
