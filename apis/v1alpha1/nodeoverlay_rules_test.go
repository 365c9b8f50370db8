package v1alpha1_test

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestNodeOverlayRefusals: the API server refuses an overlay that would
// change nothing, that sets a price two ways, that adds what the kubelet
// measures, or whose capacity depends on how the node is bought, each
// with a sentence saying why; and accepts the overlays the docs show.
func TestNodeOverlayRefusals(t *testing.T) {
	crd := loadCRD(t, "nodeforge.dev_nodeoverlays.yaml")
	for _, tc := range []struct {
		name string
		spec string
		want string // "" accepts; else a part of the one refusal's message
	}{
		{"a family's price halved is accepted", `{requirements: [{key: nodeforge.dev/instance-family, operator: In, values: [c7]}], priceAdjustment: "-50%"}`, ""},
		{"an absolute price on spot is accepted", `{requirements: [{key: nodeforge.dev/capacity-type, operator: In, values: [spot]}], price: "0.05", weight: 10}`, ""},
		{"an amount added to every type's price is accepted", `{priceAdjustment: "+0.1"}`, ""},
		{"an extended resource and huge pages are accepted", `{requirements: [{key: nodeforge.dev/instance-cpu, operator: Gt, values: ["4"]}], capacity: {example.com/fpga: "1", hugepages-2Mi: 100Mi}}`, ""},
		{"price and priceAdjustment together are refused", `{price: "1", priceAdjustment: "-10%"}`, "set price or priceAdjustment, not both"},
		{"an overlay that sets nothing is refused", `{requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}`, "must set price, priceAdjustment or capacity"},
		{"cpu in capacity is refused", `{capacity: {cpu: "2"}}`, "cpu, memory, ephemeral-storage and pods are what the kubelet measures"},
		{"pods in capacity is refused", `{capacity: {pods: "200"}}`, "cpu, memory, ephemeral-storage and pods are what the kubelet measures"},
		{"a kubernetes.io resource in capacity is refused", `{capacity: {kubernetes.io/batch-cpu: "2"}}`, "cpu, memory, ephemeral-storage and pods are what the kubelet measures"},
		{"zero capacity is refused", `{capacity: {example.com/fpga: "0"}}`, "capacity amounts must be more than zero"},
		{"capacity per capacity type is refused", `{requirements: [{key: nodeforge.dev/capacity-type, operator: In, values: [spot]}], capacity: {example.com/fpga: "1"}}`, "capacity cannot depend on topology.kubernetes.io/zone or nodeforge.dev/capacity-type"},
		{"a price without a sign is refused", `{priceAdjustment: "50%"}`, "priceAdjustment must be a signed amount or percentage"},
		{"more than 100% off is refused", `{priceAdjustment: "-150%"}`, "cannot take off more than 100%"},
		{"100% off is accepted", `{priceAdjustment: "-100%"}`, ""},
		{"a negative price is refused", `{price: "-1"}`, "should match"},
		{"Karpenter's capacity-type key is refused", `{requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}], price: "1"}`, "are Karpenter's"},
		{"the hostname is refused", `{requirements: [{key: kubernetes.io/hostname, operator: Exists}], price: "1"}`, "must not name kubernetes.io/hostname"},
		{"In without values is refused", `{requirements: [{key: kubernetes.io/arch, operator: In}], price: "1"}`, "need at least one value"},
		{"a weight of 0 is refused", `{weight: 0, price: "1"}`, "should be greater than or equal to 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var spec map[string]any
			if err := yaml.Unmarshal([]byte(tc.spec), &spec); err != nil {
				t.Fatal(err)
			}
			obj := map[string]any{"apiVersion": "nodeforge.dev/v1alpha1", "kind": "NodeOverlay", "metadata": map[string]any{"name": "o"}, "spec": spec}
			errs := crd.validate(obj)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("refused: %v", errs.ToAggregate())
			case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Errorf("refused with %v; want one refusal saying %q", errs.ToAggregate(), tc.want)
			}
		})
	}
}
