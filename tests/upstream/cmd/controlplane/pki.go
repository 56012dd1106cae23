package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// An authority that signs the leaf certificates of one trust domain.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// leaf says what one certificate is for.
type leaf struct {
	file   string // base name: FILE.crt and FILE.key
	cn     string
	orgs   []string
	dns    []string
	ips    []net.IP
	server bool
	client bool
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serial() (*big.Int, error) { return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120)) }

// newAuthority makes a self-signed CA and writes FILE.crt and FILE.key into dir.
func newAuthority(dir, file, cn string) (*authority, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing CA %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := writePair(dir, file, der, key); err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key}, nil
}

// issue signs one leaf certificate and writes it with its key.
func (ca *authority) issue(dir string, l leaf) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: l.cn, Organization: l.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     l.dns,
		IPAddresses:  l.ips,
	}
	if l.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("signing %s: %w", l.file, err)
	}
	return writePair(dir, l.file, der, key)
}

func writePair(dir, file string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, file+".crt"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, file+".key"), "PRIVATE KEY", keyDER, 0o600)
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// serviceAccountKeys writes sa.key (signing) and sa.pub (verifying) for kube-apiserver's tokens.
func serviceAccountKeys(dir string) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.key"), "PRIVATE KEY", priv, 0o600); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub, 0o644)
}

// makePKI writes every certificate the control plane and a gateway in front of it need.
//
//	ca                  cluster CA: kube-apiserver's serving certificate and every client certificate
//	front-proxy-ca      signs the front proxies' client certificates (--requestheader-client-ca-file)
//	wardle-ca           signs sample-apiserver's serving certificate (the APIService caBundle)
//	metrics-ca          signs metrics-server's
//	adapters-ca         signs the metrics adapters'
func makePKI(dir string, sampleHost, metricsHost string) error {
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	cluster, err := newAuthority(dir, "ca", "apigw-test-cluster-ca")
	if err != nil {
		return err
	}
	for _, l := range []leaf{
		{file: "apiserver", cn: "kube-apiserver", dns: []string{"localhost", "kubernetes", "kubernetes.default.svc"}, ips: loopback, server: true},
		{file: "gateway", cn: "apigw", dns: []string{"localhost"}, ips: loopback, server: true},
		{file: "admin", cn: "admin", orgs: []string{"system:masters"}, client: true},
		{file: "alice", cn: "alice", orgs: []string{"wardle-users"}, client: true},
		{file: "bob", cn: "bob", client: true},
	} {
		if err := cluster.issue(dir, l); err != nil {
			return err
		}
	}
	proxy, err := newAuthority(dir, "front-proxy-ca", "apigw-test-front-proxy-ca")
	if err != nil {
		return err
	}
	for _, l := range []leaf{
		{file: "front-proxy-client", cn: "front-proxy-client", client: true},
		{file: "apigw-proxy-client", cn: "apigw", client: true},
		// From the right CA with a name kube-apiserver does not allow (the doctor's test).
		{file: "stranger-proxy-client", cn: "stranger", client: true},
	} {
		if err := proxy.issue(dir, l); err != nil {
			return err
		}
	}
	wardle, err := newAuthority(dir, "wardle-ca", "apigw-test-wardle-ca")
	if err != nil {
		return err
	}
	if err := wardle.issue(dir, leaf{file: "wardle-serving", cn: sampleHost, dns: []string{sampleHost, "localhost"}, ips: loopback, server: true}); err != nil {
		return err
	}
	metrics, err := newAuthority(dir, "metrics-ca", "apigw-test-metrics-ca")
	if err != nil {
		return err
	}
	if err := metrics.issue(dir, leaf{file: "metrics-serving", cn: metricsHost, dns: []string{metricsHost, "localhost"}, ips: loopback, server: true}); err != nil {
		return err
	}
	if err := issueAdapterCerts(dir, loopback); err != nil {
		return err
	}
	return serviceAccountKeys(dir)
}
