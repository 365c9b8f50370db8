package aws

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// NodeConfig is the part of nodeadm's configuration document (API
// node.eks.aws/v1alpha1, kind NodeConfig, as documented for Amazon Linux
// 2023 EKS images) that joins a node to the cluster.
type NodeConfig struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Spec       NodeConfigSpec `json:"spec"`
}

// NodeConfigSpec holds the cluster to join and the kubelet's settings.
type NodeConfigSpec struct {
	Cluster NodeConfigCluster `json:"cluster"`
	Kubelet NodeConfigKubelet `json:"kubelet,omitempty"`
}

// NodeConfigCluster names the cluster and how to reach it.
type NodeConfigCluster struct {
	Name                 string `json:"name"`
	APIServerEndpoint    string `json:"apiServerEndpoint"`
	CertificateAuthority []byte `json:"certificateAuthority"`
	CIDR                 string `json:"cidr"`
}

// NodeConfigKubelet is merged by nodeadm into the kubelet's configuration
// file (config) and command line (flags).
type NodeConfigKubelet struct {
	Config map[string]any `json:"config,omitempty"`
	Flags  []string       `json:"flags,omitempty"`
	// MaxPodsExpression is a CEL expression over default_enis (the default
	// network card's interfaces), ips_per_eni and max_pods (nodeadm's
	// standard figure) that nodeadm evaluates to the kubelet's maxPods and
	// computes kube-reserved memory from (nodeadm releases from October
	// 2025 on, NodeConfig spec.kubelet.maxPodsExpression).
	MaxPodsExpression string `json:"maxPodsExpression,omitempty"`
}

// maxPodsExpression writes the class's max pods settings as nodeadm's
// maxPodsExpression, so that one launch template serves every instance
// type and nodeadm reserves memory for the same max pods as Pods
// computes: a maxPods in the kubelet's config would set the kubelet's
// figure but leave nodeadm's kube-reserved computed from its own. "" when
// nodeadm's standard figure is the class's.
func maxPodsExpression(k *v1alpha1.KubeletConfiguration) string {
	switch {
	case k == nil:
		return ""
	case k.MaxPods != nil:
		return strconv.Itoa(int(*k.MaxPods))
	case k.ReservedENIs != nil && *k.ReservedENIs > 0:
		r := *k.ReservedENIs
		return fmt.Sprintf("default_enis > %d ? (default_enis - %d) * (ips_per_eni - 1) + 2 : 2", r, r)
	}
	return ""
}

// mimeBoundary separates the parts of the user data.
const mimeBoundary = "//nodeforge//"

