package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/sandboxtest"
)

// kube is an admin client of a control plane with Nodeforge's CRDs.
var kube client.Client

func TestMain(m *testing.M) { sandboxtest.ControlPlaneMain(m, &kube, nil) }

// karpenterYAML is what a Karpenter v1 user has: two NodePools and two
// EC2NodeClasses, with requirements (well-known and Karpenter's own
// labels), taints, limits, budgets, disruption settings, AMI aliases and
// subnet and security group selectors, and fields Nodeforge lacks.
const karpenterYAML = `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    karpenter.sh/nodepool-hash: "123"
    team: platform
spec:
  template:
    metadata:
      labels: {intent: apps}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand, reserved]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c7g.large, m7g.large, c7i.large], minValues: 2}
      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}
      - {key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a, us-west-2b]}
      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["2"]}
      - {key: karpenter.k8s.aws/instance-ebs-bandwidth, operator: Gt, values: ["1000"]}
      taints: [{key: example.com/dedicated, value: apps, effect: NoSchedule}]
      startupTaints: [{key: example.com/warming, effect: NoExecute}]
      expireAfter: 336h
      terminationGracePeriod: 1h
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
    budgets:
    - nodes: "10%"
    - {nodes: "0", schedule: "0 9 * * mon-fri", duration: 8h, reasons: [Drifted, Underutilized]}
  limits: {cpu: "1000", memory: 1000Gi}
  weight: 10
status:
  resources: {cpu: "4"}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: batch}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: bottles}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: Never
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-prod
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}, {id: subnet-0123456789abcdef0}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}, {name: eks-nodes}]
  tags: {team: platform}
  metadataOptions: {httpEndpoint: enabled, httpProtocolIPv6: disabled, httpPutResponseHopLimit: 1, httpTokens: required}
  blockDeviceMappings:
  - deviceName: /dev/xvda
    rootVolume: true
    ebs: {volumeSize: 100Gi, volumeType: gp3, encrypted: true, deleteOnTermination: true, snapshotID: snap-0123}
  kubelet:
    maxPods: 58
    systemReserved: {cpu: 100m, memory: 100Mi}
    evictionHard: {memory.available: 5%}
    podsPerCore: 2
  detailedMonitoring: true
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: bottles}
spec:
  amiFamily: Bottlerocket
  role: KarpenterNodeRole-prod
  amiSelectorTerms: [{alias: bottlerocket@latest}, {id: ami-0123456789abcdef0}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]
`

