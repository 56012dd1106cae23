#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into fuzz/corpus/<target>/ (see README.md)."""
import base64, hashlib, json, os, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "corpus")
REPO = os.path.dirname(ROOT)


def write(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# Request heads: the paths and hosts of gateway/paths.rs, gateway/host.rs,
# authz/attributes.rs and request_info.rs tests.
PATHS = [
    "/", "/apis", "/apis/", "/api/v1/namespaces/default/pods",
    "/apis/wardle.example.com/v1alpha1/namespaces/ns/flunders",
    "/apis/wardle.example.com/v1alpha1/namespaces/ns/flunders/f1/status",
    "/apis/g/v1/things/a.b..c", "/openapi/v3/apis/g/v1", "/apis/g/v1/x%20y",
    "/apis/g/v1/../../other/v1/x", "/apis/g/v1/%2e%2e/x", "/apis/g/v1/%2E./x",
    "/apis/g/./v1", "/apis//g/v1", "/apis/g/v1/namespaces/a%2Fb/things",
    "/apis/g/v1/x%5Cy", "/apis/g/v1/x\\y", "/apis/g/v1/x%00",
    "/apis/wardle.example.com/v1alpha1/watch/namespaces/ns/flunders",
    "/apis/wardle.example.com/v1alpha1/flunders?watch=true&labelSelector=a%3Db",
    "/apis/wardle.example.com/v1alpha1/namespaces/ns/flunders?fieldSelector=metadata.name%3Df1",
    "/api/v1/namespaces/ns/pods/p/log?follow=true",
    "/api/v1/namespaces/ns/pods/p/exec?command=sh&stdin=true",
    "/healthz", "/readyz", "/version", "/metrics",
]
HEADS = []
for method, path in zip(["GET", "POST", "PUT", "PATCH", "DELETE", "GET", "HEAD"] * 5, PATHS):
    HEADS.append(f"{method} {path} HTTP/1.1\r\nHost: gw.example:8443\r\nAccept: application/json\r\n\r\n")
HEADS += [
    "GET /apis HTTP/1.1\r\nHost: [::1]:443\r\n\r\n",
    "GET /apis HTTP/1.1\r\n\r\n",
    "GET /apis HTTP/1.0\r\n\r\n",
    "GET /apis HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "GET /apis HTTP/1.1\r\nHost: a, b\r\n\r\n",
    "GET /apis HTTP/1.1\r\nHost: user@gw.example\r\n\r\n",
    "GET https://gw.example/apis HTTP/1.1\r\nHost: other.example\r\n\r\n",
    "GET /apis HTTP/1.1\r\nHost: gw.example\r\nAccept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json\r\n\r\n",
    "GET /apis HTTP/1.1\r\nHost: gw.example\r\nAuthorization: Bearer abc.def.ghi\r\nImpersonate-User: bob\r\n\r\n",
    "GET /apis HTTP/1.1\r\nHost: gw.example\r\nX-Remote-User: alice\r\nX-Remote-Group: a\r\nX-Remote-Extra-Example.com%2fteam: t\r\n\r\n",
    "H2\nGET /apis/g/v1/things\n:authority: gw.example:8443\naccept: application/json\n",
    "H2\nGET /apis\n:authority: gw.example\nhost: other.example\n",
    "H2\nGET /apis/g/v1/watch/things\n",
]
UPGRADES = [
    "GET /api/v1/namespaces/ns/pods/p/exec?command=sh HTTP/1.1\r\nHost: gw.example\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
    "GET /api/v1/namespaces/ns/pods/p/attach HTTP/1.1\r\nHost: gw.example\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    "GET /apis/g/v1/things HTTP/1.1\r\nHost: gw.example\r\nUpgrade: websocket\r\n\r\n",
    "GET /apis/g/v1/things HTTP/1.0\r\nHost: gw.example\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
    "POST /apis/g/v1/things HTTP/1.1\r\nHost: gw.example\r\nConnection: close, X-Secret, Keep-Alive\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\n\r\n",
    "H2\nGET /apis/g/v1/things\n:authority: gw.example\nupgrade: websocket\nconnection: upgrade\n",
]
for h in HEADS:
    write("head", h)
    write("request_info", h)
for h in HEADS[:12] + UPGRADES:
    write("upgrade", h)
for h in UPGRADES:
    write("head", h)
    write("request_info", h)

# Identity stripping: proxy/headers.rs and authn/headers.rs tests.
IDS = [
    "X-Remote-User\nX-Remote-Group\nX-Remote-Extra-\nalice\nsystem:authenticated,dev\nscopes=s1;example.com/team=t\n\n"
    "Authorization: Bearer secret\nX-Remote-User: mallory\nx-REMOTE-group: system:masters\nX-Remote-Extra-Scopes: all\n"
    "Impersonate-User: root\nImpersonate-Extra-Foo: bar\nX-Forwarded-For: 10.0.0.9\nAccept: application/json\nHost: gw.example.com\n",
    "X-Custom-User,Other-User\nX-Custom-Group\nX-Custom-Extra-\nbob\ng1\n\n\n"
    "x-custom-user: mallory\nX_Custom_User: mallory\nOther-User: eve\nx-custom-extra-k: v\nX-Custom_Extra-Scopes: all\nx-custom-group: admins\n",
    "X-Remote-User\nX-Remote-Group\nX-Remote-Extra-\nsystem:serviceaccount:ns:sa\nsystem:serviceaccounts\n\nimpersonate\n"
    "Authorization: Bearer client-token\nImpersonate-Group: system:masters\nImpersonate-Uid: 0\nConnection: X-Remote-User\nX-Remote-User: x\n",
    " X-Auth-User ,\n X_Auth_Groups\nX-Auth-Extra-\nu\n\nk=v\n\nx-auth-user: x\nx_auth_groups: g\nx-auth-extra-a: b\nx-forwarded-host: evil\n",
    "X-Forwarded-For\nX-Remote-Group\nX-Forwarded-\nalice\n\n\n\nX-Forwarded-For: 1.2.3.4\nX-Forwarded-Proto: http\n",
]
for i in IDS:
    write("identity_headers", i)

# APIService manifests: config/apiservices, the registry tests' shapes.
for f in ["config/apiservices/wardle.yaml"]:
    with open(os.path.join(REPO, f)) as fh:
        write("apiservice_manifest", fh.read())
OBJ = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
       "metadata": {"name": "v1alpha1.wardle.example.com"},
       "spec": {"group": "wardle.example.com", "version": "v1alpha1", "groupPriorityMinimum": 1000,
                "versionPriority": 15, "service": {"name": "api", "namespace": "wardle", "port": 8443},
                "insecureSkipTLSVerify": True}}