// UserData builds the instance's user data: a MIME multi-part document with
// the class's own user data first (a shell script, or a NodeConfig of its
// own, which nodeadm merges) and then the NodeConfig that joins the node to
// the cluster with the pool's labels and taints.
//
// Labels and taints are checked as the API server checks a Node's, and the
// class's own part may not contain the MIME boundary: the API already
// refuses such pools, and this keeps a value that reached here some other
// way from adding labels, taints or parts of its own.
func UserData(opts Options, class *v1alpha1.EC2NodeClass, labels map[string]string, taints []corev1.Taint) (string, error) {
	if err := checkLabelsAndTaints(labels, taints); err != nil {
		return "", err
	}
	if class.Spec.UserData != nil && strings.Contains(*class.Spec.UserData, mimeBoundary) {
		return "", fmt.Errorf("EC2NodeClass %s: userData contains %q, the boundary Nodeforge separates its parts with", class.Name, mimeBoundary)
	}
	nc := NodeConfig{APIVersion: "node.eks.aws/v1alpha1", Kind: "NodeConfig", Spec: NodeConfigSpec{
		Cluster: NodeConfigCluster{Name: opts.ClusterName, APIServerEndpoint: opts.ClusterEndpoint, CertificateAuthority: opts.ClusterCA, CIDR: opts.ClusterServiceCIDR},
	}}
	config := map[string]any{}
	if k := class.Spec.Kubelet; k != nil {
		nc.Spec.Kubelet.MaxPodsExpression = maxPodsExpression(k)
		if k.PodsPerCore != nil {
			config["podsPerCore"] = *k.PodsPerCore
		}
		if len(k.KubeReserved) > 0 {
			config["kubeReserved"] = k.KubeReserved
		}
		if len(k.SystemReserved) > 0 {
			config["systemReserved"] = k.SystemReserved
		}
		if len(k.EvictionHard) > 0 {
			config["evictionHard"] = k.EvictionHard
		}
	}
	if len(config) > 0 {
		nc.Spec.Kubelet.Config = config
	}
	if len(labels) > 0 {
		keys := make([]string, 0, len(labels))
		for k := range labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		pairs := make([]string, 0, len(keys))
		for _, k := range keys {
			pairs = append(pairs, k+"="+labels[k])
		}
		nc.Spec.Kubelet.Flags = append(nc.Spec.Kubelet.Flags, "--node-labels="+strings.Join(pairs, ","))
	}
	if len(taints) > 0 {
		ts := make([]string, 0, len(taints))
		for _, t := range taints {
			s := t.Key
			if t.Value != "" {
				s += "=" + t.Value
			}
			ts = append(ts, s+":"+string(t.Effect))
		}
		nc.Spec.Kubelet.Flags = append(nc.Spec.Kubelet.Flags, "--register-with-taints="+strings.Join(ts, ","))
	}
	doc, err := yaml.Marshal(nc)
	if err != nil {
		return "", fmt.Errorf("encoding NodeConfig: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=%q\n\n", mimeBoundary)
	if class.Spec.UserData != nil && strings.TrimSpace(*class.Spec.UserData) != "" {
		own := *class.Spec.UserData
		contentType := "text/x-shellscript; charset=\"us-ascii\""
		if strings.Contains(own, "node.eks.aws/") {
			contentType = "application/node.eks.aws"
		}
		fmt.Fprintf(&b, "--%s\nContent-Type: %s\n\n%s\n\n", mimeBoundary, contentType, strings.TrimRight(own, "\n"))
	}
	fmt.Fprintf(&b, "--%s\nContent-Type: application/node.eks.aws\n\n---\n%s\n--%s--\n", mimeBoundary, doc, mimeBoundary)
	return base64.StdEncoding.EncodeToString(b.Bytes()), nil
}

// checkLabelsAndTaints refuses what the kubelet's --node-labels and
// --register-with-taints could not carry as given.
func checkLabelsAndTaints(labels map[string]string, taints []corev1.Taint) error {
	var errs []string
	for k, v := range labels {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Sprintf("label key %q: %s", k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Sprintf("label %s value %q: %s", k, v, msg))
		}
	}
	for _, t := range taints {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, fmt.Sprintf("taint key %q: %s", t.Key, msg))
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, fmt.Sprintf("taint %s value %q: %s", t.Key, t.Value, msg))
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, fmt.Sprintf("taint %s effect %q: must be NoSchedule, PreferNoSchedule or NoExecute", t.Key, t.Effect))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return fmt.Errorf("user data: %s", strings.Join(errs, "; "))
	}
	return nil
}

// ParseNodeConfig finds the NodeConfig part Nodeforge wrote in decoded user
// data (the last node.eks.aws part), and reads the labels and taints its
// kubelet flags register the node with, for tests that check what UserData
// writes. The sandbox's nodes read user data with a reader of their own,
// written from nodeadm's behaviour (internal/sandbox/eksnode).
func ParseNodeConfig(userData string) (*NodeConfig, map[string]string, []corev1.Taint, error) {
	parts := strings.Split(userData, "--"+mimeBoundary)
	last := ""
	for _, part := range parts {
		head, body, ok := strings.Cut(part, "\n\n")
		if ok && strings.Contains(head, "application/node.eks.aws") {
			last = body // a class's own NodeConfig comes before Nodeforge's
		}
	}
	if last == "" {
		return nil, nil, nil, fmt.Errorf("user data has no application/node.eks.aws part")
	}
	found := &NodeConfig{}
	if err := yaml.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(last), "---\n")), found); err != nil {
		return nil, nil, nil, fmt.Errorf("parsing NodeConfig: %w", err)
	}
	labels := map[string]string{}
	var taints []corev1.Taint
	for _, f := range found.Spec.Kubelet.Flags {
		if v, ok := strings.CutPrefix(f, "--node-labels="); ok {
			for _, pair := range strings.Split(v, ",") {
				k, val, _ := strings.Cut(pair, "=")
				labels[k] = val
			}
		}
		if v, ok := strings.CutPrefix(f, "--register-with-taints="); ok {
			for _, t := range strings.Split(v, ",") {
				kv, effect, _ := strings.Cut(t, ":")
				k, val, _ := strings.Cut(kv, "=")
				taints = append(taints, corev1.Taint{Key: k, Value: val, Effect: corev1.TaintEffect(effect)})
			}
		}
	}
	return found, labels, taints, nil
}
