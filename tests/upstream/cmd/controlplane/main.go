// Command controlplane starts a real Kubernetes control plane on loopback for the tests and for
// trying apigw by hand: etcd, kube-apiserver (RBAC, service-account tokens, a front-proxy CA whose
// clients may assert X-Remote-User/-Group/-Extra-/-Uid, CBOR served) and sample-apiserver (the
// wardle.example.com addon server of upstream's aggregation docs, authenticating and authorizing
// by delegation to kube-apiserver). Everything is built by scripts/upstream from upstream's
// modules; this program only wires them together.
//
// It writes into -dir: the PKI (see makePKI), admin.kubeconfig, apiservices/wardle.yaml (the
// APIServices for sample-apiserver, for a gateway's --apiservice-dir), apigw-authorization.yaml
// (an AuthorizationConfiguration that asks kube-apiserver, for a gateway that must decide as
// kube-aggregator's door does), logs/*.log, and
// state.json, which it also prints as one line on stdout once every server is ready. It stops
// its servers on SIGINT or SIGTERM, when stdin closes (with -exit-on-eof), or when one of them
// exits, in which case it prints that server's log tail and exits 1.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The Services that stand for sample-apiserver and metrics-server in the cluster, as in
// upstream's artifacts.
const (
	sampleNamespace  = "wardle"
	sampleService    = "api"
	metricsNamespace = "kube-system"
	metricsService   = "metrics-server"
)

// State is what a client of the control plane needs; it is state.json.
type State struct {
	Dir       string `json:"dir"`
	Version   string `json:"version"`
	Etcd      string `json:"etcd"`
	APIServer string `json:"apiserver"`
	// Sample is sample-apiserver's URL, empty when it was not started.
	Sample string `json:"sample"`
	// SampleHost is the name in sample-apiserver's serving certificate: <service>.<namespace>.svc.
	SampleHost string `json:"sampleHost"`
	// SamplePort is the port in the APIServices' spec.service.port.
	SamplePort int `json:"samplePort"`
	// Registered says whether the APIServices were created in kube-apiserver.
	Registered bool `json:"registered"`
	// MetricsHost and MetricsPort name metrics-server (v1beta1.metrics.k8s.io) as its
	// APIService does; MetricsPort is 0 when it was not started.
	MetricsHost string `json:"metricsHost"`
	MetricsPort int    `json:"metricsPort"`
	// Adapters are the two metrics adapters, when started (-metrics-adapters).
	Adapters []Adapter `json:"adapters,omitempty"`
}

