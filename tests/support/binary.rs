//! A binary run as a user runs it, for tests that only need the process: included with
//! `#[path = "support/binary.rs"] mod binary;` so they do not build the rest of `support`
//! (crates/apigw-bench's tests include it too, for `apigw-bench`).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs apigw with `args` (in `dir` when given), as [`run_program`] does.
pub fn run(dir: Option<&Path>, args: &[&str]) -> Output {
    match option_env!("CARGO_BIN_EXE_apigw") {
        Some(apigw) => run_program(Path::new(apigw), dir, args),
        None => panic!("binary::run runs apigw, which only apigw's tests have"),
    }
}

/// Runs `program` with `args` (in `dir` when given, without `RUST_LOG`); kills it if it still
/// runs after 60 s (a command that was not refused would go on serving).
pub fn run_program(program: &Path, dir: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(program);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let mut child = command
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Standard output and standard error, as one text.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The run ended with `code`, without a panic, and exactly one line names `at` and `value`.
pub fn refused(out: &Output, code: i32, at: &str, value: &str) {
    let all = text(out);
    assert!(
        !all.contains("panicked") && !all.contains("RUST_BACKTRACE"),
        "a panic:\n{all}"
    );
    assert_eq!(out.status.code(), Some(code), "exit status:\n{all}");
    let naming: Vec<&str> = all
        .lines()
        .filter(|l| l.contains(at) && l.contains(value))
        .collect();
    assert_eq!(naming.len(), 1, "one line naming {at} and {value}:\n{all}");
}
