// main.go owns the command line, the net/http server (TLS, HTTP/2, idle timeout),
// connection statistics (/debug/stats), the request log, routing, the health
// endpoints, /echo, /refuse (413 before reading the body), and graceful shutdown on
// SIGTERM/SIGINT.
//
// goaddon is an addon API server for apigw's interop tests, written with Go's
// standard library only so that the gateway meets a strict, real net/http peer.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// config is what the command line sets.
type config struct {
	listen           string
	certFile         string
	keyFile          string
	clientCAFile     string
	allowedNames     []string
	usernameHeaders  []string
	groupHeaders     []string
	extraPrefixes    []string
	idleTimeout      time.Duration
	bookmarkInterval time.Duration
	// protocols offered by ALPN: "h2", "http/1.1" or both (the default).
	protocols []string
}

// stats are the counters /debug/stats reports.
type stats struct {
	connectionsOpen    atomic.Int64
	connectionsTotal   atomic.Int64
	h2ConnectionsTotal atomic.Int64
	requestsTotal      atomic.Int64
	watchesOpen        atomic.Int64
	execsOpen          atomic.Int64
}

// server is the whole addon: configuration, authenticator, store and counters.
type server struct {
	cfg    config
	caPool *x509.CertPool
	store  *store
	stats  stats

	// shutdown is cancelled when the HTTP server starts shutting down: open
	// watches end their responses and exec sessions send a close frame.
	shutdown context.Context
	// sessions counts exec sessions (hijacked connections, which
	// http.Server.Shutdown neither closes nor waits for).
	sessions sync.WaitGroup
}

// connInfo is attached to every connection's context.
type connInfo struct {
	h2Seen atomic.Bool
}

type connInfoKey struct{}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("goaddon", flag.ContinueOnError)
	var cfg config
	var allowed, users, groups, extras, protocols string
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:0", "address to listen on")
	fs.StringVar(&cfg.certFile, "tls-cert-file", "", "serving certificate (PEM)")
	fs.StringVar(&cfg.keyFile, "tls-private-key-file", "", "serving key (PEM)")
	fs.StringVar(&cfg.clientCAFile, "requestheader-client-ca-file", "", "CA bundle (PEM) for front-proxy client certificates")
	fs.StringVar(&allowed, "requestheader-allowed-names", "", "comma list of allowed client certificate CNs (empty: any from the CA)")
	fs.StringVar(&users, "requestheader-username-headers", "X-Remote-User", "comma list of username headers")
	fs.StringVar(&groups, "requestheader-group-headers", "X-Remote-Group", "comma list of group headers")
	fs.StringVar(&extras, "requestheader-extra-headers-prefix", "X-Remote-Extra-", "comma list of extra header prefixes")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 90*time.Second, "http.Server.IdleTimeout")
	fs.StringVar(&protocols, "protocols", "h2,http/1.1", "comma list of the protocols served (h2, http/1.1): a backend that speaks only one")
	fs.DurationVar(&cfg.bookmarkInterval, "bookmark-interval", 5*time.Second, "interval between watch BOOKMARK events")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if cfg.certFile == "" || cfg.keyFile == "" {
		return cfg, errors.New("-tls-cert-file and -tls-private-key-file are required")
	}
	if cfg.bookmarkInterval <= 0 {
		return cfg, errors.New("-bookmark-interval must be positive")
	}
	cfg.allowedNames = splitList(allowed)
	cfg.usernameHeaders = splitList(users)
	cfg.groupHeaders = splitList(groups)
	cfg.extraPrefixes = splitList(extras)
	cfg.protocols = splitList(protocols)
	for _, p := range cfg.protocols {
		if p != "h2" && p != "http/1.1" {
			return cfg, fmt.Errorf("-protocols: unknown protocol %q (h2, http/1.1)", p)
		}
	}
	if len(cfg.protocols) == 0 {
		return cfg, errors.New("-protocols: at least one of h2, http/1.1")
	}
	return cfg, nil
}

