#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| flotilla_fuzz::agent_messages(data));
