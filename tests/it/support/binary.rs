//! The apigw binary run as a user runs it; the runner itself (limits, pipes, the refusal
//! checks) is the `apigw-testrun` crate, which `apigw-bench`'s tests share.

pub use apigw_testrun::{refused, run_program, text, wait_for};
use std::path::Path;
use std::process::Output;

/// Runs apigw with `args` (in `dir` when given), as [`run_program`] does.
pub fn run(dir: Option<&Path>, args: &[&str]) -> Output {
    run_program(Path::new(env!("CARGO_BIN_EXE_apigw")), dir, args)
}
