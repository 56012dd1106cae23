// Command soak is the load generator of scripts/soak: client-go driving apigw for a set time
// with lists, long watches, uploads, WebSocket exec sessions, discovery and clients that drop
// mid-body, all against the Go addon's interop.example.com/v1 widgets. It owns the command
// line, the client configurations and the run; the workers are in load.go, the counting and
// the classification of errors in tally.go.
//
//	soak -server URL -ca FILE -cert FILE -key FILE -duration 2m -events FILE
//
// Every error is written to -events as one JSON line (time, kind, class, message), for the
// orchestrator to match against the churn it made; at the end one JSON summary goes to stdout.
// It exits 1 only when it cannot run at all.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

func main() {
	server := flag.String("server", "", "apigw's URL, https://127.0.0.1:PORT (required)")
	ca := flag.String("ca", "", "CA of apigw's serving certificate (required)")
	cert := flag.String("cert", "", "client certificate (required)")
	key := flag.String("key", "", "client key (required)")
	duration := flag.Duration("duration", 2*time.Minute, "how long to load")
	events := flag.String("events", "", "file for one JSON line per error (required)")
	namespace := flag.String("namespace", "soak", "namespace of the widgets")
	flag.Parse()
	if *server == "" || *ca == "" || *cert == "" || *key == "" || *events == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: soak -server URL -ca FILE -cert FILE -key FILE -events FILE [-duration 2m] [-namespace NS]")
		os.Exit(2)
	}
	out, err := os.Create(*events)
	if err != nil {
		fail(err)
	}
	defer out.Close()

	seen := &servingCerts{serials: map[string]bool{}}
	base := &rest.Config{
		Host:            *server,
		TLSClientConfig: rest.TLSClientConfig{CAFile: *ca, CertFile: *cert, KeyFile: *key},
		// No client-side rate limit: the workers pace themselves.
		QPS:       -1,
		UserAgent: "apigw-soak",
	}
	base.Wrap(seen.wrap)
	// Two transports: HTTP/2 (client-go's default, one multiplexed connection) and HTTP/1.1
	// (a pool, where every drop costs a connection and a new handshake).
	h1 := rest.CopyConfig(base)
	h1.NextProtos = []string{"http/1.1"}
	l, err := newLoad(*namespace, out, base, h1)
	if err != nil {
		fail(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	started := time.Now()
	var wg sync.WaitGroup
	for _, w := range l.workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				w.run(ctx)
				pause(ctx, w.every)
			}
		}()
	}
	wg.Wait()

	summary := l.tally.summary()
	summary["seconds"] = int(time.Since(started).Seconds())
	summary["servingCertSerials"] = seen.count()
	text, err := json.MarshalIndent(summary, "", "  ")
	if err != nil {
		fail(err)
	}
	fmt.Println(string(text))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "soak: %v\n", err)
	os.Exit(1)
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

// clients is what one worker talks with: a dynamic client, a discovery client (whose REST
// client also reaches raw paths) and the config (for exec).
type clients struct {
	cfg  *rest.Config
	dyn  *dynamic.DynamicClient
	disc *discovery.DiscoveryClient
}

func newClients(cfg *rest.Config) (clients, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return clients{}, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return clients{}, err
	}
	return clients{cfg: cfg, dyn: dyn, disc: disc}, nil
}

// servingCerts records the serial numbers of the serving certificates responses came over:
// more than one shows that the rotation reached clients making new connections.
type servingCerts struct {
	mu      sync.Mutex
	serials map[string]bool
}

type certRecorder struct {
	next http.RoundTripper
	s    *servingCerts
}

func (s *servingCerts) wrap(rt http.RoundTripper) http.RoundTripper { return certRecorder{rt, s} }

func (r certRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil && resp.TLS != nil {
		r.s.add(resp.TLS)
	}
	return resp, err
}

func (s *servingCerts) add(state *tls.ConnectionState) {
	if len(state.PeerCertificates) == 0 {
		return
	}
	s.mu.Lock()
	s.serials[state.PeerCertificates[0].SerialNumber.String()] = true
	s.mu.Unlock()
}

func (s *servingCerts) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.serials)
}
