package main

import (
	"fmt"
	"net"
	"path/filepath"
)

// Two metrics adapters (our metricsadapter, on sigs.k8s.io/custom-metrics-apiserver), each
// serving the custom and external metrics APIs with metrics of its own, as two adapters of one
// cluster would (say prometheus-adapter and KEDA). kube-aggregator routes a group version to
// one Service: the first is registered in kube-apiserver; the second cannot be beside it.
const adaptersNamespace = "custom-metrics"

// Adapter is one adapter as a client of the control plane sees it (state.json).
type Adapter struct {
	// Name is its Service's name in adaptersNamespace; Host the name in its certificate.
	Name string `json:"name"`
	Host string `json:"host"`
	Port int    `json:"port"`
	// Custom and External are the metrics it serves: RESOURCE/METRIC=QUANTITY, METRIC=QUANTITY.
	Custom   []string `json:"custom"`
	External []string `json:"external"`
	// APIServices is the file with its three APIServices (custom v1beta1, v1beta2, external
	// v1beta1), as the library's deployment declares them, with the adapters' CA.
	APIServices string `json:"apiservices"`
	// Registered says whether kube-apiserver has its APIServices (the first adapter's only).
	Registered bool `json:"registered"`
}

// adapters lists the two adapters and what each serves.
func adapters() []Adapter {
	return []Adapter{
		{
			Name:     "adapter-a",
			Custom:   []string{"services/queue-depth=12", "namespaces/requests-per-second=40"},
			External: []string{"jobs_waiting=30"},
		},
		{
			Name:     "adapter-b",
			Custom:   []string{"services/backlog=50", "namespaces/errors-per-second=2", "nodes/temperature=7"},
			External: []string{"orders_pending=80"},
		},
	}
}

func (a Adapter) host() string { return a.Name + "." + adaptersNamespace + ".svc" }

// issueAdapterCerts writes adapters-ca and each adapter's serving certificate.
func issueAdapterCerts(dir string, loopback []net.IP) error {
	ca, err := newAuthority(dir, "adapters-ca", "apigw-test-adapters-ca")
	if err != nil {
		return err
	}
	for _, a := range adapters() {
		l := leaf{file: a.Name + "-serving", cn: a.host(), dns: []string{a.host(), "localhost"}, ips: loopback, server: true}
		if err := ca.issue(dir, l); err != nil {
			return err
		}
	}
	return nil
}

// adapterArgs are the flags of adapter a on port, its kubeconfigs the admin's.
func adapterArgs(dir string, a Adapter) []string {
	f := func(name string) string { return filepath.Join(dir, name) }
	args := []string{
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", a.Port),
		"--tls-cert-file=" + f(a.Name+"-serving.crt"), "--tls-private-key-file=" + f(a.Name+"-serving.key"),
		"--lister-kubeconfig=" + f("admin.kubeconfig"),
		"--authentication-kubeconfig=" + f("admin.kubeconfig"),
		"--authorization-kubeconfig=" + f("admin.kubeconfig"),
		"--authentication-tolerate-lookup-failure=false",
	}
	for _, m := range a.Custom {
		args = append(args, "--custom-metric="+m)
	}
	for _, m := range a.External {
		args = append(args, "--external-metric="+m)
	}
	return args
}

// writeAdapterAPIServices writes a's three APIServices to path, as the library's test
// deployment declares them (groupPriorityMinimum 100; versionPriority 100, 200 for custom
// v1beta2) but verified against the adapters' CA.
func writeAdapterAPIServices(path, caFile string, a Adapter) error {
	return writeAPIServiceFile(path, caFile, adaptersNamespace, a.Name, a.Port, []served{
		{"custom.metrics.k8s.io", "v1beta1", 100, 100},
		{"custom.metrics.k8s.io", "v1beta2", 100, 200},
		{"external.metrics.k8s.io", "v1beta1", 100, 100},
	})
}
