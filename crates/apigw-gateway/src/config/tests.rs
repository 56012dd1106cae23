//! The configuration's tests: flags and file merged, problems named, values bounded.

use super::*;
use apigw_core::duration::{parse_duration, MAX_DURATION};
use apigw_proxy::{parse_https_url, parse_resolve};
use std::time::Duration;

fn touch(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, "x").unwrap();
    p
}

#[test]
fn file_paths_are_relative_to_the_file_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    touch(dir.path(), "s.crt");
    touch(dir.path(), "s.key");
    std::fs::create_dir(dir.path().join("apis")).unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(
        &cfg,
        "securePort: 9000\ntlsCertFile: s.crt\ntlsPrivateKeyFile: s.key\napiserviceDir: apis\nresolve: {\"a.b.svc:443\": \"127.0.0.1:9443\"}\nworkerThreads: 3\n",
    )
    .unwrap();
    let flags = Flags {
        config: Some(cfg.clone()),
        serving: ServingFlags {
            secure_port: Some(9100),
            ..Default::default()
        },
        ..Default::default()
    };
    let c = Config::load(&flags).unwrap();
    assert_eq!(c.server.listen.port(), 9100);
    assert_eq!(c.server.worker_threads, 3);
    let no_workers = Flags {
        config: Some(cfg),
        server: ServerFlags {
            worker_threads: Some(0),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(Config::load(&no_workers).unwrap().server.worker_threads, 0);
    let bare = Flags {
        serving: ServingFlags {
            tls_cert_file: Some(dir.path().join("s.crt")),
            tls_private_key_file: Some(dir.path().join("s.key")),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(Config::load(&bare).unwrap().server.worker_threads, cpus());
    assert_eq!(c.tls_cert, dir.path().join("s.crt"));
    assert_eq!(c.apiservice_dir, Some(dir.path().join("apis")));
    assert_eq!(
        c.proxy.resolve[&("a.b.svc".to_string(), 443)],
        ["127.0.0.1:9443".parse().unwrap()]
    );
    assert!(matches!(
        c.authz.links[..],
        [apigw_authz::LinkSettings::AlwaysAllow]
    ));
}

#[test]
fn paths_up_from_the_files_directory_are_named_as_a_user_types_them() {
    let dir = tempfile::tempdir().unwrap();
    let (conf, certs) = (dir.path().join("config"), dir.path().join("certs"));
    std::fs::create_dir(&conf).unwrap();
    std::fs::create_dir(&certs).unwrap();
    touch(&certs, "s.crt");
    touch(&certs, "s.key");
    let cfg = conf.join("c.yaml");
    std::fs::write(
        &cfg,
        "tlsCertFile: ../certs/s.crt\ntlsPrivateKeyFile: ../certs/s.key\nclientCaFile: ../certs/ca.crt\n",
    )
    .unwrap();
    let flags = Flags {
        config: Some(cfg.clone()),
        ..Default::default()
    };
    let problems = Config::load(&flags).unwrap_err();
    let missing = certs.join("ca.crt").display().to_string();
    assert!(
        problems
            .iter()
            .any(|p| p.message.starts_with(&format!("{missing}: "))),
        "{problems:?}"
    );
    std::fs::write(certs.join("ca.crt"), "x").unwrap();
    assert_eq!(Config::load(&flags).unwrap().tls_cert, certs.join("s.crt"));

    // Through a symlinked directory `..` is the link target's parent: the path stays as joined.
    #[cfg(unix)]
    {
        let elsewhere = tempfile::tempdir().unwrap();
        let link = elsewhere.path().join("config");
        std::os::unix::fs::symlink(&conf, &link).unwrap();
        let linked = Flags {
            config: Some(link.join("c.yaml")),
            ..Default::default()
        };
        let c = Config::load(&linked).unwrap();
        assert_eq!(c.tls_cert, link.join("../certs/s.crt"));
    }
}

#[test]
fn problems_name_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(
        &cfg,
        "tlsCertFile: missing.crt\nresolve: {\"nope\": \"x\"}\n",
    )
    .unwrap();
    let errs = Config::load(&Flags {
        config: Some(cfg.clone()),
        ..Default::default()
    })
    .unwrap_err();
    let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
    let file = cfg.display().to_string();
    assert!(
        text.iter()
            .any(|t| t.starts_with(&format!("{file}: tlsCertFile: "))),
        "{text:?}"
    );
    assert!(
        text.iter().any(|t| t
            .starts_with("--tls-private-key-file: is required with --tls-cert-file")
            && t.contains(&format!("tlsPrivateKeyFile in {file}"))),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|t| t.starts_with(&format!("{file}: resolve: nope=x"))),
        "{text:?}"
    );
}

#[test]
fn unknown_file_fields_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, "securePrt: 1\n").unwrap();
    let errs = Config::load(&Flags {
        config: Some(cfg),
        ..Default::default()
    })
    .unwrap_err();
    assert!(errs[0].message.contains("securePrt"), "{}", errs[0]);
}

