package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// pool is a Karpenter NodePool named name, with more fields (flow-style
// YAML) in its template's spec and in its spec.
func pool(name, templateSpec, spec string) string {
	return fmt.Sprintf("{apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {name: %s}, spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}%s}}%s}}", name, prefixComma(templateSpec), prefixComma(spec))
}

// class is a Karpenter EC2NodeClass named name with an al2023 alias, a
// role and selectors, with more fields in its spec.
func class(name, spec string) string {
	return fmt.Sprintf("{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: %s}, spec: {amiSelectorTerms: [{alias: al2023@latest}], role: R, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]%s}}", name, prefixComma(spec))
}

func prefixComma(s string) string {
	if s == "" {
		return ""
	}
	return ", " + s
}

// TestConvertLeavesBehindWhatNodeforgeRefuses: values Nodeforge would
// refuse or ignore are reported by path and left out, and what is written
// is accepted by the API server as it is.
func TestConvertLeavesBehindWhatNodeforgeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string // reported, as in the golden files
		// written objects; 1 unless said
		objects *int
		// a fragment of the report or of the output
		report, out string
	}{
		{name: "a pool name longer than Nodeforge's is not written",
			in:      pool(strings.Repeat("a", 58), "", ""),
			want:    []string{"NodePool/" + strings.Repeat("a", 58) + " metadata.name", "NodePool/" + strings.Repeat("a", 58) + " (not written)"},
			objects: new(0)},
		{name: "Lte whose Lt would be too long",
			in:   pool("p", "requirements: [{key: karpenter.k8s.aws/instance-memory, operator: Lte, values: ['999999999999999999']}]", ""),
			want: []string{"NodePool/p spec.template.spec.requirements[0]"}},
		{name: "an operator Nodeforge lacks",
			in:   pool("p", "requirements: [{key: kubernetes.io/arch, operator: Matches, values: [amd64]}]", ""),
			want: []string{"NodePool/p spec.template.spec.requirements[0].operator"}},
		{name: "a value that is not a label value",
			in:   pool("p", "requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: ['m7i.large,m7a.large']}]", ""),
			want: []string{"NodePool/p spec.template.spec.requirements[0].values[0]"}},
		{name: "Windows among other operating systems is dropped from the values",
			in:   pool("p", "requirements: [{key: kubernetes.io/os, operator: In, values: [linux, windows]}]", ""),
			want: []string{"NodePool/p spec.template.spec.requirements[0].values[1]"},
			out:  "values:\n        - linux\n"},
		{name: "a requirement on a key of the user's own in a domain a pool may not label",
			in:   pool("p", "requirements: [{key: example.kubernetes.io/role, operator: In, values: [web]}]", ""),
			want: []string{"NodePool/p spec.template.spec.requirements[0]"}},
		{name: "labels and annotations Nodeforge refuses or ignores",
			in: `{apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {name: p}, spec: {template: {metadata: {labels: {node-role.kubernetes.io/worker: "", example.com/ok: "yes"}, annotations: {nodeforge.dev/x: "1", karpenter.sh/managed-by: c, example.com/ok: "yes"}}, spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}}}}`,
			want: []string{
				"NodePool/p spec.template.metadata.labels[node-role.kubernetes.io/worker]",
				"NodePool/p spec.template.metadata.annotations[karpenter.sh/managed-by]",
				"NodePool/p spec.template.metadata.annotations[nodeforge.dev/x]",
			}},
		{name: "a taint value Nodeforge refuses drops the taint",
			in:   pool("p", "taints: [{key: dedicated, value: team/a, effect: NoSchedule}]", ""),
			want: []string{"NodePool/p spec.template.spec.taints[0]"}},
		{name: "a duration longer than Nodeforge's",
			in:   pool("p", "terminationGracePeriod: 10000000h", ""),
			want: []string{"NodePool/p spec.template.spec.terminationGracePeriod"}},
		// Nodeforge refuses a pool's expireAfter under 1h and its
		// terminationGracePeriod under 1m; shorter ones are raised to
		// those, which disrupts less.
		{name: "an expireAfter shorter than Nodeforge's least is raised to 1h",
			in:     pool("p", "expireAfter: 30m", ""),
			want:   []string{"NodePool/p spec.template.spec.expireAfter"},
			report: "30m is shorter than Nodeforge's least expireAfter, 1h: a node's life counts from when its NodeClaim is made",
			out:    "expireAfter: 1h\n"},
		{name: "a terminationGracePeriod of 0s is raised to 1m",
			in:     pool("p", "terminationGracePeriod: 0s", ""),
			want:   []string{"NodePool/p spec.template.spec.terminationGracePeriod"},
			report: "the converted pool has terminationGracePeriod 1m",
			out:    "terminationGracePeriod: 1m\n"},
		{name: "durations of exactly the least are kept as they are written",
			in:  pool("p", "expireAfter: 60m, terminationGracePeriod: 60s", ""),
			out: "expireAfter: 60m\n"},
		{name: "a requirement on the hostname, which no launch meets",
			in:   pool("p", "requirements: [{key: kubernetes.io/hostname, operator: In, values: [node-a]}]", ""),
			want: []string{"NodePool/p spec.template.spec.requirements[0]"}},
		{name: "a budget schedule cron refuses holds at all times",
			in:     pool("p", "", "disruption: {budgets: [{nodes: '0', schedule: '0 25 * * *', duration: 1h}]}"),
			want:   []string{"NodePool/p spec.disruption.budgets[0].schedule"},
			report: "above maximum",
			out:    "budgets:\n    - nodes: \"0\"\n      reasons:\n"},
		// The window of no time never holds and goes; the budget of a
		// schedule Nodeforge cannot read holds at all times instead, which
		// disrupts less.
		{name: "a scheduled budget of no time, and one of six cron fields",
			in:   pool("p", "", "disruption: {budgets: [{nodes: '0', schedule: '@daily', duration: 0m}, {nodes: '0', schedule: '0 0 9 * * mon', duration: 1h}, {nodes: '1'}]}"),
			want: []string{"NodePool/p spec.disruption.budgets[0].duration", "NodePool/p spec.disruption.budgets[1].schedule"},
			out:  "budgets:\n    - nodes: \"0\"\n      reasons:\n      - Underutilized\n      - Empty\n      - Drifted\n    - nodes: \"1\"\n"},
		{name: "a budget of a number Nodeforge cannot read disrupts nothing, and an unknown policy consolidates WhenEmpty",
			in:   pool("p", "", "disruption: {consolidationPolicy: Sometimes, consolidateAfter: 5 minutes, budgets: [{nodes: '123456789'}]}"),
			want: []string{"NodePool/p spec.disruption.consolidationPolicy", "NodePool/p spec.disruption.consolidateAfter", "NodePool/p spec.disruption.budgets[0].nodes"},
			out:  "budgets:\n    - nodes: \"0\"\n      reasons:\n      - Underutilized\n      - Empty\n      - Drifted\n    consolidateAfter: Never\n    consolidationPolicy: WhenEmpty\n"},
		{name: "a consolidation policy of Karpenter v1beta1",
			in:   pool("p", "", "disruption: {consolidationPolicy: WhenUnderutilized}"),
			want: []string{"NodePool/p spec.disruption.consolidationPolicy"}},
		{name: "a negative limit",
			in:   pool("p", "", "limits: {cpu: '-1', memory: 10Gi}"),
			want: []string{"NodePool/p spec.limits.cpu"}},
		{name: "a node class that is not an EC2NodeClass",
			in:   `{apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {name: p}, spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}}}}`,
			want: []string{"NodePool/p spec.template.spec.nodeClassRef"}},
		{name: "an object of Karpenter v1beta1",
			in:   strings.Replace(pool("p", "", ""), "karpenter.sh/v1", "karpenter.sh/v1beta1", 1),
			want: []string{"NodePool/p apiVersion"}},
		{name: "kubelet values Nodeforge refuses",
			in: class("c", "kubelet: {maxPods: 0, kubeReserved: {cpu: 100m, nvidia.com/gpu: '1'}, evictionHard: {memory.available: lots}}"),
			want: []string{
				"EC2NodeClass/c spec.kubelet.maxPods",
				"EC2NodeClass/c spec.kubelet.kubeReserved[nvidia.com/gpu]",
				"EC2NodeClass/c spec.kubelet.evictionHard[memory.available]",
			}},
		{name: "tags Nodeforge sets itself, and metadata options it refuses",
			in:   class("c", "tags: {aws:created-by: me, nodeforge.dev/cluster: x, team: a}, metadataOptions: {httpTokens: maybe, httpPutResponseHopLimit: 65}"),
			want: []string{"EC2NodeClass/c spec.tags[aws:created-by]", "EC2NodeClass/c spec.tags[nodeforge.dev/cluster]", "EC2NodeClass/c spec.metadataOptions.httpTokens", "EC2NodeClass/c spec.metadataOptions.httpPutResponseHopLimit"}},
		{name: "volumes Nodeforge refuses",
			in:   class("c", "blockDeviceMappings: [{deviceName: xvda, ebs: {volumeSize: 20Gi}}, {deviceName: /dev/xvdb, ebs: {volumeSize: 20Gi, volumeType: gp2, iops: 3000}}, {deviceName: /dev/xvdc}]"),
			want: []string{"EC2NodeClass/c spec.blockDeviceMappings[0]", "EC2NodeClass/c spec.blockDeviceMappings[1].ebs.iops", "EC2NodeClass/c spec.blockDeviceMappings[1].ebs.encrypted", "EC2NodeClass/c spec.blockDeviceMappings[2]"}},
		{name: "capacity reservation terms Nodeforge refuses are dropped, the others carried over",
			in: class("c", "capacityReservationSelectorTerms: [{id: cr-0123456789abcdef0, ownerID: '123456789012'}, {ownerID: '123456789012'}, {id: sg-1}, {tags: {team: ml}, instanceMatchCriteria: sometimes}, {tags: {team: ml}, ownerID: '123456789012'}]"),
			want: []string{
				"EC2NodeClass/c spec.capacityReservationSelectorTerms[0]",
				"EC2NodeClass/c spec.capacityReservationSelectorTerms[1]",
				"EC2NodeClass/c spec.capacityReservationSelectorTerms[2].id",
				"EC2NodeClass/c spec.capacityReservationSelectorTerms[3].instanceMatchCriteria",
			},
			out: "capacityReservationSelectorTerms:\n  - ownerID: \"123456789012\"\n    tags:\n      team: ml\n"},
		{name: "a pool's requirement on one reservation's id is left to the class",
			in:     pool("p", "requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [reserved]}, {key: karpenter.k8s.aws/capacity-reservation-id, operator: In, values: [cr-0123456789abcdef0]}]", ""),
			want:   []string{"NodePool/p spec.template.spec.requirements[1]"},
			report: "Nodeforge chooses capacity reservations per EC2NodeClass, not per pool",
			out:    "values:\n        - reserved\n"},
		{name: "more than ten volumes",
			in:   class("c", "blockDeviceMappings: ["+strings.Repeat("{deviceName: /dev/xvdb, ebs: {volumeSize: 1Gi, volumeType: gp3, encrypted: true}}, ", 10)+"{deviceName: /dev/xvdc, ebs: {volumeSize: 1Gi, volumeType: gp3, encrypted: true}}]"),
			want: []string{"EC2NodeClass/c spec.blockDeviceMappings[10]"}},
		{name: "an al2023 alias of a version Nodeforge does not read, beside another term",
			in:   `{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: c}, spec: {amiFamily: AL2023, amiSelectorTerms: [{alias: al2023@v1.2}, {id: ami-1}], role: R, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}}`,
			want: []string{"EC2NodeClass/c spec.amiSelectorTerms[0].alias"}},
		{name: "Custom images are written, and reported",
			in:   `{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: c}, spec: {amiFamily: Custom, amiSelectorTerms: [{id: ami-1}], role: R, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}}`,
			want: []string{"EC2NodeClass/c spec.amiFamily"}},
		{name: "a role that is not a role",
			in:      strings.Replace(class("c", ""), "role: R", "role: 'my role'", 1),
			want:    []string{"EC2NodeClass/c spec.role", "EC2NodeClass/c (not written)"},
			objects: new(0)},
		{name: "user data holding Nodeforge's MIME boundary",
			in:   class("c", `userData: "#!/bin/bash\necho //nodeforge//\n"`),
			want: []string{"EC2NodeClass/c spec.userData"}},
		{name: "a shell script Nodeforge would take for a NodeConfig",
			in:     class("c", `userData: "#!/bin/bash\ncat > /etc/eks/extra.yaml <<EOF\napiVersion: node.eks.aws/v1alpha1\nEOF\n"`),
			want:   []string{"EC2NodeClass/c spec.userData"},
			report: "a text/x-shellscript that Nodeforge would pass to nodeadm as a application/node.eks.aws"},
		{name: "a static pool's replicas are carried over",
			in:  pool("p", "", "replicas: 3, disruption: {consolidateAfter: Never}"),
			out: "replicas: 3\n"},
		{name: "a static pool's weight and consolidation are left behind: Nodeforge refuses them beside replicas",
			in:   pool("p", "", "replicas: 2, weight: 10, disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 5m}"),
			want: []string{"NodePool/p spec.disruption.consolidationPolicy", "NodePool/p spec.disruption.consolidateAfter", "NodePool/p spec.weight"},
			out:  "consolidateAfter: Never\n"},
		{name: "a Gte on a label that has a Gt",
			in:  pool("p", "requirements: [{key: karpenter.k8s.aws/instance-cpu, operator: Gte, values: ['8']}]", ""),
			out: "operator: Gt\n        values:\n        - \"7\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Convert(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var got, report []string
			for _, d := range res.Dropped {
				got = append(got, reportedPath(d))
				report = append(report, d.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reported (-want,+got):\n%s\nreport:\n%s", diff, strings.Join(report, "\n"))
			}
			if !strings.Contains(strings.Join(report, "\n"), tc.report) {
				t.Errorf("report lacks %q:\n%s", tc.report, strings.Join(report, "\n"))
			}
			if !strings.Contains(string(res.Out), tc.out) {
				t.Errorf("output lacks %q:\n%s", tc.out, res.Out)
			}
			want := 1
			if tc.objects != nil {
				want = *tc.objects
			}
			if res.Objects != want {
				t.Errorf("wrote %d objects, want %d:\n%s", res.Objects, want, res.Out)
			}
			if _, refused := sendDryRun(t, res.Out); refused > 0 {
				t.Errorf("the API server refused what was written:\n%s", res.Out)
			}
		})
	}
}
