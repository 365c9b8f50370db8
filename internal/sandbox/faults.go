package sandbox

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeforge/nodeforge/internal/sandbox/faultproxy"
)

// startFaultProxy puts a faultproxy between the provisioner and the API
// server: it serves, on loopback, with a certificate of the sandbox's CA,
// reaches the API server with the provisioner's own client certificate
// (so RBAC and the audit log see the provisioner), and the provisioner's
// kubeconfig is pointed at it.
func (s *Sandbox) startFaultProxy(certs *pki, cfg faultproxy.Config) error {
	if err := certs.issue("faultproxy", pkix.Name{CommonName: "faultproxy"}, true, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return err
	}
	serving, err := tls.LoadX509KeyPair(certs.path("faultproxy.crt"), certs.path("faultproxy.key"))
	if err != nil {
		return err
	}
	client, err := tls.LoadX509KeyPair(certs.path("nodeforge-provisioner.crt"), certs.path("nodeforge-provisioner.key"))
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(certs.path("ca.crt"))
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return errors.New("reading the sandbox CA")
	}
	upstream, err := url.Parse(s.Server)
	if err != nil {
		return err
	}
	s.Faults = faultproxy.New(upstream, &tls.Config{Certificates: []tls.Certificate{client}, RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}}, cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Faults, TLSConfig: &tls.Config{Certificates: []tls.Certificate{serving}, NextProtos: []string{"h2", "http/1.1"}}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	s.faultServer = srv
	path := filepath.Join(s.Dir, "kubeconfigs", "nodeforge-provisioner.kubeconfig")
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	for _, c := range kc.Clusters {
		c.Server = fmt.Sprintf("https://%s", l.Addr())
	}
	return clientcmd.WriteToFile(*kc, path)
}
