//! An OIDC issuer served over TLS on loopback (discovery + JWKS), tokens minted with real keys.

use super::*;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http_body_util::Full;
use jsonwebtoken::{encode, EncodingKey, Header};
use proptest::prelude::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const RSA_PEM: &str = include_str!("testdata/rsa-2048.pem");

/// A signing key and its public JWK.
struct SigningKey {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

fn rsa_key(kid: &str) -> SigningKey {
    let der = PrivatePkcs8KeyDer::from_pem_slice(RSA_PEM.as_bytes()).expect("pem");
    let pair = ring::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).expect("rsa");
    let parts = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public());
    let (n, e) = (parts.n, parts.e);
    SigningKey {
        kid: kid.into(),
        alg: Algorithm::RS256,
        encoding: EncodingKey::from_rsa_der(der.secret_pkcs8_der()),
        jwk: json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
            "n": URL_SAFE_NO_PAD.encode(n), "e": URL_SAFE_NO_PAD.encode(e)}),
    }
}

fn ec_key(kid: &str) -> SigningKey {
    ec_key_for(kid, Algorithm::ES256)
}

fn ec_key_for(kid: &str, alg: Algorithm) -> SigningKey {
    let (sig_alg, crv, len) = match alg {
        Algorithm::ES384 => (&rcgen::PKCS_ECDSA_P384_SHA384, "P-384", 48),
        _ => (&rcgen::PKCS_ECDSA_P256_SHA256, "P-256", 32),
    };
    let pair = rcgen::KeyPair::generate_for(sig_alg).expect("ec");
    let point = pair.public_key_raw();
    let (x, y) = point[1..].split_at(len);
    SigningKey {
        kid: kid.into(),
        alg,
        encoding: EncodingKey::from_ec_der(&pair.serialize_der()),
        jwk: json!({"kty": "EC", "kid": kid, "crv": crv,
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y)}),
    }
}

/// The RSA key again under another kid, for PS256 (its JWK names no `alg`).
fn pss_key(kid: &str) -> SigningKey {
    let mut key = rsa_key(kid);
    key.alg = Algorithm::PS256;
    if let Some(jwk) = key.jwk.as_object_mut() {
        jwk.remove("alg");
    }
    key
}

fn now() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64
}

fn mint(key: &SigningKey, claims: &Value) -> String {
    let mut header = Header::new(key.alg);
    header.kid = Some(key.kid.clone());
    encode(&header, claims, &key.encoding).expect("encode")
}

/// A token with a hand-made header and signature (for `none` and HMAC).
fn raw_token(header: &Value, claims: &Value, sig: &[u8]) -> String {
    let h = URL_SAFE_NO_PAD.encode(header.to_string());
    let c = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{h}.{c}.{}", URL_SAFE_NO_PAD.encode(sig))
}

/// What the test issuer serves.
struct IssuerState {
    /// The `issuer` its discovery document names.
    issuer: String,
    keys: Vec<Value>,
    down: bool,
}

