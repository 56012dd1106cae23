// store.go owns the in-memory widget store (a global resourceVersion counter, a
// bounded event history for watches), the resource routes, and the CRUD handlers:
// get, list (limit/continue, label and field selectors, Table and metadata
// output), create, update, patch, delete and deletecollection, with dryRun.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// object is a widget as decoded JSON (numbers kept as json.Number). A stored
// object is never modified: every write stores a new one.
type object = map[string]interface{}

// event is one change, as watches see it; prev is the object before a MODIFIED.
type event struct {
	typ  string
	obj  object
	prev object
	rv   uint64
}

// historySize bounds the event history a watch can resume from.
const historySize = 1000

// maxBody is kube's limit for a request body.
const maxBody = 3 << 20

type watcher struct {
	ch chan event
}

type store struct {
	mu      sync.Mutex
	rv      uint64
	objects map[string]object
	// history holds the latest events; every event after historyStart is in it.
	history      []event
	historyStart uint64
	watchers     map[*watcher]struct{}
}

func newStore() *store {
	return &store{objects: map[string]object{}, watchers: map[*watcher]struct{}{}}
}

func storeKey(ns, name string) string { return ns + "/" + name }

// emitLocked records e and hands it to every watcher; a watcher that cannot keep
// up is dropped (its channel closed), as kube ends a watch that falls behind.
func (st *store) emitLocked(e event) {
	st.history = append(st.history, e)
	if len(st.history) > historySize {
		drop := len(st.history) - historySize
		st.historyStart = st.history[drop-1].rv
		st.history = append([]event(nil), st.history[drop:]...)
	}
	for w := range st.watchers {
		select {
		case w.ch <- e:
		default:
			close(w.ch)
			delete(st.watchers, w)
		}
	}
}

func (st *store) get(ns, name string) object {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.objects[storeKey(ns, name)]
}

// list returns the objects f matches, sorted by namespace and name, and the current resourceVersion.
func (st *store) list(f filter) ([]object, uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.matchingLocked(f), st.rv
}

func (st *store) matchingLocked(f filter) []object {
	keys := make([]string, 0, len(st.objects))
	for k, o := range st.objects {
		if f.matches(o) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]object, len(keys))
	for i, k := range keys {
		out[i] = st.objects[k]
	}
	return out
}

func (st *store) create(o object, dryRun bool) (object, *statusError) {
	st.mu.Lock()
	defer st.mu.Unlock()
	ns, name := metaString(o, "namespace"), metaString(o, "name")
	if _, ok := st.objects[storeKey(ns, name)]; ok {
		return nil, errAlreadyExists(name)
	}
	if dryRun {
		return o, nil
	}
	st.rv++
	metaOf(o)["resourceVersion"] = strconv.FormatUint(st.rv, 10)
	st.objects[storeKey(ns, name)] = o
	st.emitLocked(event{typ: "ADDED", obj: o, rv: st.rv})
	return o, nil
}

// update replaces the object with what change makes of (a copy of) it, applying
// kube's rules: a resourceVersion or uid in the new object is a precondition,
// server-set metadata is kept, generation moves with spec, and a write that
// changes nothing stores nothing.
func (st *store) update(ns, name string, dryRun bool, change func(cur object) (object, *statusError)) (object, *statusError) {
	st.mu.Lock()
	defer st.mu.Unlock()
	cur, ok := st.objects[storeKey(ns, name)]
	if !ok {
		return nil, errNotFound(name)
	}
	next, err := change(deepCopy(cur).(object))
	if err != nil {
		return nil, err
	}
	if serr := validate(next, ns, name); serr != nil {
		return nil, serr
	}
	m := metaOf(next)
	tidyMeta(m)
	if rv := metaString(next, "resourceVersion"); rv != "" && rv != metaString(cur, "resourceVersion") {
		return nil, errStale(name)
	}
	if uid := metaString(next, "uid"); uid != "" && uid != metaString(cur, "uid") {
		return nil, errConflict(name, fmt.Sprintf("Precondition failed: UID in precondition: %s, UID in object meta: %s", metaString(cur, "uid"), uid))
	}
	cm := metaOf(cur)
	for _, k := range []string{"uid", "creationTimestamp", "resourceVersion", "generation"} {
		if v, ok := cm[k]; ok {
			m[k] = v
		} else {
			delete(m, k)
		}
	}
	m["namespace"] = ns
	if !reflect.DeepEqual(next["spec"], cur["spec"]) {
		gen, _ := strconv.ParseInt(fmt.Sprint(cm["generation"]), 10, 64)
		m["generation"] = json.Number(strconv.FormatInt(gen+1, 10))
	}
	if reflect.DeepEqual(next, cur) || dryRun {
		if dryRun {
			return next, nil
		}
		return cur, nil
	}
	st.rv++
	m["resourceVersion"] = strconv.FormatUint(st.rv, 10)
	st.objects[storeKey(ns, name)] = next
	st.emitLocked(event{typ: "MODIFIED", obj: next, prev: cur, rv: st.rv})
	return next, nil
}

