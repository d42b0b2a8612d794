#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pghot_fuzz::perf_data(data));
