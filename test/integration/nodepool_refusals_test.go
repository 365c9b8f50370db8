package integration

import (
	"context"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// The pools below are what the controllers cannot honour, each refused
// with a sentence that names the field and the form it takes, and the
// edge cases beside them that must still be accepted. TestAPIServerValidation
// runs them with its own cases.

// floorCases: a pool's expireAfter is at least 1h or Never, its
// terminationGracePeriod at least 1m or unset (the fields' doc comments
// say why); a claim, which copies its pool's, has no floor.
var floorCases = []validationCase{
	{name: "expireAfter 0s is refused: every node would be replaced as soon as it is made", edit: []string{"spec.template.spec.expireAfter=0s"},
		wantErr: `spec.template.spec.expireAfter: Invalid value: "0s": expireAfter must be at least 1h, or Never`},
	{name: "expireAfter just under the floor is refused", edit: []string{"spec.template.spec.expireAfter=59m59s"},
		wantErr: `spec.template.spec.expireAfter: Invalid value: "59m59s": expireAfter must be at least 1h, or Never`},
	{name: "expireAfter 30s is refused", edit: []string{"spec.template.spec.expireAfter=30s"},
		wantErr: `expireAfter must be at least 1h, or Never`},
	{name: "expireAfter of exactly 1h is accepted", edit: []string{"spec.template.spec.expireAfter=1h"}},
	{name: "expireAfter of 60m is accepted", edit: []string{"spec.template.spec.expireAfter=60m"}},
	{name: "expireAfter 3600s is accepted", edit: []string{"spec.template.spec.expireAfter=3600s"}},
	{name: "expireAfter Never is accepted", edit: []string{"spec.template.spec.expireAfter=Never"}},
	{name: "terminationGracePeriod 0s is refused: every drain would delete pods regardless of PDBs", edit: []string{"spec.template.spec.terminationGracePeriod=0s"},
		wantErr: `spec.template.spec.terminationGracePeriod: Invalid value: "0s": terminationGracePeriod must be at least 1m, or unset`},
	{name: "terminationGracePeriod just under the floor is refused", edit: []string{"spec.template.spec.terminationGracePeriod=59s"},
		wantErr: `spec.template.spec.terminationGracePeriod: Invalid value: "59s": terminationGracePeriod must be at least 1m, or unset`},
	{name: "terminationGracePeriod of exactly 1m is accepted", edit: []string{"spec.template.spec.terminationGracePeriod=1m"}},
	{name: "terminationGracePeriod of 60s is accepted", edit: []string{"spec.template.spec.terminationGracePeriod=60s"}},
	{name: "a claim's short expireAfter and terminationGracePeriod are accepted: it copies its pool's", edit: []string{`apiVersion: nodeforge.dev/v1alpha1
kind: NodeClaim
metadata: {name: NAME}
spec: {nodePool: a, nodeClassRef: {group: nodeforge.dev, kind: SimulatedNodeClass, name: default}, expireAfter: 30s, terminationGracePeriod: 0s}`}},
}

// scheduleCases: a budget's schedule is refused unless the disruption
// controller's cron parser reads it (apis/v1alpha1's
// TestScheduleRulesAreTheParser checks the rules against the parser on
// many more), with a sentence naming the field of the schedule at fault.
var scheduleCases = []validationCase{
	{name: "an hour of 25 is refused", edit: budget("0 25 * * *"),
		wantErr: `spec.disruption.budgets[0].schedule: Invalid value: "0 25 * * *": schedule's hour, its second field, must be *, a number from 0 to 23`},
	{name: "a minute of 60 is refused", edit: budget("60 * * * *"),
		wantErr: `spec.disruption.budgets[0].schedule: Invalid value: "60 * * * *": schedule's minute, its first field, must be *, a number from 0 to 59`},
	{name: "a day of month of 0 is refused", edit: budget("* * 0 * *"),
		wantErr: `schedule's day of month, its third field, must be *, a number from 1 to 31`},
	{name: "a month of 13 is refused", edit: budget("0 0 1 13 *"),
		wantErr: `schedule's month, its fourth field, must be *, a number from 1 to 12 or a name jan to dec`},
	{name: "a day of week of 7 is refused, as cron refuses it", edit: budget("0 0 * * 7"),
		wantErr: `schedule's day of week, its fifth field, must be *, a number from 0 to 6 (0 is Sunday; 7 is not accepted)`},
	{name: "a step of 0 is refused", edit: budget("*/0 * * * *"),
		wantErr: `schedule's minute, its first field`},
	{name: "a range past the minutes is refused", edit: budget("1-70 * * * *"),
		wantErr: `schedule's minute, its first field`},
	{name: "a range that runs backwards is refused", edit: budget("0 22 * * sat-sun"),
		wantErr: `schedule's day of week, its fifth field, must be *, a number from 0 to 6 (0 is Sunday; 7 is not accepted) or a name sun to sat, a range such as mon-fri (its start not after its end)`},
	{name: "a misspelt day is refused", edit: budget("0 9 * * mon-fry"),
		wantErr: `schedule's day of week, its fifth field`},
	{name: "@every is refused", edit: budget("@every 1h"),
		wantErr: `schedule must be a cron schedule in UTC: five fields separated by spaces (minute hour day-of-month month day-of-week), such as '0 9 * * mon-fri', or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly`},
	{name: "a time zone is refused", edit: budget("CRON_TZ=Asia/Tokyo 0 9 * * *"),
		wantErr: `schedule must be a cron schedule in UTC`},
	{name: "four fields are refused", edit: budget("0 9 * *"),
		wantErr: `schedule must be a cron schedule in UTC`},
	{name: "names, steps, ranges and lists are accepted", edit: budget("*/15 0-6 1,15 jan-jun/2 SUN")},
	{name: "@midnight is accepted", edit: budget("@midnight")},
	{name: "a quarterly schedule is accepted", edit: budget("0 0 1 */3 *")},
}

// budget is the edit giving the pool one budget of schedule s.
func budget(s string) []string {
	return []string{"spec.disruption={consolidateAfter: 0s, budgets: [{nodes: '0', schedule: '" + s + "', duration: 1h}]}"}
}

// sentenceCases: refusals that printed the regular expression a value
// failed now say what the field takes; and a hostname requirement, which
// no launch can meet, is refused.
var sentenceCases = []validationCase{
	{name: "a budget of 150% is refused with the forms nodes takes", edit: []string{"spec.disruption={consolidateAfter: 0s, budgets: [{nodes: '150%'}]}"},
		wantErr: `spec.disruption.budgets[0].nodes: Invalid value: "150%": nodes must be a whole number, such as 5, or a percentage from 0% to 100%, such as 10%`},
	{name: "a budget of banana is refused with the forms nodes takes", edit: []string{"spec.disruption={consolidateAfter: 0s, budgets: [{nodes: banana}]}"},
		wantErr: `spec.disruption.budgets[0].nodes: Invalid value: "banana": nodes must be a whole number, such as 5, or a percentage`},
	{name: "a malformed repair toleration is refused", edit: []string{"spec.repair={policies: [{conditionType: Ready, conditionStatus: Unknown, tolerationDuration: 10 minutes}]}"},
		wantErr: `spec.repair.policies[0].tolerationDuration: Invalid value: "10 minutes": tolerationDuration must be a duration in hours, minutes and seconds`},
	{name: "a requirement key that is not a label key is refused", edit: []string{"spec.template.spec.requirements=[{key: 'bad key!', operator: Exists}]"},
		wantErr: `spec.template.spec.requirements[0].key: Invalid value: "bad key!": requirement keys must be label keys`},
	{name: "a node class group in capitals is refused", edit: []string{"spec.template.spec.nodeClassRef={group: Nodeforge.Dev, kind: SimulatedNodeClass, name: default}"},
		wantErr: `spec.template.spec.nodeClassRef.group: Invalid value: "Nodeforge.Dev": group must be an API group`},
	{name: "a node class kind in lower case is refused", edit: []string{"spec.template.spec.nodeClassRef={group: nodeforge.dev, kind: simulatednodeclass, name: default}"},
		wantErr: `spec.template.spec.nodeClassRef.kind: Invalid value: "simulatednodeclass": kind must be a kind`},
	{name: "a kubernetes.io/hostname requirement is refused: no node is launched with a chosen hostname", edit: []string{
		"spec.template.spec.requirements=[{key: kubernetes.io/hostname, operator: In, values: [node-a]}]",
	}, wantErr: `spec.template.spec.requirements: Invalid value: requirements must not name kubernetes.io/hostname`},
	{name: "a kubernetes.io/hostname requirement is refused whatever its operator", edit: []string{
		"spec.template.spec.requirements=[{key: kubernetes.io/hostname, operator: NotIn, values: [node-a]}]",
	}, wantErr: `requirements must not name kubernetes.io/hostname`},
}

// replicaCases: a fixed-size pool (spec.replicas) is never chosen for a
// pending pod nor consolidated, so what steers those is refused beside it.
var replicaCases = []validationCase{
	{name: "a fixed-size pool is accepted with limits, budgets and expireAfter", edit: []string{"spec.replicas=3", "spec.limits={cpu: '16'}",
		"spec.disruption={consolidateAfter: Never, budgets: [{nodes: '1'}]}", "spec.template.spec.expireAfter=720h"}},
	{name: "a fixed-size pool of 0 replicas is accepted", edit: []string{"spec.replicas=0"}},
	{name: "negative replicas are refused", edit: []string{"spec.replicas=-1"},
		wantErr: "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"},
	{name: "weight beside replicas is refused: a fixed-size pool is never chosen for pending pods", edit: []string{"spec.replicas=3", "spec.weight=10"},
		wantErr: "a fixed-size nodepool (spec.replicas) is never chosen for pending pods, so spec.weight, which orders pools for them, cannot be set"},
	{name: "consolidationPolicy WhenEmpty beside replicas is refused: a fixed-size pool is never consolidated", edit: []string{"spec.replicas=3", "spec.disruption={consolidationPolicy: WhenEmpty, consolidateAfter: 0s}"},
		wantErr: "a fixed-size nodepool (spec.replicas) is never consolidated, its nodes empty or not"},
	{name: "a consolidateAfter beside replicas is refused", edit: []string{"spec.replicas=3", "spec.disruption={consolidateAfter: 5m}"},
		wantErr: "leave spec.disruption.consolidationPolicy unset (the default) and spec.disruption.consolidateAfter unset or Never"},
}

// TestReplicasCannotBeAddedOrRemoved: a pool is fixed-size from its
// creation or never; replicas may change, not come or go.
func TestReplicasCannotBeAddedOrRemoved(t *testing.T) {
	ctx := context.Background()
	np := &v1alpha1.NodePool{}
	np.Name = "replicas-mode"
	np.Spec.Template.Spec.NodeClassRef = v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"}
	np.Spec.Disruption.ConsolidateAfter = "0s"
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, np) })
	const want = "spec.replicas cannot be added to or removed from an existing nodepool"
	np.Spec.Replicas = ptr.To[int64](2)
	if err := kube.Update(ctx, np); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("adding replicas to a pool: got %v, want an error saying %q", err, want)
	}

	fixed := &v1alpha1.NodePool{}
	fixed.Name = "replicas-fixed"
	fixed.Spec.Replicas = ptr.To[int64](2)
	fixed.Spec.Template.Spec.NodeClassRef = np.Spec.Template.Spec.NodeClassRef
	fixed.Spec.Disruption.ConsolidateAfter = "0s"
	if err := kube.Create(ctx, fixed); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, fixed) })
	fixed.Spec.Replicas = ptr.To[int64](5)
	if err := kube.Update(ctx, fixed); err != nil {
		t.Fatalf("changing replicas: %v", err)
	}
	fixed.Spec.Replicas = nil
	if err := kube.Update(ctx, fixed); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("removing replicas from a pool: got %v, want an error saying %q", err, want)
	}
}