type preconditions struct {
	uid, resourceVersion string
}

func (st *store) delete(ns, name string, pre preconditions, dryRun bool) (object, *statusError) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.deleteLocked(ns, name, pre, dryRun)
}

func (st *store) deleteLocked(ns, name string, pre preconditions, dryRun bool) (object, *statusError) {
	cur, ok := st.objects[storeKey(ns, name)]
	if !ok {
		return nil, errNotFound(name)
	}
	if pre.uid != "" && pre.uid != metaString(cur, "uid") {
		return nil, errConflict(name, fmt.Sprintf("Precondition failed: UID in precondition: %s, UID in object meta: %s", pre.uid, metaString(cur, "uid")))
	}
	if pre.resourceVersion != "" && pre.resourceVersion != metaString(cur, "resourceVersion") {
		return nil, errConflict(name, fmt.Sprintf("Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", pre.resourceVersion, metaString(cur, "resourceVersion")))
	}
	if dryRun {
		return cur, nil
	}
	st.rv++
	gone := deepCopy(cur).(object)
	metaOf(gone)["resourceVersion"] = strconv.FormatUint(st.rv, 10)
	delete(st.objects, storeKey(ns, name))
	st.emitLocked(event{typ: "DELETED", obj: gone, rv: st.rv})
	return gone, nil
}

func (st *store) deleteCollection(f filter, dryRun bool) []object {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []object
	for _, o := range st.matchingLocked(f) {
		if gone, err := st.deleteLocked(metaString(o, "namespace"), metaString(o, "name"), preconditions{}, dryRun); err == nil {
			out = append(out, gone)
		}
	}
	return out
}

// tidyMeta drops empty or null labels and annotations, as kube's typed metadata does.
func tidyMeta(m map[string]interface{}) {
	for _, k := range []string{"labels", "annotations"} {
		if v, ok := m[k]; ok {
			if mm, isMap := v.(map[string]interface{}); v == nil || (isMap && len(mm) == 0) {
				delete(m, k)
			}
		}
	}
}

func metaOf(o object) map[string]interface{} {
	m, _ := o["metadata"].(map[string]interface{})
	return m
}

func metaString(o object, k string) string {
	s, _ := metaOf(o)[k].(string)
	return s
}

func deepCopy(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []interface{}:
		s := make([]interface{}, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	default:
		return v
	}
}

// decodeJSON decodes exactly one JSON value, keeping numbers as json.Number.
func decodeJSON(b []byte) (interface{}, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v interface{}
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid character after top-level value")
	}
	return v, nil
}

