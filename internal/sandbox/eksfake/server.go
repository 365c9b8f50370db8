// Package eksfake is an in-process fake of the Amazon EKS endpoint that
// speaks the protocol aws-sdk-go-v2's EKS client speaks, REST-JSON
// (restJson1: the operation in the method and path, JSON bodies, the error
// code in the X-Amzn-ErrorType header), so that the real client can be
// driven at it over loopback HTTP.
//
// It models what a node autoscaler reads from EKS to bootstrap nodes:
// DescribeCluster (GET /clusters/{name}) answering {"cluster": {...}} with
// name, arn, createdAt, version, platformVersion, endpoint, status,
// certificateAuthority.data, resourcesVpcConfig (subnetIds,
// securityGroupIds, clusterSecurityGroupId, vpcId),
// kubernetesNetworkConfig (serviceIpv4Cidr, serviceIpv6Cidr, ipFamily) and
// accessConfig.authenticationMode. An unknown name is answered 404
// ResourceNotFoundException, as EKS does. Member names, the operation's
// path and the error shapes are the SDK's (service/eks schemas/schemas.go:
// DescribeCluster's HTTP trait, the Cluster, VpcConfigResponse,
// KubernetesNetworkConfigResponse, Certificate and AccessConfigResponse
// members, and the error structures in type_registry.go); the SDK takes
// an error's code from X-Amzn-ErrorType and its message from the body's
// "message" (smithy-go transport/http/protocol/restjson1). Timestamps are
// epoch seconds, restJson1's default. Faults can be injected and every
// request is recorded.
//
// Not modelled: every other operation (creating, updating or deleting
// clusters, node groups, add-ons, access entries), cluster fields beyond
// those above (logging, identity/OIDC, tags, health, endpoint access
// flags, encryption, upgrade policy), and signature verification (a SigV4
// Authorization header scoped to the server's region and to "eks" must be
// present; its signature is not checked).
package eksfake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
)

// Account is the account ID in the ARN of every cluster that does not set
// its own.
const Account = "000000000000"

// DefaultVersion is the Kubernetes version of a cluster that does not set
// one. It is the version of the EKS-optimised AMIs in ec2fake.DefaultWorld.
const DefaultVersion = "1.37"

// Cluster is an EKS cluster as DescribeCluster reports it. AddCluster fills
// in what is left empty: ARN (from the region, Account and name), Status
// ACTIVE, Version DefaultVersion, IPFamily ipv4 with ServiceIPv4CIDR
// 172.20.0.0/16 (the block EKS picks for a VPC in 10.0.0.0/8 when none is
// asked for), AuthenticationMode CONFIG_MAP (the EKS API's default) and
// CreatedAt now.
type Cluster struct {
	Name            string
	ARN             string
	Status          string // CREATING, ACTIVE, DELETING, FAILED, UPDATING or PENDING
	Version         string // Kubernetes minor version, e.g. "1.37"
	PlatformVersion string // e.g. "eks.1"; left out of the answer if empty
	// Endpoint is the API server's URL, e.g. https://127.0.0.1:6443.
	Endpoint string
	// CertificateAuthority is the cluster CA certificate in PEM; EKS sends
	// it base64-encoded in certificateAuthority.data, and so does the fake.
	CertificateAuthority []byte

	IPFamily        string // "ipv4" or "ipv6"
	ServiceIPv4CIDR string
	ServiceIPv6CIDR string

	VpcID            string
	SubnetIDs        []string
	SecurityGroupIDs []string
	// ClusterSecurityGroupID is the security group EKS creates for the
	// control plane and managed nodes.
	ClusterSecurityGroupID string

	AuthenticationMode string // API, API_AND_CONFIG_MAP or CONFIG_MAP
	CreatedAt          time.Time
}

func (c Cluster) clone() Cluster {
	c.CertificateAuthority = slices.Clone(c.CertificateAuthority)
	c.SubnetIDs = slices.Clone(c.SubnetIDs)
	c.SecurityGroupIDs = slices.Clone(c.SecurityGroupIDs)
	return c
}

// Request is one call received, recorded whether it succeeded or not, so
// that tests can count calls and retries.
type Request struct {
	// Action is the operation the method and path name, e.g.
	// DescribeCluster; empty when they name none the fake knows.
	Action string
	Method string
	// Path is the request's path, e.g. /clusters/sandbox.
	Path string
	Time time.Time
}

