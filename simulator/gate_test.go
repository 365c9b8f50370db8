package simulator

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"

	"github.com/nodeforge/nodeforge/test/testobj"
)

// startGate starts a gate on cs for the default profile, with ignore as the
// taint held back.
func startGate(ctx context.Context, t *testing.T, cs *kubefake.Clientset, ignore string) *Gate {
	t.Helper()
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGate(ctx, plugins.NewInTreeRegistry(), cs, &cfg.Profiles[0], ignore)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return g
}

// watchStarted returns a channel closed once a watch of resource has been
// opened on cs: the fake clientset's own watch, signalled.
func watchStarted(cs *kubefake.Clientset, resource string) <-chan struct{} {
	started := make(chan struct{})
	var once sync.Once
	cs.PrependWatchReactor(resource, func(action clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := action.(clienttesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := cs.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(started) })
		return true, w, nil
	})
	return started
}

// gateNode is a Ready node of 4 cpu, 8Gi and 110 pods.
func gateNode(name string, taints ...corev1.Taint) *corev1.Node {
	return testobj.Node(name).Label(corev1.LabelHostname, name).Capacity("cpu", "4", "memory", "8Gi", "pods", "110").
		Taints(taints...).Ready().Obj()
}

// gatePod is a pod of 1 cpu, on host port port unless it is 0.
func gatePod(name string, port int32) *corev1.Pod {
	p := testobj.Pod(name).UID("uid-"+name).Req("cpu", "1")
	if port > 0 {
		p.HostPort(port)
	}
	return p.Obj()
}

// TestGateJudgesAsTheScheduler: the binding taint is not held against a
// pod; other taints are; a pod just bound counts (its host port is taken).
func TestGateJudgesAsTheScheduler(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const binding = "example.com/binding"
	cs := kubefake.NewClientset(
		gateNode("held", corev1.Taint{Key: binding, Effect: corev1.TaintEffectNoSchedule}),
		gateNode("tainted", corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}),
	)
	g := startGate(ctx, t, cs, binding)
	held := gateNode("held", corev1.Taint{Key: binding, Effect: corev1.TaintEffectNoSchedule})
	tainted := gateNode("tainted", corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule})
	if s, _ := g.Check(ctx, gatePod("a", 80), held, nil); !s.IsSuccess() {
		t.Fatalf("pod refused on a node held only by the binding taint: %s %s", s.Plugin(), s.Message())
	}
	if s, _ := g.Check(ctx, gatePod("a", 0), tainted, nil); s.IsSuccess() || s.Plugin() != "TaintToleration" {
		t.Fatalf("pod accepted on a node with an untolerated taint: %v %s", s.Code(), s.Plugin())
	}
	if s, _ := g.Check(ctx, gatePod("b", 80), held, []*corev1.Pod{gatePod("a", 80)}); s.IsSuccess() || s.Plugin() != "NodePorts" {
		t.Fatalf("second pod on host port 80 beside one just bound: %v %s %s", s.Code(), s.Plugin(), s.Message())
	}
	// In a session, a pod placed counts for the pods judged after it.
	session, err := g.Session(held, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := session.Check(ctx, gatePod("a", 80)); !s.IsSuccess() {
		t.Fatalf("first pod on host port 80 refused in a session: %s %s", s.Plugin(), s.Message())
	}
	if s, _ := session.Check(ctx, gatePod("b", 80)); !s.IsSuccess() {
		t.Fatalf("a pod judged, not placed, counted in a session: %s %s", s.Plugin(), s.Message())
	}
	if err := session.Placed(gatePod("a", 80)); err != nil {
		t.Fatal(err)
	}
	if s, _ := session.Check(ctx, gatePod("b", 80)); s.IsSuccess() || s.Plugin() != "NodePorts" {
		t.Fatalf("second pod on host port 80 beside one placed in the session: %v %s %s", s.Code(), s.Plugin(), s.Message())
	}
	// A pod the gate's informer still shows on the node, which the caller
	// knows is gone, does not count there.
	stale := gatePod("stale", 80)
	stale.Spec.NodeName = "held"
	if _, err := cs.CoreV1().Pods("default").Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := g.pods.Pods("default").Get("stale")
		return err == nil, nil
	}); err != nil {
		t.Fatal("the gate's informer never saw the pod")
	}
	if s, _ := g.Check(ctx, gatePod("b", 80), held, nil); !s.IsSuccess() {
		t.Fatalf("pod refused for a pod the caller no longer sees on the node: %s %s", s.Plugin(), s.Message())
	}
	// The caller saw the taint lifted before the gate's informer did: the
	// caller's node is judged, not the stale copy.
	if s, _ := g.Check(ctx, gatePod("a", 0), gateNode("tainted"), nil); !s.IsSuccess() {
		t.Fatalf("pod refused by the gate's stale copy of the node: %s %s", s.Plugin(), s.Message())
	}
}

