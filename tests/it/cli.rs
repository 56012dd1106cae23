//! The command line as a user meets it (issues 20 and 23), through the real binary: what
//! `serve` says when flags are missing or a key does not match, `check` on a manifest
//! directory alone, the RBAC policy flag and its deprecated name, kube's `--logging-format`,
//! help that lists what each command takes, one error prefix, and dev mode: checks before
//! writes, one line about the PKI, the ports it is given wired through, and access-log
//! durations to the microsecond.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::support::binary::{self, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_apigw");

/// Runs apigw in `dir` with `args`, as [`binary::run`] does.
fn apigw_in(dir: &Path, args: &[&str]) -> Output {
    binary::run(Some(dir), args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn all(out: &Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

/// A dev PKI in `dir/certs-dev`, written by `apigw certs dev`.
fn pki(dir: &Path) -> PathBuf {
    let out = apigw_in(dir, &["certs", "dev", "--out", "certs-dev"]);
    assert!(out.status.success(), "certs dev:\n{}", all(&out));
    dir.join("certs-dev")
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A port free on 127.0.0.1 a moment ago.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Every line that says something went wrong starts with `error:`, as clap's own do; none
/// with `apigw:`.
fn errors_start_with_error(out: &Output) {
    let text = all(out);
    assert!(
        text.lines().any(|l| l.starts_with("error: ")),
        "no error line:\n{text}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("apigw:")),
        "an error line with another prefix:\n{text}"
    );
}

#[test]
fn serve_without_flags_names_them_and_where_they_can_come_from() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = apigw_in(dir.path(), &["serve"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    errors_start_with_error(&out);
    let text = stderr(&out);
    for needle in [
        "--tls-cert-file",
        "--tls-private-key-file",
        "--config FILE",
        "tlsCertFile",
        "config/dev.yaml",
    ] {
        assert!(text.contains(needle), "{needle} not named:\n{text}");
    }
    // With a config file that lacks them, the file is named.
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, "securePort: 9000\n").expect("write");
    let out = apigw_in(dir.path(), &["serve", "--config", &s(&cfg)]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    let text = stderr(&out);
    for flag in ["--tls-cert-file", "--tls-private-key-file"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("error: {flag}: is required"))
                    && l.contains(&s(&cfg))),
            "{flag} and {} not named together:\n{text}",
            cfg.display()
        );
    }
}

#[test]
fn a_key_that_does_not_match_names_both_flags_and_both_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = pki(dir.path());
    let (crt, key) = (certs.join("serving.crt"), certs.join("user.key"));
    let serve = |extra: &[&str]| {
        let mut args = vec!["serve", "--bind-address", "127.0.0.1", "--secure-port", "0"];
        args.extend_from_slice(extra);
        apigw_in(dir.path(), &args)
    };
    let out = serve(&[
        "--tls-cert-file",
        &s(&crt),
        "--tls-private-key-file",
        &s(&key),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    errors_start_with_error(&out);
    let text = stderr(&out);
    assert!(
        text.lines().any(|l| l.starts_with(&format!(
            "error: --tls-private-key-file: {} does not match --tls-cert-file {}",
            key.display(),
            crt.display()
        ))),
        "{text}"
    );
    assert!(!text.contains("KeyMismatch"), "{text}");

    let (pcrt, pkey) = (certs.join("proxy-client.crt"), certs.join("admin.key"));
    let good = [
        "--tls-cert-file",
        &s(&certs.join("serving.crt")),
        "--tls-private-key-file",
        &s(&certs.join("serving.key")),
    ];
    let mut args = good.to_vec();
    let (pcrt_s, pkey_s) = (s(&pcrt), s(&pkey));
    args.extend([
        "--proxy-client-cert-file",
        &pcrt_s,
        "--proxy-client-key-file",
        &pkey_s,
    ]);
    let out = serve(&args);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    let text = stderr(&out);
    assert!(
        text.lines().any(|l| l.starts_with(&format!(
            "error: --proxy-client-key-file: {pkey_s} does not match --proxy-client-cert-file {pcrt_s}"
        ))),
        "{text}"
    );
    assert!(!text.contains("KeyMismatch"), "{text}");
    // So does the sample server's pair.
    let (wcrt, wkey) = (s(&certs.join("wardle.crt")), s(&certs.join("user.key")));
    let out = apigw_in(
        dir.path(),
        &[
            "sample-apiserver",
            "--secure-port",
            "0",
            "--tls-cert-file",
            &wcrt,
            "--tls-private-key-file",
            &wkey,
            "--requestheader-client-ca-file",
            &s(&certs.join("front-proxy-ca.crt")),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stderr(&out).lines().any(|l| l
            == format!("error: --tls-private-key-file: {wkey} does not match --tls-cert-file {wcrt}: the key is not the certificate's")),
        "{}",
        all(&out)
    );
    // `check` says the same.
    let mut check = vec!["check"];
    check.extend(args.iter().copied());
    let out = apigw_in(dir.path(), &check);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out).contains(&format!(
            "{pkey_s} does not match --proxy-client-cert-file {pcrt_s}"
        )),
        "{}",
        all(&out)
    );
}

const WARDLE: &str = "apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.wardle.example.com}
spec:
  group: wardle.example.com
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 15
  service: {name: wardle-server, namespace: wardle-namespace}
";

#[test]
fn check_lints_a_manifest_directory_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let apis = dir.path().join("apis");
    std::fs::create_dir(&apis).expect("mkdir");
    std::fs::write(apis.join("wardle.yaml"), WARDLE).expect("write");
    let out = apigw_in(dir.path(), &["check", "--apiservice-dir", &s(&apis)]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(
        text.contains(
            "ok: APIService v1alpha1.wardle.example.com -> wardle-server.wardle-namespace.svc:443"
        ),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "not checked: serving certificate (no --tls-cert-file)"),
        "{text}"
    );

    // A problem in a manifest is still one: exit 1, the file and field named.
    std::fs::write(
        apis.join("bad.yaml"),
        WARDLE
            .replace("v1alpha1.wardle", "v1beta1.wardle")
            .replace("versionPriority: 15", "versionPriority: 0"),
    )
    .expect("write");
    let out = apigw_in(dir.path(), &["check", "--apiservice-dir", &s(&apis)]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out).lines().any(|l| l.starts_with("error: ")
            && l.contains("bad.yaml")
            && l.contains("versionPriority")),
        "{}",
        all(&out)
    );
    std::fs::remove_file(apis.join("bad.yaml")).expect("rm");

    // Other files given are still checked without a serving certificate.
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, "not a certificate\n").expect("write");
    let out = apigw_in(
        dir.path(),
        &[
            "check",
            "--apiservice-dir",
            &s(&apis),
            "--client-ca-file",
            &s(&ca),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("error: ") && l.contains(&s(&ca))),
        "{}",
        all(&out)
    );
    // Half a serving pair is a problem.
    let out = apigw_in(
        dir.path(),
        &[
            "check",
            "--apiservice-dir",
            &s(&apis),
            "--tls-cert-file",
            &s(&ca),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out).contains("error: --tls-private-key-file: is required with --tls-cert-file"),
        "{}",
        all(&out)
    );
}

