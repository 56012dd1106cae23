//! The tools the tests run, other than apigw: what a run did ([`Ran`]), and kubectl as every
//! test runs it, with a kubeconfig and a cache directory of its own beside it.

use apigw_testrun::{run_command, text};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// What a command did.
pub struct Ran {
    pub what: String,
    pub out: Output,
}

impl Ran {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    pub fn text(&self) -> String {
        text(&self.out)
    }

    /// True when it exited with success.
    pub fn succeeded(&self) -> bool {
        self.out.status.success()
    }

    /// Standard output of a command that must succeed.
    pub fn ok(&self) -> String {
        assert!(
            self.out.status.success(),
            "{} failed ({}):\n{}",
            self.what,
            self.out.status,
            self.text()
        );
        self.stdout()
    }

    /// Standard output parsed as JSON, of a command that must succeed.
    pub fn json(&self) -> serde_json::Value {
        let text = self.ok();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", self.what))
    }

    /// Standard error of a command that must fail.
    pub fn fails(&self) -> String {
        assert!(
            !self.out.status.success(),
            "{} succeeded, and should not have:\n{}",
            self.what,
            self.text()
        );
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
}

/// Runs `program` with `args` and an optional standard input; kills it after 90 s.
pub fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> Ran {
    let what = format!("{} {}", program.display(), args.join(" "));
    let mut command = Command::new(program);
    command.args(args);
    let out = run_command(command, stdin, Duration::from_secs(90));
    Ran { what, out }
}

/// kubectl with `kubeconfig` and a cache of its own beside it.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Ran {
    kubectl_in(kubeconfig, args, None)
}

/// kubectl with a manifest on standard input (`-f -`); killed after 90 s.
pub fn kubectl_in(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Ran {
    let what = format!("kubectl {}", args.join(" "));
    let out = run_command(
        kubectl_command(kubeconfig, args),
        stdin,
        Duration::from_secs(90),
    );
    Ran { what, out }
}

/// The kubectl command line every test uses: `kubeconfig`, and a cache directory of its own
/// beside it (so that parallel tests never share discovery caches).
pub fn kubectl_command(kubeconfig: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("kubectl");
    command.args(kubectl_args(kubeconfig, args));
    command
}

/// The arguments of [`kubectl_command`].
pub fn kubectl_args(kubeconfig: &Path, args: &[&str]) -> Vec<String> {
    let mut all = vec![
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "--cache-dir".to_string(),
        kubeconfig.with_extension("cache").display().to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    all
}

/// [`kubectl`] from async code, on a blocking thread.
pub async fn kubectl_async(kubeconfig: &Path, args: &[&str]) -> Ran {
    let kubeconfig = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kubectl(&kubeconfig, &args)
    })
    .await
    .expect("kubectl's thread")
}
