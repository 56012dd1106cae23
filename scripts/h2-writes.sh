#!/usr/bin/env bash
# System calls per proxied request over HTTP/2 with 32 streams in flight, counted by strace:
#
#   scripts/h2-writes.sh [target/release/apigw] [N]
#
# Runs the sample server and `apigw serve` (one connection worker, a static token for h2load,
# which sends no client certificate), warms up with 2,000 GETs of a 1 KiB body, then sends N
# (default 20,000) with `h2load -c 4 -m 8` while `strace -c -f` counts the gateway's writev,
# recvfrom and epoll_wait. One writev per request goes to the backend (HTTP/1.1); the rest is
# the client's side, where several responses should share one TLS record
# (third_party/h2/APIGW-PATCH.md). Needs h2load (nghttp2-client), strace and curl.
set -euo pipefail
BIN=$(realpath "${1:-target/release/apigw}"); N=${2:-20000}
for tool in h2load strace curl; do
  command -v "$tool" >/dev/null || { echo "h2-writes.sh needs $tool" >&2; exit 1; }
done
D=$(mktemp -d); PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null || true; done; wait 2>/dev/null; rm -rf $D' EXIT
"$BIN" certs dev --out "$D/pki" >/dev/null; PKI=$D/pki
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GWPORT=$(port); SPORT=$(port)
mkdir -p "$D/apiservices"
cat >"$D/apiservices/wardle.json" <<EOF
{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1alpha1.wardle.example.com"},
 "spec":{"group":"wardle.example.com","version":"v1alpha1","groupPriorityMinimum":1000,"versionPriority":15,"caBundle":"$(base64 -w0 "$PKI/addon-ca.crt")",
  "service":{"name":"wardle-server","namespace":"wardle-namespace","port":443}}}
EOF
echo 'benchtoken,dev-user,u1,' > "$D/tokens.csv"
RUST_LOG=warn "$BIN" sample-apiserver --bind-address 127.0.0.1 --secure-port "$SPORT" --tls-cert-file "$PKI/wardle.crt" --tls-private-key-file "$PKI/wardle.key" --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" >"$D/sample.log" 2>&1 &
PIDS+=($!)
RUST_LOG=warn "$BIN" serve --bind-address 127.0.0.1 --secure-port "$GWPORT" --tls-cert-file "$PKI/serving.crt" --tls-private-key-file "$PKI/serving.key" \
  --token-auth-file "$D/tokens.csv" --proxy-client-cert-file "$PKI/proxy-client.crt" --proxy-client-key-file "$PKI/proxy-client.key" \
  --apiservice-dir "$D/apiservices" --resolve "wardle-server.wardle-namespace.svc:443=127.0.0.1:$SPORT" --availability-check-interval 1h --worker-threads 1 >"$D/gateway.log" 2>&1 &
GPID=$!; PIDS+=($GPID)
URL="https://127.0.0.1:$GWPORT/apis/wardle.example.com/v1alpha1/bench/payload?bytes=1024"
for _ in $(seq 100); do [ "$(curl -sk -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer benchtoken' "$URL")" = 200 ] && break; sleep 0.3; done
h2load -n 2000 -c 4 -m 8 -H 'Authorization: Bearer benchtoken' "$URL" >/dev/null
strace -q -c -f -e trace=writev,write,sendto,sendmsg,recvfrom,read,epoll_wait -p "$GPID" -o "$D/strace" & SPID=$!
sleep 0.5
h2load -n "$N" -c 4 -m 8 -H 'Authorization: Bearer benchtoken' "$URL" | grep -E "^finished|^requests|status codes"
sleep 0.3; kill -INT $SPID; wait $SPID 2>/dev/null || true
awk -v n="$N" '$NF ~ /^(writev|write|sendto|sendmsg|recvfrom|read|epoll_wait)$/ {printf "%s %.2f/req\n", $NF, $4/n}' "$D/strace"