// decodeWidget decodes a request body that must be a Widget.
func decodeWidget(body []byte) (object, *statusError) {
	v, err := decodeJSON(body)
	if err != nil {
		return nil, errBadRequest("couldn't get version/kind; json parse error: " + err.Error())
	}
	o, ok := v.(map[string]interface{})
	if !ok {
		return nil, errBadRequest("couldn't get version/kind; json parse error: the body is not a JSON object")
	}
	if _, ok := o["kind"]; !ok {
		return nil, errBadRequest(fmt.Sprintf("Object 'Kind' is missing in '%s'", bytes.TrimSpace(body)))
	}
	if _, ok := o["apiVersion"]; !ok {
		return nil, errBadRequest(fmt.Sprintf("Object 'apiVersion' is missing in '%s'", bytes.TrimSpace(body)))
	}
	return o, nil
}

var (
	nameRE      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// validate checks a widget about to be stored as namespace ns with name name.
func validate(o object, ns, name string) *statusError {
	if av, _ := o["apiVersion"].(string); av != apiVersion {
		return errBadRequest(fmt.Sprintf("the API version in the data (%v) does not match the expected API version (%s)", o["apiVersion"], apiVersion))
	}
	if k, _ := o["kind"].(string); k != "Widget" {
		return errBadRequest(fmt.Sprintf("the kind in the data (%v) does not match the expected kind (Widget)", o["kind"]))
	}
	m, ok := o["metadata"].(map[string]interface{})
	if !ok {
		return errBadRequest("metadata must be an object")
	}
	if got := metaString(o, "name"); got != name {
		return errBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", got, name))
	}
	if got, ok := m["namespace"]; ok && got != ns && got != "" {
		return errBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	for _, k := range []string{"name", "generateName", "namespace", "uid", "resourceVersion", "creationTimestamp"} {
		if v, ok := m[k]; ok && v != nil {
			if _, isString := v.(string); !isString {
				return errBadRequest(fmt.Sprintf("json: cannot unmarshal %s into Go struct field ObjectMeta.metadata.%s of type string", jsonType(v), k))
			}
		}
	}
	for _, k := range []string{"labels", "annotations"} {
		v, ok := m[k]
		if !ok || v == nil {
			continue
		}
		mm, isMap := v.(map[string]interface{})
		if !isMap {
			return errBadRequest(fmt.Sprintf("json: cannot unmarshal %s into Go struct field ObjectMeta.metadata.%s of type map[string]string", jsonType(v), k))
		}
		for lk, lv := range mm {
			if _, isString := lv.(string); !isString {
				return errBadRequest(fmt.Sprintf("json: cannot unmarshal %s into Go struct field ObjectMeta.metadata.%s of type string", jsonType(lv), k+"."+lk))
			}
		}
	}
	if len(name) > 253 || !nameRE.MatchString(name) {
		return errInvalid(name, "metadata.name", fmt.Sprintf("Invalid value: %q: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character", name))
	}
	if spec, ok := o["spec"]; ok && spec != nil {
		sm, isMap := spec.(map[string]interface{})
		if !isMap {
			return errInvalid(name, "spec", fmt.Sprintf("Invalid value: %q: spec in body must be of type object: %q", jsonType(spec), jsonType(spec)))
		}
		if c, ok := sm["color"]; ok && c != nil {
			if _, isString := c.(string); !isString {
				return errInvalid(name, "spec.color", fmt.Sprintf("Invalid value: %q: spec.color in body must be of type string: %q", jsonType(c), jsonType(c)))
			}
		}
		if sz, ok := sm["size"]; ok && sz != nil {
			n, isNum := sz.(json.Number)
			if _, err := strconv.ParseInt(string(n), 10, 64); !isNum || err != nil {
				return errInvalid(name, "spec.size", fmt.Sprintf("Invalid value: %q: spec.size in body must be of type integer: %q", jsonType(sz), jsonType(sz)))
			}
		}
	}
	if st, ok := o["status"]; ok && st != nil {
		if _, isMap := st.(map[string]interface{}); !isMap {
			return errInvalid(name, "status", fmt.Sprintf("Invalid value: %q: status in body must be of type object: %q", jsonType(st), jsonType(st)))
		}
	}
	return nil
}

func jsonType(v interface{}) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		if _, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case []interface{}:
		return "array"
	default:
		return "object"
	}
}

