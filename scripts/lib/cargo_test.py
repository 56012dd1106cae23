#!/usr/bin/env python3
"""The tests without cargo-nextest: scripts/test's fallback on a machine that does not have it.

Compiling nextest costs a fresh machine about 4.5 minutes on 2 cores before the first test can
run. Without it, this runs the same test binaries (built by `cargo test --no-run`) the way
.config/nextest.toml has nextest run them, reading that file rather than repeating it:

- each integration-test module and each other test binary in a process of its own, so a module
  that installs its own log subscriber (tests/it/deadlines.rs, jwt.rs) has its process to
  itself, as under nextest;
- the tests of the `kubernetes` test group (tests that start etcd and kube-apiserver) first,
  each in its own process, one at a time, beside the rest (the group's max-threads);
- two processes at once, one test thread each (the machine's cores), killed at the profile's
  slow-timeout x terminate-after for each of their tests.

    scripts/lib/cargo_test.py [FILTER...]   # only tests whose names contain a FILTER

Prints each process's result, the output of every one that failed, and exits non-zero when any
test failed or a process was killed.
"""

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def seconds(timeout):
    """A nextest slow-timeout (`{ period = "60s", terminate-after = 5 }`) in seconds."""
    period = int(re.fullmatch(r"(\d+)s", timeout["period"]).group(1))
    return period * timeout.get("terminate-after", 1)


def profile():
    """The kubernetes group's test-name pattern, its per-test limit and everyone else's."""
    with open(os.path.join(ROOT, ".config", "nextest.toml"), "rb") as f:
        config = tomllib.load(f)
    default = config["profile"]["default"]
    pattern, limit = None, seconds(default["slow-timeout"])
    for override in default.get("overrides", []):
        if override.get("test-group") == "kubernetes":
            pattern = re.fullmatch(r"test\(/(.*)/\)", override["filter"]).group(1)
            group_limit = seconds(override.get("slow-timeout", default["slow-timeout"]))
    if pattern is None:
        sys.exit("cargo_test.py: .config/nextest.toml has no kubernetes test group")
    return re.compile(pattern), group_limit, limit


def binaries():
    """(package directory, test binary) for every test target of the workspace."""
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--no-run", "--message-format=json"],
        cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    found = []
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
                and msg["profile"]["test"]:
            found.append((os.path.dirname(msg["manifest_path"]), msg["executable"]))
    return found


def tests_of(binary):
    listing = subprocess.run([binary, "--list", "--format", "terse"], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
    return [line[: -len(": test")] for line in listing.splitlines() if line.endswith(": test")]


def label(target, names, module):
    """`it upstream::one_test`, `it discovery:: (12 tests)` or `apigw_core (45 tests)`."""
    if len(names) == 1:
        return f"{target} {names[0]}"
    return f"{target} {module + ':: ' if module else ''}({len(names)} tests)"


def units(filters):
    """The processes to run, the kubernetes group's and the rest, each as (package dir, binary,
    tests, time limit, label)."""
    kubernetes, group_limit, limit = profile()
    group, rest = [], []
    for pkg, binary in binaries():
        target = os.path.basename(binary).rsplit("-", 1)[0]
        names = [n for n in tests_of(binary) if not filters or any(f in n for f in filters)]
        modules = {}
        for name in names:
            if kubernetes.search(name):
                group.append((pkg, binary, [name], group_limit, label(target, [name], "")))
            else:
                # Integration tests by module; a crate's unit tests all together.
                modules.setdefault(name.split("::")[0] if target == "it" else "", []).append(name)
        rest += [(pkg, binary, names, limit * len(names), label(target, names, module))
                 for module, names in modules.items()]
    return group, rest


def main():
    filters = sys.argv[1:]
    if any(f.startswith("-") for f in filters):
        sys.exit("without cargo-nextest, scripts/test takes test-name filters only; "
                 "nextest's options need it: cargo install --locked cargo-nextest")
    group, others = units(filters)
    processes = len(group) + len(others)
    if not processes:
        sys.exit(f"no test name contains any of {filters}")
    rest = queue.Queue()
    for unit in others:
        rest.put(unit)
    lock = threading.Lock()
    failed, counted, running = [], [0], set()

    def run(unit):
        pkg, binary, names, limit, what = unit
        cmd = [binary, "--exact", "--test-threads=1", *names]
        # In a session of its own, so a timeout ends the servers the tests started too.
        proc = subprocess.Popen(cmd, cwd=pkg, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        with lock:
            running.add(proc.pid)
        try:
            output, _ = proc.communicate(timeout=limit)
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            ok, output = False, f"{output}\nkilled after {limit} s"
        with lock:
            running.discard(proc.pid)
            counted[0] += len(names)
            print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)
            if not ok:
                print(output, flush=True)
                failed.append(what)

    def worker(first):
        # One worker takes the kubernetes group, one at a time, before helping with the rest.
        for unit in first:
            run(unit)
        while True:
            try:
                unit = rest.get_nowait()
            except queue.Empty:
                return
            run(unit)

    workers = [threading.Thread(target=worker, args=(g,)) for g in (group, [])]
    for w in workers:
        w.daemon = True
        w.start()
    try:
        for w in workers:
            w.join()
    except KeyboardInterrupt:
        # The tests run in sessions of their own, out of reach of the terminal's Ctrl-C.
        with lock:
            for pid in running:
                os.killpg(pid, signal.SIGKILL)
        sys.exit(130)
    if failed:
        print(f"{len(failed)} of {processes} test processes failed ({counted[0]} tests):",
              *failed, sep="\n  ")
        sys.exit(1)
    print(f"{counted[0]} tests passed in {processes} processes "
          "(cargo test's binaries; no cargo-nextest here)")


if __name__ == "__main__":
    main()