// Server is a fake EKS endpoint serving on a loopback port; it implements
// http.Handler. Its clusters are behind one mutex, as every action is
// small; the request log and the faults keep their own.
type Server struct {
	region string
	lb     *awsfake.Loopback

	mu       sync.Mutex
	clusters map[string]*Cluster
	log      awsfake.Log[Request]
	faults   awsfake.Faults // by action; "" is any action
	now      func() time.Time
}

// New starts a server for region (e.g. "us-west-2") on a loopback port.
// Requests must be signed for that region. Close stops it.
func New(region string) (*Server, error) {
	if region == "" {
		return nil, fmt.Errorf("eksfake: a region is required")
	}
	s := &Server{region: region, clusters: map[string]*Cluster{}, now: time.Now}
	var err error
	if s.lb, err = awsfake.Serve(s); err != nil {
		return nil, fmt.Errorf("eksfake: %w", err)
	}
	return s, nil
}

// URL is the base URL to give the client as its BaseEndpoint.
func (s *Server) URL() string { return s.lb.URL() }

// Close stops serving at once, dropping open connections; a fake has
// nothing to drain. It is safe to call more than once.
func (s *Server) Close() { s.lb.Close() }

// AddCluster adds a cluster, with the defaults Cluster names filled in,
// and returns it as stored. It fails if the name is empty or taken.
func (s *Server) AddCluster(c Cluster) (Cluster, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Name == "" {
		return Cluster{}, fmt.Errorf("eksfake: a cluster needs a name")
	}
	if s.clusters[c.Name] != nil {
		return Cluster{}, fmt.Errorf("eksfake: cluster %s exists; use SetCluster to change it", c.Name)
	}
	return s.storeLocked(c), nil
}

// SetCluster replaces the cluster of c's name, as an update on EKS would
// (say, a version upgrade or a status change), with the same defaults as
// AddCluster, and returns it as stored. It fails if there is no such
// cluster, so that a misspelt name does not pass unnoticed.
func (s *Server) SetCluster(c Cluster) (Cluster, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.clusters[c.Name]
	if old == nil {
		return Cluster{}, fmt.Errorf("eksfake: no cluster %s; use AddCluster to add it", c.Name)
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = old.CreatedAt
	}
	return s.storeLocked(c), nil
}

// DeleteCluster removes a cluster at once; DescribeCluster then answers
// ResourceNotFoundException. Deleting an unknown name does nothing.
func (s *Server) DeleteCluster(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clusters, name)
}