#[test]
fn durations_like_kube_flags() {
    assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert!(parse_duration("30").is_err());
    assert!(parse_duration("3d").is_err());
    assert!(parse_duration("").is_err());
    assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration(".5s"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("1s.5m"), Ok(Duration::from_secs(31)));
    assert_eq!(parse_duration("1us1ns"), Ok(Duration::from_nanos(1001)));
    assert_eq!(
        parse_duration("0.3333333333333333333333333333s"),
        Ok(Duration::from_nanos(333_333_333))
    );
    assert!(parse_duration(".s").is_err());
    assert!(parse_duration("1.2.3s").is_err());
}

#[test]
fn durations_stop_at_gos_longest() {
    assert_eq!(parse_duration("2562047h47m16.854775807s"), Ok(MAX_DURATION));
    assert_eq!(parse_duration("9223372036854775807ns"), Ok(MAX_DURATION));
    for long in [
        "2562047h47m16.854775808s",
        "9223372036854775808ns",
        "2562048h",
        "99999999999999999999h",
        "340282366920938463463374607431768211456h",
        "9223372036854775807ns1ns",
    ] {
        let e = parse_duration(long).unwrap_err();
        assert!(e.contains(long) && e.contains("too long"), "{long}: {e}");
    }
}

#[test]
fn huge_values_are_problems_naming_flag_or_field_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = (touch(dir.path(), "s.crt"), touch(dir.path(), "s.key"));
    let flags = Flags {
        serving: ServingFlags {
            tls_cert_file: Some(crt),
            tls_private_key_file: Some(key),
            ..Default::default()
        },
        limits: LimitsFlags {
            request_timeout: Some("99999999999999999999h".into()),
            ..Default::default()
        },
        audit: AuditFlags {
            audit_log_path: Some("-".into()),
            audit_log_maxsize: Some(u64::MAX),
            ..Default::default()
        },
        server: ServerFlags {
            worker_threads: Some(usize::MAX),
            ..Default::default()
        },
        proxy: ProxyFlags {
            delegate_url: Some("https://example.com:99999".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let text: Vec<String> = Config::load(&flags)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    for (at, value) in [
        ("--request-timeout: ", "99999999999999999999h"),
        ("--audit-log-maxsize: ", &u64::MAX.to_string()),
        ("--worker-threads: ", &usize::MAX.to_string()),
        ("--delegate-url: ", "99999"),
    ] {
        assert!(
            text.iter().any(|t| t.starts_with(at) && t.contains(value)),
            "{at}{value}: {text:?}"
        );
    }
    let cfg = dir.path().join("c.yaml");
    std::fs::write(
        &cfg,
        "shutdownGracePeriod: 2562048h
workerThreads: 1025
",
    )
    .unwrap();
    let text: Vec<String> = Config::load(&Flags {
        config: Some(cfg.clone()),
        serving: flags.serving,
        ..Default::default()
    })
    .unwrap_err()
    .iter()
    .map(ToString::to_string)
    .collect();
    let file = cfg.display().to_string();
    for (field, value) in [
        ("shutdownGracePeriod", "2562048h"),
        ("workerThreads", "1025"),
    ] {
        assert!(
            text.iter()
                .any(|t| t.starts_with(&format!("{file}: {field}: ")) && t.contains(value)),
            "{field}: {text:?}"
        );
    }
    assert_eq!(
        parse_https_url("https://[::1]:6443/").unwrap(),
        ("::1".into(), 6443)
    );
    assert_eq!(
        parse_https_url("https://user:pw@example.com").unwrap(),
        ("example.com".into(), 443)
    );
    assert!(parse_https_url("https://example.com:0").is_err());
    assert!(parse_https_url("https://[::1]:65536").is_err());
}

/// Text a user might give a duration: Go-like pieces with any digits and units, or anything.
fn duration_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let unit = proptest::sample::select(vec![
        "ns", "us", "µs", "ms", "s", "m", "h", "", "d", "e", ".", " ", "-", "+",
    ]);
    let piece = ("[0-9]{0,45}(\\.[0-9]{0,45})?", unit).prop_map(|(n, u)| format!("{n}{u}"));
    prop_oneof![
        proptest::collection::vec(piece, 0..5).prop_map(|p| p.concat()),
        any::<String>(),
        any::<u128>().prop_map(|n| format!("{n}h")),
        any::<u64>().prop_map(|n| format!("{n}ns")),
        any::<f64>().prop_map(|f| format!("{f}s")),
    ]
}

/// A number as a user might write one: in or past any integer type, negative, float.
fn number_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        any::<u16>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u128>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
        "-?[0-9]{1,45}(\\.[0-9]{0,10})?(e[+-]?[0-9]{1,4})?",
    ]
}