/// `check` and `doctor` agree with `serve` on what is required, and given nothing they use dev
/// mode's configuration where it is, saying so (issue 35): the README's bare lines work.
#[test]
fn check_and_doctor_given_nothing_use_the_dev_configuration_here() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Nowhere near a checkout: nothing to check is an error naming what serve needs.
    let out = apigw_in(dir.path(), &["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out).starts_with("error: nothing to check")
            && stdout(&out).contains("--tls-cert-file"),
        "{}",
        all(&out)
    );
    // A checkout before its dev PKI: still nothing to check, and what writes the PKI.
    copy_config(dir.path());
    let out = apigw_in(dir.path(), &["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(stdout(&out).contains("apigw certs dev"), "{}", all(&out));
    // With it: both use config/dev.yaml and say so; check calls it a configuration serve runs.
    let out = apigw_in(dir.path(), &["certs", "dev"]);
    assert!(out.status.success(), "{}", all(&out));
    let note = "note: no --config and no flags: using config/dev.yaml";
    let out = apigw_in(dir.path(), &["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(stderr(&out).starts_with(note), "{}", all(&out));
    assert!(
        stdout(&out).lines().any(|l| l == "configuration ok"),
        "{}",
        all(&out)
    );
    let port = free_port().to_string();
    let out = apigw_in(
        dir.path(),
        &[
            "doctor",
            "--resolve",
            &format!("wardle-server.wardle-namespace.svc:443=127.0.0.1:{port}"),
        ],
    );
    assert!(
        !stderr(&out).contains(note),
        "a flag was given: {}",
        all(&out)
    );
    let out = apigw_in(dir.path(), &["doctor"]);
    assert!(stderr(&out).starts_with(note), "{}", all(&out));
    let text = stdout(&out);
    // Paths as a user types them from here, not config/../certs-dev/.
    assert!(
        text.contains("ok       serving-cert-file      certs-dev/serving.crt: "),
        "{text}"
    );
    assert!(!text.contains("../"), "{text}");

    // A setting given is what is checked: no serving pair is fine for linting, yet never
    // called a configuration serve runs with.
    let apis = dir.path().join("config/apiservices");
    let out = apigw_in(dir.path(), &["check", "--apiservice-dir", &s(&apis)]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(!stderr(&out).contains(note), "{}", all(&out));
    assert!(!stdout(&out).contains("configuration ok"), "{}", all(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("ok as far as given")
                && l.contains("apigw serve also needs --tls-cert-file")),
        "{}",
        all(&out)
    );
}

#[test]
fn the_rbac_policy_has_its_own_flag_and_the_old_name_warns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\nrules: []\n",
    )
    .expect("write");
    let p = s(&policy);
    let check = |extra: &[&str]| {
        let mut args = vec!["check", "--authorization-mode", "RBAC"];
        args.extend_from_slice(extra);
        apigw_in(dir.path(), &args)
    };
    let out = check(&["--rbac-policy-file", &p]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(!all(&out).contains("deprecated"), "{}", all(&out));

    let out = check(&["--authorization-policy-file", &p]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(
        stdout(&out).lines().any(|l| l
            .starts_with("warning: --authorization-policy-file is deprecated")
            && l.contains("use --rbac-policy-file")),
        "{}",
        all(&out)
    );

    let out = check(&["--rbac-policy-file", &p, "--authorization-policy-file", &p]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("error: --rbac-policy-file: ")
                && l.contains("--authorization-policy-file")),
        "{}",
        all(&out)
    );

    let out = check(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out)
            .contains("error: --rbac-policy-file: is required with --authorization-mode=RBAC"),
        "{}",
        all(&out)
    );

    // The file: rbacPolicyFile, and authorizationPolicyFile with a warning naming the file.
    let cfg = dir.path().join("c.yaml");
    let cfg_s = s(&cfg);
    std::fs::write(
        &cfg,
        "authorizationMode: [RBAC]\nrbacPolicyFile: policy.yaml\n",
    )
    .expect("write");
    let out = apigw_in(dir.path(), &["check", "--config", &cfg_s]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(!all(&out).contains("deprecated"), "{}", all(&out));
    std::fs::write(
        &cfg,
        "authorizationMode: [RBAC]\nauthorizationPolicyFile: policy.yaml\n",
    )
    .expect("write");
    let out = apigw_in(dir.path(), &["check", "--config", &cfg_s]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    assert!(
        stdout(&out).contains(&format!(
            "warning: {cfg_s}: authorizationPolicyFile is deprecated; use rbacPolicyFile"
        )),
        "{}",
        all(&out)
    );
    std::fs::write(
        &cfg,
        "authorizationMode: [RBAC]\nauthorizationPolicyFile: policy.yaml\nrbacPolicyFile: policy.yaml\n",
    )
    .expect("write");
    let out = apigw_in(dir.path(), &["check", "--config", &cfg_s]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out).contains(&format!("error: {cfg_s}: rbacPolicyFile: ")),
        "{}",
        all(&out)
    );
}

#[test]
fn a_second_signal_ends_the_drain_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = pki(dir.path());
    let port = free_port().to_string();
    let log = dir.path().join("serve.log");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            &port,
        ])
        .args(["--tls-cert-file", &s(&certs.join("serving.crt"))])
        .args(["--tls-private-key-file", &s(&certs.join("serving.key"))])
        .args(["--client-ca-file", &s(&certs.join("client-ca.crt"))])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("run apigw");
    let pid = rustix::process::Pid::from_child(&child);
    let guard = Kill(&mut child);
    let url = format!("https://127.0.0.1:{port}");
    let curl = |args: &[&str]| {
        let mut c = Command::new("curl");
        c.args(["-sS", "--cacert", &s(&certs.join("ca.crt"))])
            .args([
                "--cert",
                &s(&certs.join("admin.crt")),
                "--key",
                &s(&certs.join("admin.key")),
            ])
            .args(args);
        c
    };
    let ready = wait_for(20, || {
        curl(&["-f", &format!("{url}/readyz")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert!(ready, "apigw never became ready");
    // An open watch holds the drain for the grace period (30 s by default).
    let mut watch = curl(&[
        "-N",
        &format!("{url}/apis/apiregistration.k8s.io/v1/apiservices?watch=true"),
    ])
    .stdout(Stdio::null())
    .spawn()
    .expect("curl");
    std::thread::sleep(Duration::from_millis(500));
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    assert!(
        wait_for(10, || logged()
            .contains("a second Ctrl-C or SIGTERM exits at once")
            && logged().contains("grace=30s")),
        "the first signal did not say what the drain waits for:\n{}",
        logged()
    );
    assert!(
        guard.0.try_wait().expect("wait").is_none(),
        "the first signal did not wait for the watch"
    );
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
    let ended = wait_for(10, || guard.0.try_wait().is_ok_and(|s| s.is_some()));
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        ended,
        "a second SIGINT did not end the process:\n{}",
        logged()
    );
    let status = guard.0.wait().expect("wait");
    assert_eq!(status.code(), Some(1), "{}", logged());
}

#[test]
fn serve_logs_the_deprecation_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = pki(dir.path());
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "").expect("write");
    let log = dir.path().join("serve.log");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            "0",
            "--tls-cert-file",
            &s(&certs.join("serving.crt")),
            "--tls-private-key-file",
            &s(&certs.join("serving.key")),
            "--authorization-mode",
            "RBAC",
            "--authorization-policy-file",
            &s(&policy),
            "--logging-format",
            "json",
        ])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("run apigw");
    let _guard = Kill(&mut child);
    let warned = wait_for(20, || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .any(|l| {
                serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| {
                    v["level"] == "WARN"
                        && v["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("use --rbac-policy-file"))
                })
            })
    });
    assert!(
        warned,
        "no JSON warning logged:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

#[test]
fn logging_format_is_kubes_name_for_log_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = apigw_in(dir.path(), &["check", "--logging-format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
    let out = apigw_in(dir.path(), &["check", "--logging-format", "xml"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out).lines().any(|l| l.starts_with("error: ")
            && l.contains("--logging-format")
            && l.contains("xml")),
        "{}",
        all(&out)
    );
    // One setting: both names at once is clap's usage error.
    let out = apigw_in(
        dir.path(),
        &["check", "--logging-format", "json", "--log-format", "json"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", all(&out));
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, "loggingFormat: json\n").expect("write");
    let out = apigw_in(dir.path(), &["check", "--config", &s(&cfg)]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));
}

#[test]
fn help_lists_what_each_command_takes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let help = |args: &[&str]| {
        let out = apigw_in(dir.path(), args);
        assert!(out.status.success(), "{args:?}:\n{}", all(&out));
        stdout(&out)
    };
    let serve = help(&["serve", "--help"]);
    let modes = serve
        .split("--authorization-mode <")
        .nth(1)
        .and_then(|rest| rest.split("\n      --").next())
        .unwrap_or_default();
    for mode in ["AlwaysAllow", "AlwaysDeny", "RBAC", "Webhook"] {
        assert!(modes.contains(mode), "{mode} not listed: {modes}");
    }
    for flag in [
        "--rbac-policy-file",
        "--logging-format",
        "--request-timeout",
    ] {
        assert!(serve.contains(flag), "serve --help lacks {flag}");
    }

    let check = help(&["check", "--help"]);
    let doctor = help(&["doctor", "--help"]);
    for (name, text, listed) in [
        (
            "check",
            &check,
            &["--config", "--apiservice-dir", "--resolve", "--kubeconfig"][..],
        ),
        (
            "doctor",
            &doctor,
            &[
                "--config",
                "--apiservice-dir",
                "--resolve",
                "--proxy-client-cert-file",
            ][..],
        ),
    ] {
        for flag in listed {
            assert!(text.contains(flag), "{name} --help lacks {flag}:\n{text}");
        }
        for serve_only in [
            "--request-timeout",
            "--max-requests-inflight",
            "--audit-log-path",
            "--shutdown-grace-period",
            "--worker-threads",
            "--token-auth-file",
        ] {
            assert!(
                !text.contains(serve_only),
                "{name} --help lists {serve_only}:\n{text}"
            );
        }
        let flags = text
            .lines()
            .filter(|l| l.trim_start().starts_with("--"))
            .count();
        assert!(flags <= 15, "{name} --help lists {flags} flags:\n{text}");
    }
    // The flags check does not list are still accepted, so a serve command line checks as is.
    let out = apigw_in(dir.path(), &["check", "--request-timeout", "90s"]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));

    let certs_dev = help(&["certs", "dev", "--help"]);
    for flag in ["--out <OUT>", "--force"] {
        let line = certs_dev
            .lines()
            .find(|l| l.trim_start().starts_with(flag))
            .unwrap_or_default();
        let described = line.trim_start().trim_start_matches(flag).trim();
        assert!(
            described.len() > 20,
            "{flag} has no description:\n{certs_dev}"
        );
    }
    let dev = help(&["dev", "--help"]);
    for flag in ["--port", "--sample-port"] {
        assert!(dev.contains(flag), "dev --help lacks {flag}:\n{dev}");
    }
}