func (s *Server) storeLocked(c Cluster) Cluster {
	c = c.clone()
	if c.ARN == "" {
		c.ARN = "arn:aws:eks:" + s.region + ":" + Account + ":cluster/" + c.Name
	}
	if c.Status == "" {
		c.Status = "ACTIVE"
	}
	if c.Version == "" {
		c.Version = DefaultVersion
	}
	if c.IPFamily == "" {
		c.IPFamily = "ipv4"
	}
	if c.IPFamily == "ipv4" && c.ServiceIPv4CIDR == "" {
		c.ServiceIPv4CIDR = "172.20.0.0/16"
	}
	if c.AuthenticationMode == "" {
		c.AuthenticationMode = "CONFIG_MAP"
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	s.clusters[c.Name] = &c
	return c.clone()
}

// Requests returns the calls received so far, in order.
func (s *Server) Requests() []Request { return s.log.All() }

// FailNext makes the next n calls of action ("" for any action) fail with
// HTTP status and the error code given, before they do anything: e.g. 403
// AccessDeniedException, which the SDK returns at once, or 429
// ThrottlingException, which it retries. It replaces any fault pending for
// action; n = 0 clears it. A fault for the action is used before one for
// any action.
func (s *Server) FailNext(action string, n, status int, code string) {
	s.faults.FailNext(action, n, awsfake.Fault{Status: status, Code: code})
}

// route finds the operation of a request and its path labels.
func route(r *http.Request) (action string, labels []string) {
	parts := strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/")
	if r.Method == http.MethodGet && len(parts) == 2 && parts[0] == "clusters" && parts[1] != "" {
		name, err := url.PathUnescape(parts[1])
		if err == nil {
			return "DescribeCluster", []string{name}
		}
	}
	return "", nil
}

// ServeHTTP answers one REST-JSON request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Amzn-RequestId", awsfake.HexID())
	action, labels := route(r)
	s.log.Add(action, Request{Action: action, Method: r.Method, Path: r.URL.Path, Time: s.now()})
	out, err := s.serve(r, action, labels)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// serve checks a request's signature, injects a pending fault, and runs
// its action.
func (s *Server) serve(r *http.Request, action string, labels []string) (any, *awsfake.Error) {
	if e := (awsfake.SigV4{Service: "eks", Region: s.region}).Check(r); e != nil {
		msg := e.Error()
		if e.Fault == awsfake.Unsigned {
			msg = "Missing Authentication Token" // as EKS words it
		}
		return nil, &awsfake.Error{Status: http.StatusForbidden, Code: e.Code(), Message: msg}
	}
	if e := s.faults.Inject(action, ""); e != nil {
		return nil, e
	}
	if action == "DescribeCluster" {
		return s.describeCluster(labels[0])
	}
	return nil, awsfake.Errorf(http.StatusNotFound, "UnknownOperationException", "eksfake does not implement %s %s", r.Method, r.URL.Path)
}

// writeError answers with the error code in X-Amzn-ErrorType, from which
// the SDK takes ErrorCode(), and {"message": ...} in the body, as EKS does.
func writeError(w http.ResponseWriter, e *awsfake.Error) {
	w.Header().Set("X-Amzn-ErrorType", e.Code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": e.Message})
}

// The answer's shapes, with the member names of the SDK's schemas.
type (
	describeClusterResponse struct {
		Cluster wireCluster `json:"cluster"`
	}
	wireCluster struct {
		Name                    string            `json:"name"`
		Arn                     string            `json:"arn"`
		CreatedAt               float64           `json:"createdAt"`
		Version                 string            `json:"version"`
		Endpoint                string            `json:"endpoint,omitempty"`
		Status                  string            `json:"status"`
		PlatformVersion         string            `json:"platformVersion,omitempty"`
		CertificateAuthority    *wireCertificate  `json:"certificateAuthority,omitempty"`
		ResourcesVpcConfig      wireVpcConfig     `json:"resourcesVpcConfig"`
		KubernetesNetworkConfig wireNetworkConfig `json:"kubernetesNetworkConfig"`
		AccessConfig            wireAccessConfig  `json:"accessConfig"`
	}
	wireCertificate struct {
		Data string `json:"data"`
	}
	wireVpcConfig struct {
		SubnetIDs              []string `json:"subnetIds"`
		SecurityGroupIDs       []string `json:"securityGroupIds"`
		ClusterSecurityGroupID string   `json:"clusterSecurityGroupId,omitempty"`
		VpcID                  string   `json:"vpcId,omitempty"`
	}
	wireNetworkConfig struct {
		ServiceIPv4CIDR string `json:"serviceIpv4Cidr,omitempty"`
		ServiceIPv6CIDR string `json:"serviceIpv6Cidr,omitempty"`
		IPFamily        string `json:"ipFamily"`
	}
	wireAccessConfig struct {
		AuthenticationMode string `json:"authenticationMode"`
	}
)

func (s *Server) describeCluster(name string) (any, *awsfake.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clusters[name]
	if c == nil {
		return nil, awsfake.Errorf(http.StatusNotFound, "ResourceNotFoundException", "No cluster found for name: %s.", name)
	}
	out := wireCluster{
		Name:            c.Name,
		Arn:             c.ARN,
		CreatedAt:       float64(c.CreatedAt.UnixMilli()) / 1000,
		Version:         c.Version,
		Endpoint:        c.Endpoint,
		Status:          c.Status,
		PlatformVersion: c.PlatformVersion,
		ResourcesVpcConfig: wireVpcConfig{
			// EKS answers empty lists rather than leaving them out.
			SubnetIDs:              append([]string{}, c.SubnetIDs...),
			SecurityGroupIDs:       append([]string{}, c.SecurityGroupIDs...),
			ClusterSecurityGroupID: c.ClusterSecurityGroupID,
			VpcID:                  c.VpcID,
		},
		KubernetesNetworkConfig: wireNetworkConfig{ServiceIPv4CIDR: c.ServiceIPv4CIDR, ServiceIPv6CIDR: c.ServiceIPv6CIDR, IPFamily: c.IPFamily},
		AccessConfig:            wireAccessConfig{AuthenticationMode: c.AuthenticationMode},
	}
	if len(c.CertificateAuthority) > 0 {
		out.CertificateAuthority = &wireCertificate{Data: base64.StdEncoding.EncodeToString(c.CertificateAuthority)}
	}
	return describeClusterResponse{Cluster: out}, nil
}
