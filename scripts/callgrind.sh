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

. "$(dirname "$0")/lib/pair.sh"
pair_dir "$BIN"
WRAP=(env TOKIO_WORKER_THREADS=1 "RUST_LOG=${APIGW_LOG:-warn}"
  valgrind --tool=callgrind --callgrind-out-file="$D/cg.%p"
  # Names written out in every dump, so a kept dump reads alone (compressed names are defined
  # only in the dump that first used them).
  --compress-strings=no --compress-pos=no)
# shellcheck disable=SC2206 # APIGW_ARGS is split into flags, as documented above
SERVE=(--client-ca-file "$PKI/client-ca.crt" ${APIGW_ARGS:-})
pair_serve

CLIENT=${CLIENT:-admin}
C=(--cacert "$PKI/ca.crt" --cert "$PKI/$CLIENT.crt" --key "$PKI/$CLIENT.key")
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
