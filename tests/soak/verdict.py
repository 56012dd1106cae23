"""What a soak run proves, from what it recorded: the resource series stay flat after the
warm-up, tasks and descriptors come back to idle after the load, every client error is one a
backend restart explains, every kind of load succeeded, and the churn really happened. Each
check returns its report lines and its failures; the rules and their reasons are in
docs/soak.md."""

import statistics

# How far a series may grow from the first window after the warm-up to the last.
GROWTH_LIMIT = 0.10
# The series judged by their medians. Tasks are left out: they count the connections and
# requests of the moment, some 20, and their medians move by 1 or 2 with the churn's phase
# (2-minute runs gave -9.5 % to +10.8 %), so a 10 % limit there judged noise. A leaked task
# never ends, and back_to_idle catches even one, exactly.
BY_MEDIANS = ("process_resident_memory_bytes", "process_open_fds")
# The series that must come back to their count before the load once the load has ended, the
# churned APIServices are gone and the backend is stopped (its connections with it): what is
# left then is what leaked. Memory is not among them: the allocator keeps what it grew.
BY_RETURN = ("process_open_fds", "apigw_runtime_alive_tasks")
# How long they may take to come back: a request the backend's stop cut, or a connection
# whose close is still on its way, ends within a second or two.
DRAIN_WITHIN = 15
# apigw's default --availability-check-timeout.
CHECK_TIMEOUT = 5.0
# How long after a restarted backend is listening again its errors still count as explained.
# apigw checks every APIService in rounds; a round starts at each registry change (about every
# second here) once the one in flight has finished, and each check's result takes effect as it
# ends. The round in flight when the backend returns may have checked it while it was down and
# last up to the check timeout (the black hole's check); the next one finds it up within a
# check. So one check timeout, and two seconds for that check, the registry's debounce and a
# busy machine.
RECOVERY = CHECK_TIMEOUT + 2


