package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/manifests"
)

// pool is a valid NodePool spec; cases change one thing in it.
const pool = `
apiVersion: nodeforge.dev/v1alpha1
kind: NodePool
metadata: {name: NAME}
spec:
  template:
    metadata:
      labels: {intent: apps}
    spec:
      nodeClassRef: {group: nodeforge.dev, kind: SimulatedNodeClass, name: default}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c7.large, m7.large]}
`

// validationCase is an object the API server must accept or refuse.
type validationCase struct {
	name string
	// edit is applied to the pool above, as "path=yaml" lines; when its
	// first line starts with "apiVersion" it is the object edited instead.
	edit    []string
	wantErr string // "" for an object that must be accepted
	// quotesPattern says why the refusal may quote the regular
	// expression the value failed rather than say what the field takes.
	quotesPattern string
}

// TestAPIServerValidation creates each object against the real API server
// (as a dry run) and checks that valid ones are accepted and each invalid
// one is refused with a message that says what is wrong.
func TestAPIServerValidation(t *testing.T) {
	cases := []validationCase{
		{name: "the base pool is accepted"},
		{name: "every field of a pool can be set", edit: []string{
			"spec.weight=100",
			"spec.limits={cpu: '1000', memory: 1000Gi, nvidia.com/gpu: 8}",
			"spec.disruption={consolidationPolicy: WhenEmpty, consolidateAfter: 1h30m, budgets: [{nodes: '0', schedule: '0 9 * * mon-fri', duration: 8h, reasons: [Empty, Drifted]}, {nodes: '100%'}, {nodes: '5'}]}",
			"spec.template.spec.requirements=[{key: nodeforge.dev/capacity-type, operator: In, values: [spot]}, {key: example.com/generation, operator: Gt, values: ['5']}, {key: node.kubernetes.io/instance-type, operator: In, values: [a, b, c], minValues: 2}, {key: kubernetes.io/arch, operator: Exists}]",
			"spec.template.spec.taints=[{key: example.com/dedicated, value: gpu, effect: NoSchedule}]",
			"spec.template.spec.startupTaints=[{key: node.cilium.io/agent-not-ready, effect: NoExecute}]",
			"spec.template.spec.expireAfter=Never",
			"spec.template.spec.terminationGracePeriod=48h",
			"spec.repair={policies: [{conditionType: Ready, conditionStatus: Unknown, tolerationDuration: 10m}, {conditionType: example.com/GPUHealthy, conditionStatus: 'False', tolerationDuration: 1m}]}",
		}},
		{name: "a repair policy with a status other than True, False or Unknown is refused", edit: []string{
			"spec.repair={policies: [{conditionType: Ready, conditionStatus: Broken, tolerationDuration: 10m}]}",
		}, wantErr: `Unsupported value: "Broken"`},
		{name: "an unknown requirement operator is refused", edit: []string{
			"spec.template.spec.requirements=[{key: zone, operator: Matches, values: [a]}]",
		}, wantErr: `Unsupported value: "Matches": supported values: "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"`},
		{name: "operator In with no values is refused", edit: []string{
			"spec.template.spec.requirements=[{key: topology.kubernetes.io/zone, operator: In}]",
		}, wantErr: "operators 'In' and 'NotIn' need at least one value"},
		{name: "operator NotIn with no values is refused", edit: []string{
			"spec.template.spec.requirements=[{key: node.kubernetes.io/instance-type, operator: NotIn}]",
		}, wantErr: `spec.template.spec.requirements[0]: Invalid value: operators 'In' and 'NotIn' need at least one value`},
		{name: "operator Gt with a value that overflows int64 is refused", edit: []string{
			"spec.template.spec.requirements=[{key: example.com/generation, operator: Gt, values: ['99999999999999999999']}]",
		}, wantErr: "a whole number of at most 18 digits"},
		{name: "operator Lt with 18 digits is accepted", edit: []string{
			"spec.template.spec.requirements=[{key: example.com/generation, operator: Lt, values: ['999999999999999999']}]",
		}},
		{name: "a comma-separated requirement value is refused", edit: []string{
			"spec.template.spec.requirements=[{key: node.kubernetes.io/instance-type, operator: In, values: ['m7.large,c7.large']}]",
		}, wantErr: `spec.template.spec.requirements[0]: Invalid value: requirement values must be label values`},
		{name: "a budget schedule with trailing garbage is refused", edit: []string{"spec.disruption={consolidateAfter: 0s, budgets: [{nodes: '1', schedule: '@dailyX', duration: 1h}]}"},
			wantErr: `spec.disruption.budgets[0].schedule: Invalid value: "@dailyX": schedule must be a cron schedule in UTC: five fields separated by spaces`},
		{name: "a scheduled budget of 0s is refused", edit: []string{"spec.disruption={consolidateAfter: 0s, budgets: [{nodes: '1', schedule: '@daily', duration: 0h0m0s}]}"},
			wantErr: "a scheduled budget's duration must be more than 0s"},
		{name: "a five-field budget schedule is accepted", edit: []string{"spec.disruption={consolidateAfter: 0s, budgets: [{nodes: '1', schedule: '0 9 * * mon-fri', duration: 8h}]}"}},
		{name: "operator Exists with values is refused", edit: []string{
			"spec.template.spec.requirements=[{key: topology.kubernetes.io/zone, operator: Exists, values: [a]}]",
		}, wantErr: "operators 'Exists' and 'DoesNotExist' take no values"},
		{name: "operator Gt with a word is refused", edit: []string{
			"spec.template.spec.requirements=[{key: example.com/generation, operator: Gt, values: [five]}]",
		}, wantErr: "operators 'Gt' and 'Lt' take exactly one value, a whole number"},
		{name: "minValues above the number of values is refused", edit: []string{
			"spec.template.spec.requirements=[{key: node.kubernetes.io/instance-type, operator: In, values: [a], minValues: 2}]",
		}, wantErr: "minValues needs operator 'In' with at least that many values"},
		{name: "minValues above 1 on zones is refused: a claim launches in one zone", edit: []string{
			"spec.template.spec.requirements=[{key: topology.kubernetes.io/zone, operator: In, values: [zone-a, zone-b], minValues: 2}]",
		}, wantErr: "minValues above 1 is not supported on topology.kubernetes.io/zone"},
		{name: "a negative limit is refused", edit: []string{"spec.limits={cpu: '-4'}"},
			wantErr: "limits must not be negative"},
		{name: "a malformed limit is refused", edit: []string{"spec.limits={memory: lots}"},
			wantErr: `spec.limits.memory: Invalid value: "lots"`, quotesPattern: "a limit is a resource.Quantity, whose schema (and Kubernetes' own refusal of a bad quantity) is its pattern"},
		{name: "a malformed consolidateAfter is refused", edit: []string{"spec.disruption={consolidateAfter: 30 seconds}"},
			wantErr: `spec.disruption.consolidateAfter: Invalid value: "30 seconds": must be a duration in hours, minutes and seconds of at most 6 digits each and 12 characters in all, such as 30s, 15m or 1h30m, or Never`},
		{name: "an expireAfter in days is refused", edit: []string{"spec.template.spec.expireAfter=30d"},
			wantErr: `spec.template.spec.expireAfter: Invalid value: "30d": must be a duration in hours, minutes and seconds`},
		{name: "a duration too long to parse is refused", edit: []string{"spec.disruption={consolidateAfter: 9999999999h}"},
			wantErr: `spec.disruption.consolidateAfter: Invalid value: "9999999999h": must be a duration in hours, minutes and seconds of at most 6 digits each`},
		{name: "a duration of many parts adding up past what parses is refused", edit: []string{"spec.template.spec.expireAfter=999999h999999h999999h"},
			wantErr: `spec.template.spec.expireAfter: Too long: may not be more than 12 bytes`},
		{name: "the longest duration accepted parses", edit: []string{"spec.template.spec.expireAfter=999999h9999h"}},
		{name: "a budget duration too long to parse is refused", edit: []string{"spec.disruption={consolidateAfter: 0s, budgets: [{nodes: '1', schedule: '@daily', duration: 99999999h}]}"},
			wantErr: `spec.disruption.budgets[0].duration: Invalid value: "99999999h": duration must be a duration in hours, minutes and seconds of at most 6 digits each`},
		{name: "a terminationGracePeriod too long to parse is refused", edit: []string{"spec.template.spec.terminationGracePeriod=9999999999h"},
			wantErr: `spec.template.spec.terminationGracePeriod: Invalid value: "9999999999h": terminationGracePeriod must be a duration in hours, minutes and seconds`},
		{name: "a budget of 110% is refused", edit: []string{"spec.disruption={consolidateAfter: 0s, budgets: [{nodes: '110%'}]}"},
			wantErr: "nodes must be a whole number, such as 5, or a percentage from 0% to 100%, such as 10%"},
		{name: "a budget schedule without a duration is refused", edit: []string{"spec.disruption={consolidateAfter: 0s, budgets: [{nodes: '1', schedule: '@daily'}]}"},
			wantErr: "a budget with a schedule needs a duration, and a duration needs a schedule"},
		{name: "a label in the nodeforge.dev domain is refused", edit: []string{"spec.template.metadata.labels={nodeforge.dev/nodepool: other}"},
			wantErr: `label domain "nodeforge.dev" is reserved for Nodeforge`},
		{name: "a label in a subdomain of nodeforge.dev is refused", edit: []string{"spec.template.metadata.labels={team.nodeforge.dev/owner: me}"},
			wantErr: `label domain "nodeforge.dev" is reserved for Nodeforge`},
		{name: "a label in Karpenter's karpenter.sh domain is refused", edit: []string{"spec.template.metadata.labels={karpenter.sh/nodepool: general}"},
			wantErr: `label domains "karpenter.sh" and "karpenter.k8s.aws" are Karpenter's`},
		{name: "a label in Karpenter's karpenter.k8s.aws domain is refused", edit: []string{"spec.template.metadata.labels={karpenter.k8s.aws/ec2nodeclass: default}"},
			wantErr: `label domains "karpenter.sh" and "karpenter.k8s.aws" are Karpenter's`},
		{name: "a requirement on Karpenter's capacity-type label is refused", edit: []string{"spec.template.spec.requirements=[{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]"},
			wantErr: `requirement keys in the domains "karpenter.sh" and "karpenter.k8s.aws" are Karpenter's: require nodeforge.dev/capacity-type`},
		{name: "a requirement on Karpenter's instance labels is refused", edit: []string{"spec.template.spec.requirements=[{key: karpenter.k8s.aws/instance-category, operator: In, values: [c]}]"},
			wantErr: `requirement keys in the domains "karpenter.sh" and "karpenter.k8s.aws" are Karpenter's`},
		{name: "an annotation in the nodeforge.dev domain is refused", edit: []string{"spec.template.metadata.annotations={nodeforge.dev/do-not-disrupt: 'true'}"},
			wantErr: `annotation domain "nodeforge.dev" is reserved for Nodeforge`},
		{name: "an annotation in a subdomain of nodeforge.dev is refused", edit: []string{"spec.template.metadata.annotations={team.nodeforge.dev/owner: me}"},
			wantErr: `annotation domain "nodeforge.dev" is reserved for Nodeforge`},
		{name: "an annotation in another domain is accepted", edit: []string{"spec.template.metadata.annotations={example.com/owner: me, nodeforge.dev.example.com/x: 'yes'}"}},
		{name: "a label key that is not a qualified name is refused", edit: []string{"spec.template.metadata.labels={'bad key!': x}"},
			wantErr: "label keys must be qualified names"},
		{name: "a label value that smuggles in another label is refused", edit: []string{"spec.template.metadata.labels={team: 'x,nodeforge.dev/nodepool=other'}"},
			wantErr: "label values must be empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit"},
		{name: "a label value of 64 characters is refused", edit: []string{"spec.template.metadata.labels={team: " + strings.Repeat("a", 64) + "}"},
			wantErr: "spec.template.metadata.labels.team: Too long: may not be more than 63 bytes"},
		{name: "a kubernetes.io/hostname label is refused", edit: []string{"spec.template.metadata.labels={kubernetes.io/hostname: x}"},
			wantErr: "label keys in the kubernetes.io and k8s.io domains are set by Kubernetes and Nodeforge"},
		{name: "a topology.kubernetes.io/zone label is refused", edit: []string{"spec.template.metadata.labels={topology.kubernetes.io/zone: x}"},
			wantErr: "label keys in the kubernetes.io and k8s.io domains are set by Kubernetes and Nodeforge"},
		{name: "a node-role label is refused", edit: []string{"spec.template.metadata.labels={node-role.kubernetes.io/worker: ''}"},
			wantErr: "a kubelet may not set node-role or node-restriction labels"},
		{name: "a node-restriction label is refused", edit: []string{"spec.template.metadata.labels={node-restriction.kubernetes.io/pci: 'true'}"},
			wantErr: "a kubelet may not set node-role or node-restriction labels"},
		{name: "a k8s.io label is refused", edit: []string{"spec.template.metadata.labels={example.k8s.io/x: v1}"},
			wantErr: "label keys in the kubernetes.io and k8s.io domains are set by Kubernetes and Nodeforge"},
		{name: "the instance-type label is refused", edit: []string{"spec.template.metadata.labels={node.kubernetes.io/instance-type: big}"},
			wantErr: "other than node.kubernetes.io/instance-type"},
		{name: "node.kubernetes.io and kubelet.kubernetes.io labels are accepted", edit: []string{"spec.template.metadata.labels={node.kubernetes.io/lifecycle: spot, kubelet.kubernetes.io/x: v1, example.com/team: a}"}},
		{name: "a taint key that is not a qualified name is refused", edit: []string{"spec.template.spec.taints=[{key: 'bad key!', effect: NoSchedule}]"},
			wantErr: "taint keys must be qualified names"},
		{name: "a taint effect that does not exist is refused", edit: []string{"spec.template.spec.taints=[{key: dedicated, effect: Bogus}]"},
			wantErr: `spec.template.spec.taints[0].effect: Unsupported value: "Bogus": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"`},
		{name: "a taint value with a space is refused", edit: []string{"spec.template.spec.taints=[{key: dedicated, value: 'a b', effect: NoSchedule}]"},
			wantErr: "taint values must be empty or at most 63 characters"},
		{name: "a startup taint effect that does not exist is refused", edit: []string{"spec.template.spec.startupTaints=[{key: example.com/agent, effect: Sometimes}]"},
			wantErr: `spec.template.spec.startupTaints[0].effect: Unsupported value: "Sometimes"`},
		{name: "a pool name of 70 characters is refused", edit: []string{"metadata.name=" + strings.Repeat("p", 70)},
			wantErr: "nodepool names must be at most 57 characters"},
		{name: "a pool name of 57 characters is accepted", edit: []string{"metadata.name=" + strings.Repeat("p", 57)}},
		{name: "a taint in the nodeforge.dev domain is refused", edit: []string{"spec.template.spec.taints=[{key: nodeforge.dev/binding, effect: NoSchedule}]"},
			wantErr: `taint domain "nodeforge.dev" is reserved for Nodeforge`},
		{name: "a startup taint in the nodeforge.dev domain is refused", edit: []string{"spec.template.spec.startupTaints=[{key: nodeforge.dev/disrupted, effect: NoSchedule}]"},
			wantErr: `taint domain "nodeforge.dev" is reserved for Nodeforge`},
		{name: "a requirement on nodeforge.dev/nodepool is refused", edit: []string{"spec.template.spec.requirements=[{key: nodeforge.dev/nodepool, operator: In, values: [x]}]"},
			wantErr: "only nodeforge.dev/capacity-type and the instance attribute labels"},
		{name: "requirements on instance attribute labels are accepted", edit: []string{"spec.template.spec.requirements=[{key: nodeforge.dev/instance-category, operator: In, values: [c, m, r]}, {key: nodeforge.dev/instance-generation, operator: Gt, values: ['2']}, {key: nodeforge.dev/instance-gpu-count, operator: DoesNotExist}]"}},
		{name: "a requirement on an unknown instance label is refused", edit: []string{"spec.template.spec.requirements=[{key: nodeforge.dev/instance-colour, operator: In, values: [red]}]"},
			wantErr: "only nodeforge.dev/capacity-type and the instance attribute labels"},
		{name: "weight 0 is refused", edit: []string{"spec.weight=0"},
			wantErr: "spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1"},
		{name: "weight 101 is refused", edit: []string{"spec.weight=101"},
			wantErr: "spec.weight: Invalid value: 101: spec.weight in body should be less than or equal to 100"},
		{name: "an unknown consolidation policy is refused", edit: []string{"spec.disruption={consolidationPolicy: WhenIdle, consolidateAfter: 0s}"},
			wantErr: `Unsupported value: "WhenIdle": supported values: "WhenEmpty", "WhenEmptyOrUnderutilized"`},
		{name: "a pool without a node class is refused", edit: []string{"spec.template.spec={}"},
			wantErr: "spec.template.spec.nodeClassRef: Required value"},
		{name: "a node class with an unknown fault is refused", edit: []string{`apiVersion: nodeforge.dev/v1alpha1
kind: SimulatedNodeClass
metadata: {name: NAME}
spec: {faults: [{kind: Meteor}]}`}, wantErr: `Unsupported value: "Meteor"`},
		{name: "a node class with a malformed registration delay is refused", edit: []string{`apiVersion: nodeforge.dev/v1alpha1
kind: SimulatedNodeClass
metadata: {name: NAME}
spec: {registrationDelay: soon}`}, wantErr: `spec.registrationDelay: Invalid value: "soon"`, quotesPattern: "SimulatedNodeClass durations keep their patterns for now"},
		{name: "a node class with injected faults is accepted", edit: []string{`apiVersion: nodeforge.dev/v1alpha1
kind: SimulatedNodeClass
metadata: {name: NAME}
spec: {registrationDelay: 1500ms, faults: [{kind: InsufficientCapacity, zones: [zone-a], capacityTypes: [spot]}]}`}},
		{name: "a claim's terminationGracePeriod is accepted", edit: []string{`apiVersion: nodeforge.dev/v1alpha1
kind: NodeClaim
metadata: {name: NAME}
spec: {nodePool: a, nodeClassRef: {group: nodeforge.dev, kind: SimulatedNodeClass, name: default}, terminationGracePeriod: 1h30m}`}},
		{name: "a claim's malformed terminationGracePeriod is refused", edit: []string{`apiVersion: nodeforge.dev/v1alpha1
kind: NodeClaim
metadata: {name: NAME}
spec: {nodePool: a, nodeClassRef: {group: nodeforge.dev, kind: SimulatedNodeClass, name: default}, terminationGracePeriod: 1d}`},
			wantErr: `spec.terminationGracePeriod: Invalid value: "1d": terminationGracePeriod must be a duration in hours, minutes and seconds`},
	}
	cases = append(cases, floorCases...)
	cases = append(cases, replicaCases...)
	cases = append(cases, scheduleCases...)
	cases = append(cases, sentenceCases...)
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := build(t, tc.edit, fmt.Sprintf("validation-%d", i))
			err := kube.Create(ctx, obj, client.DryRunAll)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("valid object refused: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("invalid object accepted; want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error does not say %q:\n%v", tc.wantErr, err)
			case tc.wantErr != "" && tc.quotesPattern == "" && strings.Contains(err.Error(), "should match"):
				t.Fatalf("the refusal prints a regular expression, not a sentence:\n%v", err)
			}
		})
	}
}