#[test]
fn every_command_prefixes_errors_alike() {
    let dir = tempfile::tempdir().expect("tempdir");
    let not_dir = dir.path().join("file");
    std::fs::write(&not_dir, "x").expect("write");
    let missing = s(&dir.path().join("missing.crt"));
    for args in [
        vec!["serve"],
        vec!["check", "--tls-cert-file", &missing],
        vec!["dev"],
        vec!["certs", "dev", "--out", not_dir.to_str().expect("utf-8")],
        vec!["serve", "--secure-port", "x"],
        vec![
            "sample-apiserver",
            "--secure-port",
            "0",
            "--tls-cert-file",
            &missing,
        ],
    ] {
        let out = apigw_in(dir.path(), &args);
        assert!(!out.status.success(), "{args:?}:\n{}", all(&out));
        errors_start_with_error(&out);
    }
}

#[test]
fn certs_dev_says_once_that_it_kept_the_pki() {
    let dir = tempfile::tempdir().expect("tempdir");
    pki(dir.path());
    let out = apigw_in(dir.path(), &["certs", "dev", "--out", "certs-dev"]);
    assert!(out.status.success(), "{}", all(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("certs-dev") && text.contains("--force"),
        "{text}"
    );
}

#[test]
fn dev_outside_the_repository_writes_nothing_and_says_where_to_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = apigw_in(dir.path(), &["dev"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    errors_start_with_error(&out);
    let text = stderr(&out);
    assert!(
        text.contains("config/dev.yaml") && text.contains("root of the apigw repository"),
        "{text}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "dev wrote {left:?}");

    // A config whose manifest directory is missing: refused before writing, too.
    std::fs::create_dir(dir.path().join("config")).expect("mkdir");
    std::fs::write(
        dir.path().join("config/dev.yaml"),
        "apiserviceDir: apiservices\n",
    )
    .expect("write");
    let out = apigw_in(dir.path(), &["dev"]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(stderr(&out).contains("apiserviceDir"), "{}", all(&out));
    assert!(
        !dir.path().join("certs-dev").exists(),
        "dev wrote certs-dev:\n{}",
        all(&out)
    );
}

/// Kills the child when dropped (a failed assertion must not leave dev mode running).
struct Kill<'a>(&'a mut Child);

impl Drop for Kill<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn curl(certs: &Path, url: &str) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "5", "--cacert"])
        .arg(certs.join("ca.crt"))
        .arg("--cert")
        .arg(certs.join("admin.crt"))
        .arg("--key")
        .arg(certs.join("admin.key"))
        .arg(url)
        .output()
        .expect("curl (the tests need curl on PATH)")
}

