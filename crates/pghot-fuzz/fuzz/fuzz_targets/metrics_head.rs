#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pghot_fuzz::metrics_head(data));
