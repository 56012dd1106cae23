package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/client-go/kubernetes/scheme"
	openapiproto "k8s.io/kube-openapi/pkg/util/proto"
	"sigs.k8s.io/yaml"
)

// How many differing places one row collects, and prints.
const (
	maxDiffs = 200
	maxShown = 12
)

// compare returns what differs between a and b for row r, normalized; none when they agree.
func compare(r Row, a, b Answer) []string {
	if a.Err != "" || b.Err != "" {
		if a.Err == b.Err {
			return nil
		}
		return []string{fmt.Sprintf("no answer: kube-aggregator %q, apigw %q", a.Err, b.Err)}
	}
	var out []string
	if r.compares("status") && a.Status != b.Status {
		out = append(out, fmt.Sprintf("status: kube-aggregator %d, apigw %d", a.Status, b.Status))
	}
	if r.compares("type") && mediaType(a.Type) != mediaType(b.Type) {
		out = append(out, fmt.Sprintf("Content-Type: kube-aggregator %q, apigw %q", a.Type, b.Type))
	}
	if r.compares("body") {
		va, ea := decode(a)
		vb, eb := decode(b)
		switch {
		case ea != nil || eb != nil:
			if ea == nil || eb == nil || ea.Error() != eb.Error() {
				out = append(out, fmt.Sprintf("body: kube-aggregator %v, apigw %v", errText(ea), errText(eb)))
			}
		default:
			va, vb = normalize(va, ""), normalize(vb, "")
			for _, p := range r.Ignore {
				va, vb = drop(va, strings.Split(p, "/")[1:]), drop(vb, strings.Split(p, "/")[1:])
			}
			out = append(out, diff(va, vb, "", nil)...)
		}
	}
	return out
}

// show prints the differences of a row, at most maxShown of them.
func show(diffs []string) {
	for i, d := range diffs {
		if i == maxShown {
			fmt.Printf("              ... and %d more\n", len(diffs)-maxShown)
			return
		}
		fmt.Printf("              %s\n", d)
	}
}

func errText(e error) string {
	if e == nil {
		return "decoded"
	}
	return e.Error()
}

// mediaType is a Content-Type with its parameters sorted, charset left out (both doors' Go
// and Rust servers say utf-8 in different places).
func mediaType(t string) string {
	if t == "" {
		return ""
	}
	base, params, err := mime.ParseMediaType(t)
	if err != nil {
		return t
	}
	delete(params, "charset")
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		base += ";" + k + "=" + params[k]
	}
	return base
}

// decode turns a body into plain values by its media type: JSON (a watch stream is a list of
// its events), YAML, CBOR, Kubernetes protobuf (through client-go's scheme) and OpenAPI v2
// protobuf (gnostic's, as YAML); anything else is its text.
func decode(a Answer) (any, error) {
	base, _, _ := mime.ParseMediaType(a.Type)
	switch {
	case len(a.Body) == 0:
		return "", nil
	case base == "application/json" || strings.HasSuffix(base, "+json"):
		dec := json.NewDecoder(bytes.NewReader(a.Body))
		dec.UseNumber()
		var all []any
		for dec.More() {
			var v any
			if err := dec.Decode(&v); err != nil {
				return nil, fmt.Errorf("JSON: %w", err)
			}
			all = append(all, v)
		}
		if len(all) == 1 {
			return all[0], nil
		}
		return all, nil
	case base == "application/yaml":
		j, err := yaml.YAMLToJSON(a.Body)
		if err != nil {
			return nil, fmt.Errorf("YAML: %w", err)
		}
		return decode(Answer{Type: "application/json", Body: j})
	case base == "application/cbor" || base == "application/cbor-seq":
		var v any
		if err := direct.Unmarshal(a.Body, &v); err != nil {
			return nil, fmt.Errorf("CBOR: %w", err)
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("CBOR as JSON: %w", err)
		}
		return decode(Answer{Type: "application/json", Body: j})
	case base == "application/vnd.kubernetes.protobuf":
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(a.Body, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("protobuf: %w", err)
		}
		j, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("protobuf as JSON: %w", err)
		}
		return decode(Answer{Type: "application/json", Body: j})
	case base == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf":
		// What client-go's OpenAPISchema() reads: gnostic's Document, then kube-openapi's v2
		// models (kubectl's explain and validation) built from it.
		doc := &openapi_v2.Document{}
		if err := proto.Unmarshal(a.Body, doc); err != nil {
			return nil, fmt.Errorf("OpenAPI v2 protobuf: %w", err)
		}
		if _, err := openapiproto.NewOpenAPIData(doc); err != nil {
			return nil, fmt.Errorf("OpenAPI v2 models: %w", err)
		}
		y, err := doc.YAMLValue("")
		if err != nil {
			return nil, fmt.Errorf("OpenAPI v2 protobuf as YAML: %w", err)
		}
		return decode(Answer{Type: "application/yaml", Body: y})
	case base == "text/plain" && json.Valid(a.Body):
		// Go's http.ServeContent names a JSON document text/plain by sniffing it; the media
		// type is compared apart, the document as what it is.
		return decode(Answer{Type: "application/json", Body: a.Body})
	default:
		return string(a.Body), nil
	}
}

