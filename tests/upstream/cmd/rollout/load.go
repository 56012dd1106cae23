// load.go owns the clients and what they saw: readers listing flunders, creators creating and
// deleting them (a request with a body), a watcher resuming from its last resourceVersion as
// client-go's reflector does, and a WatchList client (sendInitialEvents). Every operation is
// counted under the phase it ended in, with its latency; every answer of 400 or more and
// every transport error is also counted as it crossed the wire, so what client-go retried by
// itself (a 429 with Retry-After) shows too. Watches are read as raw event streams, so how each
// one ended (after a bookmark, cleanly, cut, or with an error event) is known.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

var flunders = schema.GroupVersionResource{Group: "wardle.example.com", Version: "v1alpha1", Resource: "flunders"}

const (
	phaseSteady = "steady"
	phaseRoll   = "roll"
	phaseAfter  = "after"
	phaseKill   = "kill"
	phaseEnd    = "end"
	// Flunders every list returns.
	listed = 20
	// An operation not answered within this is counted as hung.
	opTimeout = 30 * time.Second
	examples  = 4
)

// opStats is one operation in one phase.
type opStats struct {
	OK      int            `json:"ok"`
	Failed  map[string]int `json:"failed"`
	latency []time.Duration
	P50     float64 `json:"p50Ms"`
	P99     float64 `json:"p99Ms"`
}

// loadResult is what one door's clients saw.
type loadResult struct {
	// Ops is by operation, then phase.
	Ops map[string]map[string]*opStats `json:"ops"`
	// Wire counts answers of 400 or more and transport errors as they crossed the wire, by
	// phase and class, including those client-go then retried.
	Wire map[string]map[string]int `json:"wire"`
	// WatchEnds counts how the watches ended, by phase and kind.
	WatchEnds map[string]map[string]int `json:"watchEnds"`
	// Events is the number of watch events received.
	Events   int                 `json:"events"`
	Examples map[string][]string `json:"examples"`
}

type load struct {
	door  door
	dyn   *dynamic.DynamicClient
	http  *http.Client
	phase atomic.Value
	mu    sync.Mutex
	res   loadResult
}

func newLoad(d door) (*load, error) {
	l := &load{door: d, res: loadResult{
		Ops: map[string]map[string]*opStats{}, Wire: map[string]map[string]int{},
		WatchEnds: map[string]map[string]int{}, Examples: map[string][]string{},
	}}
	l.phase.Store(phaseSteady)
	cfg := rest.CopyConfig(d.cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return wire{rt, l} })
	var err error
	if l.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if l.http, err = rest.HTTPClientFor(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *load) setPhase(p string) { l.phase.Store(p) }
func (l *load) current() string   { return l.phase.Load().(string) }

// seed makes sure the listed flunders exist.
func (l *load) seed(ctx context.Context) error {
	for i := range listed {
		_, err := l.dyn.Resource(flunders).Namespace(loadNamespace).Create(ctx, flunder(fmt.Sprintf("listed-%d", i)), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func flunder(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app.kubernetes.io/part-of": "apigw-rollout"}},
		"spec":     map[string]any{"reference": "", "referenceType": ""},
	}}
}

// start runs the workers until ctx ends; the channel closes when they all stopped.
func (l *load) start(ctx context.Context, o options) <-chan struct{} {
	var wg sync.WaitGroup
	loop := func(f func(ctx context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				f(ctx)
			}
		}()
	}
	for range o.readers {
		loop(func(ctx context.Context) {
			l.op(ctx, "list", func(ctx context.Context) error {
				_, err := l.dyn.Resource(flunders).Namespace(loadNamespace).List(ctx, metav1.ListOptions{})
				return err
			})
		})
	}
	for w := range o.creators {
		n := 0
		loop(func(ctx context.Context) {
			n++
			name := fmt.Sprintf("%s-%d-%d", l.door.name, w, n)
			created := l.op(ctx, "create", func(ctx context.Context) error {
				_, err := l.dyn.Resource(flunders).Namespace(loadNamespace).Create(ctx, flunder(name), metav1.CreateOptions{})
				return err
			})
			if created {
				l.op(ctx, "delete", func(ctx context.Context) error {
					return l.dyn.Resource(flunders).Namespace(loadNamespace).Delete(ctx, name, metav1.DeleteOptions{})
				})
			}
		})
	}
	w := &watcher{l: l}
	loop(w.next)
	wl := &watcher{l: l, watchList: true}
	loop(wl.next)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// op runs one operation and counts it under the phase it ended in; true when it succeeded.
func (l *load) op(ctx context.Context, name string, f func(context.Context) error) bool {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	started := time.Now()
	err := f(octx)
	took := time.Since(started)
	phase := l.current()
	if ctx.Err() != nil || phase == phaseEnd {
		return err == nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats(name, phase)
	if err == nil {
		s.OK++
		s.latency = append(s.latency, took)
		return true
	}
	class := classify(err)
	if octx.Err() != nil {
		class = "hung (no answer in 30 s)"
	}
	s.Failed[class]++
	l.example(name+" "+phase+" "+class, err.Error())
	pause(ctx, 100*time.Millisecond) // a failing client does not spin
	return false
}

func (l *load) stats(name, phase string) *opStats {
	byPhase := l.res.Ops[name]
	if byPhase == nil {
		byPhase = map[string]*opStats{}
		l.res.Ops[name] = byPhase
	}
	s := byPhase[phase]
	if s == nil {
		s = &opStats{Failed: map[string]int{}}
		byPhase[phase] = s
	}
	return s
}

func (l *load) example(key, msg string) {
	if len(l.res.Examples[key]) < examples {
		l.res.Examples[key] = append(l.res.Examples[key], msg)
	}
}

func (l *load) count(m map[string]map[string]int, phase, class string) {
	if phase == phaseEnd {
		return
	}
	if m[phase] == nil {
		m[phase] = map[string]int{}
	}
	m[phase][class]++
}

func (l *load) result() loadResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, byPhase := range l.res.Ops {
		for _, s := range byPhase {
			s.P50, s.P99 = percentile(s.latency, 0.50), percentile(s.latency, 0.99)
		}
	}
	return l.res
}

// classify names an error as a client would report it: the status of an answer, or the kind
// of transport failure.
func classify(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		return fmt.Sprintf("%d %s", s.Code, s.Reason)
	}
	return transportClass(err)
}

