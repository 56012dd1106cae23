// replicas.go owns the sample-apiserver replicas and their EndpointSlices: starting one and
// publishing it once ready, the rolling restart a Deployment makes (surge one, wait for it, take
// the old one out of the endpoints as it is sent SIGTERM, let it drain), a replica lost to
// SIGKILL, and each replica's own request count.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// replica is one sample-apiserver process and its EndpointSlice.
type replica struct {
	name string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

type replicaSet struct {
	o      options
	cp     *controlPlane
	cl     *cluster
	ip     string
	client *http.Client // trusts wardle-ca, presents admin's certificate
	mu     sync.Mutex
	live   []*replica
	next   int
}

func newReplicaSet(o options, cp *controlPlane, cl *cluster) (*replicaSet, error) {
	ip, err := hostAddress()
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cl.ca)
	admin, err := tls.LoadX509KeyPair(cp.path("admin.crt"), cp.path("admin.key"))
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: serviceName + "." + serviceNamespace + ".svc", Certificates: []tls.Certificate{admin},
	}}}
	return &replicaSet{o: o, cp: cp, cl: cl, ip: ip, client: client}, nil
}

// hostAddress is the first non-loopback IPv4 address of an interface that is up: what an
// EndpointSlice may carry.
func hostAddress() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String(), nil
			}
		}
	}
	return "", errors.New("no non-loopback IPv4 address on this machine: EndpointSlices refuse loopback addresses, so the replicas need one")
}

func (s *replicaSet) url(r *replica, path string) string {
	return "https://" + net.JoinHostPort(s.ip, strconv.Itoa(r.port)) + path
}

// add starts a replica, waits for its /readyz and publishes it as ready.
func (s *replicaSet) add(ctx context.Context) (*replica, error) {
	port, err := freePortOn(s.ip)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.next++
	r := &replica{name: fmt.Sprintf("%s-r%d", serviceName, s.next), port: port, done: make(chan struct{})}
	s.mu.Unlock()
	log, err := os.Create(s.cp.path(filepath.Join("logs", "wardle-"+r.name+".log")))
	if err != nil {
		return nil, err
	}
	f := s.cp.path
	r.cmd = exec.Command(filepath.Join(s.o.bin, "wardle"),
		"--etcd-servers="+s.cp.etcd,
		"--bind-address="+s.ip, "--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+f("wardle-serving.crt"), "--tls-private-key-file="+f("wardle-serving.key"),
		"--kubeconfig="+f("admin.kubeconfig"),
		"--authentication-kubeconfig="+f("admin.kubeconfig"),
		"--authorization-kubeconfig="+f("admin.kubeconfig"),
		"--authentication-tolerate-lookup-failure=false",
		"--profiling=false",
		"--shutdown-delay-duration="+s.o.shutdownDelay.String(),
		"--shutdown-send-retry-after=true",
		"--shutdown-watch-termination-grace-period="+s.o.watchGrace.String(),
	)
	r.cmd.Stdout, r.cmd.Stderr = log, log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting sample-apiserver: %w", err)
	}
	go func() { _ = r.cmd.Wait(); _ = log.Close(); close(r.done) }()
	if err := s.awaitReady(ctx, r); err != nil {
		return nil, err
	}
	if err := s.publish(ctx, r, true); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.live = append(s.live, r)
	s.mu.Unlock()
	return r, nil
}

func (s *replicaSet) awaitReady(ctx context.Context, r *replica) error {
	if err := awaitOK(ctx, s.client, s.url(r, "/readyz"), 2*time.Minute, r.done); err != nil {
		return fmt.Errorf("replica %s (logs/wardle-%s.log): %w", r.name, r.name, err)
	}
	return nil
}

// publish writes the replica's EndpointSlice: ready, or terminating (not ready, as the
// endpoint controller marks a pod being deleted).
func (s *replicaSet) publish(ctx context.Context, r *replica, ready bool) error {
	terminating := !ready
	name, port, proto := portName, int32(r.port), corev1.ProtocolTCP
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: serviceNamespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: serviceName,
			discoveryv1.LabelManagedBy:   "apigw-rollout",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{s.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: &terminating},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	slices := s.cl.kube.DiscoveryV1().EndpointSlices(serviceNamespace)
	if ready {
		_, err := slices.Create(ctx, slice, metav1.CreateOptions{})
		return err
	}
	old, err := slices.Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	slice.ResourceVersion = old.ResourceVersion
	_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	return err
}

func (s *replicaSet) unpublish(ctx context.Context, r *replica) error {
	return s.cl.kube.DiscoveryV1().EndpointSlices(serviceNamespace).Delete(ctx, r.name, metav1.DeleteOptions{})
}

// roll replaces every live replica, one at a time, as a Deployment with maxSurge 1 and
// maxUnavailable 0 does.
func (s *replicaSet) roll(ctx context.Context) error {
	s.mu.Lock()
	old := append([]*replica(nil), s.live...)
	s.mu.Unlock()
	for _, r := range old {
		if _, err := s.add(ctx); err != nil {
			return err
		}
		if err := s.terminate(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// terminate takes r out of the endpoints as it is sent SIGTERM, waits for it to exit (its
// shutdown delay, then the drain) and removes its EndpointSlice.
func (s *replicaSet) terminate(ctx context.Context, r *replica) error {
	if err := s.publish(ctx, r, false); err != nil {
		return err
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	grace := s.o.shutdownDelay + 60*time.Second
	select {
	case <-r.done:
	case <-time.After(grace):
		_ = r.cmd.Process.Kill()
		<-r.done
		logf("replica %s did not exit within %s of SIGTERM; killed", r.name, grace)
	}
	s.forget(r)
	return s.unpublish(ctx, r)
}

// killOne kills the oldest live replica with SIGKILL, leaves it in the endpoints for the probe
// lag (the time a readiness probe takes to notice), then replaces it.
func (s *replicaSet) killOne(ctx context.Context) error {
	s.mu.Lock()
	r := s.live[0]
	s.mu.Unlock()
	_ = r.cmd.Process.Kill()
	<-r.done
	s.forget(r)
	pause(ctx, s.o.probeLag)
	if err := s.publish(ctx, r, false); err != nil {
		return err
	}
	if _, err := s.add(ctx); err != nil {
		return err
	}
	return s.unpublish(ctx, r)
}

func (s *replicaSet) forget(r *replica) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range s.live {
		if l == r {
			s.live = append(s.live[:i], s.live[i+1:]...)
			return
		}
	}
}

// requestCounts is each live replica's apiserver_request_total for the wardle group.
func (s *replicaSet) requestCounts(ctx context.Context) (map[string]float64, error) {
	s.mu.Lock()
	live := append([]*replica(nil), s.live...)
	s.mu.Unlock()
	out := map[string]float64{}
	for _, r := range live {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url(r, "/metrics"), nil)
		if err != nil {
			return nil, err
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", r.name, err)
		}
		var total float64
		for labels, v := range samples(resp.Body, "apiserver_request_total") {
			if strings.Contains(labels, `group="wardle.example.com"`) {
				total += v
			}
		}
		_ = resp.Body.Close()
		out[r.name] = total
	}
	return out, nil
}

func (s *replicaSet) stopAll() {
	s.mu.Lock()
	live := append([]*replica(nil), s.live...)
	s.mu.Unlock()
	for _, r := range live {
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

func freePortOn(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
