//! What `apigw-bench` refuses on its command line: a bad value exits non-zero with one line
//! naming the flag and the value, never a panic (moved here from tests/user_input.rs with the
//! bench, out of the apigw binary).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs apigw-bench with `args`; killed after a minute (a refusal takes milliseconds).
fn bench(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_apigw-bench"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting apigw-bench");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("waiting for apigw-bench").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("apigw-bench's output")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The run ended with `code`, without a panic, and exactly one line names `at` and `value`.
fn refused(out: &Output, code: i32, at: &str, value: &str) {
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

#[test]
fn bench_seconds_are_bounded() {
    for value in ["1e300", "inf"] {
        let out = bench(&["--no-install", "--no-peers", "--duration", value]);
        refused(&out, 1, "--duration", value);
    }
}
