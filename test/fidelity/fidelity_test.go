package fidelity

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

const (
	zone     = corev1.LabelTopologyZone
	hostname = corev1.LabelHostname
)

func labels(kv ...string) func(*v1alpha1.NodePool) {
	return func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{}
		for i := 0; i < len(kv); i += 2 {
			np.Spec.Template.ObjectMeta.Labels[kv[i]] = v1alpha1.LabelValue(kv[i+1])
		}
	}
}

func require(key string, op corev1.NodeSelectorOperator, values ...string) func(*v1alpha1.NodePool) {
	return func(np *v1alpha1.NodePool) {
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, v1alpha1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values})
	}
}

func taint(key, value string, effect corev1.TaintEffect) func(*v1alpha1.NodePool) {
	return func(np *v1alpha1.NodePool) {
		np.Spec.Template.Spec.Taints = append(np.Spec.Template.Spec.Taints, v1alpha1.Taint{Key: key, Value: value, Effect: effect})
	}
}

func weight(w int32) func(*v1alpha1.NodePool) {
	return func(np *v1alpha1.NodePool) { np.Spec.Weight = ptr.To(w) }
}

// zonesOf returns the zones of the claims.
func zonesOf(claims []v1alpha1.NodeClaim) map[string]int {
	out := map[string]int{}
	for _, nc := range claims {
		for _, r := range nc.Spec.Requirements {
			if r.Key == zone {
				out[r.Values[0]]++
			}
		}
	}
	return out
}

func onlyPool(name string) func(*testing.T, []v1alpha1.NodeClaim) {
	return func(t *testing.T, claims []v1alpha1.NodeClaim) {
		for _, nc := range claims {
			if nc.Spec.NodePool != name {
				t.Errorf("claim %s is from pool %s, want %s", nc.Name, nc.Spec.NodePool, name)
			}
		}
	}
}

func atLeastZones(n int) func(*testing.T, []v1alpha1.NodeClaim) {
	return func(t *testing.T, claims []v1alpha1.NodeClaim) {
		if z := zonesOf(claims); len(z) < n {
			t.Errorf("claims in zones %v, want at least %d zones", z, n)
		}
	}
}

func claimCount(n int) func(*testing.T, []v1alpha1.NodeClaim) {
	return func(t *testing.T, claims []v1alpha1.NodeClaim) {
		if len(claims) != n {
			t.Errorf("%d claims, want %d", len(claims), n)
		}
	}
}

func TestFidelity(t *testing.T) {
	for i, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, i) })
	}
}