var (
	uuid   = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	digits = regexp.MustCompile(`[0-9]{4,}`)
)

// normalize writes every value that differs between two runs of the same server as a
// placeholder: each door's namespace, resource versions, UIDs, times, continue tokens, and long
// numbers inside messages (resource versions quoted in an error).
func normalize(v any, key string) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normalize(e, k)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = normalize(e, key)
		}
		return t
	case string:
		t = strings.NewReplacer("diff-a", "{ns}", "diff-b", "{ns}").Replace(t)
		switch {
		case t == "":
			return t
		case key == "resourceVersion" || key == "continue":
			return "<" + key + ">"
		case key == "creationTimestamp" || key == "time" || key == "lastTransitionTime" || key == "deletionTimestamp":
			return "<time>"
		case uuid.MatchString(t):
			return uuid.ReplaceAllString(t, "<uid>")
		case key == "serverRelativeURL":
			// The hash is of the document's bytes, which carry each server's own details.
			if i := strings.Index(t, "?hash="); i >= 0 {
				return t[:i] + "?hash=<hash>"
			}
			return t
		case key == "message" || key == "reason":
			return digits.ReplaceAllString(t, "<n>")
		}
		return t
	}
	return v
}

// drop removes the value at path (segments; "*" matches every key or index).
func drop(v any, path []string) any {
	if len(path) == 0 {
		return nil
	}
	seg := strings.NewReplacer("~1", "/", "~0", "~").Replace(path[0])
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if seg == "*" || seg == k {
				if len(path) == 1 {
					delete(t, k)
				} else {
					t[k] = drop(e, path[1:])
				}
			}
		}
	case []any:
		for i, e := range t {
			if seg == "*" || seg == strconv.Itoa(i) {
				if len(path) == 1 {
					t[i] = "<ignored>"
				} else {
					t[i] = drop(e, path[1:])
				}
			}
		}
	}
	return v
}

// diff lists the JSON pointers where a and b differ.
func diff(a, b any, at string, out []string) []string {
	if len(out) > maxDiffs {
		return out
	}
	ma, oka := a.(map[string]any)
	mb, okb := b.(map[string]any)
	if oka && okb {
		keys := map[string]bool{}
		for k := range ma {
			keys[k] = true
		}
		for k := range mb {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			p := at + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
			ea, ina := ma[k]
			eb, inb := mb[k]
			switch {
			case !inb:
				out = append(out, p+": only through kube-aggregator: "+short(ea))
			case !ina:
				out = append(out, p+": only through apigw: "+short(eb))
			default:
				out = diff(ea, eb, p, out)
			}
		}
		return out
	}
	la, oka := a.([]any)
	lb, okb := b.([]any)
	if oka && okb {
		if len(la) != len(lb) {
			return append(out, fmt.Sprintf("%s: %d items through kube-aggregator, %d through apigw: %s / %s", at, len(la), len(lb), short(a), short(b)))
		}
		for i := range la {
			out = diff(la[i], lb[i], at+"/"+strconv.Itoa(i), out)
		}
		return out
	}
	if !reflect.DeepEqual(a, b) {
		out = append(out, fmt.Sprintf("%s: kube-aggregator %s, apigw %s", at, short(a), short(b)))
	}
	return out
}

func short(v any) string {
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(j) > 160 {
		return string(j[:160]) + "..."
	}
	return string(j)
}