func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func randomSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	out := make([]byte, 5)
	for i := range out {
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		out[i] = alphabet[n.Int64()]
	}
	return string(out)
}

func now() string { return time.Now().UTC().Format(time.RFC3339) }

// serveResource routes everything under /apis/interop.example.com/v1/.
func (s *server) serveResource(w *recorder, r *http.Request, id *identity, rest string) {
	seg := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	watchPath := false
	if seg[0] == "watch" {
		watchPath = true
		seg = seg[1:]
	}
	var ns, name, sub string
	switch {
	case len(seg) == 1 && seg[0] == resource:
	case len(seg) == 3 && seg[0] == "namespaces" && seg[2] == resource:
		ns = seg[1]
	case len(seg) == 4 && seg[0] == "namespaces" && seg[2] == resource:
		ns, name = seg[1], seg[3]
	case len(seg) == 5 && seg[0] == "namespaces" && seg[2] == resource && seg[4] == "exec" && !watchPath:
		ns, name, sub = seg[1], seg[3], seg[4]
	default:
		writeStatus(w, r, errNotFoundPath())
		return
	}
	if len(seg) > 1 && (ns == "" || len(ns) > 63 || !namespaceRE.MatchString(ns) || (len(seg) > 3 && name == "")) {
		writeStatus(w, r, errNotFoundPath())
		return
	}
	q := r.URL.Query()
	if watchPath {
		if readOnly(w, r) {
			s.serveWatch(w, r, q, ns, name)
		}
		return
	}
	if sub == "exec" {
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			writeStatus(w, r, errMethodNotAllowed())
			return
		}
		s.serveExec(w, r, id, ns, name)
		return
	}
	if name == "" {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if watch, _ := strconv.ParseBool(q.Get("watch")); watch {
				s.serveWatch(w, r, q, ns, "")
			} else if q.Has("bigListMiB") {
				s.serveBigList(w, r, ns, q.Get("bigListMiB"))
			} else {
				s.serveList(w, r, q, ns)
			}
		case http.MethodPost:
			if ns == "" {
				writeStatus(w, r, errMethodNotAllowed())
				return
			}
			s.serveCreate(w, r, q, ns)
		case http.MethodDelete:
			if ns == "" {
				writeStatus(w, r, errMethodNotAllowed())
				return
			}
			s.serveDeleteCollection(w, r, q, ns)
		default:
			writeStatus(w, r, errMethodNotAllowed())
		}
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.serveGet(w, r, q, ns, name)
	case http.MethodPut:
		s.serveUpdate(w, r, q, ns, name)
	case http.MethodPatch:
		s.servePatch(w, r, q, ns, name)
	case http.MethodDelete:
		s.serveDelete(w, r, q, ns, name)
	default:
		writeStatus(w, r, errMethodNotAllowed())
	}
}

// readBody reads a request body up to kube's limit.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *statusError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errTooLarge()
		}
		return nil, errBadRequest("reading the request body: " + err.Error())
	}
	return body, nil
}

// mediaType is the request's Content-Type without parameters.
func mediaType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ct
	}
	return mt
}

func dryRunOf(q url.Values) (bool, *statusError) {
	for _, v := range q["dryRun"] {
		if v != "All" {
			return false, errBadRequest(fmt.Sprintf("Invalid dryRun value: %q: the only valid value is All", v))
		}
	}
	return len(q["dryRun"]) > 0, nil
}

func (s *server) serveGet(w http.ResponseWriter, r *http.Request, q url.Values, ns, name string) {
	out, nerr := negotiateOutput(r)
	if nerr != nil {
		writeStatus(w, r, nerr)
		return
	}
	o := s.store.get(ns, name)
	if o == nil {
		writeStatus(w, r, errNotFound(name))
		return
	}
	switch out {
	case outTable:
		t, err := table([]object{o}, q.Get("includeObject"), true)
		if err != nil {
			writeStatus(w, r, err)
			return
		}
		t["metadata"] = obj("resourceVersion", metaString(o, "resourceVersion"))
		writeJSON(w, r, http.StatusOK, t)
	case outMeta:
		writeJSON(w, r, http.StatusOK, partialMetadata(o))
	default:
		writeJSON(w, r, http.StatusOK, o)
	}
}

