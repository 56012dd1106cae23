// auth.go owns authentication, done as k8s.io/apiserver's requestheader
// authenticator does it: a client certificate verified against the requestheader
// CA (client-auth usage), a CN among the allowed names, and the identity taken from
// the username, group and extra headers. There is no authorization.
package main

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// identity is who a request is authenticated as.
type identity struct {
	user   string
	groups []string
	extra  map[string][]string
}

// authenticate returns the identity of r, or nil and why not.
func (s *server) authenticate(r *http.Request) (*identity, string) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, "no client certificate"
	}
	if s.caPool == nil {
		return nil, "no -requestheader-client-ca-file configured"
	}
	leaf := r.TLS.PeerCertificates[0]
	intermediates := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		intermediates.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         s.caPool,
		Intermediates: intermediates,
		CurrentTime:   time.Now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Sprintf("client certificate %q: %v", leaf.Subject.CommonName, err)
	}
	if len(s.cfg.allowedNames) > 0 {
		allowed := false
		for _, n := range s.cfg.allowedNames {
			if leaf.Subject.CommonName == n {
				allowed = true
				break
			}
		}
		if !allowed {
			return nil, fmt.Sprintf("client certificate CN %q is not in -requestheader-allowed-names %v", leaf.Subject.CommonName, s.cfg.allowedNames)
		}
	}
	user := ""
	for _, h := range s.cfg.usernameHeaders {
		if v := strings.TrimSpace(r.Header.Get(h)); v != "" {
			user = v
			break
		}
	}
	if user == "" {
		return nil, fmt.Sprintf("no user in headers %v", s.cfg.usernameHeaders)
	}
	id := &identity{user: user, groups: []string{}, extra: map[string][]string{}}
	for _, h := range s.cfg.groupHeaders {
		for _, v := range r.Header.Values(h) {
			if v != "" {
				id.groups = append(id.groups, v)
			}
		}
	}
	// Header names in r.Header are canonical; prefixes compare case-insensitively.
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		lower := strings.ToLower(name)
		for _, prefix := range s.cfg.extraPrefixes {
			p := strings.ToLower(prefix)
			if !strings.HasPrefix(lower, p) || len(lower) == len(p) {
				continue
			}
			key := unescapeExtraKey(lower[len(p):])
			for _, v := range r.Header[name] {
				if v != "" {
					id.extra[key] = append(id.extra[key], v)
				}
			}
		}
	}
	return id, ""
}

// unescapeExtraKey undoes the percent-encoding kube applies to extra keys in header names.
func unescapeExtraKey(k string) string {
	if u, err := url.PathUnescape(k); err == nil {
		return u
	}
	return k
}