type options struct {
	dir, bin                       string
	apiserverPort, samplePort      int
	sample, register, exitOnEOF    bool
	metricsServer, metricsAdapters bool
	readyTimeout                   time.Duration
	extraAPIServer, extraSampleArg stringList
	// authorizationConfig replaces --authorization-mode=RBAC when set.
	authorizationConfig string
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var o options
	self, _ := os.Executable()
	flag.StringVar(&o.dir, "dir", "", "directory for the PKI, kubeconfigs, logs, data and state.json (required)")
	flag.StringVar(&o.bin, "bin", filepath.Dir(self), "directory holding etcd, kube-apiserver and sample-apiserver")
	flag.IntVar(&o.apiserverPort, "apiserver-port", 0, "kube-apiserver's port on 127.0.0.1 (0: a free one)")
	flag.IntVar(&o.samplePort, "sample-port", 0, "sample-apiserver's port on 127.0.0.1 (0: a free one)")
	flag.BoolVar(&o.sample, "sample", true, "start sample-apiserver")
	flag.BoolVar(&o.metricsServer, "metrics-server", false, "start metrics-server (metrics.k8s.io) too, registered like sample-apiserver")
	flag.BoolVar(&o.metricsAdapters, "metrics-adapters", false, "start two metrics adapters (custom.metrics.k8s.io, external.metrics.k8s.io) too; kube-apiserver gets the first one's APIServices")
	flag.BoolVar(&o.register, "register", true, "register sample-apiserver's APIServices in kube-apiserver (its kube-aggregator then serves them)")
	flag.BoolVar(&o.exitOnEOF, "exit-on-eof", false, "stop when stdin closes (for a parent process that may die)")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", 3*time.Minute, "how long each server may take to become ready")
	flag.Var(&o.extraAPIServer, "apiserver-arg", "one more kube-apiserver flag (repeatable)")
	flag.StringVar(&o.authorizationConfig, "authorization-config", "", "kube-apiserver's --authorization-config, instead of --authorization-mode=RBAC")
	flag.Var(&o.extraSampleArg, "sample-arg", "one more sample-apiserver flag (repeatable)")
	flag.Parse()
	if o.dir == "" {
		fmt.Fprintln(os.Stderr, "controlplane: -dir is required")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	for _, sub := range []string{"logs", "apiservices", "adapters"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	sampleHost := sampleService + "." + sampleNamespace + ".svc"
	metricsHost := metricsService + "." + metricsNamespace + ".svc"
	if err := makePKI(dir, sampleHost, metricsHost); err != nil {
		return fmt.Errorf("making the PKI in %s: %w", dir, err)
	}
	ports, err := freePorts(5 + len(adapters()))
	if err != nil {
		return err
	}
	if o.apiserverPort != 0 {
		ports[2] = o.apiserverPort
	}
	if o.samplePort != 0 {
		ports[3] = o.samplePort
	}
	version, _ := os.ReadFile(filepath.Join(o.bin, "VERSION"))
	st := State{
		Dir:        dir,
		Version:    strings.TrimSpace(string(version)),
		Etcd:       fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		APIServer:  fmt.Sprintf("https://127.0.0.1:%d", ports[2]),
		SampleHost: sampleHost,
		SamplePort: ports[3],
	}
	if o.metricsServer {
		st.MetricsHost, st.MetricsPort = metricsHost, ports[4]
	}
	if o.metricsAdapters {
		for i, a := range adapters() {
			a.Host, a.Port = a.host(), ports[5+i]
			a.APIServices = filepath.Join(dir, "adapters", a.Name+".yaml")
			st.Adapters = append(st.Adapters, a)
		}
	}
	if err := writeKubeconfig(filepath.Join(dir, "admin.kubeconfig"), st.APIServer, dir, "admin"); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.exitOnEOF {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	}
	var servers []*server
	defer func() {
		for i := len(servers) - 1; i >= 0; i-- {
			servers[i].stop()
		}
	}()
	start := func(name string, ready func() error, args ...string) error {
		s, err := startServer(filepath.Join(o.bin, name), filepath.Join(dir, "logs", name+".log"), args)
		if err != nil {
			return err
		}
		servers = append(servers, s)
		return s.awaitReady(ctx, ready, o.readyTimeout)
	}

	f := func(name string) string { return filepath.Join(dir, name) }
	if err := start("etcd", getOK(http.DefaultClient, st.Etcd+"/health"),
		"--name=default", "--data-dir="+f("etcd-data"),
		"--listen-client-urls="+st.Etcd, "--advertise-client-urls="+st.Etcd,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", ports[1]),
		"--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return err
	}

	admin, err := clientFor(dir, "ca", "admin")
	if err != nil {
		return err
	}
	apiserverArgs := append([]string{
		"--etcd-servers=" + st.Etcd,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--tls-cert-file=" + f("apiserver.crt"), "--tls-private-key-file=" + f("apiserver.key"),
		"--client-ca-file=" + f("ca.crt"),
		authorization(o.authorizationConfig),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f("sa.pub"), "--service-account-signing-key-file=" + f("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
		// The front proxies: kube-apiserver's own kube-aggregator and apigw.
		"--requestheader-client-ca-file=" + f("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client,apigw",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f("front-proxy-client.crt"), "--proxy-client-key-file=" + f("front-proxy-client.key"),
		"--feature-gates=CBORServingAndStorage=true",
		"--profiling=false",
	}, o.extraAPIServer...)
	if err := start("kube-apiserver", getOK(admin, st.APIServer+"/readyz"), apiserverArgs...); err != nil {
		return err
	}

	if o.sample {
		st.Sample = fmt.Sprintf("https://127.0.0.1:%d", ports[3])
		wardle, err := clientFor(dir, "wardle-ca", "")
		if err != nil {
			return err
		}
		sampleArgs := append([]string{
			"--etcd-servers=" + st.Etcd,
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[3]),
			"--tls-cert-file=" + f("wardle-serving.crt"), "--tls-private-key-file=" + f("wardle-serving.key"),
			"--kubeconfig=" + f("admin.kubeconfig"),
			"--authentication-kubeconfig=" + f("admin.kubeconfig"),
			"--authorization-kubeconfig=" + f("admin.kubeconfig"),
			"--authentication-tolerate-lookup-failure=false",
			"--profiling=false",
		}, o.extraSampleArg...)
		if err := start("sample-apiserver", getOK(wardle, st.Sample+"/readyz"), sampleArgs...); err != nil {
			return err
		}
	}
	if o.metricsServer {
		metrics, err := clientFor(dir, "metrics-ca", "")
		if err != nil {
			return err
		}
		url := fmt.Sprintf("https://127.0.0.1:%d", st.MetricsPort)
		// With no kubelet to scrape its /readyz never passes (no metrics yet); it serves.
		if err := start("metrics-server", getOK(metrics, url+"/livez"),
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(st.MetricsPort),
			"--tls-cert-file="+f("metrics-serving.crt"), "--tls-private-key-file="+f("metrics-serving.key"),
			"--kubeconfig="+f("admin.kubeconfig"),
			"--authentication-kubeconfig="+f("admin.kubeconfig"),
			"--authorization-kubeconfig="+f("admin.kubeconfig"),
			"--authentication-tolerate-lookup-failure=false",
			"--kubelet-insecure-tls", "--metric-resolution=15s",
		); err != nil {
			return err
		}
		if err := writeMetricsAPIService(f("apiservices/metrics.yaml"), f("metrics-ca.crt"), st.MetricsPort); err != nil {
			return err
		}
	}
	if len(st.Adapters) > 0 {
		ca, err := clientFor(dir, "adapters-ca", "")
		if err != nil {
			return err
		}
		for _, a := range st.Adapters {
			url := fmt.Sprintf("https://127.0.0.1:%d", a.Port)
			if err := start("metricsadapter", getOK(ca, url+"/readyz"), adapterArgs(dir, a)...); err != nil {
				return fmt.Errorf("%s: %w", a.Name, err)
			}
			if err := writeAdapterAPIServices(a.APIServices, f("adapters-ca.crt"), a); err != nil {
				return err
			}
		}
	}
	if err := writeAPIServices(f("apiservices/wardle.yaml"), f("wardle-ca.crt"), st.SamplePort); err != nil {
		return err
	}
	if err := writeGatewayAuthorization(dir, st.APIServer); err != nil {
		return err
	}
	if o.register {
		if err := register(admin, st, f("apiservices/wardle.yaml")); err != nil {
			return err
		}
		if o.metricsServer {
			if err := registerService(admin, st.APIServer, metricsNamespace, metricsService, st.MetricsPort, f("apiservices/metrics.yaml")); err != nil {
				return err
			}
		}
		// One adapter per group version is all kube-aggregator can route: the first.
		if len(st.Adapters) > 0 {
			a := &st.Adapters[0]
			if err := registerService(admin, st.APIServer, adaptersNamespace, a.Name, a.Port, a.APIServices); err != nil {
				return err
			}
			a.Registered = true
		}
		st.Registered = true
	}

	line, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f("state.json"), append(line, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println(string(line))

	exited := make(chan *server, len(servers))
	for _, s := range servers {
		go func(s *server) { <-s.done; exited <- s }(s)
	}
	select {
	case <-ctx.Done():
		return nil
	case s := <-exited:
		return fmt.Errorf("%s exited (%v); the end of %s:\n%s", s.name, s.err, s.log, tail(s.log, 40))
	}
}

// freePorts asks the kernel for n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// clientFor makes an HTTPS client that trusts CA.crt and, unless user is empty, presents
// user.crt.
func clientFor(dir, ca, user string) (*http.Client, error) {
	pemCA, err := os.ReadFile(filepath.Join(dir, ca+".crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	cfg := &tls.Config{RootCAs: pool}
	if user != "" {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, user+".crt"), filepath.Join(dir, user+".key"))
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}, nil
}

func getOK(c *http.Client, url string) func() error {
	return func() error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
		}
		return nil
	}
}

func writeKubeconfig(path, server, dir, user string) error {
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: control-plane
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: %s
  context: {cluster: control-plane, user: %s}
current-context: %s
`, server, filepath.Join(dir, "ca.crt"), user, filepath.Join(dir, user+".crt"), filepath.Join(dir, user+".key"), user, user, user)
	return os.WriteFile(path, []byte(text), 0o600)
}

// writeGatewayAuthorization writes apigw-authorization.yaml, an AuthorizationConfiguration
// whose one authorizer is kube-apiserver's SubjectAccessReview API (reached as admin through
// apigw-authorization.kubeconfig), with kube-apiserver's webhook defaults: a gateway given it
// decides every request as kube-apiserver, and so kube-aggregator's door, decides it.
func writeGatewayAuthorization(dir, apiserver string) error {
	kubeconfig := filepath.Join(dir, "apigw-authorization.kubeconfig")
	if err := writeKubeconfig(kubeconfig, apiserver+"/apis/authorization.k8s.io/v1/subjectaccessreviews", dir, "admin"); err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
- type: Webhook
  name: kube-apiserver
  webhook:
    timeout: 30s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: NoOpinion
    authorizedTTL: 5m
    unauthorizedTTL: 30s
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: %s
`, kubeconfig)
	return os.WriteFile(filepath.Join(dir, "apigw-authorization.yaml"), []byte(config), 0o644)
}

// served is one group version an APIService registers, with its priorities.
type served struct {
	group, version                        string
	groupPriorityMinimum, versionPriority int
}

// writeAPIServiceFile writes the APIServices of versions, served by namespace/name on port and
// verified against the CA in caFile, to path as one YAML stream.
func writeAPIServiceFile(path, caFile, namespace, name string, port int, versions []served) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	var docs []string
	for _, v := range versions {
		doc, err := json.Marshal(map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1",
			"kind":       "APIService",
			"metadata":   map[string]any{"name": v.version + "." + v.group},
			"spec": map[string]any{
				"group": v.group, "version": v.version,
				"groupPriorityMinimum": v.groupPriorityMinimum, "versionPriority": v.versionPriority,
				"service":  map[string]any{"namespace": namespace, "name": name, "port": port},
				"caBundle": ca,
			},
		})
		if err != nil {
			return err
		}
		docs = append(docs, string(doc))
	}
	return os.WriteFile(path, []byte("---\n"+strings.Join(docs, "\n---\n")+"\n"), 0o644)
}

