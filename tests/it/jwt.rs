//! JWT authentication end to end: an `AuthenticationConfiguration` file naming two issuers
//! served over TLS by the test (an OIDC provider, as Dex would be, and another cluster's
//! service-account issuer); kubectl signing in with a token in its kubeconfig and with an
//! `exec` credential plugin; every bad token refused with kube's 401 and its reason in the
//! log and in `apigw_authentication_attempts_total`; the file reloaded when it changes.

use crate::support;

use crate::support::binary;
use crate::support::oidc::{now, unsigned, with, Issuers, SigningKey};
use crate::support::tool::kubectl_async;
use crate::support::{eventually, seen_header, Single, World};
use bytes::Bytes;
use http::Request;
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Everything the gateway logs in this test process (nextest runs each test in its own).
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends the gateway's logs to [`LOG`]; before `World::new`, whose own subscriber then stays out.
fn capture_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_ansi(false)
        .with_writer(|| LogWriter)
        .try_init();
}

fn log() -> String {
    String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned()
}

/// The Dex-like issuer's settings, then the service-account issuer's.
fn config(issuers: &Issuers, extra_issuer: Option<&str>) -> String {
    let ca = issuers.ca_block(8);
    let mut text = format!(
        r#"apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: {dex}
    audiences: [apigw-client]
    certificateAuthority: |
{ca}  claimValidationRules:
  - claim: hd
    requiredValue: example.com
  claimMappings:
    username: {{claim: email, prefix: "oidc:"}}
    groups: {{claim: groups, prefix: "oidc:"}}
- issuer:
    url: {sa}
    audiences: [apigw]
    certificateAuthority: |
{ca}  claimValidationRules:
  - expression: 'claims.sub.startsWith("system:serviceaccount:")'
    message: not a service account
  claimMappings:
    username: {{claim: sub, prefix: ""}}
    uid: {{expression: 'claims["kubernetes.io"].serviceaccount.uid'}}
    groups:
      expression: '["system:serviceaccounts", "system:serviceaccounts:" + claims["kubernetes.io"].namespace]'
"#,
        dex = issuers.url("dex"),
        sa = issuers.url("sa"),
    );
    if let Some(name) = extra_issuer {
        text.push_str(&format!(
            r#"- issuer:
    url: {}
    audiences: [late]
    certificateAuthority: |
{ca}  claimMappings:
    username: {{claim: sub, prefix: "late:"}}
"#,
            issuers.url(name)
        ));
    }
    text
}

struct Setup {
    s: Single,
    issuers: Issuers,
    dex: SigningKey,
    sa: SigningKey,
    config: PathBuf,
}

async fn setup() -> Setup {
    capture_logs();
    let issuers = Issuers::start().await;
    let (dex, sa) = (SigningKey::generate("dex-1"), SigningKey::generate("sa-1"));
    issuers.publish("dex", &[&dex]);
    issuers.publish("sa", &[&sa]);
    let dir = tempfile::tempdir().unwrap().keep();
    let path = dir.join("authn.yaml");
    std::fs::write(&path, config(&issuers, None)).unwrap();
    let p = path.clone();
    let s = World::single(move |cfg| cfg.authn.authentication_config = Some(p)).await;
    Setup {
        s,
        issuers,
        dex,
        sa,
        config: path,
    }
}

impl Setup {
    fn dex_claims(&self) -> Value {
        json!({"iss": self.issuers.url("dex"), "aud": "apigw-client", "sub": "CgVqYW5lEgVsb2NhbA",
            "email": "jane@example.com", "email_verified": true, "hd": "example.com",
            "groups": ["dev", "ops"], "iat": now(), "exp": now() + 600})
    }

    fn sa_claims(&self) -> Value {
        json!({"iss": self.issuers.url("sa"), "aud": ["apigw"],
            "sub": "system:serviceaccount:team-ns:builder", "iat": now(), "nbf": now(),
            "exp": now() + 600,
            "kubernetes.io": {"namespace": "team-ns",
                "serviceaccount": {"name": "builder", "uid": "8a3c9f2e-uid"}}})
    }

