//! Running a program in a test as a user runs it: with a time limit, with both pipes drained
//! on threads of their own, and with the checks that every refused command line shares. A
//! library of its own so that the tests of `apigw` and of `apigw-bench` use one copy.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `program` with `args` (in `dir` when given, without `RUST_LOG`); kills it if it still
/// runs after 60 s (a command that was not refused would go on serving).
pub fn run_program(program: &Path, dir: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(program);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command.args(args).env_remove("RUST_LOG");
    run_command(command, None, Duration::from_secs(60))
}

/// Runs `command` with `stdin` as its standard input (None: none), reading and writing the
/// pipes on threads of their own so that a chatty command never blocks on a full one; kills
/// it if it still runs after `limit`.
pub fn run_command(mut command: Command, stdin: Option<&str>, limit: Duration) -> Output {
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {:?}: {e}", command.get_program()));
    let input = child.stdin.take().zip(stdin.map(str::to_owned));
    let writer = std::thread::spawn(move || {
        if let Some((mut pipe, text)) = input {
            // A command that exits without reading it all closes the pipe: not our failure.
            let _ = pipe.write_all(text.as_bytes());
        }
    });
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Polls `done` every 100 ms for up to `seconds`, and once more at the end.
pub fn wait_for(seconds: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
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