func main() {
	log.SetOutput(os.Stderr)
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "goaddon:", err)
		os.Exit(2)
	}
	os.Exit(run(cfg))
}

func run(cfg config) int {
	pool := x509.NewCertPool()
	if cfg.clientCAFile != "" {
		pem, err := os.ReadFile(cfg.clientCAFile)
		if err != nil {
			log.Printf("reading -requestheader-client-ca-file: %v", err)
			return 1
		}
		if !pool.AppendCertsFromPEM(pem) {
			log.Printf("no certificates in %s", cfg.clientCAFile)
			return 1
		}
	}
	shutdownCtx, cancelShutdown := context.WithCancel(context.Background())
	defer cancelShutdown()
	s := &server{cfg: cfg, caPool: pool, store: newStore(), shutdown: shutdownCtx}
	if cfg.clientCAFile == "" {
		s.caPool = nil
	}

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		log.Printf("listen: %v", err)
		return 1
	}
	srv := &http.Server{
		Handler: s,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			ClientAuth: tls.VerifyClientCertIfGiven,
			// An empty pool (no CA configured) accepts no client certificate.
			ClientCAs: pool,
		},
		IdleTimeout: cfg.idleTimeout,
		ErrorLog:    log.New(os.Stderr, "http: ", log.LstdFlags|log.Lmicroseconds),
		ConnState: func(c net.Conn, state http.ConnState) {
			switch state {
			case http.StateNew:
				s.stats.connectionsOpen.Add(1)
				s.stats.connectionsTotal.Add(1)
			case http.StateClosed:
				s.stats.connectionsOpen.Add(-1)
				// A hijacked connection is counted as open until the exec
				// session closes it.
			}
		},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connInfoKey{}, &connInfo{})
		},
	}
	// net/http offers by ALPN exactly the protocols enabled here; crypto/tls then refuses a
	// client that offers none of them with the no_application_protocol alert.
	var protocols http.Protocols
	for _, p := range cfg.protocols {
		switch p {
		case "h2":
			protocols.SetHTTP2(true)
		case "http/1.1":
			protocols.SetHTTP1(true)
		}
	}
	srv.Protocols = &protocols
	srv.RegisterOnShutdown(cancelShutdown)

	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, cfg.certFile, cfg.keyFile) }()
	fmt.Fprintf(os.Stdout, "LISTENING %s\n", ln.Addr().String())
	_ = os.Stdout.Sync()
	log.Printf("listening on %s (idle timeout %s, bookmark interval %s)", ln.Addr(), cfg.idleTimeout, cfg.bookmarkInterval)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-signals:
		log.Printf("%s: shutting down", sig)
	case err := <-served:
		log.Printf("serve: %v", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Printf("shutdown: %v", err)
	}
	done := make(chan struct{})
	go func() { s.sessions.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		log.Printf("exec sessions did not end in time")
	}
	log.Printf("shut down")
	return 0
}

// recorder remembers the status for the log and keeps Flush and Hijack reachable.
type recorder struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("this connection cannot be hijacked")
	}
	conn, brw, err := h.Hijack()
	if err == nil {
		w.hijacked = true
		w.status = http.StatusSwitchingProtocols
	}
	return conn, brw, err
}

func (s *server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s.stats.requestsTotal.Add(1)
	if r.ProtoMajor == 2 {
		if ci, ok := r.Context().Value(connInfoKey{}).(*connInfo); ok && ci.h2Seen.CompareAndSwap(false, true) {
			s.stats.h2ConnectionsTotal.Add(1)
		}
	}
	w := &recorder{ResponseWriter: rw}
	user := "-"
	defer func() {
		status := w.status
		if status == 0 {
			status = http.StatusOK
		}
		log.Printf("%s %s host=%q uri=%q user=%q status=%d dur=%s", r.Method, r.Proto, r.Host, r.RequestURI, user, status, time.Since(start).Round(time.Microsecond))
	}()

	switch r.URL.Path {
	case "/healthz", "/livez", "/readyz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = io.WriteString(w, "ok")
		return
	case "/debug/stats":
		s.serveStats(w, r)
		return
	}

	id, why := s.authenticate(r)
	if id == nil {
		log.Printf("unauthenticated %s %s: %s", r.Method, r.RequestURI, why)
		writeStatus(w, r, errUnauthorized())
		return
	}
	user = id.user
	h := w.Header()
	h.Set("X-Interop-Host", r.Host)
	h.Set("X-Interop-Request-Uri", r.RequestURI)
	h.Set("X-Interop-Proto", r.Proto)
	h.Set("X-Interop-User", id.user)
	s.route(w, r, id)
}

