package main

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// Table is the file: setup requests, then the rows compared.
type Table struct {
	Setup []Request `json:"setup"`
	Rows  []Row     `json:"rows"`
}

// Request is one HTTP request; strings may hold `{ns}` and captured `{names}`.
type Request struct {
	// User is whose client certificate is presented: admin (system:masters), alice (group
	// wardle-users), bob (no grants), or anonymous (none).
	User    string            `json:"user"`
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	// BodySize sends a body of this many bytes instead: a JSON object padded to the size.
	BodySize int `json:"bodySize"`
	// HeaderSize adds an X-Padding header of this many bytes.
	HeaderSize int `json:"headerSize"`
	// Proto is "1.1" or "2" (the default: what kubectl and client-go speak).
	Proto string `json:"proto"`
}

// Row is one request shape compared between the doors.
type Row struct {
	Name string `json:"name"`
	Request
	// Compare names what must be equal: status, type, body (the default: all three).
	Compare []string `json:"compare"`
	// Ignore lists JSON pointers (with * for any array index or key) left out of the body
	// comparison, for values that differ between any two runs of the same server.
	Ignore []string `json:"ignore"`
	// Capture keeps values of this door's answer for later rows: name -> JSON pointer.
	Capture map[string]string `json:"capture"`
	// Deliberate, when set, is why the doors answer differently; the row must then differ.
	Deliberate string `json:"deliberate"`
	// At narrows a deliberate difference to these places: JSON pointers into the body (`*`
	// for any key or index; a place covers what is under it; `/` the whole body), `status`
	// or `Content-Type`.
	// Everything else must still agree, and each place listed must still differ.
	At []string `json:"at"`
}

// expected tells whether the difference d (as compare words it) lies at one of r.At.
func (r Row) expected(d string) bool {
	place, _, _ := strings.Cut(d, ": ")
	for _, at := range r.At {
		if covers(at, place) {
			return true
		}
	}
	return false
}

// covers reports whether the place pattern at (segments, "*" for any) is place or above it.
func covers(at, place string) bool {
	if at == place || (at == "/" && (place == "" || strings.HasPrefix(place, "/"))) {
		return true
	}
	if !strings.HasPrefix(at, "/") || !strings.HasPrefix(place, "/") {
		return false
	}
	want, got := strings.Split(at, "/"), strings.Split(place, "/")
	if len(want) > len(got) {
		return false
	}
	for i, w := range want {
		if w != "*" && w != got[i] {
			return false
		}
	}
	return true
}

func readTable(path string) (*Table, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t Table
	if err := yaml.UnmarshalStrict(text, &t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, r := range t.Rows {
		switch {
		case r.Name == "":
			return nil, fmt.Errorf("%s: rows[%d] has no name", path, i)
		case seen[r.Name]:
			return nil, fmt.Errorf("%s: rows[%d]: the name %q is used twice", path, i, r.Name)
		case r.Path == "":
			return nil, fmt.Errorf("%s: rows[%d] (%s) has no path", path, i, r.Name)
		}
		for _, c := range r.Compare {
			if c != "status" && c != "type" && c != "body" {
				return nil, fmt.Errorf("%s: rows[%d] (%s): compare %q is not status, type or body", path, i, r.Name, c)
			}
		}
		if len(r.At) > 0 && r.Deliberate == "" {
			return nil, fmt.Errorf("%s: rows[%d] (%s): at without deliberate", path, i, r.Name)
		}
		seen[r.Name] = true
	}
	return &t, nil
}

// expand fills `{ns}` and captured values into s.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "{") {
		return s
	}
	for k, v := range vars {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}

func (r Row) compares(what string) bool {
	if len(r.Compare) == 0 {
		return true
	}
	for _, c := range r.Compare {
		if c == what {
			return true
		}
	}
	return false
}
