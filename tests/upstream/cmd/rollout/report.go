// report.go owns the results: one door's figures, and the Markdown tables of
// docs/performance.md#rollouts made from them.
package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// doorResult is everything measured through one door.
type doorResult struct {
	Door string `json:"door"`
	// SpreadBefore and SpreadAfter are the requests each ready replica served in the steady
	// windows before and after the rolling restart.
	SpreadBefore map[string]float64 `json:"spreadBefore"`
	SpreadAfter  map[string]float64 `json:"spreadAfter"`
	Load         loadResult         `json:"load"`
	// Retries is the door's own count of requests it sent again (apigw_backend_retries_total).
	Retries map[string]float64 `json:"retries,omitempty"`
}

var phaseNames = []struct{ key, title string }{
	{phaseSteady, "steady"},
	{phaseRoll, "rolling restart"},
	{phaseAfter, "after it"},
	{phaseKill, "kill -9"},
}

// table renders the results as the Markdown of docs/performance.md.
func table(o options, results []doorResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d replicas of sample-apiserver, --shutdown-delay-duration=%s, --shutdown-send-retry-after, "+
		"--shutdown-watch-termination-grace-period=%s; %d readers, %d creators, 1 watch, 1 WatchList; "+
		"steady windows of %s; a killed replica stays in the endpoints %s.\n\n",
		o.replicas, o.shutdownDelay, o.watchGrace, o.readers, o.creators, o.steady, o.probeLag)
	b.WriteString("| door | phase | lists ok | lists failed | creates, deletes ok | failed | list p50 / p99 ms | on the wire (retried by client-go or not) | watch ends |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|---|---|\n")
	for _, r := range results {
		for _, p := range phaseNames {
			list := r.Load.Ops["list"][p.key]
			var writes, writesFailed int
			var writeFails []map[string]int
			for _, op := range []string{"create", "delete"} {
				if s := r.Load.Ops[op][p.key]; s != nil {
					writes += s.OK
					writesFailed += sum(s.Failed)
					writeFails = append(writeFails, s.Failed)
				}
			}
			var listOK, listFailed int
			var lat string
			var listFails map[string]int
			if list != nil {
				listOK, listFailed, listFails = list.OK, sum(list.Failed), list.Failed
				lat = fmt.Sprintf("%.1f / %.1f", list.P50, list.P99)
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %s | %s | %s | %s |\n", r.Door, p.title,
				listOK, withClasses(listFailed, listFails), writes, withClasses(writesFailed, writeFails...),
				lat, classes(r.Load.Wire[p.key]), classes(r.Load.WatchEnds[p.key]))
		}
	}
	b.WriteString("\n| door | load per replica before the roll | after it | furthest from even | door's retries |\n|---|---|---|--:|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Door, shares(r.SpreadBefore), shares(r.SpreadAfter),
			unevenness(r.SpreadBefore, r.SpreadAfter), retries(r.Retries))
	}
	failures := 0
	for _, r := range results {
		failures += len(r.Load.Examples)
	}
	if failures > 0 {
		b.WriteString("\nExamples of each failure:\n\n")
		for _, r := range results {
			var ks []string
			for k := range r.Load.Examples {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				fmt.Fprintf(&b, "- %s, %s: `%s`\n", r.Door, k, oneLine(r.Load.Examples[k][0]))
			}
		}
	}
	return b.String()
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func withClasses(n int, ms ...map[string]int) string {
	if n == 0 {
		return "0"
	}
	all := map[string]int{}
	for _, m := range ms {
		for k, v := range m {
			all[k] += v
		}
	}
	return fmt.Sprintf("**%d** (%s)", n, classes(all))
}

func classes(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// shares lists each replica's share of the requests served, largest first.
func shares(served map[string]float64) string {
	v := fractions(served)
	parts := make([]string, 0, len(v))
	for _, s := range v {
		parts = append(parts, fmt.Sprintf("%.0f %%", 100*s))
	}
	return strings.Join(parts, " / ")
}

func fractions(served map[string]float64) []float64 {
	var total float64
	for _, n := range served {
		total += n
	}
	out := make([]float64, 0, len(served))
	for _, n := range served {
		if total > 0 {
			out = append(out, n/total)
		}
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(out)))
	return out
}

// unevenness is the largest relative distance of a replica's share from an even share.
func unevenness(windows ...map[string]float64) string {
	worst := 0.0
	for _, w := range windows {
		v := fractions(w)
		if len(v) == 0 {
			continue
		}
		even := 1 / float64(len(v))
		for _, s := range v {
			worst = math.Max(worst, math.Abs(s-even)/even)
		}
	}
	return fmt.Sprintf("%.0f %%", 100*worst)
}

func retries(m map[string]float64) string {
	if m == nil {
		return "not counted"
	}
	var total float64
	for _, v := range m {
		total += v
	}
	return fmt.Sprintf("%.0f", total)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.ReplaceAll(s, "`", "'")
}

// percentile of d in milliseconds (nearest rank); 0 for none.
func percentile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return float64(s[i].Microseconds()) / 1000
}

// The watch ends a client-go reflector resumes from without an error: the stream's end.
var cleanEnds = map[string]bool{"ended after a bookmark": true, "ended cleanly, no bookmark": true}

// misses checks one door's figures against the targets of issue 50 (docs/performance.md
// #rollouts): nothing fails outside the kill, not even while replicas roll; every watch ends
// with the stream's end; the load is within 20 % of even in both steady windows; and the kill
// costs at most the creates and deletes in flight on the killed replica (one per creator),
// every read answered (sent again elsewhere), nothing hung.
func misses(o options, r doorResult) []string {
	var out []string
	for op, byPhase := range r.Load.Ops {
		for phase, s := range byPhase {
			n := sum(s.Failed)
			switch {
			case n == 0:
			case phase == phaseKill && (op == "create" || op == "delete") && s.Failed["hung (no answer in 30 s)"] == 0:
			default:
				out = append(out, fmt.Sprintf("%s: %d failed %s (%s)", phase, n, op, classes(s.Failed)))
			}
		}
	}
	var killWrites int
	for _, op := range []string{"create", "delete"} {
		if s := r.Load.Ops[op][phaseKill]; s != nil {
			killWrites += sum(s.Failed)
		}
	}
	if killWrites > o.creators {
		out = append(out, fmt.Sprintf("kill -9: %d failed creates and deletes, more than the %d that can be in flight", killWrites, o.creators))
	}
	for phase, ends := range r.Load.WatchEnds {
		for how, n := range ends {
			kind, end, _ := strings.Cut(how, ": ")
			if !cleanEnds[end] {
				out = append(out, fmt.Sprintf("%s: %d %s ended so: %s", phase, n, kind, end))
			}
		}
	}
	for name, w := range map[string]map[string]float64{"before the roll": r.SpreadBefore, "after it": r.SpreadAfter} {
		v := fractions(w)
		if len(v) != o.replicas {
			out = append(out, fmt.Sprintf("load %s: %d replicas served, not %d", name, len(v), o.replicas))
			continue
		}
		even := 1 / float64(len(v))
		if worst := math.Max(v[0]-even, even-v[len(v)-1]) / even; worst > 0.20 {
			out = append(out, fmt.Sprintf("load %s: %s, %.0f %% from even", name, shares(w), 100*worst))
		}
	}
	sort.Strings(out)
	return out
}