def warmup(seconds: int) -> int:
    """The first minute or the first quarter of the run, whichever is longer. In the first
    minute the connection pools, caches and allocator arenas fill. The apiservices API keeps
    its last 1000 watch events (for watches that resume); under this churn (a toggle a second
    and the availability changes, about 1.3 events a second) that takes about 13 minutes,
    memory growing until it is full: the first quarter of an hour's run covers it."""
    return max(60, seconds // 4)


def windows(seconds: int, cycle: int):
    """The first and last comparison windows after the warm-up, as (start, end) seconds.

    Both start at the same phase of the churn (a whole number of restart cycles apart) and are
    a whole number of cycles long (a minute, or half of what follows the warm-up when the run
    is short), so both medians are taken over the same mix of restarts and toggles."""
    start = warmup(seconds)
    length = min(60, (seconds - start) // 2) // cycle * cycle
    cycles = (seconds - start - length) // cycle if length else 0
    if cycles < 1:
        raise ValueError(f"a {seconds} s run is too short: the warm-up and two {cycle} s windows need "
                         f"{60 + 2 * cycle} s")
    last = start + cycles * cycle
    return (start, start + length), (last, last + length)


def flatness(samples, seconds: int, cycle: int, metrics):
    """samples: dicts with `t` and each metric. Fails a metric of BY_MEDIANS whose median in
    the last window exceeds the first window's by more than GROWTH_LIMIT (medians: one sample
    taken while a backend restarts, or while a big list streams, must not decide); the others
    are reported."""
    first, last = windows(seconds, cycle)
    lines = [f"series after a {first[0]} s warm-up: median of [{first[0]}, {first[1]}) s "
             f"vs [{last[0]}, {last[1]}) s, limit +{GROWTH_LIMIT:.0%}",
             f"  {'metric':<26}{'first':>10}{'last':>10}{'growth':>9}{'min':>10}{'max':>10}"]
    failures = []
    after = [s for s in samples if s["t"] >= first[0]]
    for name, unit, scale in metrics:
        a = [s[name] for s in after if first[0] <= s["t"] < first[1]]
        b = [s[name] for s in after if last[0] <= s["t"] < last[1]]
        if not a or not b:
            failures.append(f"{name}: no samples in a comparison window")
            continue
        m1, m2 = statistics.median(a), statistics.median(b)
        growth = (m2 - m1) / m1 if m1 else float("inf")
        every = [s[name] for s in after]
        label = f"{name} ({unit})" if unit else name
        lines.append(f"  {label:<26}{m1 / scale:>10.1f}{m2 / scale:>10.1f}{growth:>+9.1%}"
                     f"{min(every) / scale:>10.1f}{max(every) / scale:>10.1f}"
                     + ("" if name in BY_MEDIANS else "  (reported; judged by its return)"))
        if growth > GROWTH_LIMIT and name in BY_MEDIANS:
            failures.append(f"{name} grew {growth:+.1%} (median {m1 / scale:.1f} -> {m2 / scale:.1f})")
        # Connections, watches and exec sessions come and go all the time: a series that
        # never moves is not counting them, and its flatness proves nothing.
        if min(every) == max(every):
            failures.append(f"{name} never moved from {min(every) / scale:.1f}: it does not see the load")
    return lines, failures


def back_to_idle(before, after, drained, seconds, metrics):
    """before: a scrape of apigw idle before the load; after: one once the load ended;
    drained: the last scrape after the load, the churn and the backend were gone, taken
    `seconds` after they were. Reports the metrics in all three; fails a series of BY_RETURN
    still above its count before."""
    text = ", ".join(f"{name} {before[name]:.0f} -> {drained[name]:.0f}" for name in BY_RETURN)
    lines = ["  idle before / after the load: " + ", ".join(
                 f"{name} {before[name] / scale:.1f} / {after[name] / scale:.1f}" for name, _, scale in metrics),
             f"back to idle with the load, the churn and the backend gone, after {seconds:.0f} s: {text}"]
    failures = [f"{name} stayed at {drained[name]:.0f} for {DRAIN_WITHIN} s after the load, the churn "
                f"and the backend were gone, above its {before[name]:.0f} before the load: something leaked"
                for name in BY_RETURN if drained[name] > before[name]]
    return lines, failures


def explained_errors(events, restarts):
    """events: the load generator's error lines; restarts: (down, up) times. A classified error
    is explained when it happened while a backend was down or within RECOVERY of its return;
    an unclassified one never is."""
    by_class, unexplained, lag = {}, [], None
    for e in events:
        window = next(((d, u) for d, u in restarts if d - 0.5 <= e["t"] <= u + RECOVERY), None)
        if e["class"] and window:
            by_class[e["class"]] = by_class.get(e["class"], 0) + 1
            lag = max(lag or 0.0, e["t"] - window[1])
        elif not e["class"]:
            unexplained.append(f"{e['kind']}: unclassified: {e['message'][:300]}")
        else:
            up = min((u for _, u in restarts), key=lambda u: abs(e["t"] - u), default=None)
            when = f"{e['t'] - up:+.1f} s from a backend's return" if up else "with no restart"
            unexplained.append(f"{e['kind']}: {e['class']} {when}: {e['message'][:300]}")
    total = sum(by_class.values())
    text = ", ".join(f"{c} {n}" for c, n in sorted(by_class.items())) or "none"
    lines = [f"client errors: {total + len(unexplained)}; explained by a backend restart: {total} ({text})"]
    if lag is not None:
        lines.append(f"  latest explained error: {lag:+.1f} s after its backend was back (allowed +{RECOVERY:.0f} s)")
    failures = []
    if unexplained:
        lines.append(f"  UNEXPLAINED: {len(unexplained)}, the first ones:")
        lines += [f"    {u}" for u in unexplained[:10]]
        failures.append(f"{len(unexplained)} client errors nothing in the churn explains")
    return lines, failures


def load_kinds(summary):
    """Every kind of load must have succeeded: a kind that never did proves nothing."""
    lines = [f"  {'load (client-go)':<18}{'ok':>8}{'errors':>8}"]
    failures = []
    for kind, c in sorted(summary["kinds"].items()):
        lines.append(f"  {kind:<18}{c['ok']:>8}{sum(c['errors'].values()):>8}")
        if c["ok"] == 0:
            failures.append(f"no {kind} operation succeeded")
    notes = summary.get("notes", {})
    if notes:
        lines.append("  " + ", ".join(f"{k}: {v}" for k, v in sorted(notes.items())))
    return lines, failures


def yes(b: bool) -> str:
    return "yes" if b else "NO"


def churn(c):
    """c: what the orchestrator did and what apigw and the clients saw of it."""
    lines = [
        f"churn: {c['toggles']} APIService toggles, apigw reloaded its registry {c['registry_loads']} times",
        f"  {c['restarts']} backend restarts ({c['restarts_term']} by SIGTERM, the others SIGKILL)",
        f"  {c['rotations']} rotations of the serving and proxy client certificates, "
        f"{c['cert_reloads']} certificate reloads; expiry gauges at the last certificates: "
        f"serving {yes(c['serving_follows'])}, proxy-client {yes(c['proxy_follows'])}",
        f"  clients saw {c['serials']} serving certificates; apigw logged {c['client_gone']} requests "
        f"ending client-gone",
    ]
    failures = []
    if c["registry_loads"] < 0.8 * c["toggles"] or c["toggles"] == 0:
        failures.append(f"{c['toggles']} APIService toggles but {c['registry_loads']} registry loads")
    if c["restarts"] == 0:
        failures.append("no backend restart")
    if c["rotations"] == 0 or c["cert_reloads"] < 2 * c["rotations"]:
        failures.append(f"{c['rotations']} rotations but {c['cert_reloads']} certificate reloads")
    if not (c["serving_follows"] and c["proxy_follows"]):
        failures.append("apigw's certificate expiry gauges do not show the last rotated certificates")
    if c["rotations"] and c["serials"] < 2:
        failures.append("no client ever saw a rotated serving certificate")
    return lines, failures
