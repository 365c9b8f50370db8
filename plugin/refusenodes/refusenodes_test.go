package refusenodes

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

func args(raw string) runtime.Object {
	return &runtime.Unknown{ContentType: runtime.ContentTypeJSON, Raw: []byte(raw)}
}

func TestArgsAreChecked(t *testing.T) {
	for raw, want := range map[string]string{
		`{}`:                  "nodeSelector is required",
		`{"nodeSelector":{}}`: "selects every node",
		`{"nodeSelector":{"matchLabels":{"bad key!":"x"}}}`: "nodeSelector",
		`{"nodeSelector":"zone-a"}`:                         "decoding RefuseNodes args",
	} {
		if _, err := New(context.Background(), args(raw), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("args %s: got %v, want an error saying %q", raw, err, want)
		}
	}
}

func TestFilterRefusesMatchingNodes(t *testing.T) {
	p, err := New(context.Background(), args(`{"nodeSelector":{"matchExpressions":[{"key":"team","operator":"In","values":["gpu","db"]}]}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for labels, refused := range map[string]bool{"gpu": true, "db": true, "web": false, "": false} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{}}}
		if labels != "" {
			node.Labels["team"] = labels
		}
		ni := framework.NewNodeInfo()
		ni.SetNode(node)
		s := p.(fwk.FilterPlugin).Filter(context.Background(), nil, &corev1.Pod{}, ni)
		if got := s.Code() == fwk.UnschedulableAndUnresolvable; got != refused {
			t.Errorf("node with team=%q: refused=%v (%v), want %v", labels, got, s.Message(), refused)
		}
		if refused && !strings.Contains(s.Message(), "refused by RefuseNodes (team in (db,gpu))") {
			t.Errorf("refusal %q does not say which selector", s.Message())
		}
	}
}
