//! `pghot-ibs-emu`: a QEMU TCG plugin (plugin API v1, Debian 12's QEMU 7.2) for pghotd's test
//! guest. For every guest memory access it counts the guest-physical 4 KiB page (the ground
//! truth of which pages are hot), keeps a modelled memory clock of user-mode accesses (fast
//! and slow tier latencies), samples one in `period` user-mode accesses per vCPU as AMD IBS op
//! sampling would (a 24-byte record streamed to a unix socket that QEMU exposes to the guest
//! as a virtio-serial port), and spins the host CPU on every access to the slow node's
//! physical range so that the node really is slower. README.md has the arguments and the wire
//! formats.
//!
//! The `qemu-plugin` crate provides the version symbol, `qemu_plugin_install` and the parsed
//! arguments. The per-access path does not use its closures (a boxed closure allocated per
//! instrumented instruction, a `FnMut` shared between vCPU threads): it registers a plain
//! `extern "C"` callback through the raw bindings with the leaked `State` as user data. That
//! module, `plugin::ffi`, holds every `unsafe` of the crate.

// Without the glue (see below) the unit tests leave the socket threads and the fix-up unused.
#![cfg_attr(test, allow(dead_code))]

mod bytask;
mod config;
mod io;
mod ring;
mod state;

// The glue refers to QEMU's exported functions, which only exist once QEMU loads the plugin;
// the unit tests (an executable) leave it out.
#[cfg(not(test))]
mod plugin;
