package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Answer is what one door answered to one row, before normalization; Err when no answer came.
type Answer struct {
	Status int
	Type   string
	Body   []byte
	Err    string
}

// The most of a body kept (OpenAPI v2 of kube-apiserver is a few MiB).
const maxBody = 64 << 20

// clients holds one HTTP client per (user, protocol).
type clients struct {
	pki   string
	roots *x509.CertPool
	cache map[string]*http.Client
}

func newClients(pki string) *clients {
	roots := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil || !roots.AppendCertsFromPEM(ca) {
		fmt.Fprintf(os.Stderr, "differ: the cluster CA in %s: %v\n", pki, err)
		os.Exit(2)
	}
	return &clients{pki: pki, roots: roots, cache: map[string]*http.Client{}}
}

func (c *clients) get(user, proto string) (*http.Client, error) {
	key := user + "/" + proto
	if cl, ok := c.cache[key]; ok {
		return cl, nil
	}
	cfg := &tls.Config{RootCAs: c.roots, MinVersion: tls.VersionTLS12}
	if user != "anonymous" {
		pair, err := tls.LoadX509KeyPair(filepath.Join(c.pki, user+".crt"), filepath.Join(c.pki, user+".key"))
		if err != nil {
			return nil, fmt.Errorf("user %s: %w", user, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	tr := &http.Transport{TLSClientConfig: cfg, DisableCompression: true}
	switch proto {
	case "2":
		tr.ForceAttemptHTTP2 = true
	case "1.1":
		cfg.NextProtos = []string{"http/1.1"}
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	default:
		return nil, fmt.Errorf("proto %q is not 1.1 or 2", proto)
	}
	cl := &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c.cache[key] = cl
	return cl, nil
}

// send makes one request at base and reads the whole answer.
func (c *clients) send(base string, r Request, vars map[string]string) Answer {
	user, proto, method := r.User, r.Proto, r.Method
	if user == "" {
		user = "admin"
	}
	if proto == "" {
		proto = "2"
	}
	if method == "" {
		method = http.MethodGet
	}
	cl, err := c.get(user, proto)
	if err != nil {
		return Answer{Err: err.Error()}
	}
	var body io.Reader
	switch {
	case r.BodySize > 0:
		body = bytes.NewReader(padded(r.BodySize))
	case r.Body != "":
		body = strings.NewReader(expand(r.Body, vars))
	}
	req, err := http.NewRequest(method, base+expand(r.Path, vars), body)
	if err != nil {
		return Answer{Err: err.Error()}
	}
	for k, v := range r.Headers {
		req.Header.Set(k, expand(v, vars))
	}
	if r.HeaderSize > 0 {
		req.Header.Set("X-Padding", strings.Repeat("x", r.HeaderSize))
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.Do(req)
	if err != nil {
		return Answer{Err: err.Error()}
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	a := Answer{Status: resp.StatusCode, Type: resp.Header.Get("Content-Type"), Body: got}
	if err != nil {
		a.Err = "reading the body: " + err.Error()
	}
	return a
}

// padded is a JSON object of exactly n bytes (at least 16).
func padded(n int) []byte {
	head, tail := []byte(`{"pad":"`), []byte(`"}`)
	out := make([]byte, 0, n)
	out = append(out, head...)
	for len(out) < n-len(tail) {
		out = append(out, 'x')
	}
	return append(out, tail...)
}

// runSetup sends the setup requests for door d straight to admin; any answer of 400 or more
// but 409 (already there, from an earlier run) fails.
func runSetup(c *clients, admin string, d Door, setup []Request) error {
	vars := map[string]string{"ns": d.Namespace}
	for i, r := range setup {
		a := c.send(admin, r, vars)
		if a.Err != "" {
			return fmt.Errorf("setup[%d] %s %s: %s", i, r.Method, r.Path, a.Err)
		}
		if a.Status >= 400 && a.Status != http.StatusConflict {
			return fmt.Errorf("setup[%d] %s %s: %d %s", i, r.Method, r.Path, a.Status, a.Body)
		}
	}
	return nil
}

// runRows sends every row through door d in order, keeping captures for later rows.
func runRows(c *clients, d Door, rows []Row, only string) []Answer {
	vars := map[string]string{"ns": d.Namespace}
	out := make([]Answer, len(rows))
	for i, r := range rows {
		if only != "" && !strings.Contains(r.Name, only) {
			continue
		}
		out[i] = c.send(d.URL, r.Request, vars)
		for name, pointer := range r.Capture {
			var v any
			if json.Unmarshal(out[i].Body, &v) == nil {
				if s, ok := lookup(v, pointer).(string); ok {
					vars[name] = s
				}
			}
		}
	}
	return out
}

// lookup is the value at a JSON pointer, or nil.
func lookup(v any, pointer string) any {
	for _, seg := range strings.Split(pointer, "/")[1:] {
		seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
		switch t := v.(type) {
		case map[string]any:
			v = t[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(t) {
				return nil
			}
			v = t[i]
		default:
			return nil
		}
	}
	return v
}