func transportClass(err error) string {
	msg := err.Error()
	for _, c := range []struct{ mark, class string }{
		{"connection reset by peer", "connection reset"},
		{"connection refused", "connection refused"},
		{"unexpected EOF", "unexpected EOF"},
		{"stream error", "HTTP/2 stream reset"},
		{"GOAWAY", "HTTP/2 GOAWAY"},
		{"broken pipe", "broken pipe"},
		{"deadline exceeded", "hung (no answer in 30 s)"},
		{"Client.Timeout", "hung (no answer in 30 s)"},
		{"EOF", "EOF"},
	} {
		if strings.Contains(msg, c.mark) {
			return c.class
		}
	}
	return "other transport error"
}

// wire counts what crosses the wire below client-go's own retries.
type wire struct {
	next http.RoundTripper
	l    *load
}

func (w wire) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(req)
	phase := w.l.current()
	var class string
	switch {
	case err != nil && req.Context().Err() == nil:
		class = transportClass(err)
	case err == nil && resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusConflict:
		class = fmt.Sprint(resp.StatusCode)
		if resp.Header.Get("Retry-After") != "" {
			class += " with Retry-After"
		}
	}
	if class != "" {
		w.l.mu.Lock()
		w.l.count(w.l.res.Wire, phase, class)
		if err != nil {
			w.l.example("wire "+class, err.Error())
		}
		w.l.mu.Unlock()
	}
	return resp, err
}

// watcher is one client watching flunders, resuming as client-go's reflector does: from the
// last resourceVersion it saw, listing again (or, for a WatchList client, asking for the
// initial events again) only when told the version is too old.
type watcher struct {
	l         *load
	watchList bool
	rv        string
}

type watchEvent struct {
	Type   string `json:"type"`
	Object struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
		Code int `json:"code"`
	} `json:"object"`
}

// next opens one watch and reads it to its end, counting how it ended.
func (w *watcher) next(ctx context.Context) {
	l := w.l
	kind := "watch"
	if w.watchList {
		kind = "watchlist"
	}
	if w.rv == "" && !w.watchList {
		ok := l.op(ctx, "list for watch", func(ctx context.Context) error {
			list, err := l.dyn.Resource(flunders).Namespace(loadNamespace).List(ctx, metav1.ListOptions{})
			if err == nil {
				w.rv = list.GetResourceVersion()
			}
			return err
		})
		if !ok {
			return
		}
	}
	q := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}}
	if w.watchList && w.rv == "" {
		q.Set("sendInitialEvents", "true")
		q.Set("resourceVersionMatch", "NotOlderThan")
		q.Set("resourceVersion", "")
	} else {
		q.Set("resourceVersion", w.rv)
	}
	path := fmt.Sprintf("/apis/%s/%s/namespaces/%s/%s", flunders.Group, flunders.Version, loadNamespace, flunders.Resource)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.door.cfg.Host+path+"?"+q.Encode(), nil)
	if err != nil {
		return
	}
	req.Header.Set("Accept", "application/json")
	phase := l.current()
	resp, err := l.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			w.end(phase, kind, "not opened: "+transportClass(err), err.Error())
			pause(ctx, 100*time.Millisecond)
		}
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		w.end(phase, kind, fmt.Sprintf("not opened: %d", resp.StatusCode), string(body))
		pause(ctx, 100*time.Millisecond)
		return
	}
	dec := json.NewDecoder(resp.Body)
	lastBookmark := false
	for {
		var ev watchEvent
		err := dec.Decode(&ev)
		phase = l.current()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, io.EOF) {
			if lastBookmark {
				w.end(phase, kind, "ended after a bookmark", "")
			} else {
				w.end(phase, kind, "ended cleanly, no bookmark", "")
			}
			return
		}
		if err != nil {
			w.end(phase, kind, "cut: "+transportClass(err), err.Error())
			return
		}
		switch ev.Type {
		case "ERROR":
			if ev.Object.Code == http.StatusGone {
				w.rv = ""
				w.end(phase, kind, "410 Gone: lists again", "")
			} else {
				w.end(phase, kind, fmt.Sprintf("error event %d", ev.Object.Code), "")
			}
			return
		case "BOOKMARK":
			lastBookmark = true
		default:
			lastBookmark = false
			l.mu.Lock()
			l.res.Events++
			l.mu.Unlock()
		}
		if rv := ev.Object.Metadata.ResourceVersion; rv != "" {
			w.rv = rv
		}
	}
}

func (w *watcher) end(phase, kind, how, msg string) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	w.l.count(w.l.res.WatchEnds, phase, kind+": "+how)
	if msg != "" {
		w.l.example(kind+" "+how, msg)
	}
}