// continueToken is what a continue value carries (base64 of this JSON, as kube's).
type continueToken struct {
	V     string `json:"v"`
	RV    uint64 `json:"rv"`
	Start string `json:"start"`
}

func (s *server) serveList(w http.ResponseWriter, r *http.Request, q url.Values, ns string) {
	out, serr := negotiateOutput(r)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	f, serr := parseFilter(q, ns, "")
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	limit := 0
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			writeStatus(w, r, errBadRequest(fmt.Sprintf("invalid limit %q", l)))
			return
		}
		limit = n
	}
	start := ""
	if c := q.Get("continue"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(c, "="))
		var tok continueToken
		if err == nil {
			err = json.Unmarshal(raw, &tok)
		}
		if err != nil || tok.V != "meta.k8s.io/v1" {
			writeStatus(w, r, errBadRequest("continue key is not valid: "+c))
			return
		}
		start = tok.Start
	}
	all, rv := s.store.list(f)
	items := all[:0:0]
	for _, o := range all {
		if start == "" || storeKey(metaString(o, "namespace"), metaString(o, "name")) > start {
			items = append(items, o)
		}
	}
	listMeta := obj("resourceVersion", strconv.FormatUint(rv, 10))
	if limit > 0 && len(items) > limit {
		last := items[limit-1]
		tok, _ := json.Marshal(continueToken{V: "meta.k8s.io/v1", RV: rv, Start: storeKey(metaString(last, "namespace"), metaString(last, "name"))})
		listMeta["continue"] = base64.RawURLEncoding.EncodeToString(tok)
		if len(f.labels) == 0 && len(f.fields) == 0 {
			listMeta["remainingItemCount"] = len(items) - limit
		}
		items = items[:limit]
	}
	switch out {
	case outTable:
		t, err := table(items, q.Get("includeObject"), true)
		if err != nil {
			writeStatus(w, r, err)
			return
		}
		t["metadata"] = listMeta
		writeJSON(w, r, http.StatusOK, t)
	case outMeta:
		metas := make([]interface{}, len(items))
		for i, o := range items {
			metas[i] = partialMetadata(o)
		}
		writeJSON(w, r, http.StatusOK, obj("kind", "PartialObjectMetadataList", "apiVersion", "meta.k8s.io/v1", "metadata", listMeta, "items", metas))
	default:
		writeJSON(w, r, http.StatusOK, widgetList(items, listMeta))
	}
}

func widgetList(items []object, listMeta map[string]interface{}) map[string]interface{} {
	list := make([]interface{}, len(items))
	for i, o := range items {
		list[i] = o
	}
	return obj("kind", "WidgetList", "apiVersion", apiVersion, "metadata", listMeta, "items", list)
}

func partialMetadata(o object) map[string]interface{} {
	return obj("kind", "PartialObjectMetadata", "apiVersion", "meta.k8s.io/v1", "metadata", metaOf(o))
}

func (s *server) serveCreate(w http.ResponseWriter, r *http.Request, q url.Values, ns string) {
	dry, serr := dryRunOf(q)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	if mt := mediaType(r); mt != "" && mt != "application/json" {
		writeStatus(w, r, errUnsupportedMediaType(mt))
		return
	}
	body, serr := readBody(w, r)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	o, serr := decodeWidget(body)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	m, ok := o["metadata"].(map[string]interface{})
	if !ok {
		if o["metadata"] != nil {
			writeStatus(w, r, errBadRequest("metadata must be an object"))
			return
		}
		m = map[string]interface{}{}
		o["metadata"] = m
	}
	name, _ := m["name"].(string)
	if name == "" {
		if gn, _ := m["generateName"].(string); gn != "" {
			name = gn + randomSuffix()
			m["name"] = name
		} else {
			writeStatus(w, r, errInvalid("", "metadata.name", "Required value: name or generateName is required"))
			return
		}
	}
	if rv, _ := m["resourceVersion"].(string); rv != "" {
		writeStatus(w, r, errBadRequest("resourceVersion should not be set on objects to be created"))
		return
	}
	if serr := validate(o, ns, name); serr != nil {
		writeStatus(w, r, serr)
		return
	}
	tidyMeta(m)
	m["namespace"] = ns
	m["uid"] = newUID()
	m["creationTimestamp"] = now()
	m["generation"] = json.Number("1")
	delete(m, "resourceVersion")
	created, serr := s.store.create(o, dry)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	writeJSON(w, r, http.StatusCreated, created)
}