write("apiservice_manifest", json.dumps(OBJ))
write("apiservice_manifest", json.dumps({"apiVersion": "v1", "kind": "List", "items": [OBJ, dict(OBJ, metadata={"name": "v1.wardle.example.com"})]}))
write("apiservice_manifest", json.dumps({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIServiceList", "items": [OBJ]}, indent=2))
write("apiservice_manifest", json.dumps([OBJ]))
write("apiservice_manifest", """# two documents
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.a.example.com}
spec: {group: a.example.com, version: v1, groupPriorityMinimum: 100, versionPriority: 10,
       service: {name: s, namespace: n}, caBundle: bm90IGEgY2VydA==}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1.
spec:
  version: v1
  groupPriorityMinimum: 18000
  versionPriority: 1
...
""")
write("apiservice_manifest", """apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: &m {name: v2.b.example.com, labels: {a: "1"}}
spec:
  group: b.example.com
  version: v2
  groupPriorityMinimum: 0x10
  versionPriority: 1e3
  service: {name: Bad_Name, namespace: "", port: 70000}
""")
write("apiservice_manifest", "--- \n# nothing\n...\n")

# JWTs: the tests' issuers, claims and RSA key (authn/jwt/testdata).
KEY = os.path.join(REPO, "crates/apigw-authn/src/jwt/testdata/rsa-2048.pem")
NOW = 1_800_000_000


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def mint(claims, header=None):
    header = header or {"alg": "RS256", "kid": "rsa", "typ": "JWT"}
    signing = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", KEY], input=signing.encode(),
                         capture_output=True, check=True).stdout
    return signing + "." + b64(sig)


DEX = {"iss": "https://dex.example", "aud": "apigw-client", "email": "jane@example.com",
       "email_verified": True, "groups": ["dev", "ops"], "hd": "example.com", "exp": NOW + 600, "iat": NOW}
SA = {"iss": "https://sa.example", "aud": ["apigw"], "sub": "system:serviceaccount:ns:sa",
      "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "sa", "uid": "u-2"}},
      "team": "blue", "exp": NOW + 600, "nbf": NOW - 10}
for c in [DEX, SA, dict(SA, exp=NOW - 1), dict(DEX, hd="other.example"), dict(SA, sub="system:node:n")]:
    write("jwt", mint(c))
    write("jwt", "claims\n" + json.dumps(c))
write("jwt", mint(DEX, {"alg": "none"}))
write("jwt", mint(DEX, {"alg": "HS256", "kid": "rsa"}))
write("jwt", mint(SA, {"alg": "ES256", "kid": "ec"}))
write("jwt", "x.y.z")
write("jwt", "jwks\n" + json.dumps({"keys": [
    {"kty": "RSA", "kid": "a", "use": "sig", "alg": "RS256", "n": "sXch", "e": "AQAB"},
    {"kty": "EC", "kid": "b", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
     "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
    {"kty": "oct", "k": "c2VjcmV0"}, {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
    {"kty": "RSA", "use": "enc", "n": "AQ", "e": "AQ"}]}))

# Authentication configurations: authn/jwt/tests.rs and tests/it/jwt.rs.
HEAD = "apiVersion: apiserver.config.k8s.io/v1alpha1\nkind: AuthenticationConfiguration\njwt:\n"
CONFIGS = [
    HEAD + "- issuer: {url: 'https://a.example', audiences: [x]}\n  claimMappings: {username: {claim: sub, prefix: ''}}\n",
    '{"apiVersion":"apiserver.config.k8s.io/v1","kind":"AuthenticationConfiguration",'
    '"jwt":[{"issuer":{"url":"https://a.example","audiences":["x"]},'
    '"claimMappings":{"username":{"claim":"sub","prefix":"p:"}}}]}',
    HEAD + "- issuer: {url: 'http://a.example', audiences: []}\n  claimMappings: {username: {claim: sub}}\n"
    "- issuer: {url: 'https://b.example', audiences: [x, y]}\n  claimMappings: {username: {expression: 'claims.sub +'}, groups: {claim: g}, uid: {expression: request.uid}}\n"
    "- issuer: {url: 'https://b.example', audiences: [x], audienceMatchPolicy: MatchAll}\n  claimMappings: {username: {claim: sub, prefix: ''}}\n"
    "  claimValidationRules: [{claim: a, requiredValue: b}, {claim: a, requiredValue: c}]\n",
    HEAD + "- issuer: {url: 'https://a.example', audiences: [x]}\n  claimMappings:\n    username: {expression: claims.email}\n"
    "    extra: [{key: Example.com/x, valueExpression: claims.x}, {key: k8s.io/x, valueExpression: claims.x}]\n",
    "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\nanonymous:\n  enabled: true\n  conditions:\n  - path: /livez\n  - path: /readyz\n",
    """apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://dex.example
    audiences: [apigw-client]
  claimValidationRules:
  - claim: hd
    requiredValue: example.com
  claimMappings:
    username: {claim: email, prefix: "oidc:"}
    groups: {claim: groups, prefix: "oidc:"}
- issuer:
    url: https://sa.example
    discoveryURL: https://sa.example/discovery/.well-known/openid-configuration
    audiences: [apigw, other]
    audienceMatchPolicy: MatchAny
  claimValidationRules:
  - expression: 'claims.sub.startsWith("system:serviceaccount:")'
    message: not a service account
  claimMappings:
    username: {claim: sub, prefix: ""}
    uid: {expression: 'claims["kubernetes.io"].serviceaccount.uid'}
    groups:
      expression: '["system:serviceaccounts", "system:serviceaccounts:" + claims["kubernetes.io"].namespace]'
    extra:
    - key: example.com/team
      valueExpression: 'has(claims.team) ? claims.team : "none"'
  userValidationRules:
  - expression: "!user.username.startsWith('system:node:')"
    message: no nodes
""",
]
# Found by fuzzing: operator chains that overflowed a 2 MiB stack in the CEL parser
# (expr.rs, long_operator_chains_are_refused_before_parsing).
ISSUER = HEAD + "- issuer: {url: 'https://a.example', audiences: [x]}\n  claimMappings:\n    username: {expression: '%s'}\n"
CONFIGS += [ISSUER % ("claims" + ".a" * 4500), ISSUER % ("1" + "+1" * 4900)]
for c in CONFIGS:
    write("authn_config", c)


# Protobuf reviews: gateway/protobuf.rs's test body, by hand (field tag, length, bytes).
def field(tag, payload):
    n, out = len(payload), bytearray([tag << 3 | 2])
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out) + payload


def envelope(raw):
    return b"k8s\0" + field(2, raw)


attrs = field(1, b"x") + field(2, b"list") + field(3, b"a.example.com") + field(5, b"things")
write("protobuf_review", b"\0" + envelope(field(2, field(1, attrs))))
write("protobuf_review", b"\0" + envelope(field(2, field(2, field(1, b"/healthz") + field(2, b"get")))))
write("protobuf_review", b"\1" + envelope(field(2, field(1, b"default"))))
write("protobuf_review", b"\2" + envelope(b""))
write("protobuf_review", b"\0" + b"k8s\0" + field(1, field(1, b"authorization.k8s.io/v1")) + field(2, b"\xff"))
write("protobuf_review", b"\0not protobuf")

# Discovery: the shapes of discovery/ and proxy/fetch.rs tests.
LIST = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "wardle.example.com/v1beta1",
        "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": True, "kind": "Flunder",
                       "verbs": ["get", "list", "watch", "create"], "shortNames": ["fl"], "categories": ["all"]},
                      {"name": "flunders/status", "namespaced": True, "kind": "Flunder", "verbs": ["get", "patch"]},
                      {"name": "fischers", "namespaced": False, "kind": "Fischer", "verbs": ["get"],
                       "group": "other.example.com", "version": "v9"}]}
