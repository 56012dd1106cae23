#!/usr/bin/env bash
# Instructions per proxied request, counted by callgrind (repeatable, unlike wall-clock figures).
#
#   cargo build --profile dist && scripts/callgrind.sh [target/dist/apigw] [N1] [N2]
#
# Runs the sample server natively and `apigw serve` under callgrind with one connection worker
# (and one thread for the shared runtime). For HTTP/1.1 and HTTP/2, sends N1 and then N2
# keep-alive GETs of a 1 KiB body with one curl each, zeroing the counters before and dumping
# them after. Ir/req = (Ir(N2) - Ir(N1)) / (N2 - N1), so connection setup and TLS handshakes
# cancel out. Needs valgrind (callgrind_control) and curl.
#
#   APIGW_LOG=info   the gateway's RUST_LOG (default warn: no access log); info logs every request
#   CLIENT=user      the dev PKI's client certificate: admin (default; system:masters, exempt
#                    from API Priority and Fairness) or user (dev-user: APF's global-default)
#   APIGW_ARGS=...   more `apigw serve` flags, e.g. --enable-priority-and-fairness=false
#   KEEP=DIR         keep the N2 dumps as DIR/cg.http1.1 and DIR/cg.http2 for callgrind_annotate
set -euo pipefail
BIN=$(realpath "${1:-target/dist/apigw}")
N1=${2:-500}
N2=${3:-2500}
for tool in valgrind callgrind_control curl; do
  command -v "$tool" >/dev/null || { echo "callgrind.sh needs $tool" >&2; exit 1; }
done

D=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT

"$BIN" certs dev --out "$D/pki" >/dev/null
PKI=$D/pki
GWPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
SPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$D/apiservices"
cat >"$D/apiservices/wardle.json" <<EOF
{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService",
 "metadata":{"name":"v1alpha1.wardle.example.com"},
 "spec":{"group":"wardle.example.com","version":"v1alpha1","groupPriorityMinimum":1000,
  "versionPriority":15,"caBundle":"$(base64 -w0 "$PKI/addon-ca.crt")",
  "service":{"name":"wardle-server","namespace":"wardle-namespace","port":443}}}
EOF

RUST_LOG=warn "$BIN" sample-apiserver --bind-address 127.0.0.1 --secure-port "$SPORT" \
  --tls-cert-file "$PKI/wardle.crt" --tls-private-key-file "$PKI/wardle.key" \
  --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" >"$D/sample.log" 2>&1 &
PIDS+=($!)
TOKIO_WORKER_THREADS=1 RUST_LOG=${APIGW_LOG:-warn} valgrind --tool=callgrind --callgrind-out-file="$D/cg.%p" \
  "$BIN" serve --bind-address 127.0.0.1 --secure-port "$GWPORT" \
  --tls-cert-file "$PKI/serving.crt" --tls-private-key-file "$PKI/serving.key" \
  --client-ca-file "$PKI/client-ca.crt" \
  --proxy-client-cert-file "$PKI/proxy-client.crt" --proxy-client-key-file "$PKI/proxy-client.key" \
  --apiservice-dir "$D/apiservices" \
  --resolve "wardle-server.wardle-namespace.svc:443=127.0.0.1:$SPORT" \
  --availability-check-interval 1h --worker-threads 1 ${APIGW_ARGS:-} >"$D/gateway.log" 2>&1 &
GPID=$!
PIDS+=("$GPID")

CLIENT=${CLIENT:-admin}
C=(--cacert "$PKI/ca.crt" --cert "$PKI/$CLIENT.crt" --key "$PKI/$CLIENT.key")
URL="https://127.0.0.1:$GWPORT/apis/wardle.example.com/v1alpha1/bench/payload?bytes=1024"
for _ in $(seq 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "${C[@]}" "https://127.0.0.1:$GWPORT/readyz")" = 200 ] && break
  sleep 1
done
for n in "$N1" "$N2"; do
  for _ in $(seq "$n"); do printf 'url = "%s"\noutput = "/dev/null"\n' "$URL"; done >"$D/urls.$n"
done
# Warm-up: the first backend connection and lazily built state are not part of a request's cost.
curl -sf "${C[@]}" --http1.1 -o /dev/null "$URL"
curl -sf "${C[@]}" --http2 -o /dev/null "$URL"

declare -A IR
for proto in http1.1 http2; do
  for n in "$N1" "$N2"; do
    callgrind_control -z "$GPID" >/dev/null 2>&1
    codes=$(curl -s "${C[@]}" "--$proto" -K "$D/urls.$n" -w '%{http_code}\n' | sort | uniq -c | tr -s ' \n' ' ')
    callgrind_control -d "$proto-$n" "$GPID" >/dev/null 2>&1
    sleep 0.5
    dump=$(ls -t "$D"/cg."$GPID".* | head -1)
    IR[$proto-$n]=$(awk '/^summary:/ {print $2}' "$dump")
    echo "$proto n=$n Ir=${IR[$proto-$n]} codes:$codes"
    case "$codes" in *" $n 200 "*) ;; *) echo "not every request answered 200" >&2; exit 1 ;; esac
    if [ -n "${KEEP:-}" ] && [ "$n" = "$N2" ]; then
      mkdir -p "$KEEP" && mv "$dump" "$KEEP/cg.$proto"
    else
      rm -f "$dump"
    fi
  done
  echo "$proto Ir/req = $(((IR[$proto-$N2] - IR[$proto-$N1]) / (N2 - N1)))"
done