struct TestIssuer {
    url: String,
    ca_pem: String,
    state: Arc<Mutex<IssuerState>>,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestIssuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestIssuer {
    async fn start(keys: &[&SigningKey]) -> Self {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "issuer-ca");
        let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().expect("key"))
            .expect("ca");
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .expect("params")
            .signed_by(&leaf_key, &ca)
            .expect("leaf");
        let config = rustls::ServerConfig::builder_with_provider(apigw_core::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().expect("addr").port()
        );
        let state = Arc::new(Mutex::new(IssuerState {
            issuer: url.clone(),
            keys: keys.iter().map(|k| k.jwk.clone()).collect(),
            down: false,
        }));
        let hits = Arc::new(AtomicUsize::new(0));
        let (s, h, base) = (state.clone(), hits.clone(), url.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, s, h, base) = (acceptor.clone(), s.clone(), h.clone(), base.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req: http::Request<_>| {
                        let reply = serve(&s, &h, &base, req.uri().path());
                        async move { Ok::<_, std::convert::Infallible>(reply) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Self {
            url,
            ca_pem: ca.pem(),
            state,
            hits,
            task,
        }
    }

    fn set_keys(&self, keys: &[&SigningKey]) {
        self.state.lock().expect("state").keys = keys.iter().map(|k| k.jwk.clone()).collect();
    }

    fn set_down(&self, down: bool) {
        self.state.lock().expect("state").down = down;
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// A configuration for this issuer; `extra` is YAML put under the `jwt` entry.
    fn config(&self, extra: &str) -> String {
        let ca = self.ca_pem.replace('\n', "\n        ");
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer:\n    url: {}\n    audiences: [apigw, other]\n    audienceMatchPolicy: MatchAny\n    certificateAuthority: |\n        {ca}\n{extra}",
            self.url
        )
    }

    fn authenticator(&self, extra: &str, min_interval: Duration) -> JwtAuthenticator {
        let timing = FetchTiming {
            timeout: Duration::from_secs(5),
            min_interval,
            refresh: Duration::from_secs(3600),
        };
        JwtAuthenticator::from_text(&self.config(extra), timing).expect("config")
    }
}

fn serve(
    state: &Mutex<IssuerState>,
    hits: &AtomicUsize,
    base: &str,
    path: &str,
) -> http::Response<Full<Bytes>> {
    hits.fetch_add(1, Ordering::SeqCst);
    let state = state.lock().expect("state");
    let (status, body) = if state.down {
        (503, json!({}))
    } else if path == "/.well-known/openid-configuration" {
        (
            200,
            json!({"issuer": state.issuer, "jwks_uri": format!("{base}/keys")}),
        )
    } else if path == "/keys" {
        (200, json!({"keys": state.keys}))
    } else {
        (404, json!({}))
    };
    let mut resp = http::Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = http::StatusCode::from_u16(status).expect("status");
    resp
}

const MAPPINGS: &str = "  claimMappings:
    username: {claim: sub, prefix: 'oidc:'}
    groups: {claim: groups, prefix: 'oidc:'}
    uid: {claim: uid}
";

fn claims(issuer: &TestIssuer) -> Value {
    json!({"iss": issuer.url, "aud": "apigw", "sub": "jane", "uid": "u-1",
        "groups": ["dev", "ops"], "iat": now(), "exp": now() + 600})
}

fn with(mut base: Value, patch: Value) -> Value {
    if let (Some(b), Some(p)) = (base.as_object_mut(), patch.as_object()) {
        for (k, v) in p {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

async fn reason(auth: &JwtAuthenticator, token: &str) -> Reason {
    match auth.authenticate(token).await {
        Err(e) => e.reason,
        Ok(other) => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn good_tokens_map_identity_with_prefixes() {
    let (rsa, ec) = (rsa_key("rsa1"), ec_key("ec1"));
    let (p384, pss) = (ec_key_for("ec384", Algorithm::ES384), pss_key("pss"));
    let issuer = TestIssuer::start(&[&rsa, &ec, &p384, &pss]).await;
    let auth = issuer.authenticator(MAPPINGS, Duration::from_secs(3600));
    for key in [&rsa, &ec, &p384, &pss] {
        let id = auth
            .authenticate(&mint(key, &claims(&issuer)))
            .await
            .expect("verifies")
            .expect("identity");
        assert_eq!(id.user, "oidc:jane");
        assert_eq!(id.groups, vec!["oidc:dev", "oidc:ops"]);
        assert_eq!(id.uid.as_deref(), Some("u-1"));
        assert!(id.extra.is_empty());
    }
    // A single-string group, an audience list naming one configured audience, nbf within skew.
    let c = with(
        claims(&issuer),
        json!({"groups": "dev", "aud": ["x", "other"], "nbf": now() + 120}),
    );
    let id = auth
        .authenticate(&mint(&rsa, &c))
        .await
        .expect("ok")
        .expect("id");
    assert_eq!(id.groups, vec!["oidc:dev"]);
    // No kid: every key fitting the algorithm is tried.
    let no_kid = encode(
        &Header::new(Algorithm::ES256),
        &claims(&issuer),
        &ec.encoding,
    )
    .expect("encode");
    assert!(auth.authenticate(&no_kid).await.expect("ok").is_some());
    // RS256 under the PSS key's kid: the key is RSA and names no alg, so it verifies.
    let rs_as_pss = mint(
        &SigningKey {
            kid: "pss".into(),
            ..rsa_key("x")
        },
        &claims(&issuer),
    );
    assert!(auth.authenticate(&rs_as_pss).await.expect("ok").is_some());
    // PS256 under rsa1, whose JWK says RS256: refused.
    let pss_as_rs = mint(&pss_key("rsa1"), &claims(&issuer));
    assert_eq!(reason(&auth, &pss_as_rs).await, Reason::BadSignature);
    assert_eq!(issuer.hits(), 2, "one discovery and one JWKS fetch");
}

#[tokio::test]
async fn background_refresh_fetches_without_requests() {
    let rsa = rsa_key("rsa1");
    let issuer = TestIssuer::start(&[&rsa]).await;
    let auth = issuer.authenticator(MAPPINGS, Duration::from_millis(50));
    let tasks = auth.spawn_refresh();
    let (_, keys) = auth.keys().next().expect("issuer");
    for _ in 0..100 {
        if keys.current().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(keys.current().map(|s| s.keys.len()), Some(1));
    for t in tasks {
        t.abort();
    }
    let hits = issuer.hits();
    auth.authenticate(&mint(&rsa, &claims(&issuer)))
        .await
        .expect("ok")
        .expect("id");
    assert_eq!(issuer.hits(), hits, "the request used the prefetched keys");
}

#[tokio::test]
async fn bad_tokens_are_refused_with_their_reason() {
    let (rsa, ec) = (rsa_key("rsa1"), ec_key("ec1"));
    let issuer = TestIssuer::start(&[&rsa, &ec]).await;
    let auth = issuer.authenticator(MAPPINGS, Duration::from_secs(3600));
    let c = claims(&issuer);
    let expired = with(c.clone(), json!({"exp": now() - 1}));
    assert_eq!(reason(&auth, &mint(&rsa, &expired)).await, Reason::Expired);
    let early = with(c.clone(), json!({"nbf": now() + 3600}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &early)).await,
        Reason::NotYetValid
    );
    let wrong_aud = with(c.clone(), json!({"aud": ["kubernetes"]}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &wrong_aud)).await,
        Reason::WrongAudience
    );
    let string_exp = with(c.clone(), json!({"exp": "never"}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &string_exp)).await,
        Reason::MalformedClaims
    );
    let no_exp = c.as_object().map(|m| {
        let mut m = m.clone();
        m.remove("exp");
        Value::Object(m)
    });
    let no_exp = no_exp.expect("object");
    assert_eq!(
        reason(&auth, &mint(&rsa, &no_exp)).await,
        Reason::MalformedClaims
    );
    let no_sub = with(c.clone(), json!({"sub": null}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &no_sub)).await,
        Reason::MappingFailed
    );

    // Signed by another key under a known kid; a payload swapped under a good signature.
    let forged = mint(&ec_key("ec1"), &c);
    assert_eq!(reason(&auth, &forged).await, Reason::BadSignature);
    let wrong_type = mint(
        &SigningKey {
            kid: "rsa1".into(),
            ..ec_key("x")
        },
        &c,
    );
    assert_eq!(
        reason(&auth, &wrong_type).await,
        Reason::BadSignature,
        "rsa1 is no ES256 key"
    );
    let good = mint(&rsa, &c);
    let other = mint(&rsa, &with(c.clone(), json!({"sub": "admin"})));
    let (g, o): (Vec<_>, Vec<_>) = (good.split('.').collect(), other.split('.').collect());
    let swapped = format!("{}.{}.{}", g[0], o[1], g[2]);
    assert_eq!(reason(&auth, &swapped).await, Reason::BadSignature);

    // `none`, and HMAC keyed with the public key.
    let none = raw_token(&json!({"alg": "none", "kid": "rsa1"}), &c, b"");
    assert_eq!(reason(&auth, &none).await, Reason::DisallowedAlgorithm);
    let secret = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, rsa.jwk.to_string().as_bytes());
    let h = json!({"alg": "HS256", "kid": "rsa1"});
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(h.to_string()),
        URL_SAFE_NO_PAD.encode(c.to_string())
    );
    let mac = ring::hmac::sign(&secret, signing_input.as_bytes());
    let hs = raw_token(&h, &c, mac.as_ref());
    assert_eq!(reason(&auth, &hs).await, Reason::DisallowedAlgorithm);
}

#[tokio::test]
async fn tokens_of_other_issuers_and_non_jwts_are_left_to_others() {
    let rsa = rsa_key("rsa1");
    let issuer = TestIssuer::start(&[&rsa]).await;
    let auth = issuer.authenticator(MAPPINGS, Duration::from_secs(3600));
    let other = with(claims(&issuer), json!({"iss": "https://elsewhere.example"}));
    assert!(auth
        .authenticate(&mint(&rsa, &other))
        .await
        .expect("ok")
        .is_none());
    for token in ["", "abc", "a.b.c", "static-token-123", "x.y", "a.b.c.d"] {
        assert!(
            auth.authenticate(token).await.expect("ok").is_none(),
            "{token}"
        );
    }
    assert_eq!(
        issuer.hits(),
        0,
        "nothing fetched for tokens of no configured issuer"
    );
}

#[tokio::test]
async fn unknown_kid_refetches_and_rotated_keys_verify() {
    let (rsa, ec2) = (rsa_key("rsa1"), ec_key("ec2"));
    let issuer = TestIssuer::start(&[&rsa]).await;
    let auth = issuer.authenticator(MAPPINGS, Duration::ZERO);
    let rotated = mint(&ec2, &claims(&issuer));
    assert_eq!(reason(&auth, &rotated).await, Reason::UnknownKid);
    issuer.set_keys(&[&ec2]);
    let id = auth
        .authenticate(&rotated)
        .await
        .expect("verifies")
        .expect("id");
    assert_eq!(id.user, "oidc:jane");
    // The old key is gone from the new set.
    assert_eq!(
        reason(&auth, &mint(&rsa, &claims(&issuer))).await,
        Reason::UnknownKid
    );
}

#[tokio::test]
async fn unknown_kid_refetches_are_rate_limited() {
    let (rsa, ec2) = (rsa_key("rsa1"), ec_key("ec2"));
    let issuer = TestIssuer::start(&[&rsa]).await;
    let auth = issuer.authenticator(MAPPINGS, Duration::from_secs(3600));
    auth.authenticate(&mint(&rsa, &claims(&issuer)))
        .await
        .expect("ok")
        .expect("id");
    let fetched = issuer.hits();
    issuer.set_keys(&[&rsa, &ec2]);
    for _ in 0..5 {
        let t = mint(&ec2, &claims(&issuer));
        assert_eq!(reason(&auth, &t).await, Reason::UnknownKid);
    }
    assert_eq!(
        issuer.hits(),
        fetched,
        "no refetch within the minimum interval"
    );
}

#[tokio::test]
async fn issuer_outage_keeps_the_last_good_keys() {
    let rsa = rsa_key("rsa1");
    let issuer = TestIssuer::start(&[&rsa]).await;
    let auth = issuer.authenticator(MAPPINGS, Duration::ZERO);
    auth.authenticate(&mint(&rsa, &claims(&issuer)))
        .await
        .expect("ok")
        .expect("id");
    issuer.set_down(true);
    let t = mint(&ec_key("ec9"), &claims(&issuer));
    assert_eq!(reason(&auth, &t).await, Reason::UnknownKid);
    let (_, keys) = auth.keys().next().expect("issuer");
    assert!(keys.last_error().is_some_and(|e| e.contains("503")));
    assert_eq!(keys.refresh().await.map(|s| s.keys.len()), Some(1));
    auth.authenticate(&mint(&rsa, &claims(&issuer)))
        .await
        .expect("still ok")
        .expect("id");
}

#[tokio::test]
async fn claim_validation_rules_and_email_verification() {
    let rsa = rsa_key("rsa1");
    let issuer = TestIssuer::start(&[&rsa]).await;
    let rules = "  claimValidationRules:\n  - {claim: hd, requiredValue: example.com}\n  claimMappings:\n    username: {claim: email, prefix: ''}\n";
    let auth = issuer.authenticator(rules, Duration::from_secs(3600));
    let c = with(
        claims(&issuer),
        json!({"email": "jane@example.com", "hd": "example.com"}),
    );
    let id = auth
        .authenticate(&mint(&rsa, &c))
        .await
        .expect("ok")
        .expect("id");
    assert_eq!(id.user, "jane@example.com");
    assert!(id.groups.is_empty());
    let wrong = with(c.clone(), json!({"hd": "evil.com"}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &wrong)).await,
        Reason::ClaimRuleFailed
    );
    let missing = with(c.clone(), json!({"hd": null}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &missing)).await,
        Reason::ClaimRuleFailed
    );
    let unverified = with(c.clone(), json!({"email_verified": false}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &unverified)).await,
        Reason::MappingFailed
    );
    let verified = with(c, json!({"email_verified": true}));
    assert!(auth
        .authenticate(&mint(&rsa, &verified))
        .await
        .expect("ok")
        .is_some());
}