// The APIServices of sample-apiserver's two versions, as upstream's artifacts declare v1alpha1
// (groupPriorityMinimum 1000, versionPriority 15), with the CA of its serving certificate.
func writeAPIServices(path, caFile string, port int) error {
	return writeAPIServiceFile(path, caFile, sampleNamespace, sampleService, port, []served{
		{"wardle.example.com", "v1alpha1", 1000, 15},
		{"wardle.example.com", "v1beta1", 1000, 10},
	})
}

// writeMetricsAPIService writes v1beta1.metrics.k8s.io as metrics-server's manifests declare it
// (groupPriorityMinimum 100, versionPriority 100), with the CA of its serving certificate.
func writeMetricsAPIService(path, caFile string, port int) error {
	return writeAPIServiceFile(path, caFile, metricsNamespace, metricsService, port, []served{
		{"metrics.k8s.io", "v1beta1", 100, 100},
	})
}

// register creates sample-apiserver's namespace, its Service (ExternalName 127.0.0.1: the API
// refuses loopback EndpointSlice addresses, and both kube-aggregator and apigw resolve an
// ExternalName Service to that name and the APIService's port), and its APIServices.
func register(c *http.Client, st State, apiservices string) error {
	return registerService(c, st.APIServer, sampleNamespace, sampleService, st.SamplePort, apiservices)
}