/// This repository's `config/` copied into `root`, as a checkout has it.
fn copy_config(root: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    std::fs::create_dir_all(root.join("config/apiservices")).expect("mkdir");
    std::fs::copy(src.join("dev.yaml"), root.join("config/dev.yaml")).expect("copy");
    std::fs::copy(
        src.join("apiservices/wardle.yaml"),
        root.join("config/apiservices/wardle.yaml"),
    )
    .expect("copy");
}

/// Starts `apigw dev` in `root` on free ports with `extra` flags, its log in `root/dev.log`;
/// returns the child, the gateway port and the log path once a FlunderList came through the
/// gateway with `certs`' admin certificate.
fn dev_serving(root: &Path, certs: &Path, extra: &[&str]) -> (Child, u16, PathBuf) {
    let (port, sample_port) = (free_port(), free_port());
    let log = root.join("dev.log");
    let (port_s, sample_s) = (port.to_string(), sample_port.to_string());
    let mut args = vec!["dev", "--port", &port_s, "--sample-port", &sample_s];
    args.extend_from_slice(extra);
    let mut child = Command::new(BIN)
        .args(&args)
        .current_dir(root)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("run apigw dev");
    let url = format!(
        "https://127.0.0.1:{port}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders"
    );
    let mut last = String::new();
    let through = wait_for(30, || {
        let out = curl(certs, &url);
        last = all(&out);
        last.contains("\"kind\":\"FlunderList\"")
    });
    if !through {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{args:?}: no FlunderList through the gateway on {port} to the sample on {sample_port}: {last}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    (child, port, log)
}

#[test]
fn dev_uses_the_pki_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    copy_config(root);
    let certs = root.join("other-pki");
    let (mut child, _, _) = dev_serving(root, &certs, &["--certs", "other-pki"]);
    drop(Kill(&mut child));
    assert!(!root.join("certs-dev").exists(), "certs-dev was written");
}