// TestConvertKarpenter converts the objects, checks what was carried over
// and that every field left behind is reported, and creates each converted
// object in a real API server (Nodeforge's CRDs and their validation),
// with a dry run so that other tests may use the same names.
func TestConvertKarpenter(t *testing.T) {
	res, err := Convert(strings.NewReader(karpenterYAML))
	if err != nil {
		t.Fatal(err)
	}
	out, dropped := res.Out, res.Dropped
	var got []string
	for _, d := range dropped {
		got = append(got, d.String())
	}
	report := strings.Join(got, "\n")
	for _, want := range []string{
		"NodePool general: spec.template.spec.requirements[6] not carried over: requirement on karpenter.k8s.aws/instance-ebs-bandwidth: Nodeforge publishes no such label (its instance labels are nodeforge.dev/instance-{category,",
		"EC2NodeClass default: spec.blockDeviceMappings[0].ebs.snapshotID not carried over",
		"EC2NodeClass default: spec.detailedMonitoring not carried over: Nodeforge launches instances with basic",
		"EC2NodeClass bottles: spec.amiSelectorTerms[0].alias not carried over: alias bottlerocket@latest",
		"EC2NodeClass bottles: spec.amiFamily not carried over: amiFamily Bottlerocket",
		"EC2NodeClass bottles not written: its images are Bottlerocket's",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q; it is:\n%s", want, report)
		}
	}
	if len(dropped) != 6 {
		t.Errorf("%d fields reported, want the 6 above:\n%s", len(dropped), report)
	}
	for _, unwanted := range []string{"status", "last-applied", "nodepool-hash", "metadata"} {
		if strings.Contains(report, unwanted) {
			t.Errorf("report names %q, bookkeeping that is not the user's: %s", unwanted, report)
		}
	}

	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var pools []*v1alpha1.NodePool
	var classes []*v1alpha1.EC2NodeClass
	for {
		var probe struct{ Kind string }
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			break
		}
		b, err := json.Marshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(b, &probe)
		switch probe.Kind {
		case "NodePool":
			np := &v1alpha1.NodePool{}
			if err := json.Unmarshal(b, np); err != nil {
				t.Fatal(err)
			}
			pools = append(pools, np)
		case "EC2NodeClass":
			nc := &v1alpha1.EC2NodeClass{}
			if err := json.Unmarshal(b, nc); err != nil {
				t.Fatal(err)
			}
			classes = append(classes, nc)
		default:
			t.Fatalf("converted a %q", probe.Kind)
		}
	}
	if len(pools) != 2 || len(classes) != 1 {
		t.Fatalf("converted %d pools and %d classes, want 2 and 1 (not the Bottlerocket class):\n%s", len(pools), len(classes), out)
	}
	general := pools[0]
	reqs := map[string]v1alpha1.NodeSelectorRequirementWithMinValues{}
	for _, r := range general.Spec.Template.Spec.Requirements {
		reqs[r.Key] = r
	}
	if r := reqs[v1alpha1.LabelCapacityType]; strings.Join(r.Values, ",") != "spot,on-demand,reserved" {
		t.Errorf("capacity type requirement %+v, want nodeforge.dev/capacity-type In [spot on-demand reserved]", r)
	}
	if r := reqs["node.kubernetes.io/instance-type"]; r.MinValues == nil || *r.MinValues != 2 {
		t.Errorf("instance type requirement lost its minValues: %+v", r)
	}
	if r := reqs[v1alpha1.LabelInstanceCategory]; r.Operator != "In" || strings.Join(r.Values, ",") != "c,m" {
		t.Errorf("instance category requirement %+v, want nodeforge.dev/instance-category In [c m]", r)
	}
	if r := reqs[v1alpha1.LabelInstanceGeneration]; r.Operator != "Gt" || strings.Join(r.Values, ",") != "2" {
		t.Errorf("instance generation requirement %+v, want nodeforge.dev/instance-generation Gt [2]", r)
	}
	if len(reqs) != 6 {
		t.Errorf("requirements %v, want capacity type, arch, instance type, zone, instance category and generation", reqs)
	}
	if ref := general.Spec.Template.Spec.NodeClassRef; ref.Group != "nodeforge.dev" || ref.Kind != "EC2NodeClass" || ref.Name != "default" {
		t.Errorf("nodeClassRef %+v", ref)
	}
	if general.Annotations["team"] != "platform" || len(general.Annotations) != 1 {
		t.Errorf("annotations %v, want team=platform alone", general.Annotations)
	}
	if d := general.Spec.Disruption; d.ConsolidationPolicy != v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized || string(d.ConsolidateAfter) != "1m" || len(d.Budgets) != 2 ||
		d.Budgets[1].Schedule == nil || len(d.Budgets[1].Reasons) != 2 {
		t.Errorf("disruption %+v", d)
	}
	// Karpenter's budgets hold consolidation and drift, never expiration
	// or repair; Nodeforge's hold what they name, or every method.
	if r := general.Spec.Disruption.Budgets[0].Reasons; len(r) != 3 || slices.Contains(r, v1alpha1.DisruptionReasonExpired) {
		t.Errorf("budget without reasons converted with reasons %v, want Karpenter's three", r)
	}
	if general.Spec.Weight == nil || *general.Spec.Weight != 10 || limitCPU(general) != 1000 {
		t.Errorf("weight %v, limits %v", general.Spec.Weight, general.Spec.Limits)
	}
	if string(general.Spec.Template.Spec.ExpireAfter) != "336h" || general.Spec.Template.Spec.TerminationGracePeriod == nil || len(general.Spec.Template.Spec.Taints) != 1 || len(general.Spec.Template.Spec.StartupTaints) != 1 {
		t.Errorf("template spec %+v", general.Spec.Template.Spec)
	}
	def := classes[0]
	if def.Spec.BlockDeviceMappings[0].EBS.VolumeSize != 100 || def.Spec.Kubelet == nil || def.Spec.Kubelet.MaxPods == nil || *def.Spec.Kubelet.MaxPods != 58 {
		t.Errorf("class default: volumes %+v, kubelet %+v", def.Spec.BlockDeviceMappings, def.Spec.Kubelet)
	}
	if len(def.Spec.SubnetSelectorTerms) != 2 || len(def.Spec.SecurityGroupSelectorTerms) != 2 || def.Spec.AMISelectorTerms[0].Alias != "al2023@latest" {
		t.Errorf("class default selectors %+v", def.Spec)
	}
	// The API server accepts every converted object as it is.
	ctx := context.Background()
	for _, o := range append(objects(classes), objects(pools)...) {
		if err := kube.Create(ctx, o, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			t.Errorf("the API server refused converted %T %s: %v", o, o.GetName(), err)
		}
	}
}

