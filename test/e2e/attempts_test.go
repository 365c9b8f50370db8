package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// TestPodCreatedWithItsPoolIsTriedAtMostTwice creates a NodePool and, at
// once, a pod only it can hold. The pool's catalog is published one
// family object at a time after that; the pod is refused until it is
// whole, then nominated and Running. Every scheduling attempt of the pod
// ends in a FailedScheduling Event (a refusal, or the nomination), and
// the scheduler's recorder writes the same note twice as one Event with a
// series of 2: the attempts the Events show are at least the Events plus
// one for each series, and that must be at most 2. Before, each catalog
// object sent the pod back to be tried again (16 tries in 0.4 s in the
// sandbox's walk-through).
func TestPodCreatedWithItsPoolIsTriedAtMostTwice(t *testing.T) {
	t.Parallel()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	ctx := context.Background()
	// The default pool's catalog first, so that only the new pool's is
	// being written while the pod waits.
	poll(t, "the default pool's catalog", func() (bool, error) {
		types, err := cluster.InstanceTypesOf(ctx, kube, "default")
		return len(types) > 0, err
	})
	createZonalPool(t, kube, "together")
	names := topologyPods(t, cs, "together", 1, func(*corev1.PodSpec) {})
	poll(t, "pod "+names[0]+" Running", func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, names[0], metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	// Events are written in the background: wait for the one of the
	// attempt that nominated it, the last.
	var attempts int
	var notes []string
	nominated := false
	poll(t, "pod "+names[0]+"'s FailedScheduling Events", func() (bool, error) {
		evs, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "regarding.kind=Pod,regarding.name=" + names[0] + ",reason=FailedScheduling"})
		if err != nil {
			return false, err
		}
		attempts, notes, nominated = 0, nil, false
		for _, e := range evs.Items {
			attempts++
			if e.Series != nil {
				attempts++
			}
			notes = append(notes, e.Note)
			nominated = nominated || strings.Contains(e.Note, "nominated to nodeclaim together-")
		}
		return nominated || attempts > 2, nil
	})
	t.Logf("pod %s: at least %d scheduling attempts: %q", names[0], attempts, notes)
	if !nominated {
		t.Errorf("no FailedScheduling Event of pod %s names its nodeclaim: %q", names[0], notes)
	}
	if attempts > 2 {
		t.Errorf("pod %s created with its pool was tried at least %d times, want at most 2: %q", names[0], attempts, notes)
	}
}
