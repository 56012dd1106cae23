"""The official Python `kubernetes` client (PyPI) against apigw, as a user's script would use it.

Run by tests/interop.rs with the gateway's URL, its CA and a user's client certificate. Does
discovery, create, get, list, merge patch, replace, a conflict, delete, and a watch resumed
from a resourceVersion that must replay every change in order; prints one line per check and
exits non-zero with the reason on the first failure.
"""

import argparse
import sys

try:
    import kubernetes
    from kubernetes import client, watch
    from kubernetes.client.rest import ApiException
except ImportError:
    sys.exit("the Python kubernetes client is missing: pip install kubernetes")

GROUP, VERSION, PLURAL = "interop.example.com", "v1", "widgets"


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--namespace", default="py")
    args = ap.parse_args()

    cfg = client.Configuration()
    cfg.host = args.server
    cfg.ssl_ca_cert = args.ca
    cfg.cert_file = args.cert
    cfg.key_file = args.key
    api_client = client.ApiClient(cfg)
    apis = client.ApisApi(api_client)
    custom = client.CustomObjectsApi(api_client)
    ns = args.namespace
    print(f"kubernetes client {kubernetes.__version__}")

    groups = apis.get_api_versions()
    check(any(g.name == GROUP for g in groups.groups), f"/apis lists {GROUP}")

    start = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    check(start["kind"] == "WidgetList" and start["items"] == [], "an empty list to begin with")
    # A widget that stays, so the list after it has a resourceVersion to watch from (a watch
    # from "0" would start "at any point" and replay nothing).
    custom.create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": "py-seed"}},
    )
    rv0 = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["metadata"][
        "resourceVersion"
    ]

    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": "py-widget", "labels": {"made-by": "python"}},
        "spec": {"color": "red", "size": 1},
    }
    made = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    check(made["metadata"]["name"] == "py-widget" and made["metadata"].get("uid"), "create")

    got = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "py-widget")
    check(got["spec"] == {"color": "red", "size": 1}, "get returns what was created")

    listed = custom.list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, label_selector="made-by=python"
    )
    check([i["metadata"]["name"] for i in listed["items"]] == ["py-widget"], "list by label")
    everything = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    names = sorted(i["metadata"]["name"] for i in everything["items"])
    check(names == ["py-seed", "py-widget"], "list")

    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "py-widget", {"spec": {"size": 2}}
    )
    check(patched["spec"] == {"color": "red", "size": 2}, "merge patch")

    patched["spec"]["color"] = "blue"
    replaced = custom.replace_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "py-widget", patched
    )
    check(replaced["spec"]["color"] == "blue", "replace")

    try:
        custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "py-widget", patched)
        check(False, "a stale replace is refused")
    except ApiException as e:
        check(e.status == 409 and "Conflict" in e.body, "a stale replace is a 409 Conflict Status")

    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "py-widget")
    try:
        custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "py-widget")
        check(False, "the deleted widget is gone")
    except ApiException as e:
        check(e.status == 404 and "NotFound" in e.body, "get after delete is a 404 NotFound Status")

    seen = []
    w = watch.Watch()
    for event in w.stream(
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        ns,
        PLURAL,
        resource_version=rv0,
        allow_watch_bookmarks=True,
        timeout_seconds=10,
    ):
        if event["type"] == "BOOKMARK":
            continue
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if event["type"] == "DELETED":
            w.stop()
    check(
        seen == [("ADDED", "py-widget"), ("MODIFIED", "py-widget"), ("MODIFIED", "py-widget"),
                 ("DELETED", "py-widget")],
        f"a watch from resourceVersion {rv0} replays every change in order: {seen}",
    )
    print("python client: all checks passed")


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, ApiException) as e:
        sys.exit(f"FAILED: {e}")
