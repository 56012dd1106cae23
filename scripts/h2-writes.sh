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
. "$(dirname "$0")/lib/pair.sh"
pair_dir "$BIN"
WRAP=(env RUST_LOG=warn)
SERVE=(--token-auth-file "$D/tokens.csv")
pair_serve
ready=
for _ in $(seq 100); do
  [ "$(curl -sk -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer benchtoken' "$URL")" = 200 ] && ready=1 && break
  sleep 0.3
done
[ -n "$ready" ] || { echo "the gateway did not answer 200 through to the backend; its log:" >&2; cat "$D/gateway.log" >&2; exit 1; }
h2load -n 2000 -c 4 -m 8 -H 'Authorization: Bearer benchtoken' "$URL" >/dev/null
strace -q -c -f -e trace=writev,write,sendto,sendmsg,recvfrom,read,epoll_wait -p "$GPID" -o "$D/strace" & SPID=$!
sleep 0.5
h2load -n "$N" -c 4 -m 8 -H 'Authorization: Bearer benchtoken' "$URL" | grep -E "^finished|^requests|status codes"
sleep 0.3; kill -INT $SPID; wait $SPID 2>/dev/null || true
awk -v n="$N" '$NF ~ /^(writev|write|sendto|sendmsg|recvfrom|read|epoll_wait)$/ {printf "%s %.2f/req\n", $NF, $4/n}' "$D/strace"