#[tokio::test]
async fn discovery_must_name_the_issuer_and_tls_must_verify() {
    let rsa = rsa_key("rsa1");
    let issuer = TestIssuer::start(&[&rsa]).await;
    issuer.state.lock().expect("state").issuer = "https://impostor.example".into();
    let auth = issuer.authenticator(MAPPINGS, Duration::ZERO);
    let t = mint(&rsa, &claims(&issuer));
    assert_eq!(reason(&auth, &t).await, Reason::KeysUnavailable);

    // Without its CA the issuer's certificate does not verify against the system roots.
    issuer.state.lock().expect("state").issuer = issuer.url.clone();
    let config = format!(
        "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\njwt:\n- issuer: {{url: '{}', audiences: [apigw]}}\n{MAPPINGS}",
        issuer.url
    );
    let untrusting = JwtAuthenticator::from_text(&config, FetchTiming::default()).expect("config");
    assert_eq!(reason(&untrusting, &t).await, Reason::KeysUnavailable);
    auth.authenticate(&t)
        .await
        .expect("ok")
        .expect("verifies once discovery names it");
}

#[tokio::test]
async fn discovery_url_is_fetched_but_the_issuer_must_match() {
    let rsa = rsa_key("rsa1");
    let issuer = TestIssuer::start(&[&rsa]).await;
    // The token's issuer is a name; discovery comes from the test server.
    let name = "https://issuer.example";
    issuer.state.lock().expect("state").issuer = name.into();
    let ca = issuer.ca_pem.replace('\n', "\n        ");
    let config = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer:\n    url: {name}\n    discoveryURL: {}/.well-known/openid-configuration\n    audiences: [apigw]\n    certificateAuthority: |\n        {ca}\n{MAPPINGS}",
        issuer.url
    );
    let auth = JwtAuthenticator::from_text(&config, FetchTiming::default()).expect("config");
    let c = with(claims(&issuer), json!({"iss": name}));
    let id = auth
        .authenticate(&mint(&rsa, &c))
        .await
        .expect("ok")
        .expect("id");
    assert_eq!(id.user, "oidc:jane");
}

