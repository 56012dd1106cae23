// load.go owns the workers: what each kind of load does once, and how it decides that it
// succeeded. Each worker repeats its one operation until the run ends.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// The Go addon's resource; its APIService is never churned.
var widgets = schema.GroupVersionResource{Group: "interop.example.com", Version: "v1", Resource: "widgets"}

// How much each operation moves.
const (
	uploadMin, uploadMax = 16 << 10, 512 << 10
	execMin, execMax     = 4 << 10, 128 << 10
	dropListMiB          = 16        // the streamed list a dropping client asks for
	dropAfter            = 256 << 10 // and the bytes it reads before it goes away
	dropWatchWait        = 10 * time.Second
)

type worker struct {
	every time.Duration // pause between two operations
	run   func(ctx context.Context)
}

type load struct {
	ns     string
	tally  *tally
	h2, h1 clients
	// corpus is random text; payloads are slices of it.
	corpus string
}

func newLoad(ns string, events io.Writer, h2, h1 *rest.Config) (*load, error) {
	l := &load{ns: ns, tally: newTally(events, "list", "watch", "upload", "exec", "drop", "discovery")}
	var err error
	if l.h2, err = newClients(h2); err != nil {
		return nil, err
	}
	if l.h1, err = newClients(h1); err != nil {
		return nil, err
	}
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, uploadMax)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	l.corpus = string(b)
	return l, nil
}

// payload is a random slice of the corpus of lo to hi bytes.
func (l *load) payload(lo, hi int) string {
	n := lo + rand.IntN(hi-lo+1)
	off := rand.IntN(len(l.corpus) - n + 1)
	return l.corpus[off : off+n]
}

// workers: each kind over both transports where it matters; exec dials its own WebSocket.
func (l *load) workers() []worker {
	both := []clients{l.h2, l.h1}
	var ws []worker
	for i := range 3 {
		c := both[i%2]
		ws = append(ws, worker{250 * time.Millisecond, func(ctx context.Context) { l.list(ctx, c) }})
	}
	for i := range 4 {
		c := both[i%2]
		ws = append(ws, worker{time.Second, func(ctx context.Context) { l.watch(ctx, c) }})
	}
	for i := range 2 {
		c, n := both[i%2], 0
		ws = append(ws, worker{200 * time.Millisecond, func(ctx context.Context) {
			n++
			l.upload(ctx, c, fmt.Sprintf("soak-upload-%d-%d", i, n))
		}})
	}
	for i := range 2 {
		name := fmt.Sprintf("soak-exec-%d", i)
		ws = append(ws, worker{200 * time.Millisecond, func(ctx context.Context) { l.exec(ctx, l.h2, name) }})
	}
	for i := range 2 {
		c, n := both[i%2], 0
		ws = append(ws, worker{500 * time.Millisecond, func(ctx context.Context) {
			n++
			if n%2 == 0 {
				l.dropList(ctx, c)
			} else {
				l.dropWatch(ctx, c)
			}
		}})
	}
	ws = append(ws, worker{time.Second, func(ctx context.Context) { l.discover(ctx, l.h2) }})
	return ws
}

// failed records err for kind unless it is the end of the run cancelling the operation.
func (l *load) failed(ctx context.Context, kind string, err error) {
	if !ending(ctx) {
		l.tally.fail(kind, err)
	}
}

// ending is true once the run's deadline has come: also in the instant before ctx says so,
// when a connection deadline set from ctx's (the WebSocket dialer sets one for its handshake)
// has already failed an operation with "i/o timeout".
func ending(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

func (l *load) list(ctx context.Context, c clients) {
	if _, err := c.dyn.Resource(widgets).Namespace(l.ns).List(ctx, metav1.ListOptions{}); err != nil {
		l.failed(ctx, "list", err)
		return
	}
	l.tally.ok("list")
}

// watch holds one watch until the server ends it (an error unless the run is over).
func (l *load) watch(ctx context.Context, c clients) {
	w, err := c.dyn.Resource(widgets).Namespace(l.ns).Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true})
	if err != nil {
		l.failed(ctx, "watch", err)
		return
	}
	defer w.Stop()
	l.tally.ok("watch")
	events := 0
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			l.failed(ctx, "watch", apierrors.FromObject(ev.Object))
			return
		}
		events++
		l.tally.note("watch events")
	}
	if !ending(ctx) {
		l.tally.failAs("watch", classWatchEnded, fmt.Sprintf("the watch ended after %d events", events))
	}
}

func widget(name, payload string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "interop.example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"color": "blue", "payload": payload},
	}}
}

func payloadOf(u *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(u.Object, "spec", "payload")
	return s
}

