// cluster.go owns the parts around the replicas: the control plane (cmd/controlplane as a
// child), the wardle Service and APIServices in it, apigw in cluster mode, and the two doors
// with the client configuration each takes.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The wardle Service, as in upstream's artifacts; its certificates name api.wardle.svc.
const (
	serviceNamespace = "wardle"
	serviceName      = "api"
	servicePort      = 443
	portName         = "https"
	loadNamespace    = "rollout"
)

var apiservices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// controlPlane is the launcher's child process and what it wrote.
type controlPlane struct {
	dir, bin  string
	apiserver string
	etcd      string
	cmd       *exec.Cmd
	stdin     io.Closer
}

func startControlPlane(o options) (*controlPlane, error) {
	cmd := exec.Command(filepath.Join(o.bin, "controlplane"), "-dir="+o.dir, "-bin="+o.bin,
		"-sample=false", "-register=false", "-exit-on-eof",
		"-apiserver-arg=--enable-aggregator-routing=true")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the control plane did not start (its messages are above): %w", err)
	}
	var st struct{ APIServer, Etcd string }
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		return nil, fmt.Errorf("the control plane's state line %q: %w", line, err)
	}
	return &controlPlane{dir: o.dir, bin: o.bin, apiserver: st.APIServer, etcd: st.Etcd, cmd: cmd, stdin: stdin}, nil
}

func (cp *controlPlane) path(name string) string { return filepath.Join(cp.dir, name) }

func (cp *controlPlane) stop() {
	_ = cp.stdin.Close()
	done := make(chan struct{})
	go func() { _ = cp.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cp.cmd.Process.Kill()
		<-done
	}
}

// adminConfig is the launcher's admin (system:masters) at server.
func (cp *controlPlane) adminConfig(server string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.path("admin.kubeconfig"))
	if err != nil {
		return nil, err
	}
	cfg.Host = server
	cfg.QPS = -1
	cfg.UserAgent = "apigw-rollout"
	// sample-apiserver warns that v1alpha1 is deprecated on every answer.
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg, nil
}

// cluster is the admin's clients at kube-apiserver.
type cluster struct {
	kube *kubernetes.Clientset
	dyn  *dynamic.DynamicClient
	ca   []byte
}

func newCluster(cp *controlPlane) (*cluster, error) {
	cfg, err := cp.adminConfig(cp.apiserver)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(cp.path("wardle-ca.crt"))
	if err != nil {
		return nil, err
	}
	return &cluster{kube: kube, dyn: dyn, ca: ca}, nil
}

// register creates the namespaces, the selectorless Service and sample-apiserver's two
// APIServices (upstream's priorities), pointing at the Service's port 443.
func (c *cluster) register(ctx context.Context) error {
	for _, ns := range []string{serviceNamespace, loadNamespace} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := c.kube.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: serviceName, Namespace: serviceNamespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: portName, Port: servicePort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(servicePort),
		}}},
	}
	if _, err := c.kube.CoreV1().Services(serviceNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, v := range []struct {
		version            string
		group, versionPrio int64
	}{{"v1alpha1", 1000, 15}, {"v1beta1", 1000, 10}} {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
			"metadata": map[string]any{"name": v.version + ".wardle.example.com"},
			"spec": map[string]any{
				"group": "wardle.example.com", "version": v.version,
				"groupPriorityMinimum": v.group, "versionPriority": v.versionPrio,
				"service":  map[string]any{"namespace": serviceNamespace, "name": serviceName, "port": int64(servicePort)},
				"caBundle": c.ca,
			},
		}}
		if _, err := c.dyn.Resource(apiservices).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// awaitAvailable waits until the door lists the wardle group version.
func (c *cluster) awaitAvailable(ctx context.Context, d door) error {
	hc, err := rest.HTTPClientFor(d.cfg)
	if err != nil {
		return err
	}
	err = awaitOK(ctx, hc, d.cfg.Host+"/apis/wardle.example.com/v1alpha1", 90*time.Second, nil)
	if err != nil {
		return fmt.Errorf("wardle.example.com/v1alpha1 not served: %w", err)
	}
	return nil
}

// awaitOK polls url until it answers 200, for up to limit, or until gone closes; the error
// has the last answer.
func awaitOK(ctx context.Context, c *http.Client, url string, limit time.Duration, gone <-chan struct{}) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-gone:
			return errors.New("the server exited")
		default:
		}
		resp, err := c.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status + ": " + string(body)
		} else {
			last = err.Error()
		}
		pause(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("no 200 from %s within %s: %s", url, limit, last)
}

// gateway is apigw in cluster mode.
type gateway struct {
	url string
	cmd *exec.Cmd
}

func startGateway(o options, cp *controlPlane) (*gateway, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(cp.path("logs/apigw.log"))
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + cp.path("gateway.crt"), "--tls-private-key-file=" + cp.path("gateway.key"),
		"--client-ca-file=" + cp.path("ca.crt"),
		"--proxy-client-cert-file=" + cp.path("apigw-proxy-client.crt"), "--proxy-client-key-file=" + cp.path("apigw-proxy-client.key"),
		"--delegate-url=" + cp.apiserver, "--delegate-ca-file=" + cp.path("ca.crt"),
		// Authorized as kube-apiserver authorizes, so as kube-aggregator's door does.
		"--anonymous-auth=true", "--authorization-config=" + cp.path("apigw-authorization.yaml"),
		"--kubeconfig=" + cp.path("admin.kubeconfig"), "--enable-aggregator-routing",
	}
	cmd := exec.Command(o.apigw, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", o.apigw, err)
	}
	return &gateway{url: fmt.Sprintf("https://127.0.0.1:%d", port), cmd: cmd}, nil
}

func (g *gateway) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-done
	}
}

// door is one front door and the admin's client configuration for it.
type door struct {
	name    string
	cfg     *rest.Config
	retries func() map[string]float64
}

func (cp *controlPlane) door(name string, gw *gateway) (door, error) {
	switch name {
	case "kube-aggregator":
		cfg, err := cp.adminConfig(cp.apiserver)
		// kube-aggregator counts no retries of its own.
		return door{name: name, cfg: cfg, retries: func() map[string]float64 { return nil }}, err
	case "apigw":
		cfg, err := cp.adminConfig(gw.url)
		if err != nil {
			return door{}, err
		}
		cfg.TLSClientConfig.CAFile = cp.path("ca.crt")
		return door{name: name, cfg: cfg, retries: func() map[string]float64 { return scrape(cfg, "apigw_backend_retries_total") }}, nil
	}
	return door{}, fmt.Errorf("unknown door %q (kube-aggregator, apigw)", name)
}

// scrape sums the samples of metric on the door's /metrics by their label set.
func scrape(cfg *rest.Config, metric string) map[string]float64 {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil
	}
	resp, err := hc.Get(cfg.Host + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	return samples(resp.Body, metric)
}

// samples reads the Prometheus text exposition in r and returns metric's samples by labels.
func samples(r io.Reader, metric string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[cut+1:], 64)
		if err != nil {
			continue
		}
		out[strings.TrimPrefix(line[:cut], metric)] += v
	}
	return out
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
