// Command clientgo is the tests' client-go witness: it drives a Kubernetes API (apigw, or
// kube-apiserver to compare) with upstream's own clients and prints what it saw as one JSON
// object on stdout. It fails (exit 1, the reason on stderr) when client-go does.
//
//	clientgo -kubeconfig FILE [-namespace NS] CHECK
//
// CHECK is one of:
//
//	discovery  aggregated discovery (ServerGroupsAndResources): the groups in order, each group
//	           version's resources, and whether the server answered /apis with apidiscovery v2
//	dynamic    the dynamic client on wardle.example.com/v1alpha1 flunders: create, get, update,
//	           merge patch, list, delete, with a watch that must see each of them in order
//	protobuf   the typed client with application/vnd.kubernetes.protobuf on ConfigMaps
//	watchlist  a streaming list (sendInitialEvents=true) of -resource (configmaps or flunders):
//	           the initial objects and the bookmark that ends them
//	cbor       the dynamic client with CBOR allowed and preferred (client-go's feature gates)
//	           on ConfigMaps
//
// Every check reports the response Content-Types it received.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/metrics/pkg/client/custom_metrics"
	"k8s.io/metrics/pkg/client/external_metrics"
)

var flunders = schema.GroupVersionResource{Group: "wardle.example.com", Version: "v1alpha1", Resource: "flunders"}
var configmaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the server to drive (required)")
	namespace := flag.String("namespace", "default", "namespace for the objects the check makes")
	resource := flag.String("resource", "configmaps", "watchlist: configmaps or flunders")
	custom := flag.String("custom-metrics", "", "metrics: custom metrics to read, RESOURCE/METRIC,... (namespaces/METRIC: the namespace's own; nodes/METRIC: node-1's)")
	external := flag.String("external-metrics", "", "metrics: external metrics to read, METRIC,...")
	flag.Parse()
	if *kubeconfig == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: clientgo -kubeconfig FILE [-namespace NS] discovery|dynamic|protobuf|watchlist|cbor|metrics")
		os.Exit(2)
	}
	check := flag.Arg(0)
	if check == "cbor" {
		// client-go reads its feature gates from the environment on first use.
		os.Setenv("KUBE_FEATURE_ClientsAllowCBOR", "true")
		os.Setenv("KUBE_FEATURE_ClientsPreferCBOR", "true")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	seen := &contentTypes{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return seen.wrap(rt) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var out map[string]any
	switch check {
	case "discovery":
		out, err = checkDiscovery(cfg, seen)
	case "dynamic":
		out, err = checkDynamic(ctx, cfg, *namespace)
	case "protobuf":
		out, err = checkProtobuf(ctx, cfg, *namespace)
	case "watchlist":
		gvr := configmaps
		if *resource == "flunders" {
			gvr = flunders
		}
		out, err = checkWatchList(ctx, cfg, gvr, *namespace)
	case "cbor":
		out, err = checkCBOR(ctx, cfg, *namespace)
	case "metrics":
		out, err = checkMetrics(cfg, *namespace, list(*custom), list(*external))
	default:
		err = fmt.Errorf("unknown check %q", check)
	}
	if err != nil {
		fail(fmt.Errorf("%s: %w", check, err))
	}
	out["contentTypes"] = seen.list()
	text, err := json.Marshal(out)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(text))
}

// list splits a comma-separated flag value.
func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// checkMetrics reads metrics with the clients the HPA controller uses
// (k8s.io/metrics/pkg/client): custom metrics of one object by name and of every object of its
// kind (`*`), a namespace's own custom metrics, and external metrics. Each value as read.
func checkMetrics(cfg *rest.Config, namespace string, custom, external []string) (map[string]any, error) {
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	cm := custom_metrics.NewForConfig(cfg, mapper, custom_metrics.NewAvailableAPIsGetter(disco))
	got := map[string]any{}
	for _, name := range custom {
		resource, metric, ok := strings.Cut(name, "/")
		if !ok {
			return nil, fmt.Errorf("custom metric %q: want RESOURCE/METRIC", name)
		}
		// Root-scoped: a namespace's own metric, and a node's (by name: none need exist).
		if root, ok := map[string]string{"namespaces": "Namespace", "nodes": "Node"}[resource]; ok {
			object := map[string]string{"namespaces": namespace, "nodes": "node-1"}[resource]
			v, err := cm.RootScopedMetrics().GetForObject(schema.GroupKind{Kind: root}, object, metric, labels.Everything())
			if err != nil {
				return nil, fmt.Errorf("custom metric %s of %s %s: %w", metric, resource, object, err)
			}
			got[name] = v.Value.String()
			continue
		}
		kind, err := mapper.KindFor(schema.GroupVersionResource{Resource: resource})
		if err != nil {
			return nil, fmt.Errorf("kind of %s: %w", resource, err)
		}
		gk := kind.GroupKind()
		all, err := cm.NamespacedMetrics(namespace).GetForObjects(gk, labels.Everything(), metric, labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("custom metric %s of every %s: %w", metric, resource, err)
		}
		if len(all.Items) == 0 {
			return nil, fmt.Errorf("custom metric %s of every %s: no items", metric, resource)
		}
		one, err := cm.NamespacedMetrics(namespace).GetForObject(gk, all.Items[0].DescribedObject.Name, metric, labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("custom metric %s of %s %s: %w", metric, resource, all.Items[0].DescribedObject.Name, err)
		}
		got[name] = one.Value.String()
		got[resource+"/*/"+metric] = len(all.Items)
	}
	em, err := external_metrics.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	for _, metric := range external {
		v, err := em.NamespacedMetrics(namespace).List(metric, labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("external metric %s: %w", metric, err)
		}
		if len(v.Items) == 0 {
			return nil, fmt.Errorf("external metric %s: no items", metric)
		}
		got[metric] = v.Items[0].Value.String()
	}
	return map[string]any{"metrics": got}, nil
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "clientgo: %v\n", err)
	os.Exit(1)
}