/// The file's settings that hold durations, numbers and other text, by kind.
const FILE_DURATIONS: [&str; 8] = [
    "requestTimeout",
    "shutdownDelayDuration",
    "shutdownGracePeriod",
    "availabilityCheckInterval",
    "availabilityCheckTimeout",
    "leaderElectLeaseDuration",
    "leaderElectRenewDeadline",
    "leaderElectRetryPeriod",
];
const FILE_NUMBERS: [&str; 8] = [
    "securePort",
    "maxRequestsInflight",
    "maxRequestsInflightPerClient",
    "maxConnectionsPerClient",
    "workerThreads",
    "maxRequestBodyBytes",
    "auditLogMaxsize",
    "auditLogMaxbackup",
];
const FILE_TEXT: [&str; 5] = [
    "delegateUrl",
    "logFormat",
    "auditLogPath",
    "bindAddress",
    "metricsBindAddress",
];

/// What loading did: every setting in range, or problems to print.
fn loaded_sanely(
    result: Result<Config, Vec<ConfigError>>,
) -> Result<(), proptest::test_runner::TestCaseError> {
    match result {
        Ok(c) => {
            for d in [
                c.limits.request_timeout,
                c.server.shutdown_delay,
                c.server.shutdown_grace,
                c.availability.interval,
                c.availability.timeout,
            ] {
                proptest::prop_assert!(d <= MAX_DURATION);
            }
            proptest::prop_assert!(c.server.worker_threads <= MAX_WORKER_THREADS);
        }
        Err(problems) => proptest::prop_assert!(!problems.is_empty()),
    }
    Ok(())
}

