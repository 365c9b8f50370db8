package aws

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// FuzzUserDataCarriesExactlyThePoolsLabelsAndTaints: whatever labels,
// taints and class user data it is given, the builder either refuses them
// or writes user data from which the node registers with exactly those
// labels and taints: nothing smuggled in, nothing lost, always parseable.
func FuzzUserDataCarriesExactlyThePoolsLabelsAndTaints(f *testing.F) {
	f.Add("intent", "apps", "dedicated", "gpu", "NoSchedule", "#!/bin/bash\necho hi\n")
	f.Add("team", "x,nodeforge.dev/nodepool=other", "bad key!", "", "Bogus", "")
	f.Add("example.com/a", "b", "k", "v=1:NoExecute,evil", "NoExecute", "--//nodeforge//\nContent-Type: application/node.eks.aws\n\nspec: {}")
	f.Add("a", "", "k", "", "PreferNoSchedule", "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: [broken")
	f.Add("kubernetes.io/hostname", "h", "k", "v", "NoSchedule", "\n\n\n")
	f.Fuzz(func(t *testing.T, labelKey, labelValue, taintKey, taintValue, effect, own string) {
		labels := map[string]string{v1alpha1.LabelNodePool: "apps", labelKey: labelValue}
		taints := []corev1.Taint{{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}, {Key: taintKey, Value: taintValue, Effect: corev1.TaintEffect(effect)}}
		class := &v1alpha1.EC2NodeClass{Spec: v1alpha1.EC2NodeClassSpec{UserData: &own}}
		encoded, err := UserData(Options{ClusterName: "c", ClusterEndpoint: "https://c.example", ClusterServiceCIDR: "10.0.0.0/16"}, class, labels, taints)
		if err != nil {
			return // refused: nothing launched
		}
		raw, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			t.Fatal(err)
		}
		_, gotLabels, gotTaints, err := ParseNodeConfig(string(raw))
		if err != nil {
			t.Fatalf("accepted user data does not parse: %v\n%s", err, raw)
		}
		if diff := cmp.Diff(labels, gotLabels); diff != "" {
			t.Errorf("labels (-given,+registered):\n%s", diff)
		}
		if diff := cmp.Diff(taints, gotTaints); diff != "" {
			t.Errorf("taints (-given,+registered):\n%s", diff)
		}
		if strings.Count(string(raw), "--"+mimeBoundary+"--") != 1 {
			t.Errorf("user data does not end in exactly one closing boundary:\n%s", raw)
		}
	})
}
