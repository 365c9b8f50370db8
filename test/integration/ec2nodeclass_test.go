package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// ec2NodeClass is a valid EC2NodeClass; cases change one thing in it.
const ec2NodeClass = `apiVersion: nodeforge.dev/v1alpha1
kind: EC2NodeClass
metadata: {name: NAME}
spec:
  role: NodeforgeNodeRole-demo
  subnetSelectorTerms: [{tags: {example.com/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {example.com/discovery: demo}}]
  amiSelectorTerms: [{alias: al2023@latest}]
`

// TestEC2NodeClassValidation creates EC2NodeClasses against the real API
// server (as a dry run): valid ones are accepted, and each invalid one is
// refused with a message that says what is wrong.
func TestEC2NodeClassValidation(t *testing.T) {
	cases := []struct {
		name    string
		edit    []string // "path=yaml" lines applied to the class above
		wantErr string   // "" for a class that must be accepted
	}{
		{name: "the base class is accepted"},
		{name: "every field can be set", edit: []string{
			"spec.role=null",
			"spec.instanceProfile=NodeforgeNodeProfile",
			"spec.subnetSelectorTerms=[{tags: {example.com/discovery: demo, tier: '*'}}, {id: subnet-0123456789abcdef0}]",
			"spec.securityGroupSelectorTerms=[{tags: {example.com/discovery: demo}}, {id: sg-0123456789abcdef0}, {name: nodes}]",
			"spec.amiSelectorTerms=[{name: 'my-ami-*', owner: '123456789012'}, {id: ami-0123456789abcdef0}, {tags: {team: infra}}]",
			"spec.userData='#!/bin/bash\necho hello'",
			"spec.blockDeviceMappings=[{deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 100, volumeType: gp3, iops: 4000, throughput: 250, kmsKeyID: alias/nodes}}, {deviceName: /dev/xvdb, ebs: {volumeSize: 500, volumeType: st1}}]",
			"spec.metadataOptions={httpEndpoint: enabled, httpTokens: required, httpPutResponseHopLimit: 2, httpProtocolIPv6: disabled}",
			"spec.tags={team: infra, cost-center: '42'}",
			"spec.kubelet={maxPods: 110, kubeReserved: {cpu: 100m, memory: 1Gi}, systemReserved: {memory: 200Mi, pid: '1000'}, evictionHard: {memory.available: 5%, nodefs.available: 10%}}",
		}},
		{name: "both role and instanceProfile are refused", edit: []string{"spec.instanceProfile=NodeforgeNodeProfile"},
			wantErr: "set exactly one of role or instanceProfile"},
		{name: "neither role nor instanceProfile is refused", edit: []string{"spec.role=null"},
			wantErr: "set exactly one of role or instanceProfile"},
		{name: "a tag in the nodeforge.dev domain is refused", edit: []string{"spec.tags={nodeforge.dev/nodepool: sneaky}"},
			wantErr: "tag keys in the nodeforge.dev domain, kubernetes.io/cluster/* and aws:* are reserved"},
		{name: "a Name tag, which Nodeforge sets, is refused", edit: []string{"spec.tags={Name: my-node}"},
			wantErr: "tag Name is not supported yet: Nodeforge names each instance after its NodeClaim"},
		{name: "user data that is already MIME is refused", edit: []string{"spec.userData='MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"b\"\n\n--b\n\n#!/bin/bash\n--b--'"},
			wantErr: "userData that is already a MIME multi-part document is not supported yet"},
		{name: "user data that starts with its MIME Content-Type is refused", edit: []string{"spec.userData='Content-Type: multipart/mixed; boundary=\"b\"\n\n--b--'"},
			wantErr: "userData that is already a MIME multi-part document is not supported yet"},
		{name: "user data that is MIME in lower case, after blank lines, is refused", edit: []string{"spec.userData='\n\nmime-version: 1.0\n'"},
			wantErr: "userData that is already a MIME multi-part document is not supported yet"},
		{name: "a kubernetes.io/cluster tag is refused", edit: []string{"spec.tags={kubernetes.io/cluster/other: owned}"},
			wantErr: "tag keys in the nodeforge.dev domain, kubernetes.io/cluster/* and aws:* are reserved"},
		{name: "a subnet term with both tags and id is refused", edit: []string{"spec.subnetSelectorTerms=[{tags: {a: b}, id: subnet-01}]"},
			wantErr: "set exactly one of tags or id"},
		{name: "an empty subnet term is refused", edit: []string{"spec.subnetSelectorTerms=[{}]"},
			wantErr: "set exactly one of tags or id"},
		{name: "no subnet terms at all are refused", edit: []string{"spec.subnetSelectorTerms=[]"},
			wantErr: "spec.subnetSelectorTerms: Invalid value: 0: spec.subnetSelectorTerms in body should have at least 1 items"},
		{name: "a malformed subnet id is refused", edit: []string{"spec.subnetSelectorTerms=[{id: sg-01}]"},
			wantErr: `spec.subnetSelectorTerms[0].id: Invalid value: "sg-01"`},
		{name: "a security group term with a name and an id is refused", edit: []string{"spec.securityGroupSelectorTerms=[{id: sg-01, name: nodes}]"},
			wantErr: "set exactly one of tags, id or name"},
		{name: "an alias beside another AMI term is refused", edit: []string{"spec.amiSelectorTerms=[{alias: al2023@latest}, {id: ami-01}]"},
			wantErr: "an alias term must be the only AMI selector term"},
		{name: "an alias combined with an id in one term is refused", edit: []string{"spec.amiSelectorTerms=[{alias: al2023@latest, id: ami-01}]"},
			wantErr: "alias cannot be combined with id, name, owner or tags"},
		{name: "an unknown alias family is refused", edit: []string{"spec.amiSelectorTerms=[{alias: al2@latest}]"},
			wantErr: `spec.amiSelectorTerms[0].alias: Invalid value: "al2@latest"`},
		{name: "a kubeReserved key other than cpu, memory, ephemeral-storage or pid is refused", edit: []string{"spec.kubelet={kubeReserved: {gpu: '1'}}"},
			wantErr: "kubeReserved keys must be cpu, memory, ephemeral-storage or pid"},
		{name: "a kubeReserved value that is not a quantity is refused", edit: []string{"spec.kubelet={kubeReserved: {memory: lots}}"},
			wantErr: "kubeReserved values must be quantities such as 100m or 1Gi"},
		{name: "an evictionHard signal kubelet does not know is refused", edit: []string{"spec.kubelet={evictionHard: {memory: 100Mi}}"},
			wantErr: "evictionHard keys must be memory.available"},
		{name: "maxPods of 0 is refused", edit: []string{"spec.kubelet={maxPods: 0}"},
			wantErr: "spec.kubelet.maxPods: Invalid value: 0: spec.kubelet.maxPods in body should be greater than or equal to 1"},
		{name: "a hop limit of 0 is refused", edit: []string{"spec.metadataOptions={httpPutResponseHopLimit: 0}"},
			wantErr: "httpPutResponseHopLimit in body should be greater than or equal to 1"},
		{name: "httpTokens other than required or optional is refused", edit: []string{"spec.metadataOptions={httpTokens: sometimes}"},
			wantErr: `Unsupported value: "sometimes": supported values: "required", "optional"`},
		{name: "throughput on a gp2 volume is refused", edit: []string{"spec.blockDeviceMappings=[{deviceName: /dev/xvda, ebs: {volumeSize: 20, volumeType: gp2, throughput: 200}}]"},
			wantErr: "iops and throughput can only be set on gp3, io1 and io2 volumes"},
		{name: "the NVIDIA GPU DRA driver is accepted", edit: []string{"spec.draDrivers=[gpu.nvidia.com]"}},
		{name: "a DRA driver Nodeforge does not describe yet is refused, pointing at DeviceTemplates", edit: []string{"spec.draDrivers=[dra.net]"},
			wantErr: "draDrivers: only gpu.nvidia.com is supported yet; describe another driver's devices with a DeviceTemplate"},
		{name: "a DRA driver named twice is refused", edit: []string{"spec.draDrivers=[gpu.nvidia.com, gpu.nvidia.com]"},
			wantErr: `spec.draDrivers[1]: Duplicate value: "gpu.nvidia.com"`},
		{name: "two root volumes are refused", edit: []string{"spec.blockDeviceMappings=[{deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 20}}, {deviceName: /dev/xvdb, rootVolume: true, ebs: {volumeSize: 20}}]"},
			wantErr: "at most one block device mapping may be the root volume"},
	}
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := build(t, append([]string{ec2NodeClass}, tc.edit...), fmt.Sprintf("ec2-validation-%d", i))
			err := kube.Create(ctx, obj, client.DryRunAll)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("valid class refused: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("invalid class accepted; want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error does not say %q:\n%v", tc.wantErr, err)
			}
		})
	}
}