// TestConvertReadsAList: kubectl get -o yaml writes a List; its items
// are converted.
func TestConvertReadsAList(t *testing.T) {
	list := "apiVersion: v1\nkind: List\nitems:\n- apiVersion: karpenter.sh/v1\n  kind: NodePool\n  metadata: {name: a, uid: x, resourceVersion: \"1\"}\n  spec:\n    template:\n      spec:\n        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n- apiVersion: karpenter.k8s.aws/v1\n  kind: EC2NodeClass\n  metadata: {name: default}\n  spec:\n    role: R\n    amiSelectorTerms: [{alias: al2023@latest}]\n    subnetSelectorTerms: [{id: subnet-1}]\n    securityGroupSelectorTerms: [{id: sg-1}]\n"
	res, err := Convert(strings.NewReader(list))
	out := res.Out
	if err != nil || len(res.Dropped) != 0 {
		t.Fatalf("Convert = %v, dropped %v", err, res.Dropped)
	}
	if !strings.Contains(string(out), "kind: NodePool") || !strings.Contains(string(out), "kind: EC2NodeClass") || strings.Contains(string(out), "uid") {
		t.Errorf("converted:\n%s", out)
	}
}

// TestConvertRefusesOtherObjects: a document that is not a Karpenter
// NodePool or EC2NodeClass is an error naming it, not silently skipped.
func TestConvertRefusesOtherObjects(t *testing.T) {
	_, err := Convert(strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
	if err == nil || !strings.Contains(err.Error(), "v1 ConfigMap is not a Karpenter NodePool") {
		t.Errorf("Convert of a ConfigMap: %v", err)
	}
}

// TestRunExitsThreeWhenFieldsAreLeft: the command writes the objects and
// exits 3 when it reports fields left behind, 0 when nothing is.
func TestRunExitsThreeWhenFieldsAreLeft(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(nil, strings.NewReader(karpenterYAML), &stdout, &stderr); code != 3 {
		t.Errorf("exit %d, want 3; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "6 field(s) not carried over") || !strings.Contains(stdout.String(), "kind: EC2NodeClass") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	clean := "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n"
	if code := run(nil, strings.NewReader(clean), &stdout, &stderr); code != 0 {
		t.Errorf("exit %d for a pool with nothing to leave behind; stderr:\n%s", code, stderr.String())
	}
}

// TestRunExitsOneOnErrors: input that cannot be converted at all is an
// error (exit 1), not a report.
func TestRunExitsOneOnErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{name: "a file that does not exist", args: []string{"testdata/karpenter/no-such-file.yaml"}, want: "no such file"},
		{name: "an object of another kind", stdin: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", want: "is not a Karpenter NodePool"},
		{name: "input that is not YAML", stdin: "kind: [\n", want: "document 1"},
		{name: "a flag it does not have", args: []string{"-o", "json"}, want: "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, strings.NewReader(tc.stdin), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

func objects[T client.Object](xs []T) []client.Object {
	out := make([]client.Object, 0, len(xs))
	for _, x := range xs {
		out = append(out, x)
	}
	return out
}

func limitCPU(np *v1alpha1.NodePool) int64 {
	q := np.Spec.Limits[corev1.ResourceCPU]
	return q.Value()
}
