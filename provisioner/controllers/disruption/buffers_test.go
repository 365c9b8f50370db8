package disruption

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// readyBuffer is CapacityBuffer default/web, resolved and ready: n
// chunks of cpu each, and its PodTemplate.
func readyBuffer(n int32, cpu string) []client.Object {
	tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shape"},
		Template: corev1.PodTemplateSpec{Spec: testobj.Pod("x").Req("cpu", cpu).Obj().Spec}}
	b := &bufferv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-buffer"},
		Spec: bufferv1beta1.CapacityBufferSpec{PodTemplateRef: &bufferv1beta1.LocalObjectRef{Name: "shape"}, Replicas: ptr.To(n)},
		Status: bufferv1beta1.CapacityBufferStatus{PodTemplateRef: &bufferv1beta1.LocalObjectRef{Name: "shape"}, Replicas: ptr.To(n),
			Conditions: []metav1.Condition{{Type: bufferv1beta1.ConditionReadyForProvisioning, Status: metav1.ConditionTrue, Reason: bufferv1beta1.ReasonResolved, LastTransitionTime: metav1.Now()}}}}
	return []client.Object{tpl, b}
}

// TestEmptyNodeStaysForABuffersRoom: of two empty 4-cpu nodes, n1 is
// past consolidateAfter. A ready buffer of two 3-cpu chunks needs both
// nodes, so n1 is kept and its claim says why (DisruptionBlocked); a
// buffer of one chunk fits on n2, so n1 goes; without buffer room kept
// (Buffers unset), n1 goes whatever the buffer.
func TestEmptyNodeStaysForABuffersRoom(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks int32
		keep   bool // Emptiness.Buffers set
		kept   bool
	}{
		{name: "two chunks need both nodes: n1 stays", chunks: 2, keep: true, kept: true},
		{name: "one chunk fits on n2: n1 goes", chunks: 1, keep: true},
		{name: "buffer room not kept: n1 goes", chunks: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool := testobj.Pool("p").ConsolidateAfter("30s").Obj()
			nc := testobj.Claim("p-abcde").UID("uid-1").Pool("p").Phase(v1alpha1.NodeClaimInitialized).NodeName("n1").Obj()
			objs := []client.Object{pool, nc}
			for _, n := range []string{"n1", "n2"} {
				objs = append(objs, testobj.Node(n).Label(corev1.LabelHostname, n).Capacity("cpu", "4", "memory", "16Gi", "pods", "110").Ready().Obj())
			}
			kube := testobj.Client(append(objs, readyBuffer(tc.chunks, "3")...)...)
			live := kubefake.NewClientset()
			now := time.Now()
			clock := func() time.Time { return now }
			rec := events.NewFakeRecorder(10)
			empty := NewEmptiness(kube, live, clock)
			if tc.keep {
				empty.Buffers = newScheduler(ctx, t)
			}
			c := New(NewExecutor(kube, kube, live, rec, clock), empty)
			get := func() *v1alpha1.NodeClaim {
				var got v1alpha1.NodeClaim
				if err := kube.Get(ctx, client.ObjectKeyFromObject(nc), &got); err != nil {
					return nil
				}
				return &got
			}
			for range 2 {
				if _, err := settle(c, ctx, get()); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(31 * time.Second)
			res, err := settle(c, ctx, get())
			if err != nil {
				t.Fatal(err)
			}
			var evs []string
			for len(rec.Events) > 0 {
				evs = append(evs, <-rec.Events)
			}
			if kept := get() != nil && get().Status.Phase != v1alpha1.NodeClaimDisrupting; kept != tc.kept {
				t.Fatalf("n1 kept = %v, want %v; events %v", kept, tc.kept, evs)
			}
			if !tc.kept {
				return
			}
			if res.RequeueAfter <= 0 {
				t.Errorf("a node kept for a buffer's room is not looked at again (result %+v)", res)
			}
			want := "removing it leaves CapacityBuffer default/web's chunks without room"
			if !strings.Contains(strings.Join(evs, "\n"), want) {
				t.Errorf("no Event saying %q; events:\n%s", want, strings.Join(evs, "\n"))
			}
		})
	}
}

// TestConsolidationKeepsABuffersRoom: n1 runs one 1-cpu pod, n2 two; a
// ready buffer of one 3-cpu chunk. Without the buffer, n1's pod moves to
// n2 and n1 goes. With it, the chunk would have no room on n2 once the
// pod moved there (1+2 cpu used of 4): n1 stays, and its claim says why;
// the real pods are not moved.
func TestConsolidationKeepsABuffersRoom(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keep      bool
		want      []string
		wantEvent string
	}{
		{name: "buffer room kept: n1 stays", keep: true, wantEvent: "removing it leaves CapacityBuffer default/web's chunks without room"},
		{name: "buffer room not kept: n1 goes", want: []string{"n1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &consolidationFixture{keepBufferRoom: tc.keep}
			for i := 1; i <= 2; i++ {
				f.node(fmt.Sprintf("n%d", i))
			}
			f.objs = append(f.objs, pod("a", "n1"), pod("b", "n2"), pod("c", "n2"))
			f.objs = append(f.objs, readyBuffer(1, "3")...)
			got, evs := f.run(t)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("disrupted %v, want %v; events:\n%s", got, tc.want, strings.Join(evs, "\n"))
			}
			if tc.wantEvent != "" && !strings.Contains(strings.Join(evs, "\n"), tc.wantEvent) {
				t.Errorf("no Event saying %q; events:\n%s", tc.wantEvent, strings.Join(evs, "\n"))
			}
		})
	}
}

// TestConsolidationReplacesNoNodeABuffersRoomIsOn: n1 and n2 each run a
// pod that fits on no other node, and would each be replaced by a
// cheaper 2-cpu node (TestConsolidationReplacesANodeWithACheaperOne). A
// ready buffer of two 3-cpu chunks has room only with both nodes, so
// with its room kept neither is replaced, and the claim says why;
// without, n1 is.
func TestConsolidationReplacesNoNodeABuffersRoomIsOn(t *testing.T) {
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprintf("room kept %v", keep), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			objs := append(replacementFixture("on-demand", cpuType("c7.large", 2, "on-demand", 0.085)), readyBuffer(2, "3")...)
			kube, rec := consolidateOnceKeeping(ctx, t, objs, keep)
			evs := drain(rec)
			reps := len(replacementsOf(ctx, t, kube, "p-n1")) + len(replacementsOf(ctx, t, kube, "p-n2"))
			if keep && reps != 0 {
				t.Errorf("%d replacements of nodes the buffer's room is on; events:\n%s", reps, evs)
			}
			if !keep && reps != 1 {
				t.Errorf("%d replacements without the buffer's room kept, want 1; events:\n%s", reps, evs)
			}
			if want := "replacing it leaves CapacityBuffer default/web's chunks without room"; keep && !strings.Contains(evs, want) {
				t.Errorf("no Event saying %q; events:\n%s", want, evs)
			}
		})
	}
}
