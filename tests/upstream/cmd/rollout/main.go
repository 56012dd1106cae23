// Command rollout measures what a client sees while an aggregated API server is rolled, through
// kube-aggregator (inside kube-apiserver) and through apigw, one door after the other, on the
// same cluster and the same replicas (scripts/rollout; docs/performance.md#rollouts).
//
// The cluster is cmd/controlplane's (etcd and kube-apiserver, with --enable-aggregator-routing
// so kube-aggregator picks an endpoint per request as apigw does). Upstream's sample-apiserver
// (cmd/wardle: with k8s.io/apiserver's graceful-termination settings) runs as -replicas
// processes on the machine's first non-loopback IPv4 address, one port each, behind one
// selectorless Service whose EndpointSlices this program keeps as the endpoint controller
// would (the API refuses loopback endpoint addresses). apigw runs in cluster mode with
// --enable-aggregator-routing, reading the same APIServices, Service and EndpointSlices.
//
// For each door, while client-go load runs through it (load.go): a steady window, a rolling
// restart as a Deployment does it (replicas.go), a second steady window, and one replica killed
// with SIGKILL. What the clients saw is written as JSON (-json) and as the Markdown table of
// docs/performance.md (stdout), by report.go.
//
//	rollout -bin DIR -apigw PATH -dir DIR [-replicas 3] [-json FILE] [-check apigw]
//
// It exits 1 when the door named by -check misses the targets (report.go's misses).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type options struct {
	bin, apigw, dir, jsonOut string
	replicas, readers        int
	creators                 int
	steady                   time.Duration
	shutdownDelay            time.Duration
	watchGrace               time.Duration
	probeLag                 time.Duration
	doors                    string
	// check names the door whose figures must meet the targets (see misses); "" for none.
	check string
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "", "directory of the upstream build (scripts/upstream) (required)")
	flag.StringVar(&o.apigw, "apigw", "", "the apigw binary (required)")
	flag.StringVar(&o.dir, "dir", "", "work directory: PKI, logs, results (required)")
	flag.StringVar(&o.jsonOut, "json", "", "file for the results as JSON")
	flag.IntVar(&o.replicas, "replicas", 3, "sample-apiserver replicas")
	flag.IntVar(&o.readers, "readers", 4, "clients looping list requests")
	flag.IntVar(&o.creators, "creators", 2, "clients looping create and delete")
	flag.DurationVar(&o.steady, "steady", 20*time.Second, "each steady window (the spread is measured in it)")
	flag.DurationVar(&o.shutdownDelay, "shutdown-delay", 10*time.Second, "the replicas' --shutdown-delay-duration")
	flag.DurationVar(&o.watchGrace, "watch-grace", 5*time.Second, "the replicas' --shutdown-watch-termination-grace-period")
	flag.DurationVar(&o.probeLag, "probe-lag", 5*time.Second, "how long a killed replica stays in the endpoints (a readiness probe's period)")
	flag.StringVar(&o.doors, "doors", "kube-aggregator,apigw", "the doors, in order")
	flag.StringVar(&o.check, "check", "apigw", "exit 1 unless this door meets the targets (\"\" for none)")
	flag.Parse()
	if o.bin == "" || o.apigw == "" || o.dir == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: rollout -bin DIR -apigw PATH -dir DIR [-replicas 3] [-json FILE]")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "rollout: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	o.dir = dir
	ctx := context.Background()
	logf("starting the control plane in %s", dir)
	cp, err := startControlPlane(o)
	if err != nil {
		return err
	}
	defer cp.stop()
	cl, err := newCluster(cp)
	if err != nil {
		return err
	}
	if err := cl.register(ctx); err != nil {
		return fmt.Errorf("registering the wardle APIServices: %w", err)
	}
	set, err := newReplicaSet(o, cp, cl)
	if err != nil {
		return err
	}
	defer set.stopAll()
	for range o.replicas {
		if _, err := set.add(ctx); err != nil {
			return err
		}
	}
	gw, err := startGateway(o, cp)
	if err != nil {
		return err
	}
	defer gw.stop()

	var results []doorResult
	for _, name := range splitList(o.doors) {
		d, err := cp.door(name, gw)
		if err != nil {
			return err
		}
		if err := cl.awaitAvailable(ctx, d); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		logf("door %s: load on", name)
		r, err := measure(ctx, o, d, set)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results = append(results, r)
	}
	if o.jsonOut != "" {
		text, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, append(text, '\n'), 0o644); err != nil {
			return err
		}
	}
	fmt.Print(table(o, results))
	for _, r := range results {
		if r.Door != o.check {
			continue
		}
		if m := misses(o, r); len(m) > 0 {
			return fmt.Errorf("%s misses the targets:\n  %s", r.Door, strings.Join(m, "\n  "))
		}
		logf("%s meets the targets", r.Door)
	}
	return nil
}

// measure runs the load through d while the replicas go through the scenario's phases.
func measure(ctx context.Context, o options, d door, set *replicaSet) (doorResult, error) {
	l, err := newLoad(d)
	if err != nil {
		return doorResult{}, err
	}
	if err := l.seed(ctx); err != nil {
		return doorResult{}, fmt.Errorf("creating the listed flunders: %w", err)
	}
	loadCtx, stop := context.WithCancel(ctx)
	done := l.start(loadCtx, o)
	defer func() { stop(); <-done }()

	r := doorResult{Door: d.name}
	pause(ctx, 3*time.Second) // connections made, watches open
	var err2 error
	if r.SpreadBefore, err2 = spread(ctx, set, l, phaseSteady, o.steady); err2 != nil {
		return r, err2
	}
	logf("door %s: rolling restart of %d replicas", d.name, o.replicas)
	l.setPhase(phaseRoll)
	if err := set.roll(ctx); err != nil {
		return r, err
	}
	pause(ctx, 2*time.Second)
	if r.SpreadAfter, err2 = spread(ctx, set, l, phaseAfter, o.steady); err2 != nil {
		return r, err2
	}
	logf("door %s: kill -9 of one replica", d.name)
	l.setPhase(phaseKill)
	if err := set.killOne(ctx); err != nil {
		return r, err
	}
	pause(ctx, 3*time.Second)
	l.setPhase(phaseEnd)
	stop()
	<-done
	r.Load = l.result()
	r.Retries = d.retries()
	return r, nil
}

// spread runs the load for window in phase and returns each ready replica's count of the
// wardle requests it served in that window, by its own apiserver_request_total.
func spread(ctx context.Context, set *replicaSet, l *load, phase string, window time.Duration) (map[string]float64, error) {
	l.setPhase(phase)
	before, err := set.requestCounts(ctx)
	if err != nil {
		return nil, err
	}
	pause(ctx, window)
	after, err := set.requestCounts(ctx)
	if err != nil {
		return nil, err
	}
	served := map[string]float64{}
	for name, n := range after {
		served[name] = n - before[name]
	}
	return served, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rollout %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// pause sleeps d, or less when ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
