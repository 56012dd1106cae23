#!/usr/bin/env python3
"""scripts/soak's orchestrator: starts the Go addon and apigw in front of it on loopback, runs
the client-go load generator (tests/upstream/cmd/soak) for the minutes asked, and meanwhile
churns: an APIService manifest added or removed every second, the backend restarted every
30 s (down 2 s, by SIGTERM and SIGKILL in turn), the serving and proxy client certificates
rotated every minute. It scrapes apigw's /metrics every second into series.csv; when the load
has ended it removes the churned APIServices, stops the addon and scrapes until apigw is back
to idle; then it hands what it recorded to verdict.py and exits 1 on any failure, keeping the
work directory.

    tests/soak/soak.py MINUTES      (scripts/soak MINUTES)

APIGW=path uses that binary instead of building one; APIGW_ARGS adds flags to `apigw serve`;
SOAK_SEED fixes the churn's random choices; SOAK_KEEP=1 keeps the work directory on success."""

import base64
import csv
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import verdict  # noqa: E402
from pki import Pki, Secret  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# The churn's schedule, in seconds of the run: a restart at 5 s of every half minute, up
# again 2 s later; a rotation at 20 s of every minute, after the window in which a restart
# explains errors (verdict.RECOVERY) and before the next, so an error a rotation caused is
# never taken for one a restart explains.
RESTART_EVERY, RESTART_AT, DOWN_FOR = 30, 5, 2
ROTATE_EVERY, ROTATE_AT = 60, 20
# A scrape a second: the series move with the churn's phase (tasks fall from 20 to 11 while
# the backend is down), and with a scrape every 5 s the phase the six samples of a half-minute
# window caught decided its median. See docs/soak.md.
SCRAPE_EVERY = 1
# How long after the load ends apigw is scraped idle.
IDLE_AFTER = 5
ADDON_HOST = ("widgets", "interop")  # the addon's Service: widgets.interop.svc
SERIES = [("process_resident_memory_bytes", "MiB", 2**20), ("process_open_fds", "", 1),
          ("apigw_runtime_alive_tasks", "", 1)]
EXPIRY = 'apigw_certificate_expiry_timestamp_seconds{cert="%s"}'


class Failure(Exception):
    pass