// build makes the object of a case: the base pool with edits, or a whole object.
func build(t *testing.T, edit []string, name string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	base := pool
	if len(edit) > 0 && strings.HasPrefix(edit[0], "apiVersion") {
		base, edit = edit[0], edit[1:]
	}
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(base, "NAME", name)), &obj.Object); err != nil {
		t.Fatal(err)
	}
	for _, e := range edit {
		path, value, _ := strings.Cut(e, "=")
		var v any
		if err := yaml.Unmarshal([]byte(value), &v); err != nil {
			t.Fatalf("edit %q: %v", e, err)
		}
		if err := unstructured.SetNestedField(obj.Object, v, strings.Split(path, ".")...); err != nil {
			t.Fatalf("edit %q: %v", e, err)
		}
	}
	return obj
}

// TestAPIServerDefaults checks the defaults a minimal pool gets, and that
// the shipped example pools and node classes are valid.
func TestAPIServerDefaults(t *testing.T) {
	ctx := context.Background()
	obj := build(t, nil, "defaults")
	if err := kube.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, obj) })
	var got v1alpha1.NodePool
	if err := kube.Get(ctx, types.NamespacedName{Name: "defaults"}, &got); err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.Disruption{
		ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized,
		ConsolidateAfter:    "0s",
		Budgets:             []v1alpha1.Budget{{Nodes: "10%"}},
	}
	if diff := cmp.Diff(want, got.Spec.Disruption); diff != "" {
		t.Errorf("disruption defaults (-want,+got):\n%s", diff)
	}
	if got.Spec.Template.Spec.ExpireAfter != "720h" {
		t.Errorf("expireAfter defaults to %q, want 720h", got.Spec.Template.Spec.ExpireAfter)
	}

	for _, file := range []string{"examples/default.yaml", "examples/apps.yaml", "examples/aws.yaml"} {
		raw, err := manifests.FS.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatal(err)
			}
			if u.Object == nil {
				continue // comments only
			}
			if err := kube.Create(ctx, u, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s refused: %v", file, u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// TestNodeClaimPoolIsImmutable checks that a claim cannot move to another pool.
func TestNodeClaimPoolIsImmutable(t *testing.T) {
	ctx := context.Background()
	nc := &v1alpha1.NodeClaim{}
	nc.Name = "immutable"
	nc.Spec.NodePool = "a"
	nc.Spec.NodeClassRef = v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"}
	if err := kube.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, nc) })
	nc.Spec.NodePool = "b"
	err := kube.Update(ctx, nc)
	if err == nil || !strings.Contains(err.Error(), "nodePool is immutable") {
		t.Fatalf("moving a claim to another pool: got %v, want an error saying nodePool is immutable", err)
	}
}

// TestCatalogNamesItsPoolForGood: readers key a catalog object by
// spec.nodePool, so it must be set and must not change.
func TestCatalogNamesItsPoolForGood(t *testing.T) {
	ctx := context.Background()
	cat := &v1alpha1.InstanceTypeCatalog{}
	cat.Name = "immutable.m5"
	cat.Spec.Provider = "fake"
	if err := kube.Create(ctx, cat); err == nil || !strings.Contains(err.Error(), "spec.nodePool") {
		t.Errorf("a catalog without spec.nodePool: got %v, want an error naming spec.nodePool", err)
	}
	cat.ResourceVersion = ""
	cat.Spec.NodePool = "a"
	if err := kube.Create(ctx, cat); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, cat) })
	cat.Spec.NodePool = "b"
	if err := kube.Update(ctx, cat); err == nil || !strings.Contains(err.Error(), "nodePool is immutable") {
		t.Errorf("moving a catalog to another pool: got %v, want an error saying nodePool is immutable", err)
	}
}