// scenarios are the cases of the differential suite, each also run end to
// end through a sandbox (TestFidelityEndToEnd).
func scenarios() []scenario {
	def := pool("default")
	apps := pool("apps", labels("intent", "apps"), weight(50))
	gpu := pool("gpu", taint("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule), require(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, "g6.xlarge", "g6.2xlarge", "g6.4xlarge", "g6.12xlarge", "g6.24xlarge"))
	web := podOf("web").Req("1", "1536Mi")

	return []scenario{
		{name: "plain pods share one claim", pools: []*v1alpha1.NodePool{def}, pods: times(6, web), check: claimCount(1)},
		{name: "nodeSelector on a pool label picks that pool", pools: []*v1alpha1.NodePool{def, apps},
			pods: times(4, podOf("sel").Req("500m", "512Mi").Selector("intent", "apps")), check: onlyPool("apps")},
		{name: "required node affinity on zone", pools: []*v1alpha1.NodePool{def},
			pods: times(3, podOf("za").Req("1", "1Gi").NodeAffinityIn(zone, "zone-c")),
			check: func(t *testing.T, c []v1alpha1.NodeClaim) {
				if z := zonesOf(c); z["zone-c"] != len(c) {
					t.Errorf("claims in %v, want all in zone-c", z)
				}
			}},
		{name: "nodeSelector on architecture", pools: []*v1alpha1.NodePool{def}, pods: times(3, podOf("arm").Req("1", "1Gi").Selector(corev1.LabelArchStable, "arm64"))},
		{name: "nodeSelector on instance type", pools: []*v1alpha1.NodePool{def}, pods: times(2, podOf("it").Req("1", "1Gi").Selector(corev1.LabelInstanceTypeStable, "m7.xlarge"))},
		{name: "required on-demand capacity", pools: []*v1alpha1.NodePool{def}, pods: times(2, podOf("od").Req("1", "1Gi").Selector(v1alpha1.LabelCapacityType, "on-demand"))},
		{name: "preferred node affinity does not block", pools: []*v1alpha1.NodePool{def}, pods: times(3, podOf("pref").Req("1", "1Gi").PreferNodeAffinityIn(zone, "zone-x"))},
		{name: "pods that tolerate a pool's taint may use it; others go elsewhere", pools: []*v1alpha1.NodePool{def, gpu},
			pods: append(times(2, podOf("tol").Req("1", "1Gi").Toleration("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).Extended(simulated.ResourceGPU, "1")), times(2, podOf("notol").Req("1", "1Gi"))...)},
		// End to end the taint is lifted 5 s after the node registers: a
		// pod bound before that would be evicted by the taint manager.
		{name: "startup taints need no toleration", pools: []*v1alpha1.NodePool{pool("startup", func(np *v1alpha1.NodePool) {
			np.Spec.Template.Spec.StartupTaints = []v1alpha1.Taint{{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}}
		})}, pods: times(2, podOf("st").Req("1", "1Gi"))},
		{name: "a pod tolerating a pool's taint only for NoSchedule does not use its NoExecute pool", pools: []*v1alpha1.NodePool{
			pool("evicting", taint("dedicated", "batch", corev1.TaintEffectNoExecute), labels("intent", "batch"), weight(100)),
			pool("holding", taint("dedicated", "batch", corev1.TaintEffectNoSchedule), labels("intent", "batch")),
		}, pods: times(2, podOf("tol").Req("1", "1Gi").Selector("intent", "batch").Toleration("dedicated", "batch", corev1.TaintEffectNoSchedule)), check: onlyPool("holding")},
		{name: "zone spread maxSkew 1 spreads over the zones", pools: []*v1alpha1.NodePool{def},
			pods: times(6, podOf("zs").Req("500m", "512Mi").Spread(zone, 1, corev1.DoNotSchedule)), check: atLeastZones(3)},
		{name: "hostname spread maxSkew 1", pools: []*v1alpha1.NodePool{def}, pods: times(5, podOf("hs").Req("500m", "512Mi").Spread(hostname, 1, corev1.DoNotSchedule))},
		{name: "zone spread with minDomains 3", pools: []*v1alpha1.NodePool{def},
			pods: times(3, podOf("md").Req("500m", "512Mi").Spread(zone, 1, corev1.DoNotSchedule, func(c *corev1.TopologySpreadConstraint) { c.MinDomains = ptr.To[int32](3) })), check: atLeastZones(3)},
		{name: "zone spread with matchLabelKeys", pools: []*v1alpha1.NodePool{def},
			pods: times(4, podOf("mlk").Label("pod-template-hash", "abc").Req("500m", "512Mi").Spread(zone, 1, corev1.DoNotSchedule, func(c *corev1.TopologySpreadConstraint) { c.MatchLabelKeys = []string{"pod-template-hash"} })), check: atLeastZones(2)},
		{name: "zone spread with nodeAffinityPolicy Honor and a zone selector", pools: []*v1alpha1.NodePool{def},
			pods: times(4, podOf("nap").Req("500m", "512Mi").NodeAffinityIn(zone, "zone-a", "zone-b").Spread(zone, 1, corev1.DoNotSchedule, func(c *corev1.TopologySpreadConstraint) {
				c.NodeAffinityPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
			}))},
		{name: "zone spread with nodeTaintsPolicy Honor", pools: []*v1alpha1.NodePool{def},
			pods: times(4, podOf("ntp").Req("500m", "512Mi").Spread(zone, 1, corev1.DoNotSchedule, func(c *corev1.TopologySpreadConstraint) {
				c.NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
			}))},
		{name: "zone spread ScheduleAnyway", pools: []*v1alpha1.NodePool{def}, pods: times(4, podOf("sa").Req("500m", "512Mi").Spread(zone, 1, corev1.ScheduleAnyway))},
		{name: "required pod affinity to pods only nominated so far", pools: []*v1alpha1.NodePool{def},
			pods: times(4, podOf("aff").Req("2", "2Gi").PodAffinity("aff", zone)),
			check: func(t *testing.T, c []v1alpha1.NodeClaim) {
				if z := zonesOf(c); len(z) != 1 {
					t.Errorf("claims in zones %v, want one zone", z)
				}
			}},
		{name: "required pod anti-affinity per host", pools: []*v1alpha1.NodePool{def}, pods: times(4, podOf("anti").Req("500m", "512Mi").PodAntiAffinity("anti", hostname)), check: claimCount(4)},
		{name: "host ports keep pods apart", pools: []*v1alpha1.NodePool{def}, pods: times(3, podOf("port").Req("250m", "256Mi").HostPort(80)), check: claimCount(3)},
		{name: "extended resources only on types that have them", pools: []*v1alpha1.NodePool{def},
			pods: times(2, podOf("gpu").Req("1", "1Gi").Extended(simulated.ResourceGPU, "1"))},
		// End to end the node's GPUs appear 5 s after it registers (its
		// device plugin is late): the pod is bound once they do, on the one
		// node launched for it, not sent back for a second node.
		{name: "a GPU that registers after the node gets one node, not two", pools: []*v1alpha1.NodePool{pool("late-gpu", func(np *v1alpha1.NodePool) {
			np.Spec.Template.Spec.NodeClassRef.Name = "late-devices"
		})},
			setup: func(t *testing.T, ns string) {
				class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "late-devices"},
					Spec: v1alpha1.SimulatedNodeClassSpec{DevicePluginDelay: &metav1.Duration{Duration: 5 * time.Second}}}
				if err := kube.Create(context.Background(), class); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			},
			pods: times(1, podOf("late").Req("1", "1Gi").Extended(simulated.ResourceGPU, "1")), check: claimCount(1)},
		{name: "init containers, sidecars and pod overhead count", pools: []*v1alpha1.NodePool{def},
			setup: func(t *testing.T, ns string) {
				mustCreateOnce(t, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: "sandboxed",
					Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")}}})
			},
			pods: times(3, podOf("init").Req("1", "1Gi").Init("3", "1Gi", false).Init("500m", "256Mi", true).RuntimeClass("sandboxed"))},
		{name: "a pod with a PV bound in one zone goes to that zone", pools: []*v1alpha1.NodePool{def},
			setup: func(t *testing.T, ns string) { zonalVolume(t, ns, "data", "zone-b") },
			pods:  []*corev1.Pod{podOf("vol").Req("1", "1Gi").PVC("data").Obj()},
			check: func(t *testing.T, c []v1alpha1.NodeClaim) {
				if z := zonesOf(c); z["zone-b"] != 1 {
					t.Errorf("claims in %v, want one in zone-b", z)
				}
			}},
		{name: "a pod with an unbound WaitForFirstConsumer claim goes where its class can provision", pools: []*v1alpha1.NodePool{def},
			setup: func(t *testing.T, ns string) { provisionedVolume(t, ns, "scratch", "zone-a") },
			pods:  []*corev1.Pod{podOf("wffc").Req("1", "1Gi").PVC("scratch").Obj()},
			check: func(t *testing.T, c []v1alpha1.NodeClaim) {
				if z := zonesOf(c); z["zone-a"] != 1 {
					t.Errorf("claims in %v, want one in zone-a", z)
				}
			}},
		{name: "daemonset overhead is counted", pools: []*v1alpha1.NodePool{def},
			setup: func(t *testing.T, ns string) { daemonSet(t, ns, "agent", "1", "1Gi") },
			onNode: func(t *testing.T, ns string, node *corev1.Node) {
				// What the DaemonSet controller would do on the new node.
				createPod(t, ns, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node.Name, Labels: map[string]string{"app": "agent"}}, Spec: corev1.PodSpec{
					NodeName: node.Name, Containers: []corev1.Container{{Name: "agent", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}})
			},
			pods: times(7, podOf("ds").Req("1", "1Gi"))},
		{name: "cluster default spread constraints of the profile apply", pools: []*v1alpha1.NodePool{def},
			pluginConfig: []map[string]any{{"name": "PodTopologySpread", "args": map[string]any{"defaultingType": "List",
				"defaultConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": zone, "whenUnsatisfiable": "DoNotSchedule"}}}}},
			setup: func(t *testing.T, ns string) { service(t, ns, "spread") },
			pods:  times(6, podOf("spread").Req("500m", "512Mi")),
			check: atLeastZones(3)},
		{name: "a pod no instance type can hold gets no claim and an Event", pools: []*v1alpha1.NodePool{def},
			pods: times(1, web), refused: []*corev1.Pod{podOf("huge").Req("300", "1Gi").Obj()}, refusal: "pool default: no instance type has 300 cpu; the largest has"},
		{name: "a pod no pool matches gets no claim", pools: []*v1alpha1.NodePool{def},
			refused: []*corev1.Pod{podOf("nomatch").Req("1", "1Gi").Selector("team", "nobody").Obj()}, refusal: "pool default: "},
		{name: "a pool at its cpu limit makes no more claims", pools: []*v1alpha1.NodePool{pool("small", func(np *v1alpha1.NodePool) {
			np.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("2")}
		})}, pods: times(1, podOf("lim").Req("1", "1Gi")), refused: []*corev1.Pod{podOf("over").Req("1500m", "1Gi").PodAntiAffinity("lim", hostname).Obj()}, refusal: "limits reached"},
	}
}

// mustCreateOnce creates a cluster-wide object unless it exists.
func mustCreateOnce(t *testing.T, obj *nodev1.RuntimeClass) {
	t.Helper()
	if _, err := cs.NodeV1().RuntimeClasses().Get(context.Background(), obj.Name, metav1.GetOptions{}); err == nil {
		return
	}
	mustCreate(t, obj)
}

// zonalVolume makes a PVC bound to a PV that only zone can reach, as the
// PV controller leaves them: the claim names the volume, the volume the
// claim (with its UID), both Bound.
func zonalVolume(t *testing.T, ns, name, z string) {
	ctx := context.Background()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "zonal-" + ns}, Provisioner: "none.example.com", VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	mustCreate(t, sc)
	t.Cleanup(func() { _ = cs.StorageV1().StorageClasses().Delete(ctx, sc.Name, metav1.DeleteOptions{}) })
	pvName := "pv-" + ns
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(sc.Name), VolumeName: pvName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	createdPVC, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName, Annotations: map[string]string{"pv.kubernetes.io/bound-by-controller": "yes"}}, Spec: corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName:              sc.Name,
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "none.example.com", VolumeHandle: "vol-1"}},
		ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: name, UID: createdPVC.UID},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zone, Operator: corev1.NodeSelectorOpIn, Values: []string{z}}}}}}},
	}}
	created, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}) })
	// End to end the PV controller writes both too: each write is retried
	// on the object as it is now.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		created.Status.Phase = corev1.VolumeBound
		_, err := cs.CoreV1().PersistentVolumes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if latest, gerr := cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{}); gerr == nil {
				created = latest
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		createdPVC.Status.Phase = corev1.ClaimBound
		createdPVC.Status.Capacity = pv.Spec.Capacity
		createdPVC.Status.AccessModes = pv.Spec.AccessModes
		_, err := cs.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, createdPVC, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if latest, gerr := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil {
				createdPVC = latest
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// provisionedVolume makes an unbound claim of a WaitForFirstConsumer class
// that can only provision in zone z, and plays its external provisioner:
// once the scheduler picks a node, a PV is made there and bound.
func provisionedVolume(t *testing.T, ns, name, z string) {
	ctx, cancel := context.WithCancel(context.Background())
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "wffc-" + ns}, Provisioner: "disk.example.com",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: zone, Values: []string{z}}}}}}
	mustCreate(t, sc)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(sc.Name),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	mustCreate(t, pvc)
	pvName := "pv-" + ns + "-" + name
	t.Cleanup(func() {
		cancel()
		_ = cs.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
		_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
		_ = cs.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			claim, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || claim.Annotations["volume.kubernetes.io/selected-node"] == "" {
				return false, nil
			}
			pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": sc.Provisioner}}, Spec: corev1.PersistentVolumeSpec{
				Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: sc.Name, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: sc.Provisioner, VolumeHandle: pvName}},
				ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: name, UID: claim.UID},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zone, Operator: corev1.NodeSelectorOpIn, Values: []string{z}}}}}}},
			}}
			created, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
			if err != nil {
				return false, nil
			}
			created.Status.Phase = corev1.VolumeBound
			if _, err := cs.CoreV1().PersistentVolumes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				return false, nil
			}
			claim.Spec.VolumeName = pvName
			claim.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
			if claim, err = cs.CoreV1().PersistentVolumeClaims(ns).Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
				return false, nil
			}
			claim.Status.Phase = corev1.ClaimBound
			claim.Status.Capacity = pv.Spec.Capacity
			_, err = cs.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
			return err == nil, nil
		})
	}()
}

func daemonSet(t *testing.T, ns, name, cpu, mem string) {
	l := map[string]string{"app": name}
	mustCreate(t, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: l},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}}}},
	}})
}

// service selects the pods labelled app=<app>: the scheduler's default
// spread constraints count the pods of the same Service (or ReplicaSet,
// StatefulSet, ReplicationController). A Service, not a ReplicaSet, so the
// end-to-end runs' garbage collector and ReplicaSet controller leave the
// pods alone.
func service(t *testing.T, ns, app string) {
	mustCreate(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": app}, Ports: []corev1.ServicePort{{Port: 80}},
	}})
}