    /// A request with `token`, answered by the gateway.
    async fn send(&self, token: &str, path: &str) -> support::Answer {
        let req = Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Bytes::new())
            .unwrap();
        self.s.w.client(None).send(self.s.gw.addr, req).await
    }

    /// A kubeconfig whose user is `user` (kubeconfig `users[].user` fields).
    fn kubeconfig(&self, name: &str, user: Value) -> PathBuf {
        let p = |n: &str| self.s.w.pki.path(n).display().to_string();
        let kc = json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "gw",
            "clusters": [{"name": "gw", "cluster": {
                "server": format!("https://127.0.0.1:{}", self.s.gw.addr.port()),
                "certificate-authority": p("ca.crt")}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "gw", "context": {"cluster": "gw", "user": "u"}}]
        });
        let path = self.s.w.pki.path(name);
        std::fs::write(&path, kc.to_string()).unwrap();
        path
    }

    async fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> String {
        kubectl_async(kubeconfig, args).await.ok()
    }

    async fn whoami(&self, kubeconfig: &Path) -> Value {
        let out = self
            .kubectl(kubeconfig, &["auth", "whoami", "-o", "json"])
            .await;
        serde_json::from_str::<Value>(&out).unwrap()["status"]["userInfo"].clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_signs_in_with_an_oidc_token_and_another_clusters_service_account_token() {
    let t = setup().await;
    // An ID token in the kubeconfig, as `kubectl oidc-login` or a copied token leaves it.
    let token = t.dex.mint(&t.dex_claims());
    let kc = t.kubeconfig("oidc.kubeconfig", json!({ "token": token }));
    let who = t.whoami(&kc).await;
    assert_eq!(who["username"], "oidc:jane@example.com", "{who}");
    assert_eq!(
        who["groups"],
        json!(["oidc:dev", "oidc:ops", "system:authenticated"])
    );
    // The backend hears of the mapped user, as of any other.
    let out = t
        .kubectl(
            &kc,
            &["get", "--raw", "/apis/a.example.com/v1/namespaces/x/things"],
        )
        .await;
    let seen: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        seen_header(&seen, "x-remote-user"),
        ["oidc:jane@example.com"]
    );
    assert_eq!(
        seen_header(&seen, "x-remote-group"),
        ["oidc:dev", "oidc:ops", "system:authenticated"]
    );

    // Another cluster's service-account token, from an exec credential plugin.
    let sa_token = t.sa.mint(&t.sa_claims());
    let plugin = t.s.w.pki.path("credential-plugin.sh");
    let credential = json!({"apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential", "status": {"token": sa_token}});
    std::fs::write(
        &plugin,
        format!("#!/bin/sh\ncat <<'EOF'\n{credential}\nEOF\n"),
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let kc = t.kubeconfig(
        "exec.kubeconfig",
        json!({"exec": {"apiVersion": "client.authentication.k8s.io/v1",
            "command": plugin.display().to_string(), "interactiveMode": "Never"}}),
    );
    let who = t.whoami(&kc).await;
    assert_eq!(who["username"], "system:serviceaccount:team-ns:builder");
    assert_eq!(who["uid"], "8a3c9f2e-uid");
    assert_eq!(
        who["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:team-ns",
            "system:authenticated"
        ])
    );
    let out = t
        .kubectl(
            &kc,
            &["get", "--raw", "/apis/a.example.com/v1/namespaces/x/things"],
        )
        .await;
    let seen: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        seen_header(&seen, "x-remote-user"),
        ["system:serviceaccount:team-ns:builder"]
    );
    // The static token file still works beside the issuers.
    let bob = t
        .send(
            "s3cr3t-token-bob",
            "/apis/a.example.com/v1/namespaces/x/things",
        )
        .await;
    assert_eq!(bob.seen("x-remote-user"), ["bob"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_tokens_are_refused_with_kubes_401_and_the_reason_logged_and_counted() {
    let t = setup().await;
    let path = "/apis/a.example.com/v1/namespaces/x/things";
    let baseline = t.send("not-a-jwt", path).await.assert_status(401);
    let good = t.dex_claims();
    let stranger = SigningKey::generate("dex-1");
    let unknown = SigningKey::generate("dex-9");
    let other = Issuers::start().await;
    let cases: Vec<(&str, String)> = vec![
        (
            "expired",
            t.dex.mint(&with(
                good.clone(),
                json!({"iat": now() - 900, "exp": now() - 300}),
            )),
        ),
        (
            "not_yet_valid",
            t.dex
                .mint(&with(good.clone(), json!({"nbf": now() + 3600}))),
        ),
        (
            "wrong_audience",
            t.dex
                .mint(&with(good.clone(), json!({"aud": "someone-else"}))),
        ),
        (
            "unknown_issuer",
            t.dex
                .mint(&with(good.clone(), json!({"iss": other.url("dex")}))),
        ),
        ("bad_signature", stranger.mint(&good)),
        ("disallowed_algorithm", unsigned(&good)),
        ("unknown_kid", unknown.mint(&good)),
        (
            "claim_rule_failed",
            t.dex
                .mint(&with(good.clone(), json!({"hd": "evil.example"}))),
        ),
        (
            "claim_rule_failed",
            t.sa.mint(&with(t.sa_claims(), json!({"sub": "root"}))),
        ),
    ];
    for (reason, token) in &cases {
        let answer = t.send(token, path).await;
        assert_eq!(answer.status, 401, "{reason}: {:?}", answer.body);
        let body = answer.assert_status(401);
        assert_eq!(body, baseline, "{reason}: the client learns nothing more");
        let logged = log();
        let line = logged
            .lines()
            .rev()
            .find(|l| l.contains("bearer token refused"))
            .unwrap_or_else(|| panic!("{reason}: nothing logged:\n{logged}"));
        assert!(line.contains(reason), "{reason}: {line}");
        assert!(
            !logged.contains(token.as_str()),
            "{reason}: the token was logged"
        );
    }
    // Good tokens still pass after all that.
    assert_eq!(t.send(&t.dex.mint(&good), path).await.status, 200);

    // The attempts by authenticator and result, which promtool accepts.
    let alice = t.s.w.client(Some("alice"));
    let text = String::from_utf8(alice.get(t.s.gw.addr, "/metrics").await.body.to_vec()).unwrap();
    for (authenticator, result) in [
        ("jwt", "success"),
        ("jwt", "expired"),
        ("jwt", "unknown_issuer"),
        ("jwt", "claim_rule_failed"),
        ("jwt", "disallowed_algorithm"),
        ("none", "invalid_token"),
        ("x509", "success"),
    ] {
        let series = format!(
            "apigw_authentication_attempts_total{{authenticator=\"{authenticator}\",result=\"{result}\"}}"
        );
        assert!(text.contains(&series), "no {series} in:\n{text}");
    }
    promtool_check(&text);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_file_is_reloaded_and_a_broken_one_keeps_the_last_good() {
    let t = setup().await;
    let path = "/apis/a.example.com/v1/namespaces/x/things";
    let late = SigningKey::generate("late-1");
    t.issuers.publish("late", &[&late]);
    let token = late.mint(&json!({"iss": t.issuers.url("late"), "aud": "late",
        "sub": "lee", "exp": now() + 600}));
    t.send(&token, path).await.assert_status(401);
    std::fs::write(&t.config, config(&t.issuers, Some("late"))).unwrap();
    let works = eventually(15, || {
        let (t, token) = (&t, token.clone());
        async move { t.send(&token, path).await.status == 200 }
    })
    .await;
    assert!(works, "the added issuer never took effect:\n{}", log());
    let answer = t.send(&token, path).await;
    assert_eq!(answer.seen("x-remote-user"), ["late:lee"]);

    // A broken file is logged and the last good configuration stays.
    std::fs::write(&t.config, "jwt:\n- issuer: {url: http://insecure}\n").unwrap();
    let logged = eventually(15, || async {
        log().contains("authentication config") && log().contains("keeping the previous one")
    })
    .await;
    assert!(logged, "the broken file was not reported:\n{}", log());
    assert!(log().contains("jwt[0].issuer.url"), "{}", log());
    assert_eq!(t.send(&token, path).await.status, 200);
    let dex = t.dex.mint(&t.dex_claims());
    assert_eq!(t.send(&dex, path).await.status, 200);
}

/// Runs `promtool check metrics` on `text`; panics with what it printed unless it passes.
fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is required for this test");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_validates_the_file_named_in_the_config_file_with_field_paths() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, "authenticationConfig: authn.yaml\n").unwrap();
    let cfg = cfg.display().to_string();
    std::fs::write(
        dir.path().join("authn.yaml"),
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n\
         - issuer: {url: 'http://dex.example'}\n  claimMappings: {username: {claim: email}}\n",
    )
    .unwrap();
    let out = binary::run(Some(dir.path()), &["check", "--config", &cfg]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("error: --authentication-config"))
        .unwrap_or_else(|| panic!("{stdout}"));
    for field in [
        "jwt[0].issuer.url",
        "jwt[0].issuer.audiences",
        "jwt[0].claimMappings.username.prefix",
    ] {
        assert!(line.contains(field), "{field}: {line}");
    }
    std::fs::write(
        dir.path().join("authn.yaml"),
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n\
         - issuer: {url: 'https://dex.example', audiences: [apigw]}\n  \
         claimMappings: {username: {claim: email, prefix: 'oidc:'}}\n",
    )
    .unwrap();
    let out = binary::run(Some(dir.path()), &["check", "--config", &cfg]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