def say(msg):
    print(f"soak: {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, **kw):
    """Runs a build step quietly; its output is shown only when it fails."""
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise Failure(f"{' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def programs(work: Path):
    """apigw, the load generator and the Go addon, built or found."""
    for tool in ("go", "openssl") + (() if os.environ.get("APIGW") else ("cargo",)):
        if not shutil.which(tool):
            raise Failure(f"{tool} is not on PATH (Go: /usr/local/go/bin; cargo: ~/.cargo/bin)")
    apigw = Path(os.environ.get("APIGW") or ROOT / "target/release/apigw")
    if not os.environ.get("APIGW"):
        say("cargo build --release -p apigw")
        run(["cargo", "build", "--release", "-p", "apigw"], cwd=ROOT)
    if not os.access(apigw, os.X_OK):
        raise Failure(f"no apigw binary at {apigw}")
    upstream = subprocess.run([ROOT / "scripts/upstream"], stdout=subprocess.PIPE, text=True)
    if upstream.returncode != 0:
        raise Failure("scripts/upstream failed")
    load = Path(upstream.stdout.strip()) / "soak"
    addon = work / "goaddon"
    run(["go", "build", "-o", addon, "."], cwd=ROOT / "tests/interop/goaddon",
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off"})
    return apigw, load, addon


class Addon:
    """The Go addon server, restartable on the same port; its stderr is addon.log."""

    def __init__(self, bin: Path, work: Path, port: int, cert: Secret, front_proxy_ca: Path):
        self.args = [str(bin), f"-listen=127.0.0.1:{port}", f"-tls-cert-file={cert.crt}",
                     f"-tls-private-key-file={cert.key}",
                     f"-requestheader-client-ca-file={front_proxy_ca}",
                     "-requestheader-allowed-names=front-proxy-client"]
        self.log, self.out = work / "addon.log", work / "addon.out"
        self.proc = None

    def start(self):
        with open(self.log, "a") as err, open(self.out, "w") as out:
            self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        deadline = time.time() + 20
        while "LISTENING" not in self.out.read_text():
            if self.proc.poll() is not None or time.time() > deadline:
                raise Failure(f"the Go addon did not start listening; see {self.log}")
            time.sleep(0.02)

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)
        self.proc = None


class Gateway:
    """apigw serve, its log in apigw.log, its metrics on a plain-HTTP port."""

    def __init__(self, bin: Path, work: Path, args):
        self.metrics_port = free_port()
        self.args = [str(bin), "serve", *args, "--metrics-bind-address",
                     f"127.0.0.1:{self.metrics_port}", "--log-format", "json",
                     *shlex.split(os.environ.get("APIGW_ARGS", ""))]
        self.log = work / "apigw.log"
        self.proc = None

    def start(self):
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url("/readyz"), timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise Failure(f"apigw did not become ready; see {self.log}")
            time.sleep(0.1)

    def url(self, path):
        return f"http://127.0.0.1:{self.metrics_port}{path}"

    def scrape(self) -> dict:
        try:
            with urllib.request.urlopen(self.url("/metrics"), timeout=10) as r:
                text = r.read().decode()
        except OSError as e:
            raise Failure(f"scraping apigw's /metrics failed: {e}")
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                values[key] = float(value)
        return values

    def log_lines(self, *marks):
        """How many log lines hold every one of marks."""
        with open(self.log, errors="replace") as f:
            return sum(1 for line in f if all(m in line for m in marks))


def manifest(version, group, svc, ns, ca_bundle) -> str:
    return json.dumps({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": f"{version}.{group}"},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 1000,
                 "versionPriority": 15, "service": {"name": svc, "namespace": ns, "port": 443},
                 "caBundle": ca_bundle}})


def write_atomically(path: Path, text: str):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Churn:
    """APIServices that come and go in the watched directory: another version of the addon's
    group on the running addon, and groups whose backends refuse connections or never answer.
    The addon's own v1.interop.example.com stays."""

    SLOTS = [("v1beta1", "interop.example.com", *ADDON_HOST),
             ("v1", "refused-1.soak.example.com", "refused", "soak"),
             ("v1", "refused-2.soak.example.com", "refused", "soak"),
             ("v1", "blackhole.soak.example.com", "blackhole", "soak")]

    def __init__(self, dir: Path, ca_bundle: str, rng: random.Random):
        self.dir, self.ca_bundle, self.rng = dir, ca_bundle, rng
        self.toggles = 0
        write_atomically(dir / "stable.json", manifest("v1", "interop.example.com", *ADDON_HOST, ca_bundle))

    def settle(self):
        """Removes every churned APIService: the registry is back to what it was at the start."""
        for path in self.dir.glob("churn-*.json"):
            path.unlink()

    def toggle(self):
        i = self.rng.randrange(len(self.SLOTS))
        path = self.dir / f"churn-{i}.json"
        if path.exists():
            path.unlink()
        else:
            write_atomically(path, manifest(*self.SLOTS[i], self.ca_bundle))
        self.toggles += 1


def make_pki(work: Path) -> dict:
    pki = Pki(work / "pki")
    for ca in ("ca", "client-ca", "front-proxy-ca", "addon-ca"):
        pki.ca(ca)
    pki.leaf("client-ca", pki.path("client.crt"), pki.path("client.key"), "soak", orgs=["soak"])
    return {
        "pki": pki,
        "serving": Secret(pki, work / "serving", "ca", "apigw", dns=["localhost"], ips=["127.0.0.1"]),
        "proxy": Secret(pki, work / "proxy-client", "front-proxy-ca", "front-proxy-client"),
        "addon": Secret(pki, work / "addon", "addon-ca", "widgets", dns=[".".join(ADDON_HOST) + ".svc"]),
    }


def soak(minutes: int, work: Path) -> int:
    seconds = minutes * 60
    seed = int(os.environ.get("SOAK_SEED") or random.randrange(1 << 30))
    say(f"{minutes} min, work dir {work}, churn seed {seed}")
    apigw_bin, load_bin, addon_bin = programs(work)
    certs = make_pki(work)
    pki = certs["pki"]
    (work / "apiservices").mkdir()
    addon_ca = base64.b64encode(pki.path("addon-ca.crt").read_bytes()).decode()
    churn = Churn(work / "apiservices", addon_ca, random.Random(seed))
    # A backend that accepts connections (the kernel does) and never answers.
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(8)
    addon_port = free_port()
    addon = Addon(addon_bin, work, addon_port, certs["addon"], pki.path("front-proxy-ca.crt"))
    port = free_port()
    gateway = Gateway(apigw_bin, work, [
        "--bind-address", "127.0.0.1", "--secure-port", str(port),
        "--tls-cert-file", certs["serving"].crt, "--tls-private-key-file", certs["serving"].key,
        "--client-ca-file", pki.path("client-ca.crt"),
        "--proxy-client-cert-file", certs["proxy"].crt, "--proxy-client-key-file", certs["proxy"].key,
        "--apiservice-dir", work / "apiservices",
        "--resolve", f"widgets.interop.svc:443=127.0.0.1:{addon_port}",
        "--resolve", f"refused.soak.svc:443=127.0.0.1:{free_port()}",
        "--resolve", f"blackhole.soak.svc:443=127.0.0.1:{blackhole.getsockname()[1]}"])
    load = None
    try:
        addon.start()
        gateway.start()
        idle_before = gateway.scrape()
        with open(work / "load.json", "w") as out, open(work / "load.log", "w") as err:
            load = subprocess.Popen([
                load_bin, "-server", f"https://127.0.0.1:{port}", "-ca", pki.path("ca.crt"),
                "-cert", pki.path("client.crt"), "-key", pki.path("client.key"),
                "-duration", f"{seconds}s", "-events", work / "events.jsonl"],
                stdout=out, stderr=err)
        say(f"apigw on 127.0.0.1:{port}, the Go addon on 127.0.0.1:{addon_port}, load running")
        record = churn_run(seconds, gateway, addon, certs, churn, work)
        try:
            load.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise Failure("the load generator did not finish within 60 s of its end; see load.log")
        if load.returncode != 0:
            raise Failure(f"the load generator failed ({load.returncode}); see {work}/load.log")
        time.sleep(IDLE_AFTER)
        record["before"] = idle_before
        record["final"] = gateway.scrape()
        churn.settle()
        addon.stop()
        record["drained"] = drain(gateway, idle_before)
        if gateway.proc.poll() is not None:
            raise Failure(f"apigw exited ({gateway.proc.returncode}); see {gateway.log}")
        gateway.proc.send_signal(signal.SIGTERM)
        code = gateway.proc.wait(timeout=60)
        return judge(record, seconds, gateway, certs, work, code)
    finally:
        for proc in (load, gateway.proc, addon.proc):
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait()
        blackhole.close()


def drain(gateway, before) -> tuple:
    """Scrapes apigw every second until the series of verdict.BY_RETURN are back to their
    counts before the load, for at most verdict.DRAIN_WITHIN seconds; returns the last scrape
    and the seconds it took."""
    start = time.time()
    while True:
        values = gateway.scrape()
        waited = time.time() - start
        if waited >= verdict.DRAIN_WITHIN or all(values[n] <= before[n] for n in verdict.BY_RETURN):
            return values, waited
        time.sleep(1)


def churn_run(seconds, gateway, addon, certs, churn, work) -> dict:
    """The churn, second by second, with the scrapes; returns what happened."""
    samples, restarts, term = [], [], 0
    rotations, down = 0, None
    start = time.time()
    with open(work / "series.csv", "w", newline="") as f:
        series = csv.writer(f)
        series.writerow(["t"] + [name for name, _, _ in SERIES])
        for tick in range(seconds):
            time.sleep(max(0.0, start + tick - time.time()))
            if gateway.proc.poll() is not None:
                raise Failure(f"apigw exited ({gateway.proc.returncode}) at {tick} s; see {gateway.log}")
            phase = tick % RESTART_EVERY
            if phase == RESTART_AT:
                down = time.time()
                sig = signal.SIGTERM if len(restarts) % 2 == 0 else signal.SIGKILL
                term += sig == signal.SIGTERM
                addon.stop(sig)
            elif phase == RESTART_AT + DOWN_FOR and down is not None:
                addon.start()
                restarts.append((down, time.time()))
                down = None
            if tick % ROTATE_EVERY == ROTATE_AT:
                certs["serving"].rotate()
                certs["proxy"].rotate()
                rotations += 1
            churn.toggle()
            if tick % SCRAPE_EVERY == 0:
                values = gateway.scrape()
                missing = [name for name, _, _ in SERIES if name not in values]
                if missing:
                    raise Failure(f"apigw's /metrics lacks {', '.join(missing)}")
                sample = {"t": tick, **{name: values[name] for name, _, _ in SERIES}}
                samples.append(sample)
                series.writerow([sample[k] for k in ["t"] + [n for n, _, _ in SERIES]])
                f.flush()
                if tick and tick % 60 == 0:
                    say(f"{tick // 60} min: " + ", ".join(
                        f"{n.split('_', 1)[1]} {sample[n] / s:.1f}{u and ' ' + u}" for n, u, s in SERIES))
    return {"samples": samples, "restarts": restarts, "term": term, "rotations": rotations,
            "toggles": churn.toggles}


def judge(record, seconds, gateway, certs, work, exit_code) -> int:
    summary = json.loads((work / "load.json").read_text())
    events = [json.loads(line) for line in (work / "events.jsonl").read_text().splitlines()]
    final = record["final"]
    seen = {
        "toggles": record["toggles"],
        "registry_loads": gateway.log_lines("registry loaded"),
        "restarts": len(record["restarts"]),
        "restarts_term": record["term"],
        "rotations": record["rotations"],
        "cert_reloads": gateway.log_lines('"reloaded"', '"certificate"'),
        "serving_follows": final.get(EXPIRY % "serving") == certs["serving"].not_after(),
        "proxy_follows": final.get(EXPIRY % "proxy-client") == certs["proxy"].not_after(),
        "serials": summary["servingCertSerials"],
        "client_gone": gateway.log_lines("client-gone"),
    }
    reports = [verdict.load_kinds(summary),
               verdict.explained_errors(events, record["restarts"]),
               verdict.churn(seen),
               verdict.flatness(record["samples"], seconds, RESTART_EVERY, SERIES),
               verdict.back_to_idle(record["before"], final, *record["drained"], SERIES)]
    failures = []
    for lines, failed in reports:
        print("\n".join(lines))
        failures += failed
    panics = gateway.log_lines("panicked")
    if panics:
        failures.append(f"apigw logged {panics} panics (grep panicked {gateway.log})")
    if exit_code != 0:
        failures.append(f"apigw exited {exit_code} on SIGTERM")
    if failures:
        say("FAIL: " + "; ".join(failures))
        return 1
    say("PASS")
    return 0


def main():
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and not sys.argv[1].isdigit()):
        print("usage: scripts/soak [MINUTES]   (whole minutes, at least 2; default 2)", file=sys.stderr)
        return 2
    minutes = int(sys.argv[1]) if len(sys.argv) == 2 else 2
    try:
        verdict.windows(minutes * 60, RESTART_EVERY)
    except ValueError as e:
        say(str(e))
        return 2
    work = Path(tempfile.mkdtemp(prefix="apigw-soak-"))
    try:
        code = soak(minutes, work)
    except Failure as e:
        say(f"FAIL: {e}")
        code = 1
    except Exception:  # a bug here, or a tool misbehaving: the traceback says where
        traceback.print_exc()
        code = 1
    if code == 0 and not os.environ.get("SOAK_KEEP"):
        shutil.rmtree(work)
    else:
        say(f"work dir kept: {work}")
    return code


if __name__ == "__main__":
    sys.exit(main())