const CEL_MAPPINGS: &str = "  claimValidationRules:
  - expression: 'claims.exp - claims.iat <= 3600'
    message: token lives too long
  - expression: 'claims.?tenant.orValue(\"\") != \"blocked\"'
  claimMappings:
    username:
      expression: '\"cel:\" + claims.email'
    groups:
      expression: 'claims.roles.map(r, \"role:\" + r.lowerAscii())'
    uid:
      expression: 'claims.sub'
    extra:
    - key: example.com/tenant
      valueExpression: 'has(claims.tenant) ? claims.tenant : \"\"'
    - key: example.com/scopes
      valueExpression: 'claims.scope.split(\" \")'
  userValidationRules:
  - expression: '!user.username.startsWith(\"cel:system:\")'
    message: no system users
  - expression: 'claims.email_verified == true || user.groups.size() >= 0'
";

#[tokio::test]
async fn cel_expressions_validate_and_map() {
    let rsa = rsa_key("rsa1");
    let issuer = TestIssuer::start(&[&rsa]).await;
    // The last user rule names `claims`, which user rules may not use.
    let err = JwtAuthenticator::from_text(&issuer.config(CEL_MAPPINGS), FetchTiming::default())
        .expect_err("claims in a user rule");
    assert!(
        err.to_string()
            .contains("userValidationRules[1].expression"),
        "{err}"
    );
    let config = CEL_MAPPINGS.replace("claims.email_verified == true || ", "");
    let config = config.replace(
        "'\"cel:\" + claims.email'",
        "'claims.email_verified ? \"cel:\" + claims.email : \"\"'",
    );
    let auth = issuer.authenticator(&config, Duration::from_secs(3600));
    let c = with(
        claims(&issuer),
        json!({"email": "jane@example.com", "email_verified": true,
        "roles": ["Admin", "Dev"], "tenant": "t1", "scope": "read write"}),
    );
    let id = auth
        .authenticate(&mint(&rsa, &c))
        .await
        .expect("ok")
        .expect("id");
    assert_eq!(id.user, "cel:jane@example.com");
    assert_eq!(id.groups, vec!["role:admin", "role:dev"]);
    assert_eq!(id.uid.as_deref(), Some("jane"));
    assert_eq!(
        id.extra.get("example.com/tenant"),
        Some(&vec!["t1".to_string()])
    );
    assert_eq!(
        id.extra.get("example.com/scopes"),
        Some(&vec!["read".to_string(), "write".to_string()])
    );

    let untenanted = with(c.clone(), json!({"tenant": null}));
    let untenanted = untenanted.as_object().map(|m| {
        let mut m = m.clone();
        m.remove("tenant");
        Value::Object(m)
    });
    let id = auth
        .authenticate(&mint(&rsa, &untenanted.expect("object")))
        .await
        .expect("ok")
        .expect("id");
    assert!(
        !id.extra.contains_key("example.com/tenant"),
        "empty values are dropped"
    );

    let long = with(c.clone(), json!({"exp": now() + 7200}));
    let err = auth
        .authenticate(&mint(&rsa, &long))
        .await
        .expect_err("too long");
    assert_eq!(
        (err.reason, err.detail.as_str()),
        (Reason::ClaimRuleFailed, "token lives too long")
    );
    let blocked = with(c.clone(), json!({"tenant": "blocked"}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &blocked)).await,
        Reason::ClaimRuleFailed
    );
    let system = with(c.clone(), json!({"email": "system:admin"}));
    let err = auth
        .authenticate(&mint(&rsa, &system))
        .await
        .expect_err("system user");
    assert_eq!(
        (err.reason, err.detail.as_str()),
        (Reason::UserRuleFailed, "no system users")
    );
    let unverified = with(c.clone(), json!({"email_verified": false}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &unverified)).await,
        Reason::MappingFailed
    );
    let bad_roles = with(c, json!({"roles": "admin"}));
    assert_eq!(
        reason(&auth, &mint(&rsa, &bad_roles)).await,
        Reason::MappingFailed
    );
}