func (s *server) serveUpdate(w http.ResponseWriter, r *http.Request, q url.Values, ns, name string) {
	dry, serr := dryRunOf(q)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	if mt := mediaType(r); mt != "" && mt != "application/json" {
		writeStatus(w, r, errUnsupportedMediaType(mt))
		return
	}
	body, serr := readBody(w, r)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	o, serr := decodeWidget(body)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	updated, serr := s.store.update(ns, name, dry, func(object) (object, *statusError) { return o, nil })
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	writeJSON(w, r, http.StatusOK, updated)
}

func (s *server) servePatch(w http.ResponseWriter, r *http.Request, q url.Values, ns, name string) {
	dry, serr := dryRunOf(q)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	mt := mediaType(r)
	apply, ok := patchers[mt]
	if !ok {
		writeStatus(w, r, errUnsupportedMediaType(mt))
		return
	}
	body, serr := readBody(w, r)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	patch, err := decodeJSON(body)
	if err != nil {
		writeStatus(w, r, errBadRequest("error decoding patch: "+err.Error()))
		return
	}
	patched, serr := s.store.update(ns, name, dry, func(cur object) (object, *statusError) {
		out, serr := apply(cur, patch)
		if serr != nil {
			return nil, serr
		}
		o, ok := out.(map[string]interface{})
		if !ok {
			return nil, errUnprocessable("the patched object is not a JSON object")
		}
		return o, nil
	})
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	writeJSON(w, r, http.StatusOK, patched)
}

// deleteOptions reads the optional DeleteOptions body: preconditions and dryRun.
func deleteOptions(w http.ResponseWriter, r *http.Request, q url.Values) (preconditions, bool, *statusError) {
	dry, serr := dryRunOf(q)
	if serr != nil {
		return preconditions{}, false, serr
	}
	body, serr := readBody(w, r)
	if serr != nil {
		return preconditions{}, false, serr
	}
	var pre preconditions
	if len(bytes.TrimSpace(body)) > 0 {
		var opts struct {
			DryRun        []string `json:"dryRun"`
			Preconditions *struct {
				UID             *string `json:"uid"`
				ResourceVersion *string `json:"resourceVersion"`
			} `json:"preconditions"`
		}
		if err := json.Unmarshal(body, &opts); err != nil {
			return pre, false, errBadRequest("error decoding DeleteOptions: " + err.Error())
		}
		for _, v := range opts.DryRun {
			if v != "All" {
				return pre, false, errBadRequest(fmt.Sprintf("Invalid dryRun value: %q: the only valid value is All", v))
			}
			dry = true
		}
		if p := opts.Preconditions; p != nil {
			if p.UID != nil {
				pre.uid = *p.UID
			}
			if p.ResourceVersion != nil {
				pre.resourceVersion = *p.ResourceVersion
			}
		}
	}
	return pre, dry, nil
}

func (s *server) serveDelete(w http.ResponseWriter, r *http.Request, q url.Values, ns, name string) {
	pre, dry, serr := deleteOptions(w, r, q)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	gone, serr := s.store.delete(ns, name, pre, dry)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	writeJSON(w, r, http.StatusOK, gone)
}

