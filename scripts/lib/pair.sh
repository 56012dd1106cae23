# Sourced by scripts/callgrind.sh and scripts/h2-writes.sh: the sample server and `apigw serve`
# in front of it on loopback, with the dev PKI and one APIService, torn down on exit.
#
#   pair_dir BIN        the run's directory $D, the PKI $PKI, the ports $GWPORT and $SPORT,
#                       the APIService manifest and a token file (benchtoken: dev-user)
#   pair_serve          starts the sample server, then `apigw serve` with one connection worker
#                       run through the command in the array WRAP (e.g. env and valgrind) with
#                       the flags in the array SERVE added; the gateway's pid is $GPID
#   URL                 a 1 KiB GET through the gateway

pair_dir() {
  BIN=$1
  D=$(mktemp -d)
  PIDS=()
  trap pair_cleanup EXIT
  "$BIN" certs dev --out "$D/pki" >/dev/null
  PKI=$D/pki
  GWPORT=$(pair_port)
  SPORT=$(pair_port)
  mkdir -p "$D/apiservices"
  cat >"$D/apiservices/wardle.json" <<EOF
{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService",
 "metadata":{"name":"v1alpha1.wardle.example.com"},
 "spec":{"group":"wardle.example.com","version":"v1alpha1","groupPriorityMinimum":1000,
  "versionPriority":15,"caBundle":"$(base64 -w0 "$PKI/addon-ca.crt")",
  "service":{"name":"wardle-server","namespace":"wardle-namespace","port":443}}}
EOF
  echo 'benchtoken,dev-user,u1,' >"$D/tokens.csv"
  URL="https://127.0.0.1:$GWPORT/apis/wardle.example.com/v1alpha1/bench/payload?bytes=1024"
}

pair_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

pair_serve() {
  RUST_LOG=warn "$BIN" sample-apiserver --bind-address 127.0.0.1 --secure-port "$SPORT" \
    --tls-cert-file "$PKI/wardle.crt" --tls-private-key-file "$PKI/wardle.key" \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" >"$D/sample.log" 2>&1 &
  PIDS+=($!)
  "${WRAP[@]}" "$BIN" serve --bind-address 127.0.0.1 --secure-port "$GWPORT" \
    --tls-cert-file "$PKI/serving.crt" --tls-private-key-file "$PKI/serving.key" \
    --proxy-client-cert-file "$PKI/proxy-client.crt" --proxy-client-key-file "$PKI/proxy-client.key" \
    --apiservice-dir "$D/apiservices" \
    --resolve "wardle-server.wardle-namespace.svc:443=127.0.0.1:$SPORT" \
    --availability-check-interval 1h --worker-threads 1 "${SERVE[@]}" >"$D/gateway.log" 2>&1 &
  GPID=$!
  PIDS+=("$GPID")
}

pair_cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$D"
}
