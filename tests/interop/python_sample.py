"""The official Python `kubernetes` client (PyPI) against the gateway in front of the sample
server (flunders), for what tests/sample_clients.rs needs a client no one here wrote for:

  version  VersionApi().get_code() parses the gateway's /version; prints it as JSON.
  dryrun   dry_run="All" on create, replace, patch, apply and delete changes nothing: the live
           object keeps its resourceVersion and a watch from before sees no event; an unknown
           dryRun value is a 422 Invalid.
  apply    server-side apply in the JSON form: create, conflict (409) with another manager,
           force, managedFields.
  dynamic  the DynamicClient finds flunders by kind and by short name, and lists them.

Prints one line per check and exits non-zero with the reason on the first failure.
"""

import argparse
import json
import sys

try:
    from kubernetes import client, dynamic, watch
    from kubernetes.client.rest import ApiException
except ImportError:
    sys.exit("the Python kubernetes client is missing: pip install kubernetes")

GROUP, VERSION, PLURAL, KIND = "wardle.example.com", "v1alpha1", "flunders", "Flunder"
API_VERSION = f"{GROUP}/{VERSION}"
APPLY = "application/apply-patch+yaml"


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


def flunder(name, reference, labels=None):
    meta = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
            "spec": {"reference": reference}}


def fails(call, status, reason=None):
    try:
        call()
    except ApiException as e:
        body = json.loads(e.body or "{}")
        return e.status == status and (reason is None or body.get("reason") == reason), body
    return False, "no error"


def version(api_client, _ns):
    info = client.VersionApi(api_client).get_code()
    for field in ("major", "minor", "git_version", "git_commit", "git_tree_state",
                  "build_date", "go_version", "compiler", "platform"):
        check(getattr(info, field) is not None, f"/version has {field}")
    print("VERSION " + json.dumps(api_client.sanitize_for_serialization(info)))


def dryrun(api_client, ns):
    custom = client.CustomObjectsApi(api_client)
    args = (GROUP, VERSION, ns, PLURAL)
    made = custom.create_namespaced_custom_object(*args, flunder("py-live", "one"))
    rv = made["metadata"]["resourceVersion"]
    list_rv = custom.list_namespaced_custom_object(*args)["metadata"]["resourceVersion"]

    would = custom.create_namespaced_custom_object(*args, flunder("py-dry", "x"), dry_run="All")
    check(would["metadata"]["name"] == "py-dry", "a dry-run create answers the object")
    gone, _ = fails(lambda: custom.get_namespaced_custom_object(*args, "py-dry"), 404)
    check(gone, "a dry-run create stores nothing")

    changed = dict(made, spec={"reference": "two"})
    replaced = custom.replace_namespaced_custom_object(*args, "py-live", changed, dry_run="All")
    check(replaced["spec"]["reference"] == "two", "a dry-run replace answers the change")
    patched = custom.patch_namespaced_custom_object(
        *args, "py-live", {"metadata": {"labels": {"dry": "yes"}}}, dry_run="All")
    check(patched["metadata"]["labels"] == {"dry": "yes"}, "a dry-run patch answers the change")
    applied = custom.patch_namespaced_custom_object(
        *args, "py-live", flunder("py-live", "three"), dry_run="All",
        field_manager="py-apply", force=True, _content_type=APPLY)
    check(applied["spec"]["reference"] == "three", "a dry-run apply answers the change")
    status = custom.delete_namespaced_custom_object(*args, "py-live", dry_run="All")
    check(status.get("status") == "Success", "a dry-run delete answers Success")

    live = custom.get_namespaced_custom_object(*args, "py-live")
    check(live["metadata"]["resourceVersion"] == rv, "the live object kept its resourceVersion")
    check(live["spec"] == {"reference": "one"} and "labels" not in live["metadata"],
          "the live object is unchanged")
    events = list(watch.Watch().stream(custom.list_namespaced_custom_object, *args,
                                       resource_version=list_rv, timeout_seconds=2))
    check(events == [], f"no watch event after the dry runs (got {len(events)})")

    bad, body = fails(lambda: custom.create_namespaced_custom_object(
        *args, flunder("py-bad", "x"), dry_run="Bogus"), 422, "Invalid")
    check(bad, f"an unknown dryRun value is a 422 Invalid ({body})")
    message = body.get("message", "") if isinstance(body, dict) else ""
    check('dryRun: Unsupported value' in message, f"it names dryRun: {message}")


def apply(api_client, ns):
    custom = client.CustomObjectsApi(api_client)
    args = (GROUP, VERSION, ns, PLURAL)
    # A 201 Created, which the generated client (200 -> object) reads as no body.
    custom.patch_namespaced_custom_object(
        *args, "py-applied", flunder("py-applied", "mine", {"team": "py"}),
        field_manager="py-owner", _content_type=APPLY)
    made = custom.get_namespaced_custom_object(*args, "py-applied")
    check(made["spec"]["reference"] == "mine", "apply creates the object")
    managers = {(e["manager"], e["operation"]): e for e in made["metadata"]["managedFields"]}
    entry = managers.get(("py-owner", "Apply"))
    check(entry is not None and entry["fieldsType"] == "FieldsV1", "an Apply entry for py-owner")
    check(entry["fieldsV1"] == {"f:metadata": {"f:labels": {"f:team": {}}},
                                "f:spec": {"f:reference": {}}},
          f"it owns what it applied: {entry['fieldsV1']}")
    conflict, body = fails(lambda: custom.patch_namespaced_custom_object(
        *args, "py-applied", flunder("py-applied", "theirs"), field_manager="py-other",
        _content_type=APPLY), 409, "Conflict")
    check(conflict, f"another manager changing an owned field is a 409 Conflict ({body})")
    causes = body.get("details", {}).get("causes", []) if isinstance(body, dict) else []
    check(any(c.get("field") == ".spec.reference" and "py-owner" in c.get("message", "")
              for c in causes), f"the conflict names .spec.reference and py-owner: {causes}")
    forced = custom.patch_namespaced_custom_object(
        *args, "py-applied", flunder("py-applied", "theirs"), field_manager="py-other",
        force=True, _content_type=APPLY)
    check(forced["spec"]["reference"] == "theirs", "force takes the field over")
    missing, body = fails(lambda: custom.patch_namespaced_custom_object(
        *args, "py-applied", flunder("py-applied", "x"), _content_type=APPLY), 422, "Invalid")
    check(missing, f"an apply without fieldManager is a 422 Invalid ({body})")


def dynamic_client(api_client, ns):
    dyn = dynamic.DynamicClient(api_client)
    by_kind = dyn.resources.get(api_version=API_VERSION, kind=KIND)
    check(by_kind.name == PLURAL, "the DynamicClient finds flunders by kind")
    by_short = dyn.resources.get(short_names=["fl"])
    check(by_short.name == PLURAL and by_short.group == GROUP,
          "the DynamicClient finds flunders by short name")
    by_short.create(body=flunder("py-dyn", "dyn"), namespace=ns)
    names = [i.metadata.name for i in by_short.get(namespace=ns).items]
    check("py-dyn" in names, "the DynamicClient creates and lists flunders")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["version", "dryrun", "apply", "dynamic"])
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
    {"version": version, "dryrun": dryrun, "apply": apply, "dynamic": dynamic_client}[
        args.check](api_client, args.namespace)
    print(f"python client: {args.check} checks passed")


if __name__ == "__main__":
    main()
