package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestConvertNodeOverlays: Karpenter's NodeOverlay fields carry over
// under Nodeforge's keys; what Nodeforge refuses is reported by path
// with why; and an overlay that would select more types without a
// requirement left behind, or would change nothing, is not written.
func TestConvertNodeOverlays(t *testing.T) {
	overlay := func(name, spec string) string {
		return "{apiVersion: karpenter.sh/v1alpha1, kind: NodeOverlay, metadata: {name: " + name + "}, spec: " + spec + "}\n---\n"
	}
	in := overlay("pool", `{requirements: [{key: karpenter.sh/nodepool, operator: In, values: [general]}], priceAdjustment: "-.5%", weight: 3}`) +
		overlay("zonal", `{requirements: [{key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a]}], price: "0.1", capacity: {example.com/x: "1"}}`) +
		overlay("kubelet", `{capacity: {kubernetes.io/batch-cpu: "1"}}`) +
		overlay("hostname", `{requirements: [{key: kubernetes.io/hostname, operator: In, values: [a]}], price: "1"}`) +
		overlay("steep", `{priceAdjustment: "-150%"}`)
	res, err := Convert(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range res.Dropped {
		got = append(got, d.String())
	}
	want := []string{
		"NodeOverlay zonal: spec.capacity[example.com/x] not carried over: Nodeforge refuses capacity on an overlay whose requirements name topology.kubernetes.io/zone or the capacity type: a node has the same resources wherever and however it is bought; write an overlay of its own for the capacity, without those requirements",
		"NodeOverlay kubelet: spec.capacity[kubernetes.io/batch-cpu] not carried over: Nodeforge's overlays add extended resources (a name with a domain outside kubernetes.io) and huge pages only",
		"NodeOverlay kubelet not written: it sets no price, priceAdjustment or capacity that Nodeforge carries, so it would change nothing (Nodeforge refuses such an overlay)",
		"NodeOverlay hostname: spec.requirements[0] not carried over: requirement on kubernetes.io/hostname: a requirement on the hostname chooses nothing that can be launched",
		"NodeOverlay hostname not written: requirement spec.requirements[0] is not carried over, and without it the overlay would apply to more instance types than it did",
		"NodeOverlay steep: spec.priceAdjustment not carried over: priceAdjustment -150% takes off more than 100% of a price",
		"NodeOverlay steep not written: it sets no price, priceAdjustment or capacity that Nodeforge carries, so it would change nothing (Nodeforge refuses such an overlay)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reported (-want,+got):\n%s", diff)
	}
	out := string(res.Out)
	for _, frag := range []string{"key: nodeforge.dev/nodepool", "priceAdjustment: -0.5%", "weight: 3", `price: "0.1"`} {
		if !strings.Contains(out, frag) {
			t.Errorf("output lacks %q:\n%s", frag, out)
		}
	}
	if res.Objects != 2 {
		t.Errorf("wrote %d objects, want pool and zonal:\n%s", res.Objects, out)
	}
}