func (s *server) serveDeleteCollection(w http.ResponseWriter, r *http.Request, q url.Values, ns string) {
	_, dry, serr := deleteOptions(w, r, q)
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	f, serr := parseFilter(q, ns, "")
	if serr != nil {
		writeStatus(w, r, serr)
		return
	}
	gone := s.store.deleteCollection(f, dry)
	s.store.mu.Lock()
	rv := s.store.rv
	s.store.mu.Unlock()
	writeJSON(w, r, http.StatusOK, widgetList(gone, obj("resourceVersion", strconv.FormatUint(rv, 10))))
}

// filter is what a list or watch selects: namespace, name, labels and fields.
type filter struct {
	namespace string
	name      string
	labels    []requirement
	fields    []requirement
}

// requirement is one term of a selector: op is =, !=, in, notin, exists or !.
type requirement struct {
	key    string
	op     string
	values []string
}

func parseFilter(q url.Values, ns, name string) (filter, *statusError) {
	f := filter{namespace: ns, name: name}
	var err error
	if f.labels, err = parseSelector(q.Get("labelSelector"), false); err != nil {
		return f, errBadRequest(fmt.Sprintf("unable to parse requirement: %v", err))
	}
	if f.fields, err = parseSelector(q.Get("fieldSelector"), true); err != nil {
		return f, errBadRequest(err.Error())
	}
	for _, req := range f.fields {
		if req.key != "metadata.name" && req.key != "metadata.namespace" {
			return f, errBadRequest(fmt.Sprintf("field label not supported: %s", req.key))
		}
	}
	return f, nil
}

