package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestCapacityReservationValidation creates, as dry runs against the real
// API server, the objects that name capacity reservations or the reserved
// capacity type: what Nodeforge acts on is accepted, and what it would
// not act on is refused with a sentence saying why.
func TestCapacityReservationValidation(t *testing.T) {
	withTerms := func(terms string) []string {
		return []string{ec2NodeClass, "spec.capacityReservationSelectorTerms=" + terms}
	}
	cases := []struct {
		name    string
		edit    []string // a whole object (else the base pool), then "path=yaml" edits
		wantErr string
	}{
		{name: "terms by id, by tags with an owner, and by match criteria are accepted",
			edit: withTerms("[{id: cr-0123456789abcdef0}, {tags: {team: ml}, ownerID: '123456789012'}, {instanceMatchCriteria: targeted, tags: {team: web}}, {instanceMatchCriteria: open}]")},
		{name: "an id with tags is refused", edit: withTerms("[{id: cr-0123456789abcdef0, tags: {team: ml}}]"),
			wantErr: "id names one reservation and cannot be combined with tags, ownerID or instanceMatchCriteria"},
		{name: "an id with an owner is refused", edit: withTerms("[{id: cr-0123456789abcdef0, ownerID: '123456789012'}]"),
			wantErr: "id names one reservation and cannot be combined with tags, ownerID or instanceMatchCriteria"},
		{name: "an owner alone selects nothing and is refused", edit: withTerms("[{ownerID: '123456789012'}]"),
			wantErr: "set id, or tags and/or instanceMatchCriteria (with an optional ownerID)"},
		{name: "an empty term is refused", edit: withTerms("[{}]"),
			wantErr: "set id, or tags and/or instanceMatchCriteria (with an optional ownerID)"},
		{name: "an empty tag value is refused", edit: withTerms("[{tags: {team: ''}}]"),
			wantErr: "tag keys and values must not be empty"},
		{name: "match criteria other than open or targeted are refused", edit: withTerms("[{instanceMatchCriteria: any}]"),
			wantErr: `Unsupported value: "any": supported values: "open", "targeted"`},
		{name: "an id that is not a reservation's is refused", edit: withTerms("[{id: sg-0123456789abcdef0}]"),
			wantErr: `spec.capacityReservationSelectorTerms[0].id: Invalid value: "sg-0123456789abcdef0"`},
		{name: "a pool may require the reserved capacity type", edit: []string{
			"spec.template.spec.requirements=[{key: nodeforge.dev/capacity-type, operator: In, values: [reserved, on-demand]}]"}},
		{name: "a simulated class's fault on reserved capacity, which the simulated cloud has none of, is refused", edit: []string{`apiVersion: nodeforge.dev/v1alpha1
kind: SimulatedNodeClass
metadata: {name: NAME}
spec: {faults: [{kind: InsufficientCapacity, capacityTypes: [reserved]}]}`},
			wantErr: "the simulated cloud has no capacity reservations: its capacity types are spot and on-demand"},
		{name: "a catalog's reserved offering with its count is accepted", edit: []string{`apiVersion: nodeforge.dev/v1alpha1
kind: InstanceTypeCatalog
metadata: {name: NAME, labels: {nodeforge.dev/nodepool: a}}
spec:
  nodePool: a
  instanceTypes:
  - name: m5.large
    capacity: {cpu: '2'}
    allocatable: {cpu: 1930m}
    offerings: [{zone: us-west-2a, capacityType: reserved, price: '0.000000000096', available: true, reservationCapacity: 2}]`}},
	}
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := build(t, tc.edit, fmt.Sprintf("reservation-validation-%d", i))
			err := kube.Create(ctx, obj, client.DryRunAll)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("valid object refused: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("invalid object accepted; want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error does not say %q:\n%v", tc.wantErr, err)
			}
		})
	}
}