proptest::proptest! {
    #[test]
    fn no_duration_text_panics(text in duration_text()) {
        if let Ok(d) = parse_duration(&text) {
            proptest::prop_assert!(d <= MAX_DURATION, "{:?} -> {:?}", text, d);
        }
    }

    #[test]
    fn exact_seconds_parse_exactly(secs in 0..=MAX_DURATION.as_secs() + 1, nanos in 0u32..1_000_000_000) {
        let d = Duration::new(secs, nanos);
        let parsed = parse_duration(&format!("{secs}.{nanos:09}s"));
        if d <= MAX_DURATION {
            proptest::prop_assert_eq!(parsed, Ok(d));
        } else {
            proptest::prop_assert!(parsed.is_err());
        }
    }

    #[test]
    fn no_url_or_resolve_text_panics(a in ".*", b in ".*", port in number_text()) {
        let _ = parse_https_url(&a);
        let _ = parse_https_url(&format!("https://{a}:{port}"));
        let _ = parse_https_url(&format!("https://[::1]:{port}/"));
        let _ = parse_resolve(&a, &b);
        let _ = parse_resolve(&format!("{a}:{port}"), &format!("127.0.0.1:{port},{b}"));
    }

    #[test]
    fn no_flag_values_panic(
        durations in proptest::collection::vec(duration_text(), 8),
        counts in proptest::collection::vec(proptest::prelude::any::<usize>(), 7),
        percent in proptest::prelude::any::<u32>(),
        maxsize in proptest::prelude::any::<u64>(),
        port in proptest::prelude::any::<u16>(),
        url in ".*",
        resolve in proptest::collection::vec(".*", 0..3),
        cluster in proptest::prelude::any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let d = |i: usize| Some(durations[i].clone());
        let flags = Flags {
            serving: ServingFlags {
                tls_cert_file: Some(touch(dir.path(), "s.crt")),
                tls_private_key_file: Some(touch(dir.path(), "s.key")),
                secure_port: Some(port),
                ..Default::default()
            },
            limits: LimitsFlags {
                request_timeout: d(0),
                max_requests_inflight: Some(counts[0]),
                max_requests_inflight_per_client: Some(counts[1]),
                max_request_body_bytes: Some(counts[4]),
            },
            flowcontrol: FlowControlFlags {
                max_mutating_requests_inflight: Some(counts[6]),
                max_apiservice_seats_percent: Some(percent),
                ..Default::default()
            },
            server: ServerFlags {
                shutdown_delay_duration: d(1),
                shutdown_grace_period: d(2),
                max_connections_per_client: Some(counts[2]),
                worker_threads: Some(counts[3]),
            },
            availability: AvailabilityFlags {
                availability_check_interval: d(3),
                availability_check_timeout: d(4),
            },
            cluster: ClusterFlags {
                leader_elect_lease_duration: d(5),
                leader_elect_renew_deadline: d(6),
                leader_elect_retry_period: d(7),
                cluster_mode: cluster,
                ..Default::default()
            },
            audit: AuditFlags {
                audit_log_maxbackup: Some(counts[5]),
                audit_log_maxsize: Some(maxsize),
                audit_log_path: Some("-".into()),
                ..Default::default()
            },
            proxy: ProxyFlags {
                delegate_url: Some(url),
                resolve,
                ..Default::default()
            },
            ..Default::default()
        };
        loaded_sanely(Config::load(&flags))?;
    }

    #[test]
    fn no_file_values_panic(
        durations in proptest::collection::vec((proptest::sample::select(FILE_DURATIONS.to_vec()), duration_text()), 0..4),
        numbers in proptest::collection::vec((proptest::sample::select(FILE_NUMBERS.to_vec()), number_text()), 0..4),
        texts in proptest::collection::vec((proptest::sample::select(FILE_TEXT.to_vec()), ".*"), 0..3),
        resolve in proptest::collection::btree_map(".*", ".*", 0..3),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let quote = |t: &str| serde_json::Value::from(t).to_string();
        let mut yaml = format!(
            "tlsCertFile: {}\ntlsPrivateKeyFile: {}\nclusterMode: true\nresolve: {}\n",
            quote(&touch(dir.path(), "s.crt").display().to_string()),
            quote(&touch(dir.path(), "s.key").display().to_string()),
            serde_json::json!(resolve),
        );
        let mut seen = std::collections::HashSet::new();
        for (key, value) in durations.iter().map(|(k, v)| (k, quote(v)))
            .chain(numbers.iter().map(|(k, v)| (k, v.clone())))
            .chain(texts.iter().map(|(k, v)| (k, quote(v))))
        {
            if seen.insert(*key) {
                yaml.push_str(&format!("{key}: {value}\n"));
            }
        }
        let cfg = dir.path().join("c.yaml");
        std::fs::write(&cfg, &yaml).unwrap();
        loaded_sanely(Config::load(&Flags { config: Some(cfg), ..Default::default() }))?;
    }
}

