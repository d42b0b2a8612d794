#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pghotd::fuzz::perf_records(data));
