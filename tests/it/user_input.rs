//! Nothing a user types panics the process (issue 18, item 6): huge durations, sizes, counts
//! and ports, on the command line, in the config file and in APIService manifests, through the
//! real binary. Each is refused with a non-zero exit and one line naming the flag (or the file
//! and field, or the manifest field) and the value; none may end in a panic.

use crate::support::binary;
use std::path::Path;
use std::process::Output;

/// Runs the apigw binary with `args`, as [`binary::run`] does.
fn apigw(args: &[&str]) -> Output {
    binary::run(None, args)
}

use binary::{refused, text};

/// Stand-ins for the serving pair: the config checks that they are files before anything else.
fn pair(dir: &Path) -> [String; 4] {
    let (crt, key) = (dir.join("s.crt"), dir.join("s.key"));
    std::fs::write(&crt, "x").expect("write");
    std::fs::write(&key, "x").expect("write");
    [
        "--tls-cert-file".into(),
        crt.display().to_string(),
        "--tls-private-key-file".into(),
        key.display().to_string(),
    ]
}

#[test]
fn a_huge_request_timeout_is_an_error_naming_the_flag_not_a_panic() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let pair = pair(dir.path());
    let mut args = vec!["serve", "--request-timeout", "99999999999999999999h"];
    args.extend(pair.iter().map(String::as_str));
    let out = apigw(&args);
    refused(&out, 1, "--request-timeout", "99999999999999999999h");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("--request-timeout"))
        .unwrap_or_default();
    assert!(
        line.starts_with("error: --request-timeout: ") && line.contains("too long"),
        "{stderr}"
    );
    args[0] = "check";
    refused(
        &apigw(&args),
        1,
        "--request-timeout",
        "99999999999999999999h",
    );
}

#[test]
fn every_number_a_flag_takes_is_bounded() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let pair = pair(dir.path());
    let audit = dir.path().join("audit.log").display().to_string();
    // (extra args, flag, value): `apigw check` exits 1 and names both.
    let cases: &[(&[&str], &str, &str)] = &[
        (&[], "--request-timeout", "18446744073709551616s"),
        (&[], "--request-timeout", "2562048h"),
        (&[], "--shutdown-grace-period", "1e300s"),
        (
            &[],
            "--shutdown-delay-duration",
            "9999999999.99999999999999999999h",
        ),
        (
            &[],
            "--availability-check-interval",
            "99999999999999999999999999999999999999999ms",
        ),
        (
            &[],
            "--availability-check-timeout",
            "1h1h1h99999999999999999h",
        ),
        (&[], "--leader-elect-lease-duration", "106751991167301d"),
        (
            &[],
            "--leader-elect-renew-deadline",
            "340282366920938463463374607431768211456ns",
        ),
        (&[], "--leader-elect-retry-period", "9223372037s"),
        (
            &["--audit-log-path", &audit],
            "--audit-log-maxsize",
            "18446744073709551615",
        ),
        (&[], "--worker-threads", "18446744073709551615"),
        (&[], "--delegate-url", "https://example.com:99999"),
        (&[], "--delegate-url", "https://example.com:0"),
        (&[], "--resolve", "a.svc:99999=127.0.0.1:1"),
    ];
    for (extra, flag, value) in cases {
        let mut args = vec!["check", flag, value];
        args.extend(extra.iter().copied());
        args.extend(pair.iter().map(String::as_str));
        refused(&apigw(&args), 1, flag, value);
    }
    // Values the command-line parser refuses: exit 2 with clap's one line.
    for (flag, value) in [
        ("--secure-port", "99999"),
        ("--max-requests-inflight", "99999999999999999999999"),
        ("--max-request-body-bytes", "1e3"),
        ("--audit-log-maxbackup", "18446744073709551616"),
    ] {
        let mut args = vec!["check", flag, value];
        args.extend(pair.iter().map(String::as_str));
        refused(&apigw(&args), 2, flag, value);
    }
}

