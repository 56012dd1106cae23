#!/usr/bin/env python3
"""Runs a command in a flunder through the gateway, as `kubectl exec` does for a pod.

The sample server's `flunders/{name}/exec` subresource speaks Kubernetes' WebSocket channel
protocol (v5/v4.channel.k8s.io). kubectl only execs into pods, so this uses the official Python
client's WebSocket client (`pip install kubernetes`) with the kubeconfig `apigw dev` writes,
certs-dev/kubeconfig beside this directory, unless KUBECONFIG names another (never
~/.kube/config, which may be a real cluster):

    python3 examples/exec.py my-flunder echo hello

Prints the command's stdout and stderr and exits with its exit code. The sample server's
commands: `echo ARGS...`, `env` (the identity the backend received), `cat`, `exit N`.
"""

import json
import os
import sys
from pathlib import Path
from urllib.parse import quote

from kubernetes import client, config
from kubernetes.stream.ws_client import WSClient, get_websocket_url
from websocket import WebSocketBadStatusException

GROUP_VERSION = "wardle.example.com/v1alpha1"


def main() -> int:
    args = sys.argv[1:]
    namespace = "default"
    if len(args) >= 2 and args[0] in ("-n", "--namespace"):
        namespace, args = args[1], args[2:]
    if len(args) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: exec.py [-n NAMESPACE] FLUNDER COMMAND [ARG...]", file=sys.stderr)
        return 2
    name, command = args[0], args[1:]

    kubeconfig = os.environ.get("KUBECONFIG") or str(Path(__file__).resolve().parent.parent / "certs-dev" / "kubeconfig")
    if not Path(kubeconfig.split(os.pathsep)[0]).is_file():
        print(f"exec.py: no kubeconfig at {kubeconfig}: start `cargo run --release -- dev` first, "
              "or set KUBECONFIG", file=sys.stderr)
        return 2
    config.load_kube_config(config_file=kubeconfig)
    conf = client.Configuration.get_default_copy()
    query = "&".join(["command=" + quote(part, safe="") for part in command] + ["stdout=true", "stderr=true"])
    url = f"{conf.host}/apis/{GROUP_VERSION}/namespaces/{quote(namespace)}/flunders/{quote(name)}/exec?{query}"
    headers = {}
    if conf.api_key.get("authorization"):
        headers["authorization"] = conf.get_api_key_with_prefix("authorization")

    try:
        ws = WSClient(conf, get_websocket_url(url), headers, capture_all=True)
    except WebSocketBadStatusException as e:
        # The gateway or the sample server refused the upgrade with a kind: Status body.
        try:
            message = json.loads(e.resp_body)["message"]
        except (TypeError, ValueError, KeyError):
            message = str(e)
        print(f"error: {e.status_code}: {message}", file=sys.stderr)
        return 1
    ws.run_forever(timeout=30)
    sys.stdout.write(ws.read_stdout() if ws.peek_stdout() else "")
    sys.stderr.write(ws.read_stderr() if ws.peek_stderr() else "")
    code = ws.returncode
    return 0 if code is None else code


if __name__ == "__main__":
    sys.exit(main())
