// stream.go owns response compression as kube-apiserver does it (gzip when the
// client accepts it and the body is over 128 KiB) and the streamed big list:
// ?bigListMiB=N writes a WidgetList of about N MiB of generated widgets
// incrementally, flushing about every 64 KiB, never holding it whole.
package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// gzipThreshold is kube's: smaller responses are sent as they are.
const gzipThreshold = 128 * 1024

// acceptsGzip reports whether Accept-Encoding lists gzip (with a non-zero q).
func acceptsGzip(r *http.Request) bool {
	for _, h := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(h, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				continue
			}
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			if q == "q=0" || q == "q=0.0" || q == "q=0.00" || q == "q=0.000" {
				continue
			}
			return true
		}
	}
	return false
}

// writeBody sends a complete body, gzip-compressed when kube would compress it.
func writeBody(w http.ResponseWriter, r *http.Request, code int, body []byte) {
	if len(body) > gzipThreshold && acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		w.Header().Del("Content-Length")
		w.WriteHeader(code)
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		_, _ = gz.Write(body)
		_ = gz.Close()
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

const (
	bigListMaxMiB = 1024
	flushEvery    = 64 * 1024
)

// bigPadding makes each generated widget about 1 KiB.
var bigPadding = strings.Repeat("interop-padding-", 52)

func (s *server) serveBigList(w http.ResponseWriter, r *http.Request, ns, raw string) {
	mib, err := strconv.Atoi(raw)
	if err != nil || mib < 0 || mib > bigListMaxMiB {
		writeStatus(w, r, errBadRequest(fmt.Sprintf("bigListMiB must be an integer from 0 to %d, not %q", bigListMaxMiB, raw)))
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeStatus(w, r, &statusError{code: 500, reason: "InternalError", message: "streaming is not supported"})
		return
	}
	itemNS := ns
	if itemNS == "" {
		itemNS = "default"
	}
	s.store.mu.Lock()
	rv := strconv.FormatUint(s.store.rv, 10)
	s.store.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	var sink io.Writer = w
	var gz *gzip.Writer
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		gz, _ = gzip.NewWriterLevel(w, gzip.BestSpeed)
		sink = gz
	}
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(sink, 2*flushEvery)
	sinceFlush := 0
	flush := func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		if gz != nil {
			if err := gz.Flush(); err != nil {
				return err
			}
		}
		flusher.Flush()
		sinceFlush = 0
		return nil
	}
	write := func(s string) {
		n, _ := bw.WriteString(s)
		sinceFlush += n
	}
	created := time.Now().UTC().Format(time.RFC3339)
	write(`{"kind":"WidgetList","apiVersion":"` + apiVersion + `","metadata":{"resourceVersion":"` + rv + `"},"items":[`)
	total := int64(mib) << 20
	colors := []string{"red", "green", "blue", "yellow"}
	var written int64
	for i := 0; written < total; i++ {
		if r.Context().Err() != nil {
			return
		}
		item := fmt.Sprintf(`{"apiVersion":"%s","kind":"Widget","metadata":{"name":"big-%07d","namespace":"%s","uid":"00000000-0000-4000-8000-%012d","resourceVersion":"%s","generation":1,"creationTimestamp":"%s","annotations":{"interop.example.com/padding":"%s"}},"spec":{"color":"%s","size":%d},"status":{}}`,
			apiVersion, i, itemNS, i, rv, created, bigPadding, colors[i%len(colors)], i)
		if i > 0 {
			write(",")
		}
		write(item)
		written += int64(len(item)) + 1
		if sinceFlush >= flushEvery {
			if flush() != nil {
				return
			}
		}
	}
	write("]}\n")
	if flush() != nil {
		return
	}
	if gz != nil {
		_ = gz.Close()
	}
}