#[test]
fn config_file_values_are_bounded_and_named_by_file_and_field() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let pair = pair(dir.path());
    let cfg = dir.path().join("c.yaml");
    let cfg_arg = cfg.display().to_string();
    for (yaml, field, value) in [
        (
            "requestTimeout: 99999999999999999999h",
            "requestTimeout",
            "99999999999999999999h",
        ),
        (
            "shutdownGracePeriod: 1e400s",
            "shutdownGracePeriod",
            "1e400s",
        ),
        ("workerThreads: 100000000", "workerThreads", "100000000"),
        (
            "auditLogPath: a.log\nauditLogMaxsize: 18446744073709551615",
            "auditLogMaxsize",
            "18446744073709551615",
        ),
        ("securePort: 99999", "securePort", "99999"),
        (
            "maxRequestsInflight: 99999999999999999999999",
            "maxRequestsInflight",
            "99999999999999999999999",
        ),
    ] {
        std::fs::write(&cfg, format!("{yaml}\n")).expect("write");
        let mut args = vec!["check", "--config", &cfg_arg];
        args.extend(pair.iter().map(String::as_str));
        let out = apigw(&args);
        let all = text(&out);
        refused(&out, 1, &cfg_arg, field);
        assert!(
            all.contains(value) || all.contains("invalid"),
            "{yaml}:\n{all}"
        );
    }
}

#[test]
fn manifest_numbers_are_field_errors() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let pair = pair(dir.path());
    let apis = dir.path().join("apis");
    std::fs::create_dir(&apis).expect("mkdir");
    let object = |spec: &str| {
        format!("apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: v1.a.example.com}}\nspec: {{group: a.example.com, version: v1, {spec}}}\n")
    };
    let service = "service: {name: a, namespace: ns}";
    for (spec, field, value) in [
        (format!("groupPriorityMinimum: 99999999999999999999, versionPriority: 1, {service}"), "spec.groupPriorityMinimum", "99999999999999999999"),
        (format!("groupPriorityMinimum: 1, versionPriority: -9223372036854775809, {service}"), "spec.versionPriority", "-9223372036854775809"),
        (format!("groupPriorityMinimum: 18446744073709551615, versionPriority: 1, {service}"), "spec.groupPriorityMinimum", "18446744073709551615"),
        (format!("groupPriorityMinimum: 1, versionPriority: 1.5e300, {service}"), "spec.versionPriority", "1.5e+300"),
        ("groupPriorityMinimum: 1, versionPriority: 1, service: {name: a, namespace: ns, port: 18446744073709551616}".to_string(), "spec.service.port", "18446744073709551616"),
        ("groupPriorityMinimum: 1, versionPriority: 1, service: {name: a, namespace: ns, port: -65536}".to_string(), "spec.service.port", "-65536"),
        (format!("groupPriorityMinimum: 1, versionPriority: 1, caBundle: '!!!', {service}"), "spec.caBundle", "base64"),
        (format!("groupPriorityMinimum: 1, versionPriority: 1, caBundle: aGVsbG8=, {service}"), "spec.caBundle", "PEM"),
    ] {
        for f in std::fs::read_dir(&apis).expect("read dir") {
            std::fs::remove_file(f.expect("entry").path()).expect("rm");
        }
        std::fs::write(apis.join("a.yaml"), object(&spec)).expect("write");
        let apis_arg = apis.display().to_string();
        let mut args = vec!["check", "--apiservice-dir", &apis_arg];
        args.extend(pair.iter().map(String::as_str));
        let out = apigw(&args);
        let all = text(&out);
        // A number YAML cannot hold is the file's error; any other is the field's.
        assert!(
            all.lines().any(|l| l.contains("a.yaml") && (l.contains(field) || l.contains("invalid YAML"))),
            "{spec}:\n{all}"
        );
        refused(&out, 1, "a.yaml", value);
    }
}