// TestGateSaysWhatOnlyTheBindingCycleDoes: a pod whose claim waits for its
// first consumer is accepted but must be handed to the scheduler
// (VolumeBinding has a volume to provision); a pod whose claim is bound,
// or that has none, may be bound directly.
func TestGateSaysWhatOnlyTheBindingCycleDoes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	pvc := func(name, volume string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptrTo("wffc"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: volume,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if volume != "" {
			c.Status.Phase = corev1.ClaimBound
			c.Annotations = map[string]string{"pv.kubernetes.io/bind-completed": "yes"}
		}
		return c
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-bound"}, Spec: corev1.PersistentVolumeSpec{
		StorageClassName: "wffc", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		ClaimRef: &corev1.ObjectReference{Namespace: "default", Name: "bound"}, PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/x"}}},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound}}
	cs := kubefake.NewClientset(gateNode("n"), pvc("unbound", ""), pvc("bound", "pv-bound"), pv,
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "wffc"}, Provisioner: "example.com/fake", VolumeBindingMode: &wffc})
	g := startGate(ctx, t, cs, "")
	withClaim := func(name, claim string) *corev1.Pod {
		p := gatePod(name, 0)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		return p
	}
	node := gateNode("n")
	if s, handOff := g.Check(ctx, withClaim("a", "unbound"), node, nil); !s.IsSuccess() || !strings.Contains(handOff, "VolumeBinding") {
		t.Errorf("pod with a claim waiting for its first consumer: status %v %s, handOff %q; want accepted and handed off for VolumeBinding", s.Code(), s.Message(), handOff)
	}
	if s, handOff := g.Check(ctx, withClaim("b", "bound"), node, nil); !s.IsSuccess() || handOff != "" {
		t.Errorf("pod with a bound claim: status %v %s, handOff %q; want accepted, bound directly", s.Code(), s.Message(), handOff)
	}
	if s, handOff := g.Check(ctx, gatePod("c", 0), node, nil); !s.IsSuccess() || handOff != "" {
		t.Errorf("pod without volumes: status %v %s, handOff %q; want accepted, bound directly", s.Code(), s.Message(), handOff)
	}
}