#[test]
fn leader_election_timing_from_flags_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = (touch(dir.path(), "s.crt"), touch(dir.path(), "s.key"));
    let kubeconfig = touch(dir.path(), "kubeconfig");
    let cfg = dir.path().join("c.yaml");
    std::fs::write(
        &cfg,
        "leaderElectLeaseDuration: 4s\nleaderElectRenewDeadline: 3s\n",
    )
    .unwrap();
    let flags = Flags {
        config: Some(cfg.clone()),
        serving: ServingFlags {
            tls_cert_file: Some(crt),
            tls_private_key_file: Some(key),
            ..Default::default()
        },
        cluster: ClusterFlags {
            kubeconfig: Some(kubeconfig),
            leader_elect_retry_period: Some("500ms".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let loaded = Config::load(&flags).unwrap();
    let le = loaded.cluster.unwrap().leader_election;
    assert_eq!(le.lease_duration, Duration::from_secs(4));
    assert_eq!(le.renew_deadline, Duration::from_secs(3));
    assert_eq!(le.retry_period, Duration::from_millis(500));

    let errs = Config::load(&Flags {
        cluster: ClusterFlags {
            leader_elect_retry_period: Some("3s".into()),
            ..flags.cluster.clone()
        },
        ..flags
    })
    .unwrap_err();
    let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
    let file = cfg.display().to_string();
    assert!(
        text.iter().any(|t| t.starts_with(&format!(
            "{file}: leaderElectRenewDeadline: must be greater than 1.2 x"
        ))),
        "{text:?}"
    );
}

#[test]
fn resolve_and_delegate_parsing() {
    assert!(parse_resolve("a.svc:443", "127.0.0.1:1").is_ok());
    assert!(parse_resolve("a.svc:443", "[::1]:1").is_ok());
    assert!(parse_resolve("a.svc", "127.0.0.1:1").is_err());
    assert_eq!(
        parse_resolve("A.svc:443", "127.0.0.1:1, 127.0.0.2:2").unwrap(),
        (
            ("a.svc".into(), 443),
            vec![
                "127.0.0.1:1".parse().unwrap(),
                "127.0.0.2:2".parse().unwrap()
            ]
        )
    );
    assert!(parse_resolve("a.svc:443", "127.0.0.1:1,").is_err());
    assert_eq!(
        parse_https_url("https://10.0.0.1:6443").unwrap(),
        ("10.0.0.1".into(), 6443)
    );
    assert!(parse_https_url("http://x").is_err());
}

/// Every setting's help is its documentation: each flag and its file key are in a table row of
/// `docs/configuration.md`, and the default its help names is in that row too.
#[test]
fn the_configuration_docs_match_the_help() {
    use clap::{Args, Command};
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
    )
    .expect("docs/configuration.md");
    let rows: Vec<&str> = docs.lines().filter(|l| l.starts_with("| `--")).collect();
    let command = super::defaults::in_help(Flags::augment_args(Command::new("serve")));
    let mut problems = Vec::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let flag = format!("`--{long}");
        let Some(row) = rows.iter().find(|r| {
            let first = r.split(" | ").next().unwrap_or("");
            first.contains(&format!("{flag}`"))
                || first.contains(&format!("{flag}["))
                || first.contains(&format!("{flag} "))
        }) else {
            if long != "config" {
                problems.push(format!("--{long}: no row in docs/configuration.md"));
            }
            continue;
        };
        if !row.contains(&format!("`{}`", camel(long))) {
            problems.push(format!(
                "--{long}: its row does not name the key `{}`",
                camel(long)
            ));
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        if let Some((_, default)) = help.split_once("[default: ") {
            let default = default.split(']').next().unwrap_or("").trim();
            if !row.contains(default) {
                problems.push(format!(
                    "--{long}: the help's default {default:?} is not in its row"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `--help` lists the flags in one order: no two share a `display_order` (clap would then
/// order them by name, whatever the sections say).
#[test]
fn every_flag_has_its_own_place_in_the_help() {
    use clap::Args;
    let cmd = super::Flags::augment_args(clap::Command::new("serve"));
    let mut seen = std::collections::BTreeMap::new();
    for arg in cmd.get_arguments() {
        let name = arg.get_id().to_string();
        if let Some(other) = seen.insert(arg.get_display_order(), name.clone()) {
            panic!(
                "--{name} and --{other} share display_order {}",
                arg.get_display_order()
            );
        }
    }
    assert!(seen.len() > 40, "{seen:?}");
}