AGG = {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
       "items": [{"metadata": {"name": "wardle.example.com"}, "versions": [
           {"version": "v1beta1", "resources": [{"resource": "flunders", "scope": "Namespaced",
            "responseKind": {"group": "", "version": "", "kind": "Flunder"}, "verbs": ["get"],
            "subresources": [{"subresource": "status", "verbs": ["get"]}]}], "freshness": "Current"},
           {"version": "v1alpha1", "resources": [], "freshness": "Stale"}]},
           {"metadata": {"name": "a.example.com"}, "versions": [{"version": "v1", "resources": [{"resource": "things", "categories": ["all"]}]}]}]}
V2 = {"swagger": "2.0", "paths": {"/apis/wardle.example.com/v1beta1/flunders": {"get": {}}}, "definitions": {"Flunder": {"type": "object"}}}
V3 = {"paths": {"apis/wardle.example.com/v1beta1": {"serverRelativeURL": "/openapi/v3/apis/wardle.example.com/v1beta1?hash=AB"}}}
S = "\n%%\n"
write("discovery", b"\x07" + S.join([json.dumps(AGG), json.dumps(LIST), json.dumps(dict(LIST, groupVersion="wardle.example.com/v1alpha1")), json.dumps(LIST), json.dumps(V2), json.dumps(V3)]).encode())
write("discovery", b"\x05" + S.join([json.dumps({"kind": "APIGroupList", "groups": []}), json.dumps(LIST), "not json", json.dumps({"kind": "Status"})]).encode())
write("discovery", b"\x00" + S.join([json.dumps(dict(AGG, apiVersion="apidiscovery.k8s.io/v2beta1")), "", "", "", json.dumps(V2), json.dumps(V2)]).encode())
write("discovery", b"\x03" + S.join(["not json", json.dumps({"kind": "APIResourceList", "resources": [{"name": "a/b/c"}, {"name": 7}, {"name": "x", "verbs": None}]})]).encode())
print("seeds written under", CORPUS)
