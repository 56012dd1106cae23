// watch.go owns watches: newline-delimited JSON events flushed one by one,
// synthetic ADDED events for resourceVersion "" or "0", resuming from the event
// history (410 Expired as an ERROR event when it is gone), BOOKMARK events,
// sendInitialEvents, selectors (an object leaving the selection is DELETED),
// timeoutSeconds, and ending cleanly when the client leaves or the server stops.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// subscribe registers a watcher and returns the events to send first and the
// resourceVersion they bring the watcher up to, all under the store lock so
// that nothing falls between them and the live events.
func (st *store) subscribe(rv string, f filter) ([]event, *watcher, uint64, *statusError) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var initial []event
	if rv == "" || rv == "0" {
		for _, o := range st.matchingLocked(f) {
			initial = append(initial, event{typ: "ADDED", obj: o})
		}
	} else {
		n, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return nil, nil, 0, errBadRequest(fmt.Sprintf("invalid resource version %q", rv))
		}
		if n < st.historyStart {
			return nil, nil, 0, errExpired(fmt.Sprintf("too old resource version: %d (%d)", n, st.historyStart+1))
		}
		for _, e := range st.history {
			if e.rv > n {
				initial = append(initial, e)
			}
		}
	}
	w := &watcher{ch: make(chan event, 4*historySize)}
	st.watchers[w] = struct{}{}
	return initial, w, st.rv, nil
}

func (st *store) unsubscribe(w *watcher) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.watchers[w]; ok {
		delete(st.watchers, w)
		close(w.ch)
	}
}

// watchEvent is one line of a watch, fields in kube's order.
type watchEvent struct {
	Type   string      `json:"type"`
	Object interface{} `json:"object"`
}

// seen turns a store event into what a watch with filter f sees, if anything.
func (f filter) seen(e event) (string, object, bool) {
	now := f.matches(e.obj)
	switch e.typ {
	case "MODIFIED":
		before := e.prev != nil && f.matches(e.prev)
		switch {
		case now && before:
			return "MODIFIED", e.obj, true
		case now:
			return "ADDED", e.obj, true
		case before:
			return "DELETED", e.obj, true
		}
		return "", nil, false
	default:
		return e.typ, e.obj, now
	}
}

func (s *server) serveWatch(w http.ResponseWriter, r *http.Request, q url.Values, ns, name string) {
	out, serr := negotiateOutput(r)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	f, serr := parseFilter(q, ns, name)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	includeObject := q.Get("includeObject")
	if out == outTable {
		if _, err := table(nil, includeObject, false); err != nil {
			writeStatus(w, r, err)
			return
		}
	}
	bookmarks, _ := strconv.ParseBool(q.Get("allowWatchBookmarks"))
	sendInitial, _ := strconv.ParseBool(q.Get("sendInitialEvents"))
	rv := q.Get("resourceVersion")
	if sendInitial {
		if !bookmarks {
			writeStatus(w, r, errInvalid("", "allowWatchBookmarks", "Required value: allowWatchBookmarks must be set to true when sendInitialEvents is true"))
			return
		}
		rv = ""
	}
	ctx := r.Context()
	if t := q.Get("timeoutSeconds"); t != "" {
		secs, err := strconv.ParseInt(t, 10, 64)
		if err != nil || secs < 0 {
			writeStatus(w, r, errBadRequest(fmt.Sprintf("invalid timeoutSeconds %q", t)))
			return
		}
		if secs > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(secs)*time.Second)
			defer cancel()
		}
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeStatus(w, r, &statusError{code: 500, reason: "InternalError", message: "streaming is not supported"})
		return
	}

	initial, watch, lastRV, serr := s.store.subscribe(rv, f)
	expired := serr
	if serr != nil && serr.code != http.StatusGone {
		writeStatus(w, r, serr)
		return
	}
	if watch != nil {
		defer s.store.unsubscribe(watch)
	}
	s.stats.watchesOpen.Add(1)
	defer s.stats.watchesOpen.Add(-1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	headers := true
	send := func(typ string, o interface{}) bool {
		if eo, isObject := o.(object); isObject && (typ == "ADDED" || typ == "MODIFIED" || typ == "DELETED") {
			switch out {
			case outTable:
				t, _ := table([]object{eo}, includeObject, headers)
				t["metadata"] = obj("resourceVersion", metaString(eo, "resourceVersion"))
				headers = false
				o = t
			case outMeta:
				o = partialMetadata(eo)
			}
		}
		line, err := json.Marshal(watchEvent{Type: typ, Object: o})
		if err != nil {
			return false
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	bookmark := func(rv uint64, annotations map[string]interface{}) bool {
		meta := obj("resourceVersion", strconv.FormatUint(rv, 10))
		if annotations != nil {
			meta["annotations"] = annotations
		}
		return send("BOOKMARK", obj("kind", "Widget", "apiVersion", apiVersion, "metadata", meta))
	}

	if expired != nil {
		send("ERROR", expired.object())
		return
	}
	for _, e := range initial {
		if typ, o, ok := f.seen(e); ok && !send(typ, o) {
			return
		}
	}
	if sendInitial && !bookmark(lastRV, obj("k8s.io/initial-events-end", "true")) {
		return
	}
	var tick <-chan time.Time
	if bookmarks {
		ticker := time.NewTicker(s.cfg.bookmarkInterval)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.shutdown.Done():
			return
		case e, open := <-watch.ch:
			if !open {
				// Fell behind; the client lists and watches again, as with kube.
				return
			}
			lastRV = e.rv
			if typ, o, ok := f.seen(e); ok && !send(typ, o) {
				return
			}
		case <-tick:
			if !bookmark(lastRV, nil) {
				return
			}
		}
	}
}