func (s *server) route(w *recorder, r *http.Request, id *identity) {
	p := r.URL.Path
	switch {
	// Also under the group version, where front proxies that forward only /apis/<group>/<version>
	// (kube-aggregator) reach it.
	case p == "/echo" || strings.HasPrefix(p, "/echo/") || p == apiPrefix+"/echo":
		s.serveEcho(w, r, id)
	// Judges the upload by its Content-Length alone and answers before reading a byte of
	// it, as a server with a body limit may: the early answer a front proxy must deliver
	// while its client is still uploading.
	case p == apiPrefix+"/refuse":
		writeStatus(w, r, errTooLarge())
	case p == "/version":
		if !readOnly(w, r) {
			return
		}
		writeJSON(w, r, http.StatusOK, map[string]string{
			"major": "1", "minor": "33", "gitVersion": "v1.33.0-goaddon", "goVersion": goVersion(),
			"compiler": "gc", "platform": "linux/amd64", "gitCommit": "", "gitTreeState": "clean", "buildDate": "",
		})
	case strings.HasPrefix(p, apiPrefix+"/"):
		s.serveResource(w, r, id, strings.TrimPrefix(p, apiPrefix+"/"))
	case s.serveDiscovery(w, r):
	default:
		writeStatus(w, r, errNotFoundPath())
	}
}

type statsReply struct {
	ConnectionsOpen    int64 `json:"connections_open"`
	ConnectionsTotal   int64 `json:"connections_total"`
	H2ConnectionsTotal int64 `json:"h2_connections_total"`
	RequestsTotal      int64 `json:"requests_total"`
	WatchesOpen        int64 `json:"watches_open"`
	ExecsOpen          int64 `json:"execs_open"`
}

func (s *server) serveStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, statsReply{
		ConnectionsOpen:    s.stats.connectionsOpen.Load(),
		ConnectionsTotal:   s.stats.connectionsTotal.Load(),
		H2ConnectionsTotal: s.stats.h2ConnectionsTotal.Load(),
		RequestsTotal:      s.stats.requestsTotal.Load(),
		WatchesOpen:        s.stats.watchesOpen.Load(),
		ExecsOpen:          s.stats.execsOpen.Load(),
	})
}

type echoReply struct {
	Method     string              `json:"method"`
	Proto      string              `json:"proto"`
	Host       string              `json:"host"`
	RequestURI string              `json:"requestURI"`
	User       string              `json:"user"`
	Groups     []string            `json:"groups"`
	Extra      map[string][]string `json:"extra"`
	Headers    map[string][]string `json:"headers"`
	BodyBytes  int64               `json:"bodyBytes"`
}

func (s *server) serveEcho(w http.ResponseWriter, r *http.Request, id *identity) {
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		writeStatus(w, r, errBadRequest("reading the request body: "+err.Error()))
		return
	}
	headers := map[string][]string{}
	for k, v := range r.Header {
		headers[k] = append([]string{}, v...)
	}
	writeJSON(w, r, http.StatusOK, echoReply{
		Method: r.Method, Proto: r.Proto, Host: r.Host, RequestURI: r.RequestURI,
		User: id.user, Groups: id.groups, Extra: id.extra, Headers: headers, BodyBytes: n,
	})
}

// readOnly answers 405 for anything but GET and HEAD; it reports whether to go on.
func readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	writeStatus(w, r, errMethodNotAllowed())
	return false
}
