//! What `apigw-bench` refuses on its command line: a bad value exits non-zero with one line
//! naming the flag and the value, never a panic (moved here from tests/it/user_input.rs with the
//! bench, out of the apigw binary).

use apigw_testrun::{refused, run_program};
use std::path::Path;
use std::process::Output;

/// Runs apigw-bench with `args`; killed after a minute (a refusal takes milliseconds).
fn bench(args: &[&str]) -> Output {
    run_program(Path::new(env!("CARGO_BIN_EXE_apigw-bench")), None, args)
}

#[test]
fn bench_seconds_are_bounded() {
    for value in ["1e300", "inf"] {
        let out = bench(&["--no-install", "--no-peers", "--duration", value]);
        refused(&out, 1, "--duration", value);
    }
}
