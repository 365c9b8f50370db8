package v1alpha1_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// stored is a NodeClaim as the scheduler plugin writes one; cases change
// one field of it.
const stored = `
apiVersion: nodeforge.dev/v1alpha1
kind: NodeClaim
metadata: {name: default-x7k2p}
spec:
  nodePool: default
  nodeClassRef: {group: nodeforge.dev, kind: SimulatedNodeClass, name: default}
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [c7.large, m7.large]}
  - {key: topology.kubernetes.io/zone, operator: In, values: [zone-a]}
  resources: {requests: {cpu: "1", memory: 1Gi}}
  labels: {intent: apps, nodeforge.dev/nodepool: default}
  annotations: {example.com/owner: team-a}
  taints: [{key: dedicated, value: apps, effect: NoSchedule}]
  startupTaints: [{key: node.cilium.io/agent-not-ready, effect: NoExecute}]
  expireAfter: 720h
  terminationGracePeriod: 1h
`

func claimObject(t *testing.T) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(stored), &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// TestNodeClaimSpecChanges: what a claim's node is made from cannot
// change once it is made, each refusal naming the field; what the
// scheduler and provisioner rewrite (requirements, resources) and what
// only shortens or lengthens the node's life can.
func TestNodeClaimSpecChanges(t *testing.T) {
	crd := loadCRD(t, "nodeforge.dev_nodeclaims.yaml")
	for _, tc := range []struct {
		name  string
		field string // under spec
		value any    // nil removes the field
		// wantErr is how the refusal starts; "" for a change accepted.
		wantErr string
	}{
		{"another node class is refused", "nodeClassRef", map[string]any{"group": "nodeforge.dev", "kind": "SimulatedNodeClass", "name": "other"}, "nodeClassRef is immutable"},
		{"another pool is refused", "nodePool", "other", "nodePool is immutable"},
		{"a label added is refused", "labels", map[string]any{"intent": "apps", "nodeforge.dev/nodepool": "default", "example.com/team": "a"}, "labels are immutable"},
		{"a label's value changed is refused", "labels", map[string]any{"intent": "db", "nodeforge.dev/nodepool": "default"}, "labels are immutable"},
		{"the labels removed are refused", "labels", nil, "labels are immutable"},
		{"an annotation changed is refused", "annotations", map[string]any{"example.com/owner": "team-b"}, "annotations are immutable"},
		{"a taint removed is refused", "taints", []any{}, "taints are immutable"},
		{"the taints removed are refused", "taints", nil, "taints are immutable"},
		{"a startup taint changed is refused", "startupTaints", []any{map[string]any{"key": "other", "effect": "NoExecute"}}, "startupTaints are immutable"},
		{"requirements narrowed are accepted", "requirements", []any{
			map[string]any{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": []any{"c7.large"}},
			map[string]any{"key": "topology.kubernetes.io/zone", "operator": "In", "values": []any{"zone-a"}},
		}, ""},
		{"resources repacked are accepted", "resources", map[string]any{"requests": map[string]any{"cpu": "3", "memory": "5Gi"}}, ""},
		{"a shorter expireAfter is accepted", "expireAfter", "45s", ""},
		{"a shorter terminationGracePeriod is accepted", "terminationGracePeriod", "10s", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, obj := claimObject(t), claimObject(t)
			if tc.value == nil {
				unstructured.RemoveNestedField(obj, "spec", tc.field)
			} else if err := unstructured.SetNestedField(obj, tc.value, "spec", tc.field); err != nil {
				t.Fatal(err)
			}
			errs := crd.validateUpdate(obj, old)
			switch {
			case tc.wantErr == "" && len(errs) > 0:
				t.Errorf("refused: %v", errs.ToAggregate())
			case tc.wantErr != "" && (len(errs) != 1 || errs[0].Field != "spec."+tc.field || !strings.HasPrefix(errs[0].Detail, tc.wantErr)):
				t.Errorf("refused with %v; want one error on spec.%s starting %q", errs.ToAggregate(), tc.field, tc.wantErr)
			}
		})
	}
	t.Run("the labels set on a claim made without any are refused", func(t *testing.T) {
		old, obj := claimObject(t), claimObject(t)
		unstructured.RemoveNestedField(old, "spec", "labels")
		if errs := crd.validateUpdate(obj, old); len(errs) != 1 || errs[0].Field != "spec.labels" {
			t.Errorf("refused with %v; want one error on spec.labels", errs.ToAggregate())
		}
	})
	t.Run("an update that changes nothing is accepted", func(t *testing.T) {
		if errs := crd.validateUpdate(claimObject(t), claimObject(t)); len(errs) > 0 {
			t.Errorf("refused: %v", errs.ToAggregate())
		}
	})
}

// TestNodeClaimLabelsAreAPoolsLabels: a claim's labels are refused where
// a pool's template labels are, so that what the provisioner sets on a
// node with its own rights is never what the pool could not ask for;
// nodeforge.dev/nodepool, which every claim carries, is the exception.
func TestNodeClaimLabelsAreAPoolsLabels(t *testing.T) {
	claims := loadCRD(t, "nodeforge.dev_nodeclaims.yaml")
	pools := loadCRD(t, "nodeforge.dev_nodepools.yaml")
	for _, key := range []string{
		"intent", "example.com/team", "node.kubernetes.io/exclude-from-external-load-balancers", "kubelet.kubernetes.io/x",
		"node-role.kubernetes.io/control-plane", "node-restriction.kubernetes.io/secure", "kubernetes.io/hostname",
		"node.kubernetes.io/instance-type", "k8s.io/x", "x.k8s.io/y", "karpenter.sh/nodepool", "karpenter.k8s.aws/x",
		"nodeforge.dev/capacity-type", "sub.nodeforge.dev/x", "-bad", "a/b/c",
	} {
		claim := claimObject(t)
		_ = unstructured.SetNestedField(claim, map[string]any{key: "v"}, "spec", "labels")
		pool := budgetPool("@daily")
		_ = unstructured.SetNestedField(pool, map[string]any{key: "v"}, "spec", "template", "metadata", "labels")
		claimErrs, poolErrs := claims.validate(claim), pools.validate(pool)
		if (len(claimErrs) == 0) != (len(poolErrs) == 0) {
			t.Errorf("label %q: a claim's refused with %v, a pool's with %v", key, claimErrs.ToAggregate(), poolErrs.ToAggregate())
		}
		for _, e := range claimErrs {
			if e.Field != "spec.labels" || !strings.Contains(e.Detail, "label") {
				t.Errorf("label %q: refused with %q, which does not name the labels", key, e.Error())
			}
		}
	}
	for key, wantErr := range map[string]string{
		"node-restriction.kubernetes.io/secure": "a kubelet may not set node-role or node-restriction labels",
		"node-role.kubernetes.io/control-plane": "a kubelet may not set node-role or node-restriction labels",
		"nodeforge.dev/capacity-type":           "label domain \"nodeforge.dev\" is reserved for Nodeforge; only nodeforge.dev/nodepool may be set",
	} {
		claim := claimObject(t)
		_ = unstructured.SetNestedField(claim, map[string]any{key: "v"}, "spec", "labels")
		if errs := claims.validate(claim); len(errs) != 1 || !strings.Contains(errs[0].Detail, wantErr) {
			t.Errorf("label %q on a claim: refused with %v; want %q", key, errs.ToAggregate(), wantErr)
		}
	}
	if errs := claims.validate(claimObject(t)); len(errs) > 0 {
		t.Errorf("a claim labelled nodeforge.dev/nodepool, as every claim is, refused: %v", errs.ToAggregate())
	}
}
