// Command kwokstages writes kwok's own default stages (node initialisation,
// node heartbeat with a lease, pod ready/complete/delete) as one multi-document
// YAML on standard output. The sandbox passes that file to kwok with --config;
// taking the stages from kwok's packages keeps them at the version of kwok
// that is built, instead of a copy that would drift.
//
// One change is made to them: no pod stage matches a pod annotated
// simulated.nodeforge.dev/node-failed, which the simulated cloud writes on
// the pods of a node it failed. kwok is meant to stop playing the stages of
// a node whose lease another holds, which is how the simulated cloud fails
// a node; but kwok v0.8.0 starts its controllers from the --config stages
// in map order, and when the pod controller starts before the node lease
// controller it never checks the lease (its read-only check is nil), so in
// about one sandbox in eight kwok would go on running, and deleting at
// once, the pods of a dead node. A dead kubelet does neither.
package main

import (
	"fmt"
	"os"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/yaml"
)

// nodeFailed is the annotation of the pods of a failed simulated node
// (provisioner/cloudprovider/simulated's PodOfFailedNode).
const nodeFailed = "simulated.nodeforge.dev/node-failed"

func main() {
	docs := []string{nodefast.DefaultNodeInit, nodeheartbeat.DefaultNodeHeartbeatWithLease}
	for _, d := range []string{podfast.DefaultPodReady, podfast.DefaultPodComplete, podfast.DefaultPodDelete} {
		s, err := notOnFailedNodes(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		docs = append(docs, s)
	}
	for i, d := range docs {
		docs[i] = strings.TrimSpace(d)
	}
	if _, err := fmt.Println(strings.Join(docs, "\n---\n")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// notOnFailedNodes adds to a pod stage's selector that the pod is not
// annotated nodeFailed.
func notOnFailedNodes(doc string) (string, error) {
	var stage map[string]any
	if err := yaml.Unmarshal([]byte(doc), &stage); err != nil {
		return "", err
	}
	spec, _ := stage["spec"].(map[string]any)
	if spec == nil {
		return "", fmt.Errorf("stage without a spec:\n%s", doc)
	}
	sel, _ := spec["selector"].(map[string]any)
	if sel == nil {
		sel = map[string]any{}
		spec["selector"] = sel
	}
	exprs, _ := sel["matchExpressions"].([]any)
	sel["matchExpressions"] = append(exprs, map[string]any{
		"key":      fmt.Sprintf(".metadata.annotations[%q]", nodeFailed),
		"operator": "DoesNotExist",
	})
	out, err := yaml.Marshal(stage)
	return string(out), err
}