// TestBindingCycleOnlyNamesWhatADirectBindSkips: the default profile
// leaves nothing to the binding cycle but what PreBindPreFlight reports;
// a Permit plugin, another binder or a Reserve plugin without PreBind
// sends every pod through the scheduler.
func TestBindingCycleOnlyNamesWhatADirectBindSkips(t *testing.T) {
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	if got := bindingCycleOnly(cfg.Profiles[0].Plugins); got != "" {
		t.Errorf("default profile: %q, want nothing", got)
	}
	set := func(names ...string) config.PluginSet {
		var s config.PluginSet
		for _, n := range names {
			s.Enabled = append(s.Enabled, config.Plugin{Name: n})
		}
		return s
	}
	for _, tc := range []struct {
		plugins config.Plugins
		want    string
	}{
		{config.Plugins{Permit: set("Gang")}, "Permit plugins [Gang]"},
		{config.Plugins{Bind: set("OtherBinder")}, "Bind plugins [OtherBinder]"},
		{config.Plugins{Reserve: set("VolumeBinding", "Quota"), PreBind: set("VolumeBinding")}, "Reserve plugins [Quota]"},
		{config.Plugins{PostBind: set("Audit")}, "PostBind plugins [Audit]"},
	} {
		if got := bindingCycleOnly(&tc.plugins); got != tc.want {
			t.Errorf("bindingCycleOnly(%+v) = %q, want %q", tc.plugins, got, tc.want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestGateSessionsShareUnchangedPodInfos: sessions take the PodInfo of a
// bound pod the informer still holds as the same object from the last
// session (its requests worked out once), also after a session judging
// the pod's own node, make a new one for a pod changed since, forget pods
// gone, and judge with them as with fresh ones: a pod bound elsewhere
// fills its node, and one resized frees it.
func TestGateSessionsShareUnchangedPodInfos(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	big := gatePod("big", 0)
	big.Spec.NodeName = "other"
	big.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
	gone := gatePod("gone", 0)
	gone.Spec.NodeName = "other"
	gone.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("0")
	cs := kubefake.NewClientset(gateNode("held"), gateNode("other"), big, gone)
	podsWatched := watchStarted(cs, "pods")
	g := startGate(ctx, t, cs, "")
	wantOnOther := func(s *GateSession) {
		t.Helper()
		// "other" is full with big (4 of 4 cpu): a 1-cpu pod does not fit
		// there, whatever the judged node.
		if ni := s.view.info("other"); ni == nil || ni.Requested.MilliCPU != 4000 {
			t.Fatalf("node other in the session: %v", ni)
		}
	}
	first, err := g.Session(gateNode("held"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantOnOther(first)
	bigInfo := g.infos[big.UID].pi
	if bigInfo == nil || len(g.infos) != 2 {
		t.Fatalf("%d PodInfos kept after a session over 2 bound pods", len(g.infos))
	}
	second, err := g.Session(gateNode("held"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantOnOther(second)
	if g.infos[big.UID].pi != bigInfo {
		t.Fatal("an unchanged pod got a new PodInfo in the next session")
	}
	// A session judging the pod's own node counts copies of its pods, and
	// keeps their PodInfos for the sessions after it.
	if _, err := g.Session(gateNode("other"), nil); err != nil {
		t.Fatal(err)
	}
	if g.infos[big.UID].pi != bigInfo {
		t.Fatal("a session judging the pod's own node dropped its PodInfo")
	}
	// big shrinks to 1 cpu and gone goes: the next session sees both.
	// The fake API server's watch does not replay what happened between
	// the informer's list and its watch: change nothing before the watch
	// is there (seen lost on a loaded machine, cold CI).
	select {
	case <-podsWatched:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	small := big.DeepCopy()
	small.ResourceVersion = "2"
	small.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	if _, err := cs.CoreV1().Pods("default").Update(ctx, small, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		p, err := g.pods.Pods("default").Get("big")
		_, goneErr := g.pods.Pods("default").Get("gone")
		return err == nil && p.Spec.Containers[0].Resources.Requests.Cpu().MilliValue() == 1000 && goneErr != nil, nil
	}); err != nil {
		t.Fatal("the gate's informer never saw the changes")
	}
	third, err := g.Session(gateNode("held"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ni := third.view.info("other"); ni == nil || ni.Requested.MilliCPU != 1000 {
		t.Fatalf("node other after big shrank to 1 cpu: %v", ni)
	}
	if g.infos[big.UID].pi == bigInfo {
		t.Fatal("a changed pod kept its old PodInfo")
	}
	if _, ok := g.infos[gone.UID]; ok || len(g.infos) != 1 {
		t.Fatalf("%d PodInfos kept; a deleted pod's is among them: %v", len(g.infos), ok)
	}
}