// contentTypes records every response Content-Type, per request path.
type contentTypes struct {
	mu   sync.Mutex
	seen map[string]string
}

type recorder struct {
	next http.RoundTripper
	c    *contentTypes
}

func (c *contentTypes) wrap(rt http.RoundTripper) http.RoundTripper { return recorder{rt, c} }

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.c.mu.Lock()
		if r.c.seen == nil {
			r.c.seen = map[string]string{}
		}
		r.c.seen[req.Method+" "+req.URL.Path] = resp.Header.Get("Content-Type")
		r.c.mu.Unlock()
	}
	return resp, err
}

func (c *contentTypes) get(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[key]
}

func (c *contentTypes) list() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for k, v := range c.seen {
		out[k] = v
	}
	return out
}

func checkDiscovery(cfg *rest.Config, seen *contentTypes) (map[string]any, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	groups, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, g := range groups {
		var versions []string
		for _, v := range g.Versions {
			versions = append(versions, v.Version)
		}
		names = append(names, g.Name+"="+strings.Join(versions, ","))
	}
	resources := map[string][]string{}
	for _, l := range lists {
		var rs []string
		for _, r := range l.APIResources {
			rs = append(rs, r.Name)
		}
		sort.Strings(rs)
		resources[l.GroupVersion] = rs
	}
	ct := seen.get("GET /apis")
	return map[string]any{
		"groups":     names,
		"resources":  resources,
		"aggregated": strings.Contains(ct, "g=apidiscovery.k8s.io") && strings.Contains(ct, "as=APIGroupDiscoveryList"),
	}, nil
}

func flunder(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "wardle.example.com/v1alpha1",
		"kind":       "Flunder",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{},
	}}
}

func checkDynamic(ctx context.Context, cfg *rest.Config, ns string) (map[string]any, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	api := dyn.Resource(flunders).Namespace(ns)
	before, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	w, err := api.Watch(ctx, metav1.ListOptions{ResourceVersion: before.GetResourceVersion()})
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()

	name := fmt.Sprintf("clientgo-%d", time.Now().UnixNano())
	created, err := api.Create(ctx, flunder(name), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	got, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	if got.GetUID() != created.GetUID() {
		return nil, errors.New("get answered another object than create made")
	}
	if err := unstructured.SetNestedField(got.Object, "Flunder/other", "spec", "reference"); err != nil {
		return nil, err
	}
	if _, err := api.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	patched, err := api.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`), metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: "patched=yes"})
	if err != nil {
		return nil, fmt.Errorf("list by label: %w", err)
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return nil, fmt.Errorf("delete: %w", err)
	}
	var events []string
	for len(events) < 4 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("the watch ended after %v", events)
			}
			if obj, isObj := ev.Object.(*unstructured.Unstructured); isObj && obj.GetName() == name {
				events = append(events, string(ev.Type))
			} else if ev.Type == watch.Error {
				return nil, fmt.Errorf("watch error event: %v", ev.Object)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("the watch saw only %v", events)
		}
	}
	ref, _, _ := unstructured.NestedString(patched.Object, "spec", "reference")
	return map[string]any{
		"name":      name,
		"events":    events,
		"reference": ref,
		"labels":    patched.GetLabels(),
		"listed":    len(list.Items),
	}, nil
}

func checkProtobuf(ctx context.Context, cfg *rest.Config, ns string) (map[string]any, error) {
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return nil, err
	}
	api := cs.CoreV1().ConfigMaps(ns)
	name := fmt.Sprintf("protobuf-%d", time.Now().UnixNano())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"through": "apigw"}}
	if _, err := api.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	got, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return nil, fmt.Errorf("delete: %w", err)
	}
	return map[string]any{"name": name, "data": got.Data, "listed": len(list.Items)}, nil
}

// checkWatchList is a streaming list: a watch with sendInitialEvents=true that first sends
// every existing object as ADDED, then a bookmark annotated k8s.io/initial-events-end.
func checkWatchList(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, ns string) (map[string]any, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	yes := true
	w, err := dyn.Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{
		SendInitialEvents:    &yes,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	})
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	var initial []string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("the watch ended before the initial-events bookmark, after %v", initial)
			}
			obj, isObj := ev.Object.(*unstructured.Unstructured)
			switch {
			case ev.Type == watch.Added && isObj:
				initial = append(initial, obj.GetName())
			case ev.Type == watch.Bookmark && isObj:
				if obj.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					sort.Strings(initial)
					return map[string]any{"initial": initial, "bookmarkResourceVersion": obj.GetResourceVersion()}, nil
				}
			case ev.Type == watch.Error:
				return nil, fmt.Errorf("watch error event: %v", ev.Object)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("no initial-events bookmark; saw %v", initial)
		}
	}
}

func checkCBOR(ctx context.Context, cfg *rest.Config, ns string) (map[string]any, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	api := dyn.Resource(configmaps).Namespace(ns)
	name := fmt.Sprintf("cbor-%d", time.Now().UnixNano())
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name},
		"data":     map[string]any{"through": "apigw"},
	}}
	if _, err := api.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	got, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return nil, fmt.Errorf("delete: %w", err)
	}
	data, _, _ := unstructured.NestedStringMap(got.Object, "data")
	return map[string]any{"name": name, "data": data}, nil
}
