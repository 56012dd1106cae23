// Command metricsadapter serves the custom and external metrics APIs
// (custom.metrics.k8s.io, external.metrics.k8s.io) with sigs.k8s.io/custom-metrics-apiserver,
// the library prometheus-adapter and KEDA are built on: its AdapterBase, with a provider of
// fixed values named on the command line. Two instances with different metrics stand for two
// adapters of one cluster (the library's test adapter cannot: its write port is fixed at :8080).
//
//	metricsadapter --secure-port 6443 --cert-dir DIR --lister-kubeconfig KC \
//	  --authentication-kubeconfig KC --authorization-kubeconfig KC \
//	  --custom-metric services/queue-depth=12 \
//	  --custom-metric namespaces/packets-per-second=40 \
//	  --external-metric jobs_waiting=30
//
// A custom metric is `<resource>/<metric>=<quantity>` for every object of that resource
// (namespaced unless the resource is namespaces or nodes); an external one `<metric>=<quantity>`.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"k8s.io/metrics/pkg/apis/external_metrics"

	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider/helpers"
)

// fixed serves each metric at one value.
type fixed struct {
	mapper   apimeta.RESTMapper
	client   dynamic.Interface
	custom   map[provider.CustomMetricInfo]resource.Quantity
	external map[string]resource.Quantity
}

func (f *fixed) value(info provider.CustomMetricInfo) (resource.Quantity, error) {
	v, ok := f.custom[info]
	if !ok {
		return v, provider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	return v, nil
}

func (f *fixed) metric(name types.NamespacedName, info provider.CustomMetricInfo, v resource.Quantity) (*custom_metrics.MetricValue, error) {
	ref, err := helpers.ReferenceFor(f.mapper, name, info)
	if err != nil {
		return nil, err
	}
	return &custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: info.Metric},
		Timestamp:       metav1.Time{Time: time.Now()},
		Value:           v,
	}, nil
}

func (f *fixed) GetMetricByName(_ context.Context, name types.NamespacedName, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValue, error) {
	v, err := f.value(info)
	if err != nil {
		return nil, err
	}
	return f.metric(name, info, v)
}

func (f *fixed) GetMetricBySelector(_ context.Context, namespace string, selector labels.Selector, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValueList, error) {
	v, err := f.value(info)
	if err != nil {
		return nil, err
	}
	names, err := helpers.ListObjectNames(f.mapper, f.client, namespace, selector, info)
	if err != nil {
		return nil, err
	}
	list := &custom_metrics.MetricValueList{}
	for _, name := range names {
		m, err := f.metric(types.NamespacedName{Namespace: namespace, Name: name}, info, v)
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *m)
	}
	return list, nil
}

func (f *fixed) ListAllMetrics() []provider.CustomMetricInfo {
	out := make([]provider.CustomMetricInfo, 0, len(f.custom))
	for info := range f.custom {
		out = append(out, info)
	}
	return out
}

func (f *fixed) GetExternalMetric(_ context.Context, _ string, _ labels.Selector, info provider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	v, ok := f.external[info.Metric]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "external.metrics.k8s.io", Resource: info.Metric}, "")
	}
	return &external_metrics.ExternalMetricValueList{Items: []external_metrics.ExternalMetricValue{{
		MetricName: info.Metric,
		Timestamp:  metav1.Time{Time: time.Now()},
		Value:      v,
	}}}, nil
}

func (f *fixed) ListAllExternalMetrics() []provider.ExternalMetricInfo {
	out := make([]provider.ExternalMetricInfo, 0, len(f.external))
	for name := range f.external {
		out = append(out, provider.ExternalMetricInfo{Metric: name})
	}
	return out
}

// parse reads `key=quantity`.
func parse(flag, s string) (string, resource.Quantity, error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return "", resource.Quantity{}, fmt.Errorf("--%s %q: want NAME=QUANTITY", flag, s)
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return "", q, fmt.Errorf("--%s %q: %w", flag, s, err)
	}
	return key, q, nil
}

func main() {
	logs.InitLogs()
	defer logs.FlushLogs()
	adapter := &basecmd.AdapterBase{Name: "metricsadapter"}
	var custom, external []string
	flags := adapter.Flags()
	flags.StringArrayVar(&custom, "custom-metric", nil, "RESOURCE/METRIC=QUANTITY, repeatable")
	flags.StringArrayVar(&external, "external-metric", nil, "METRIC=QUANTITY, repeatable")
	logs.AddFlags(flags)
	if err := flags.Parse(os.Args[1:]); err != nil {
		klog.Fatalf("flags: %v", err)
	}
	mapper, err := adapter.RESTMapper()
	if err != nil {
		klog.Fatalf("REST mapper: %v", err)
	}
	client, err := adapter.DynamicClient()
	if err != nil {
		klog.Fatalf("dynamic client: %v", err)
	}
	f := &fixed{
		mapper:   mapper,
		client:   client,
		custom:   map[provider.CustomMetricInfo]resource.Quantity{},
		external: map[string]resource.Quantity{},
	}
	for _, s := range custom {
		key, q, err := parse("custom-metric", s)
		if err != nil {
			klog.Fatal(err)
		}
		res, metric, ok := strings.Cut(key, "/")
		if !ok {
			klog.Fatalf("--custom-metric %q: want RESOURCE/METRIC=QUANTITY", s)
		}
		namespaced := res != "namespaces" && res != "nodes"
		f.custom[provider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: res}, Namespaced: namespaced, Metric: metric}] = q
	}
	for _, s := range external {
		name, q, err := parse("external-metric", s)
		if err != nil {
			klog.Fatal(err)
		}
		f.external[name] = q
	}
	adapter.WithCustomMetrics(f)
	adapter.WithExternalMetrics(f)
	if err := adapter.Run(context.Background()); err != nil {
		klog.Fatalf("run: %v", err)
	}
}