// TestEC2NodeClassDefaults checks that a class asking for nothing gets
// IMDSv2 only, with a hop limit of 1, and encrypted volumes.
func TestEC2NodeClassDefaults(t *testing.T) {
	ctx := context.Background()
	obj := build(t, []string{ec2NodeClass, "spec.blockDeviceMappings=[{deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 50}}]"}, "ec2-defaults")
	if err := kube.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, obj) })
	var got v1alpha1.EC2NodeClass
	if err := kube.Get(ctx, types.NamespacedName{Name: "ec2-defaults"}, &got); err != nil {
		t.Fatal(err)
	}
	mo := got.Spec.MetadataOptions
	if mo == nil || mo.HTTPTokens != "required" || mo.HTTPPutResponseHopLimit != 1 || mo.HTTPEndpoint != "enabled" || mo.HTTPProtocolIPv6 != "disabled" {
		t.Errorf("metadataOptions default to %+v, want IMDSv2 required, hop limit 1, endpoint enabled, IPv6 disabled", mo)
	}
	ebs := got.Spec.BlockDeviceMappings[0].EBS
	if ebs.VolumeType != "gp3" || ebs.Encrypted == nil || !*ebs.Encrypted || ebs.DeleteOnTermination == nil || !*ebs.DeleteOnTermination {
		t.Errorf("volume defaults to %+v, want encrypted gp3 deleted on termination", ebs)
	}
}