#[test]
fn dev_sends_to_the_ports_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    copy_config(root);
    // The PKI is there already: dev says so in one line.
    let certs = pki(root);
    let (mut child, port, log) = dev_serving(root, &certs, &[]);
    let guard = Kill(&mut child);
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    let kubeconfig = std::fs::read_to_string(certs.join("kubeconfig")).expect("kubeconfig");
    assert!(
        kubeconfig.contains(&format!("https://127.0.0.1:{port}")),
        "{kubeconfig}"
    );
    // The access line of that request, its duration to the microsecond.
    let access = |text: &str| {
        text.lines()
            .filter(|l| l.contains("apigw::access") && l.contains("flunders"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(
        wait_for(5, || !access(&logged()).is_empty()),
        "no access line:\n{}",
        logged()
    );
    drop(guard);
    let text = logged();
    for line in access(&text) {
        let value = line
            .split("duration_ms=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_default();
        let decimals = value.split_once('.').map_or(0, |(_, f)| f.len());
        assert!(
            !value.is_empty() && value.parse::<f64>().is_ok() && decimals <= 3,
            "duration_ms={value} is not milliseconds to the microsecond: {line}"
        );
    }
    // One line about the PKI, saying how to regenerate it; every line but the commands to
    // try is a log line.
    let pki_lines: Vec<&str> = text.lines().filter(|l| l.contains("certs-dev")).collect();
    assert!(
        pki_lines
            .iter()
            .any(|l| l.contains("reusing the dev PKI in certs-dev")
                && l.contains("apigw certs dev --force --out certs-dev")),
        "{text}"
    );
    assert!(!text.contains("--force replaces it"), "{text}");
    // The commands to try name the port dev mode serves on, each a bare line that pastes into
    // a shell as it is, after a log line that introduces them.
    let curl = format!(
        "curl --cacert certs-dev/ca.crt --cert certs-dev/admin.crt --key certs-dev/admin.key https://127.0.0.1:{port}/apis"
    );
    assert!(text.lines().any(|l| l == curl), "{text}");
    assert!(text.contains("try it (from this directory"), "{text}");
    let commands = ["curl ", "openssl ", "kubectl "];
    assert_eq!(
        text.lines()
            .filter(|l| commands.iter().any(|c| l.starts_with(c)))
            .count(),
        6,
        "{text}"
    );
    assert!(
        text.lines().filter(|l| l.contains("reusing")).count() == 1,
        "{text}"
    );
    let logged_lines = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !commands.iter().any(|c| l.starts_with(c)));
    for line in logged_lines {
        let stamp = line.get(..20).unwrap_or_default();
        assert!(
            stamp.len() == 20
                && stamp.as_bytes()[4] == b'-'
                && stamp.as_bytes()[10] == b'T'
                && stamp.as_bytes()[19] == b'.',
            "a line without a timestamp: {line:?}\n{text}"
        );
    }
}

/// `--authorization-config` as `apigw check` reads it: a good file passes; its problems are
/// listed by field; with `--authorization-mode` too, kube-apiserver's refusal.
#[test]
fn check_reads_the_authorization_config_and_refuses_it_with_the_modes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("authz.yaml");
    let c = s(&config);
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- {type: AlwaysAllow, name: alwaysallow}\n",
    )
    .expect("write");
    let out = apigw_in(dir.path(), &["check", "--authorization-config", &c]);
    assert_eq!(out.status.code(), Some(0), "{}", all(&out));

    let out = apigw_in(
        dir.path(),
        &[
            "check",
            "--authorization-config",
            &c,
            "--authorization-mode",
            "RBAC",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out).contains("error: --authorization-config: --authorization-config can not be specified when --authorization-mode or --authorization-webhook-* flags are defined"),
        "{}",
        all(&out)
    );

    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- {type: Node, name: node}\n",
    )
    .expect("write");
    let out = apigw_in(dir.path(), &["check", "--authorization-config", &c]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out).contains(
            "error: --authorization-config: authorizers[0].type: Unsupported value: \"Node\""
        ),
        "{}",
        all(&out)
    );

    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- {type: RBAC, name: rbac}\n",
    )
    .expect("write");
    let out = apigw_in(dir.path(), &["check", "--authorization-config", &c]);
    assert_eq!(out.status.code(), Some(1), "{}", all(&out));
    assert!(
        stdout(&out).contains(
            "error: --rbac-policy-file: is required with an RBAC authorizer in --authorization-config"
        ),
        "{}",
        all(&out)
    );
}