// splitTerms splits a selector on the commas outside parentheses.
func splitTerms(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseSelector(s string, fields bool) ([]requirement, error) {
	var out []requirement
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, term := range splitTerms(s) {
		term = strings.TrimSpace(term)
		if term == "" {
			return nil, fmt.Errorf("invalid selector: %q: empty term", s)
		}
		var req requirement
		switch {
		case !fields && strings.HasPrefix(term, "!"):
			req = requirement{key: strings.TrimSpace(term[1:]), op: "!"}
		case strings.Contains(term, "!="):
			k, v, _ := strings.Cut(term, "!=")
			req = requirement{key: strings.TrimSpace(k), op: "!=", values: []string{strings.TrimSpace(v)}}
		case strings.Contains(term, "=="):
			k, v, _ := strings.Cut(term, "==")
			req = requirement{key: strings.TrimSpace(k), op: "=", values: []string{strings.TrimSpace(v)}}
		case strings.Contains(term, "="):
			k, v, _ := strings.Cut(term, "=")
			req = requirement{key: strings.TrimSpace(k), op: "=", values: []string{strings.TrimSpace(v)}}
		case !fields && strings.Contains(term, "("):
			open := strings.Index(term, "(")
			if !strings.HasSuffix(term, ")") {
				return nil, fmt.Errorf("%q: missing closing parenthesis", term)
			}
			head := strings.Fields(term[:open])
			if len(head) != 2 || (head[1] != "in" && head[1] != "notin") {
				return nil, fmt.Errorf("%q: expected 'key in (...)' or 'key notin (...)'", term)
			}
			req = requirement{key: head[0], op: head[1]}
			for _, v := range strings.Split(term[open+1:len(term)-1], ",") {
				req.values = append(req.values, strings.TrimSpace(v))
			}
		case !fields:
			req = requirement{key: term, op: "exists"}
		default:
			return nil, fmt.Errorf("invalid selector: '%s'; can't understand '%s'", s, term)
		}
		if req.key == "" || strings.ContainsAny(req.key, " ()!=") {
			return nil, fmt.Errorf("%q: invalid key %q", term, req.key)
		}
		out = append(out, req)
	}
	return out, nil
}

func (req requirement) matches(value string, present bool) bool {
	switch req.op {
	case "=":
		return present && value == req.values[0]
	case "!=":
		return !present || value != req.values[0]
	case "in":
		if !present {
			return false
		}
		for _, v := range req.values {
			if v == value {
				return true
			}
		}
		return false
	case "notin":
		if !present {
			return true
		}
		for _, v := range req.values {
			if v == value {
				return false
			}
		}
		return true
	case "exists":
		return present
	case "!":
		return !present
	}
	return false
}

func (f filter) matches(o object) bool {
	if f.namespace != "" && metaString(o, "namespace") != f.namespace {
		return false
	}
	if f.name != "" && metaString(o, "name") != f.name {
		return false
	}
	labels, _ := metaOf(o)["labels"].(map[string]interface{})
	for _, req := range f.labels {
		v, present := labels[req.key].(string)
		if !req.matches(v, present) {
			return false
		}
	}
	for _, req := range f.fields {
		v := metaString(o, strings.TrimPrefix(req.key, "metadata."))
		if !req.matches(v, true) {
			return false
		}
	}
	return true
}

var tableColumns = []interface{}{
	obj("name", "Name", "type", "string", "format", "name", "description", "Name must be unique within a namespace.", "priority", 0),
	obj("name", "Color", "type", "string", "format", "", "description", "The widget's color.", "priority", 0),
	obj("name", "Size", "type", "integer", "format", "", "description", "The widget's size.", "priority", 0),
	obj("name", "Age", "type", "date", "format", "", "description", "CreationTimestamp is when the object was created.", "priority", 0),
}

// table renders objects as a meta.k8s.io/v1 Table; includeObject is None,
// Metadata (the default) or Object.
func table(objs []object, includeObject string, headers bool) (map[string]interface{}, *statusError) {
	switch includeObject {
	case "", "Metadata", "None", "Object":
	default:
		return nil, errBadRequest(fmt.Sprintf("includeObject: unsupported value %q: must be None, Metadata or Object", includeObject))
	}
	rows := make([]interface{}, len(objs))
	for i, o := range objs {
		spec, _ := o["spec"].(map[string]interface{})
		age := "<unknown>"
		if ts, err := time.Parse(time.RFC3339, metaString(o, "creationTimestamp")); err == nil {
			age = humanDuration(time.Since(ts))
		}
		row := obj("cells", arr(metaString(o, "name"), spec["color"], spec["size"], age))
		switch includeObject {
		case "", "Metadata":
			row["object"] = partialMetadata(o)
		case "Object":
			row["object"] = o
		}
		rows[i] = row
	}
	t := obj("kind", "Table", "apiVersion", "meta.k8s.io/v1", "metadata", obj(), "rows", rows)
	if headers {
		t["columnDefinitions"] = tableColumns
	} else {
		t["columnDefinitions"] = arr()
	}
	return t, nil
}

// humanDuration prints an age the way kubectl's AGE column does.
func humanDuration(d time.Duration) string {
	secs := int64(d / time.Second)
	switch {
	case secs < -1:
		return "<invalid>"
	case secs < 0:
		return "0s"
	case secs < 120:
		return fmt.Sprintf("%ds", secs)
	}
	mins := int64(d / time.Minute)
	switch {
	case mins < 10:
		if s := secs % 60; s != 0 {
			return fmt.Sprintf("%dm%ds", mins, s)
		}
		return fmt.Sprintf("%dm", mins)
	case mins < 180:
		return fmt.Sprintf("%dm", mins)
	}
	hours := int64(d / time.Hour)
	switch {
	case hours < 8:
		if m := mins % 60; m != 0 {
			return fmt.Sprintf("%dh%dm", hours, m)
		}
		return fmt.Sprintf("%dh", hours)
	case hours < 48:
		return fmt.Sprintf("%dh", hours)
	case hours < 24*8:
		if h := hours % 24; h != 0 {
			return fmt.Sprintf("%dd%dh", hours/24, h)
		}
		return fmt.Sprintf("%dd", hours/24)
	case hours < 24*365*2:
		return fmt.Sprintf("%dd", hours/24)
	case hours < 24*365*8:
		if dd := hours / 24 % 365; dd != 0 {
			return fmt.Sprintf("%dy%dd", hours/24/365, dd)
		}
		return fmt.Sprintf("%dy", hours/24/365)
	}
	return fmt.Sprintf("%dy", hours/24/365)
}
