// discovery.go owns discovery (/api, /api/v1, /apis with the aggregated v2 form,
// /apis/interop.example.com, /apis/interop.example.com/v1) and OpenAPI (/openapi/v2,
// /openapi/v3 and its group-version document), all with ETags. It also answers the resource
// list of /apis/interop.example.com/v1beta1, a version its aggregated /apis leaves out, as a
// backend mid-upgrade may: an APIService for it is available, and kube-aggregator lists the
// version without resources.
package main

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

const aggregatedV2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

var widgetVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// document is a JSON document marshalled once, with its ETag.
type document struct {
	body []byte
	etag string
}

func newDocument(v interface{}) document {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	body = append(body, '\n')
	sum := sha512.Sum512(body)
	return document{body: body, etag: fmt.Sprintf("\"%X\"", sum[:16])}
}

func obj(kv ...interface{}) map[string]interface{} {
	m := make(map[string]interface{}, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func arr(items ...interface{}) []interface{} {
	if items == nil {
		return []interface{}{}
	}
	return items
}

var (
	groupVersion = obj("groupVersion", apiVersion, "version", version)
	apiGroup     = obj("name", group, "versions", arr(groupVersion), "preferredVersion", groupVersion)

	docAPIGroupList = newDocument(obj("kind", "APIGroupList", "apiVersion", "v1", "groups", arr(apiGroup)))
	docAPIGroup     = newDocument(obj("kind", "APIGroup", "apiVersion", "v1", "name", group,
		"versions", arr(groupVersion), "preferredVersion", groupVersion))
	docResourceList = newDocument(obj("kind", "APIResourceList", "apiVersion", "v1", "groupVersion", apiVersion,
		"resources", arr(
			obj("name", resource, "singularName", "widget", "namespaced", true, "kind", "Widget",
				"verbs", widgetVerbs, "shortNames", []string{"wg"}),
			obj("name", resource+"/exec", "singularName", "", "namespaced", true, "kind", "WidgetExecOptions",
				"verbs", []string{"create", "get"}),
		)))
	// The unlisted version: only its legacy resource list.
	unlistedVersion         = "v1beta1"
	docUnlistedResourceList = newDocument(obj("kind", "APIResourceList", "apiVersion", "v1",
		"groupVersion", group+"/"+unlistedVersion,
		"resources", arr(obj("name", resource, "singularName", "widget", "namespaced", true,
			"kind", "Widget", "verbs", widgetVerbs))))
	aggregatedResource = obj(
		"resource", resource,
		"responseKind", obj("group", group, "version", version, "kind", "Widget"),
		"scope", "Namespaced", "singularResource", "widget", "shortNames", []string{"wg"},
		"verbs", widgetVerbs,
		"subresources", arr(obj("subresource", "exec",
			"responseKind", obj("group", "", "version", "", "kind", "WidgetExecOptions"),
			"verbs", []string{"create", "get"})),
	)
	aggregatedGroup = obj(
		"metadata", obj("name", group, "creationTimestamp", nil),
		"versions", arr(obj("version", version, "freshness", "Current", "resources", arr(aggregatedResource))),
	)
	docAggregated = newDocument(obj("kind", "APIGroupDiscoveryList", "apiVersion", "apidiscovery.k8s.io/v2",
		"metadata", obj(), "items", arr(aggregatedGroup)))
	coreGroup = obj(
		"metadata", obj("creationTimestamp", nil),
		"versions", arr(obj("version", "v1", "freshness", "Current", "resources", arr())),
	)
	docCoreAggregated = newDocument(obj("kind", "APIGroupDiscoveryList", "apiVersion", "apidiscovery.k8s.io/v2",
		"metadata", obj(), "items", arr(coreGroup)))
	docAPIVersions     = newDocument(obj("kind", "APIVersions", "versions", []string{"v1"}, "serverAddressByClientCIDRs", arr()))
	docCoreResources   = newDocument(obj("kind", "APIResourceList", "groupVersion", "v1", "resources", arr()))
	docOpenAPIV2       = newDocument(openAPI(false))
	docOpenAPIV3       = newDocument(openAPI(true))
	openAPIV3Hash      = func() string { s := sha512.Sum512(docOpenAPIV3.body); return fmt.Sprintf("%X", s[:]) }()
	openAPIV3GroupPath = "/openapi/v3/apis/" + group + "/" + version
	docOpenAPIV3Index  = newDocument(obj("paths", obj("apis/"+group+"/"+version,
		obj("serverRelativeURL", openAPIV3GroupPath+"?hash="+openAPIV3Hash))))
)

// serveDocument answers doc (304 when If-None-Match names its ETag).
func serveDocument(w http.ResponseWriter, r *http.Request, doc document, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Etag", doc.etag)
	h.Add("Vary", "Accept")
	for _, tag := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		if strings.TrimSpace(tag) == doc.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	writeBody(w, r, http.StatusOK, doc.body)
}

// wantsAggregated reports whether the first acceptable Accept entry is the
// aggregated v2 discovery form; err when no entry is acceptable.
func wantsAggregated(r *http.Request) (bool, *statusError) {
	h := acceptHeader(r)
	if strings.TrimSpace(h) == "" {
		return false, nil
	}
	for _, m := range parseAccept(h) {
		if !m.isJSON() {
			continue
		}
		as := m.params["as"]
		if as == "" {
			return false, nil
		}
		if as == "APIGroupDiscoveryList" && m.params["g"] == "apidiscovery.k8s.io" && m.params["v"] == "v2" {
			return true, nil
		}
	}
	return false, errNotAcceptable()
}

// acceptsPlainJSON: OpenAPI is served as JSON only (no protobuf).
func acceptsPlainJSON(r *http.Request) bool {
	h := acceptHeader(r)
	if strings.TrimSpace(h) == "" {
		return true
	}
	for _, m := range parseAccept(h) {
		if m.isJSON() && m.params["as"] == "" {
			return true
		}
	}
	return false
}

// serveDiscovery answers the discovery and OpenAPI paths; false for any other path.
func (s *server) serveDiscovery(w http.ResponseWriter, r *http.Request) bool {
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch p {
	case "/apis", "/api":
		if !readOnly(w, r) {
			return true
		}
		agg, err := wantsAggregated(r)
		if err != nil {
			writeStatus(w, r, err)
			return true
		}
		switch {
		case p == "/apis" && agg:
			serveDocument(w, r, docAggregated, aggregatedV2)
		case p == "/apis":
			serveDocument(w, r, docAPIGroupList, "application/json")
		case agg:
			serveDocument(w, r, docCoreAggregated, aggregatedV2)
		default:
			serveDocument(w, r, docAPIVersions, "application/json")
		}
	case "/api/v1":
		if readOnly(w, r) {
			serveDocument(w, r, docCoreResources, "application/json")
		}
	case "/apis/" + group:
		if readOnly(w, r) {
			serveDocument(w, r, docAPIGroup, "application/json")
		}
	case apiPrefix:
		if readOnly(w, r) {
			serveDocument(w, r, docResourceList, "application/json")
		}
	case "/apis/" + group + "/" + unlistedVersion:
		if readOnly(w, r) {
			serveDocument(w, r, docUnlistedResourceList, "application/json")
		}
	case "/openapi/v2", "/openapi/v3", openAPIV3GroupPath:
		if !readOnly(w, r) {
			return true
		}
		if !acceptsPlainJSON(r) {
			writeStatus(w, r, errNotAcceptable())
			return true
		}
		switch p {
		case "/openapi/v2":
			serveDocument(w, r, docOpenAPIV2, "application/json")
		case "/openapi/v3":
			serveDocument(w, r, docOpenAPIV3Index, "application/json")
		default:
			if hash := r.URL.Query().Get("hash"); hash != "" {
				if hash != openAPIV3Hash {
					http.Redirect(w, r, openAPIV3GroupPath+"?hash="+openAPIV3Hash, http.StatusMovedPermanently)
					return true
				}
				w.Header().Set("Cache-Control", "public, immutable")
			}
			serveDocument(w, r, docOpenAPIV3, "application/json")
		}
	default:
		return false
	}
	return true
}

// openAPI builds the swagger 2.0 document (v3 false) or the OpenAPI 3.0 document
// for interop.example.com/v1 from one description.
func openAPI(v3 bool) map[string]interface{} {
	refPrefix := "#/definitions/"
	if v3 {
		refPrefix = "#/components/schemas/"
	}
	ref := func(name string) map[string]interface{} { return obj("$ref", refPrefix+name) }
	// field wraps a reference with a description as each format allows.
	field := func(name, description string) map[string]interface{} {
		if v3 {
			return obj("allOf", arr(ref(name)), "default", obj(), "description", description)
		}
		return obj("$ref", refPrefix+name, "description", description)
	}
	const (
		meta     = "io.k8s.apimachinery.pkg.apis.meta.v1."
		widget   = "com.example.interop.v1.Widget"
		list     = "com.example.interop.v1.WidgetList"
		status   = meta + "Status"
		delOpts  = meta + "DeleteOptions"
		patchDef = meta + "Patch"
	)
	gvk := func(g, v, k string) map[string]interface{} { return obj("group", g, "version", v, "kind", k) }
	str := func(d string) map[string]interface{} { return obj("type", "string", "description", d) }
	stringMap := func(d string) map[string]interface{} {
		return obj("type", "object", "description", d, "additionalProperties", obj("type", "string", "default", ""))
	}
	schemas := obj(
		widget, obj(
			"type", "object",
			"description", "A Widget is what the interop test server stores: a color and a size.",
			"properties", obj(
				"apiVersion", str("APIVersion defines the versioned schema of this representation of an object."),
				"kind", str("Kind is a string value representing the REST resource this object represents."),
				"metadata", field(meta+"ObjectMeta", "Standard object's metadata."),
				"spec", obj("type", "object", "description", "The desired state of the widget.",
					"properties", obj(
						"color", str("The widget's color."),
						"size", obj("type", "integer", "format", "int64", "description", "The widget's size."),
					)),
				"status", obj("type", "object", "description", "The observed state of the widget.",
					"x-kubernetes-preserve-unknown-fields", true),
			),
			"x-kubernetes-group-version-kind", arr(gvk(group, version, "Widget")),
		),
		list, obj(
			"type", "object", "description", "A list of widgets.", "required", []string{"items"},
			"properties", obj(
				"apiVersion", str("APIVersion defines the versioned schema of this representation of an object."),
				"kind", str("Kind is a string value representing the REST resource this object represents."),
				"metadata", field(meta+"ListMeta", "Standard list metadata."),
				"items", obj("type", "array", "description", "The widgets.", "items", ref(widget)),
			),
			"x-kubernetes-group-version-kind", arr(gvk(group, version, "WidgetList")),
		),
		meta+"ObjectMeta", obj(
			"type", "object",
			"description", "ObjectMeta is metadata that all persisted resources must have.",
			"properties", obj(
				"name", str("Name must be unique within a namespace."),
				"generateName", str("A prefix the server uses to generate a unique name when name is not given."),
				"namespace", str("The namespace the object is in."),
				"uid", str("UID is the unique in time and space value for this object, set by the server."),
				"resourceVersion", str("An opaque value that represents the internal version of this object."),
				"generation", obj("type", "integer", "format", "int64", "description", "A sequence number representing a specific generation of the desired state."),
				"creationTimestamp", obj("type", "string", "format", "date-time", "description", "When the object was created."),
				"deletionTimestamp", obj("type", "string", "format", "date-time", "description", "When the object will be deleted."),
				"labels", stringMap("Map of string keys and values that can be used to organize and categorize objects."),
				"annotations", stringMap("Unstructured key value map stored with a resource."),
				"finalizers", obj("type", "array", "items", obj("type", "string", "default", ""), "description", "Finalizers."),
			),
		),
		meta+"ListMeta", obj(
			"type", "object", "description", "ListMeta describes metadata that synthetic resources must have.",
			"properties", obj(
				"resourceVersion", str("The resource version of the list."),
				"continue", str("Set when more results are available."),
				"remainingItemCount", obj("type", "integer", "format", "int64", "description", "The number of items left."),
				"selfLink", str("Deprecated."),
			),
		),
		status, obj(
			"type", "object", "description", "Status is a return value for calls that don't return other objects.",
			"properties", obj(
				"apiVersion", str("APIVersion."), "kind", str("Kind."),
				"metadata", field(meta+"ListMeta", "Standard list metadata."),
				"status", str("Status of the operation: Success or Failure."),
				"message", str("A human-readable description of the status."),
				"reason", str("A machine-readable description of why the operation failed."),
				"details", obj("type", "object", "x-kubernetes-preserve-unknown-fields", true, "description", "Extended data."),
				"code", obj("type", "integer", "format", "int32", "description", "Suggested HTTP return code."),
			),
			"x-kubernetes-group-version-kind", arr(gvk("", "v1", "Status")),
		),
		delOpts, obj(
			"type", "object", "description", "DeleteOptions may be provided when deleting an API object.",
			"properties", obj(
				"apiVersion", str("APIVersion."), "kind", str("Kind."),
				"dryRun", obj("type", "array", "items", obj("type", "string", "default", ""), "description", "When present, modifications are not persisted."),
				"gracePeriodSeconds", obj("type", "integer", "format", "int64", "description", "Ignored."),
				"propagationPolicy", str("Ignored."),
				"preconditions", obj("type", "object", "description", "Must be fulfilled before a deletion is carried out.",
					"properties", obj("resourceVersion", str("Specifies the target ResourceVersion"), "uid", str("Specifies the target UID."))),
			),
			"x-kubernetes-group-version-kind", arr(gvk("", "v1", "DeleteOptions"), gvk("meta.k8s.io", "v1", "DeleteOptions")),
		),
		patchDef, obj("type", "object", "description", "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."),
	)

	queryParam := func(name, typ, description string) map[string]interface{} {
		if v3 {
			return obj("name", name, "in", "query", "description", description, "schema", obj("type", typ, "uniqueItems", true))
		}
		return obj("name", name, "in", "query", "description", description, "type", typ, "uniqueItems", true)
	}
	pathParam := func(name, description string) map[string]interface{} {
		if v3 {
			return obj("name", name, "in", "path", "required", true, "description", description, "schema", obj("type", "string", "uniqueItems", true))
		}
		return obj("name", name, "in", "path", "required", true, "description", description, "type", "string", "uniqueItems", true)
	}
	pretty := queryParam("pretty", "string", "If 'true', then the output is pretty printed.")
	dryRun := queryParam("dryRun", "string", "When present, indicates that modifications should not be persisted. The only valid value is All.")
	fieldManager := queryParam("fieldManager", "string", "A name associated with the actor or entity that is making these changes.")
	fieldValidation := queryParam("fieldValidation", "string", "How the server handles unknown or duplicate fields: Ignore, Warn or Strict (this server ignores it).")
	listParams := []interface{}{
		queryParam("allowWatchBookmarks", "boolean", "Requests watch events with type BOOKMARK."),
		queryParam("continue", "string", "The continue option from a previous, limited list."),
		queryParam("fieldSelector", "string", "Restricts the list by fields (metadata.name, metadata.namespace)."),
		queryParam("labelSelector", "string", "Restricts the list by labels."),
		queryParam("limit", "integer", "The maximum number of responses to return for a list call."),
		queryParam("resourceVersion", "string", "Where a watch starts."),
		queryParam("resourceVersionMatch", "string", "How resourceVersion is applied to list calls."),
		queryParam("sendInitialEvents", "boolean", "Synthetic ADDED events first, then a BOOKMARK marking their end."),
		queryParam("timeoutSeconds", "integer", "Timeout for the list/watch call."),
		queryParam("watch", "boolean", "Watch for changes and return them as a stream of events."),
	}

	jsonTypes := []string{"application/json"}
	patchTypes := []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json"}
	// op builds one operation; body is the schema name of the request body ("" for none).
	op := func(id, action, description, body string, bodyTypes []string, response string, codes []string, params ...interface{}) map[string]interface{} {
		o := obj("description", description, "operationId", id, "tags", []string{"interopExampleCom_v1"},
			"x-kubernetes-action", action, "x-kubernetes-group-version-kind", gvk(group, version, "Widget"))
		if !v3 {
			o["consumes"] = []string{"*/*"}
			if body != "" {
				o["consumes"] = bodyTypes
			}
			o["produces"] = []string{"application/json", "application/yaml"}
			o["schemes"] = []string{"https"}
		}
		if body != "" {
			if v3 {
				content := obj()
				for _, t := range bodyTypes {
					content[t] = obj("schema", ref(body))
				}
				o["requestBody"] = obj("required", true, "content", content)
			} else {
				params = append([]interface{}{obj("name", "body", "in", "body", "required", true, "schema", ref(body))}, params...)
			}
		}
		if len(params) > 0 {
			o["parameters"] = params
		}
		responses := obj("401", obj("description", "Unauthorized"))
		for _, c := range codes {
			if v3 {
				responses[c] = obj("description", "OK", "content", obj("application/json", obj("schema", ref(response))))
			} else {
				responses[c] = obj("description", "OK", "schema", ref(response))
			}
		}
		o["responses"] = responses
		return o
	}
	ok := []string{"200"}
	created := []string{"200", "201", "202"}
	paths := obj(
		apiPrefix+"/"+resource, obj(
			"get", op("listWidgetForAllNamespaces", "list", "list or watch objects of kind Widget", "", nil, list, ok, listParams...),
			"parameters", arr(pretty),
		),
		apiPrefix+"/namespaces/{namespace}/"+resource, obj(
			"get", op("listNamespacedWidget", "list", "list or watch objects of kind Widget", "", nil, list, ok, listParams...),
			"post", op("createNamespacedWidget", "post", "create a Widget", widget, jsonTypes, widget, created, dryRun, fieldManager, fieldValidation),
			"delete", op("deleteCollectionNamespacedWidget", "deletecollection", "delete collection of Widget", delOpts, jsonTypes, list, ok,
				append([]interface{}{dryRun}, listParams...)...),
			"parameters", arr(pathParam("namespace", "object name and auth scope, such as for teams and projects"), pretty),
		),
		apiPrefix+"/namespaces/{namespace}/"+resource+"/{name}", obj(
			"get", op("readNamespacedWidget", "get", "read the specified Widget", "", nil, widget, ok),
			"put", op("replaceNamespacedWidget", "put", "replace the specified Widget", widget, jsonTypes, widget, []string{"200", "201"}, dryRun, fieldManager, fieldValidation),
			"patch", op("patchNamespacedWidget", "patch", "partially update the specified Widget", patchDef, patchTypes, widget, []string{"200", "201"},
				dryRun, fieldManager, fieldValidation, queryParam("force", "boolean", "Ignored.")),
			"delete", op("deleteNamespacedWidget", "delete", "delete a Widget", delOpts, jsonTypes, widget, []string{"200", "202"}, dryRun,
				queryParam("gracePeriodSeconds", "integer", "Ignored."), queryParam("propagationPolicy", "string", "Ignored.")),
			"parameters", arr(pathParam("name", "name of the Widget"), pathParam("namespace", "object name and auth scope, such as for teams and projects"), pretty),
		),
		apiPrefix+"/namespaces/{namespace}/"+resource+"/{name}/exec", obj(
			"get", op("connectGetNamespacedWidgetExec", "connect", "connect GET requests to exec of Widget (WebSocket: v5.channel.k8s.io, v4.channel.k8s.io)", "", nil, status, ok,
				queryParam("command", "string", "Command is the remote command to execute: cat, echo ARGS, env, exit N."),
				queryParam("container", "string", "Ignored."),
				queryParam("stderr", "boolean", "Redirect the standard error stream of the command."),
				queryParam("stdin", "boolean", "Redirect the standard input stream of the command."),
				queryParam("stdout", "boolean", "Redirect the standard output stream of the command."),
				queryParam("tty", "boolean", "Ignored."),
			),
			"parameters", arr(pathParam("name", "name of the Widget"), pathParam("namespace", "object name and auth scope, such as for teams and projects")),
		),
	)
	// The exec operation names the options kind, not Widget.
	execOp := paths[apiPrefix+"/namespaces/{namespace}/"+resource+"/{name}/exec"].(map[string]interface{})["get"].(map[string]interface{})
	execOp["x-kubernetes-group-version-kind"] = gvk(group, version, "WidgetExecOptions")

	info := obj("title", "goaddon interop server", "version", version)
	if v3 {
		return obj("openapi", "3.0.0", "info", info, "paths", paths, "components", obj("schemas", schemas))
	}
	return obj("swagger", "2.0", "info", info, "paths", paths, "definitions", schemas)
}
