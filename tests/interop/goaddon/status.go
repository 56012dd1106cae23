// status.go owns kube-style errors (kind: Status bodies with kube's wording),
// writing JSON responses, and content negotiation of the Accept header.
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"mime"
	"net/http"
	"runtime"
	"strings"
)

const (
	group      = "interop.example.com"
	version    = "v1"
	apiPrefix  = "/apis/" + group + "/" + version
	apiVersion = group + "/" + version
	resource   = "widgets"
	qualified  = resource + "." + group // widgets.interop.example.com
)

func goVersion() string { return runtime.Version() }

// statusError is a failure answered with a kind: Status body.
type statusError struct {
	code    int
	reason  string
	message string
	details map[string]interface{}
}

func (e *statusError) Error() string { return e.message }

func (e *statusError) object() map[string]interface{} {
	o := map[string]interface{}{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]interface{}{},
		"status": "Failure", "message": e.message, "reason": e.reason, "code": e.code,
	}
	if e.details != nil {
		o["details"] = e.details
	}
	return o
}

func nameDetails(name string) map[string]interface{} {
	return map[string]interface{}{"name": name, "group": group, "kind": resource}
}

func errUnauthorized() *statusError {
	return &statusError{code: 401, reason: "Unauthorized", message: "Unauthorized"}
}

func errNotFound(name string) *statusError {
	return &statusError{code: 404, reason: "NotFound", message: fmt.Sprintf("%s %q not found", qualified, name), details: nameDetails(name)}
}

func errNotFoundPath() *statusError {
	return &statusError{code: 404, reason: "NotFound", message: "the server could not find the requested resource", details: map[string]interface{}{}}
}

func errAlreadyExists(name string) *statusError {
	return &statusError{code: 409, reason: "AlreadyExists", message: fmt.Sprintf("%s %q already exists", qualified, name), details: nameDetails(name)}
}

func errConflict(name, why string) *statusError {
	return &statusError{code: 409, reason: "Conflict", message: fmt.Sprintf("Operation cannot be fulfilled on %s %q: %s", qualified, name, why), details: nameDetails(name)}
}

func errStale(name string) *statusError {
	return errConflict(name, "the object has been modified; please apply your changes to the latest version and try again")
}

func errBadRequest(msg string) *statusError {
	return &statusError{code: 400, reason: "BadRequest", message: msg}
}

// errInvalid is kube's 422 for a field that fails validation.
func errInvalid(name, field, detail string) *statusError {
	return &statusError{
		code: 422, reason: "Invalid",
		message: fmt.Sprintf("Widget.%s %q is invalid: %s: %s", group, name, field, detail),
		details: map[string]interface{}{
			"name": name, "group": group, "kind": "Widget",
			"causes": []interface{}{map[string]interface{}{"reason": "FieldValueInvalid", "message": detail, "field": field}},
		},
	}
}

func errUnprocessable(msg string) *statusError {
	return &statusError{code: 422, reason: "Invalid", message: msg}
}

func errMethodNotAllowed() *statusError {
	return &statusError{code: 405, reason: "MethodNotAllowed", message: "the server does not allow this method on the requested resource", details: map[string]interface{}{}}
}

func errUnsupportedMediaType(got string) *statusError {
	return &statusError{code: 415, reason: "UnsupportedMediaType", message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s (got %q)", acceptedPatchTypes, got)}
}

func errNotAcceptable() *statusError {
	return &statusError{code: 406, reason: "NotAcceptable", message: "only the following media types are accepted: application/json"}
}

func errExpired(msg string) *statusError {
	return &statusError{code: 410, reason: "Expired", message: msg}
}

func errTooLarge() *statusError {
	return &statusError{code: 413, reason: "RequestEntityTooLarge", message: "Request entity too large: limit is 3145728"}
}

func writeStatus(w http.ResponseWriter, r *http.Request, e *statusError) {
	writeJSON(w, r, e.code, e.object())
}

// writeJSON answers v as JSON (with kube's trailing newline), gzip-compressed when
// the client accepts it and the body is over kube's 128 KiB threshold.
func writeJSON(w http.ResponseWriter, r *http.Request, code int, v interface{}) {
	writeJSONAs(w, r, code, v, "application/json")
}

func writeJSONAs(w http.ResponseWriter, r *http.Request, code int, v interface{}, contentType string) {
	body, err := json.Marshal(v)
	if err != nil {
		log.Printf("encoding a response: %v", err)
		code = http.StatusInternalServerError
		body, _ = json.Marshal((&statusError{code: 500, reason: "InternalError", message: err.Error()}).object())
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", contentType)
	writeBody(w, r, code, body)
}

// mediaRange is one entry of an Accept header.
type mediaRange struct {
	full   string // type/subtype, lower case
	params map[string]string
}

func parseAccept(h string) []mediaRange {
	var out []mediaRange
	for _, part := range strings.Split(h, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		mt, params, err := mime.ParseMediaType(part)
		if err != nil {
			continue
		}
		if params["q"] == "0" || params["q"] == "0.0" {
			continue
		}
		out = append(out, mediaRange{full: mt, params: params})
	}
	return out
}

// isJSON reports whether m accepts JSON (application/json or a wildcard).
func (m mediaRange) isJSON() bool {
	return m.full == "application/json" || m.full == "*/*" || m.full == "application/*"
}

// acceptHeader joins every Accept header the request carries.
func acceptHeader(r *http.Request) string {
	return strings.Join(r.Header.Values("Accept"), ",")
}

// output is the representation a request for widgets asked for.
type output int

const (
	outObject output = iota // the objects themselves
	outTable                // meta.k8s.io/v1 Table
	outMeta                 // meta.k8s.io/v1 PartialObjectMetadata(List)
)

// negotiateOutput picks the first acceptable entry of the Accept header.
func negotiateOutput(r *http.Request) (output, *statusError) {
	h := acceptHeader(r)
	if strings.TrimSpace(h) == "" {
		return outObject, nil
	}
	for _, m := range parseAccept(h) {
		if !m.isJSON() {
			continue
		}
		as, g, v := m.params["as"], m.params["g"], m.params["v"]
		switch {
		case as == "":
			return outObject, nil
		case as == "Table" && g == "meta.k8s.io" && (v == "v1" || v == "v1beta1"):
			return outTable, nil
		case (as == "PartialObjectMetadata" || as == "PartialObjectMetadataList") && g == "meta.k8s.io" && (v == "v1" || v == "v1beta1"):
			return outMeta, nil
		}
	}
	return outObject, errNotAcceptable()
}
