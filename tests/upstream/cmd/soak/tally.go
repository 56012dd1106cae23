// tally.go owns the outcomes: counts per kind of load, the class of every error (what in the
// churn could cause it), and the events file the orchestrator checks those classes against.
package main

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/streaming/pkg/httpstream"
)

// The classes of errors a backend restart explains. Anything else is unclassified, and the
// orchestrator also refuses a classified error that did not happen near a restart.
const (
	// apigw answered 503: the backend was unreachable or its APIService unavailable.
	classUnavailable = "unavailable"
	// 404 for an object this worker made: the restarted backend's store is empty.
	classLost = "lost"
	// A response, watch or exec session cut while it streamed: the backend went away.
	classCut = "cut"
	// A watch the server ended before the client stopped it.
	classWatchEnded = "watch-ended"
)

// cutMarks are the messages of a stream cut under client-go: Go's HTTP/1.1 and HTTP/2
// transports, and gorilla/websocket under remotecommand. A broken pipe is an upload whose
// body the gateway stopped reading because it answered first (a 503 while the backend was
// down) and closed the connection.
var cutMarks = []string{
	"unexpected EOF",
	"stream error: stream ID",
	"connection reset by peer",
	"write: broken pipe",
	"websocket: close 1006",
	"websocket: close 1001",
}

func classify(err error) string {
	var upgrade *httpstream.UpgradeFailureError
	if errors.As(err, &upgrade) {
		err = upgrade.Cause
	}
	switch {
	case apierrors.IsServiceUnavailable(err):
		return classUnavailable
	case apierrors.IsNotFound(err):
		return classLost
	case errors.Is(err, io.ErrUnexpectedEOF):
		return classCut
	}
	for _, mark := range cutMarks {
		if strings.Contains(err.Error(), mark) {
			return classCut
		}
	}
	return ""
}

// event is one line of the events file.
type event struct {
	Time    float64 `json:"t"`
	Kind    string  `json:"kind"`
	Class   string  `json:"class"`
	Message string  `json:"message"`
}

type counts struct {
	OK     int            `json:"ok"`
	Errors map[string]int `json:"errors"`
}

const examplesPerClass = 3

type tally struct {
	mu       sync.Mutex
	out      *json.Encoder
	kinds    map[string]*counts
	examples map[string][]string
	notes    map[string]int
}

func newTally(w io.Writer, kinds ...string) *tally {
	t := &tally{out: json.NewEncoder(w), kinds: map[string]*counts{}, examples: map[string][]string{}, notes: map[string]int{}}
	for _, k := range kinds {
		t.kinds[k] = &counts{Errors: map[string]int{}}
	}
	return t
}

func (t *tally) ok(kind string) {
	t.mu.Lock()
	t.kinds[kind].OK++
	t.mu.Unlock()
}

// note counts something worth reporting that is neither a success nor an error.
func (t *tally) note(what string) {
	t.mu.Lock()
	t.notes[what]++
	t.mu.Unlock()
}

// fail records an error of kind, classifying it.
func (t *tally) fail(kind string, err error) { t.failAs(kind, classify(err), err.Error()) }

// failAs records an error whose class the caller knows ("" for one nothing explains).
func (t *tally) failAs(kind, class, message string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name := class
	if name == "" {
		name = "unclassified"
	}
	t.kinds[kind].Errors[name]++
	if len(t.examples[name]) < examplesPerClass || class == "" && len(t.examples[name]) < 20 {
		t.examples[name] = append(t.examples[name], kind+": "+message)
	}
	now := float64(time.Now().UnixNano()) / 1e9
	_ = t.out.Encode(event{Time: now, Kind: kind, Class: class, Message: message})
}

func (t *tally) summary() map[string]any {
	t.mu.Lock()
	defer t.mu.Unlock()
	return map[string]any{"kinds": t.kinds, "examples": t.examples, "notes": t.notes}
}