// registerService creates namespace/name as an ExternalName Service for 127.0.0.1:port and the
// APIServices in the file apiservices.
func registerService(c *http.Client, apiserver, namespace, name string, port int, apiservices string) error {
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": namespace}}
	if err := create(c, apiserver+"/api/v1/namespaces", ns); err != nil {
		return err
	}
	svc := map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"type": "ExternalName", "externalName": "127.0.0.1",
			"ports": []any{map[string]any{"name": "https", "port": port, "protocol": "TCP"}},
		},
	}
	if err := create(c, apiserver+"/api/v1/namespaces/"+namespace+"/services", svc); err != nil {
		return err
	}
	text, err := os.ReadFile(apiservices)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(text), "\n---\n") {
		doc = strings.TrimPrefix(strings.TrimSpace(doc), "---")
		var obj map[string]any
		if err := json.Unmarshal([]byte(doc), &obj); err != nil {
			return fmt.Errorf("%s: %w", apiservices, err)
		}
		if err := create(c, apiserver+"/apis/apiregistration.k8s.io/v1/apiservices", obj); err != nil {
			return err
		}
	}
	return nil
}

func create(c *http.Client, url string, obj any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict {
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, answer)
	}
	return nil
}

// server is one child process with its log file.
type server struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
}

func startServer(bin, log string, args []string) (*server, error) {
	out, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Killed with us, however we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &server{name: filepath.Base(bin), log: log, cmd: cmd, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		_ = out.Close()
		close(s.done)
	}()
	return s, nil
}

func (s *server) awaitReady(ctx context.Context, ready func() error, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		if last = ready(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("stopped before " + s.name + " was ready")
		case <-s.done:
			return fmt.Errorf("%s exited before it was ready (%v); the end of %s:\n%s", s.name, s.err, s.log, tail(s.log, 40))
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %s: %v; the end of %s:\n%s", s.name, limit, last, s.log, tail(s.log, 40))
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// authorization is kube-apiserver's authorization flag: the configuration file when one is
// given, else RBAC alone.
func authorization(config string) string {
	if config != "" {
		return "--authorization-config=" + config
	}
	return "--authorization-mode=RBAC"
}