#[test]
fn the_authenticator_is_shareable_across_tasks() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let auth = JwtAuthenticator::new(Vec::new(), FetchTiming::default()).expect("empty");
    send_sync(&auth);
    send(&auth.authenticate("x.y.z"));
}

fn problems(text: &str) -> Vec<String> {
    let config = match AuthenticationConfiguration::parse(text) {
        Ok(c) => c,
        Err(e) => return vec![format!("<file>: {e}")],
    };
    match config.validate() {
        Ok(_) => Vec::new(),
        Err(e) => e
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect(),
    }
}

#[test]
fn config_is_validated_with_field_paths() {
    let head =
        "apiVersion: apiserver.config.k8s.io/v1alpha1\nkind: AuthenticationConfiguration\njwt:\n";
    let ok = format!("{head}- issuer: {{url: 'https://a.example', audiences: [x]}}\n  claimMappings: {{username: {{claim: sub, prefix: ''}}}}\n");
    assert!(problems(&ok).is_empty(), "{:?}", problems(&ok));
    let json = r#"{"apiVersion":"apiserver.config.k8s.io/v1","kind":"AuthenticationConfiguration",
        "jwt":[{"issuer":{"url":"https://a.example","audiences":["x"]},
        "claimMappings":{"username":{"claim":"sub","prefix":"p:"}}}]}"#;
    assert!(problems(json).is_empty());
    // The scheme in any case, as Go's url.Parse lowercases it before kube-apiserver checks it
    // (found by the authn_config fuzz target, whose check had been case-sensitive).
    let mixed = ok.replace("'https://", "'httPs://");
    assert!(problems(&mixed).is_empty(), "{:?}", problems(&mixed));

    let bad = format!(
        "{head}- issuer: {{url: 'http://a.example', audiences: []}}\n  claimMappings: {{username: {{claim: sub}}}}\n\
         - issuer: {{url: 'https://b.example', audiences: [x, y]}}\n  claimMappings: {{username: {{expression: 'claims.sub +'}}, groups: {{claim: g}}, uid: {{expression: request.uid}}}}\n\
         - issuer: {{url: 'https://b.example', audiences: [x], audienceMatchPolicy: MatchAll}}\n  claimMappings: {{username: {{claim: sub, prefix: ''}}}}\n  claimValidationRules: [{{claim: a, requiredValue: b}}, {{claim: a, requiredValue: c}}]\n"
    );
    let got = problems(&bad);
    for want in [
        "jwt[0].issuer.url: invalid value \"http://a.example\": URL scheme must be https",
        "jwt[0].issuer.audiences: at least one issuer.audiences is required",
        "jwt[0].claimMappings.username.prefix: required value",
        "jwt[1].issuer.audienceMatchPolicy: must be MatchAny for multiple audiences",
        "jwt[1].claimMappings.username.expression: invalid value \"claims.sub +\": compilation failed",
        "jwt[1].claimMappings.uid.expression: invalid value \"request.uid\": compilation failed: undeclared reference to [\"request\"]",
        "jwt[1].claimMappings.groups.prefix: required value",
        "jwt[2].issuer.audienceMatchPolicy: unsupported value \"MatchAll\"",
        "jwt[2].claimValidationRules[1].claim: duplicate value \"a\"",
    ] {
        assert!(got.iter().any(|g| g.starts_with(want)), "missing {want:?} in {got:#?}");
    }
    let dup = format!("{head}{0}{0}", "- issuer: {url: 'https://a.example', audiences: [x]}\n  claimMappings: {username: {claim: sub, prefix: ''}}\n");
    assert_eq!(
        problems(&dup),
        vec!["jwt[1].issuer.url: duplicate value \"https://a.example\""]
    );
    assert!(problems("apiVersion: v1\nkind: Config\n").len() == 2);
    let email = format!("{head}- issuer: {{url: 'https://a.example', audiences: [x]}}\n  claimMappings:\n    username: {{expression: claims.email}}\n    extra: [{{key: Example.com/x, valueExpression: claims.x}}, {{key: k8s.io/x, valueExpression: claims.x}}]\n");
    let got = problems(&email);
    for want in [
        "jwt[0].claimMappings.username.expression: claims.email_verified must be used",
        "jwt[0].claimMappings.extra[0].key: invalid value \"Example.com/x\": key must be lowercase",
        "jwt[0].claimMappings.extra[1].key: invalid value \"k8s.io/x\": k8s.io, kubernetes.io",
    ] {
        assert!(
            got.iter().any(|g| g.starts_with(want)),
            "missing {want:?} in {got:#?}"
        );
    }
    let deep = format!("{head}- issuer: {{url: 'https://a.example', audiences: [x]}}\n  claimMappings: {{username: {{expression: '{}claims.sub{}'}}}}\n", "(".repeat(200), ")".repeat(200));
    assert!(
        problems(&deep)[0].contains("nested deeper than"),
        "{:?}",
        problems(&deep)
    );
    assert!(problems(&format!(
        "{head}- issuer: {{url: 'https://a.example', bogus: 1}}\n"
    ))[0]
        .starts_with("<file>"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn malformed_tokens_never_panic(s in ".{0,200}", cut in 0usize..400, flip in 0usize..400, byte in any::<u8>()) {
        let (rt, auth, token) = &*FIXTURE;
        rt.block_on(async {
            let _ = auth.authenticate(s.as_str()).await;
            let mut bytes = token.clone().into_bytes();
            if !bytes.is_empty() {
                let i = flip % bytes.len();
                bytes[i] = byte;
            }
            let mangled = String::from_utf8_lossy(&bytes).into_owned();
            let _ = auth.authenticate(&mangled).await;
            let _ = auth.authenticate(&token[..cut.min(token.len())]).await;
            let parts: Vec<&str> = token.split('.').collect();
            let spliced = format!("{}.{}{}.{}", parts[0], parts[1], s, parts[2]);
            let _ = auth.authenticate(&spliced).await;
        });
    }
}

/// A runtime with a test issuer running on it, an authenticator for it and a good token.
static FIXTURE: std::sync::LazyLock<(tokio::runtime::Runtime, JwtAuthenticator, String)> =
    std::sync::LazyLock::new(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (auth, token) = rt.block_on(async {
            let rsa = rsa_key("rsa1");
            let issuer = TestIssuer::start(&[&rsa]).await;
            let auth = issuer.authenticator(MAPPINGS, Duration::from_secs(3600));
            let token = mint(&rsa, &claims(&issuer));
            auth.authenticate(&token).await.expect("ok").expect("id");
            // Keep the issuer serving for the runtime's life.
            std::mem::forget(issuer);
            (auth, token)
        });
        (rt, auth, token)
    });