// upload creates a widget with a large body, replaces it with another, and deletes it; the
// answers must carry the bodies sent.
func (l *load) upload(ctx context.Context, c clients, name string) {
	api := c.dyn.Resource(widgets).Namespace(l.ns)
	sent := l.payload(uploadMin, uploadMax)
	got, err := api.Create(ctx, widget(name, sent), metav1.CreateOptions{})
	if err != nil {
		l.failed(ctx, "upload", err)
		return
	}
	if payloadOf(got) != sent {
		l.tally.failAs("upload", "", fmt.Sprintf("create of %s answered %d payload bytes for %d sent", name, len(payloadOf(got)), len(sent)))
		return
	}
	sent = l.payload(uploadMin, uploadMax)
	if err := unstructured.SetNestedField(got.Object, sent, "spec", "payload"); err != nil {
		panic(err)
	}
	if got, err = api.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		l.failed(ctx, "upload", err)
		return
	}
	if payloadOf(got) != sent {
		l.tally.failAs("upload", "", fmt.Sprintf("update of %s answered %d payload bytes for %d sent", name, len(payloadOf(got)), len(sent)))
		return
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		l.failed(ctx, "upload", err)
		return
	}
	l.tally.ok("upload")
}

// exec runs cat in the widget over client-go's WebSocket executor: stdout must be stdin.
func (l *load) exec(ctx context.Context, c clients, name string) {
	// A restarted backend has lost the widget: make it again when missing.
	_, err := c.dyn.Resource(widgets).Namespace(l.ns).Create(ctx, widget(name, ""), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		l.failed(ctx, "exec", err)
		return
	}
	q := url.Values{"command": {"cat"}, "stdin": {"true"}, "stdout": {"true"}}
	target := fmt.Sprintf("%s/apis/%s/%s/namespaces/%s/%s/%s/exec?%s",
		c.cfg.Host, widgets.Group, widgets.Version, l.ns, widgets.Resource, name, q.Encode())
	ex, err := remotecommand.NewWebSocketExecutor(c.cfg, "GET", target)
	if err != nil {
		l.failed(ctx, "exec", err)
		return
	}
	in := l.payload(execMin, execMax)
	var out bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(in), Stdout: &out}); err != nil {
		l.failed(ctx, "exec", err)
		return
	}
	if out.String() != in {
		l.tally.failAs("exec", "", fmt.Sprintf("cat gave back %d bytes for %d sent (or other bytes)", out.Len(), len(in)))
		return
	}
	l.tally.ok("exec")
}

// dropList asks for a big streamed list and goes away after its first bytes.
func (l *load) dropList(ctx context.Context, c clients) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body, err := c.disc.RESTClient().Get().
		AbsPath("/apis", widgets.Group, widgets.Version, "namespaces", l.ns, widgets.Resource).
		Param("bigListMiB", fmt.Sprint(dropListMiB)).Stream(ctx)
	if err != nil {
		l.failed(ctx, "drop", err)
		return
	}
	defer body.Close()
	if _, err := io.CopyN(io.Discard, body, dropAfter); err != nil {
		l.failed(ctx, "drop", err)
		return
	}
	l.tally.ok("drop")
}

// dropWatch opens a watch and goes away at its first event (an object, or a bookmark).
func (l *load) dropWatch(ctx context.Context, c clients) {
	w, err := c.dyn.Resource(widgets).Namespace(l.ns).Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true})
	if err != nil {
		l.failed(ctx, "drop", err)
		return
	}
	defer w.Stop()
	select {
	case ev, open := <-w.ResultChan():
		switch {
		case !open:
			if !ending(ctx) {
				l.tally.failAs("drop", classWatchEnded, "the watch ended before its first event")
			}
		case ev.Type == watch.Error:
			l.failed(ctx, "drop", apierrors.FromObject(ev.Object))
		default:
			l.tally.ok("drop")
		}
	case <-time.After(dropWatchWait):
		l.tally.failAs("drop", "", fmt.Sprintf("no watch event (not even a bookmark) within %s", dropWatchWait))
	case <-ctx.Done():
	}
}

// discover asks for every group's resources, as kubectl does. Group versions other than the
// addon's come and go with the churn; their failures are counted, not errors.
func (l *load) discover(ctx context.Context, c clients) {
	stable := widgets.GroupVersion()
	_, lists, err := c.disc.ServerGroupsAndResources()
	var partial *discovery.ErrGroupDiscoveryFailed
	if errors.As(err, &partial) {
		for gv, gerr := range partial.Groups {
			switch {
			case gv != stable:
				l.tally.note("discovery: churned group version failed")
			case errors.As(gerr, &discovery.StaleGroupVersionError{}):
				// apigw serves the last resources it saw as Stale while the backend is down.
				l.tally.failAs("discovery", classUnavailable, gerr.Error())
				return
			default:
				l.failed(ctx, "discovery", gerr)
				return
			}
		}
	} else if err != nil {
		l.failed(ctx, "discovery", err)
		return
	}
	if !hasResource(lists, stable, widgets.Resource) {
		l.tally.failAs("discovery", "", fmt.Sprintf("%s %s missing from discovery", stable, widgets.Resource))
		return
	}
	l.tally.ok("discovery")
}

func hasResource(lists []*metav1.APIResourceList, gv schema.GroupVersion, resource string) bool {
	for _, list := range lists {
		if list != nil && list.GroupVersion == gv.String() {
			for _, r := range list.APIResources {
				if r.Name == resource {
					return true
				}
			}
		}
	}
	return false
}
