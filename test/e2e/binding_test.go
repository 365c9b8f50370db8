package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// The annotations a volume's life passes through: the PV controller names
// the external provisioner on the claim, the scheduler's VolumeBinding
// names the node it chose (both from the Kubernetes storage API).
const (
	annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	annSelectedNode       = "volume.kubernetes.io/selected-node"
	fakeProvisioner       = "example.com/fake"
)

// TestPodsThatNeedTheBindingCycleAreBoundByTheScheduler: a pod whose
// PersistentVolumeClaim waits for its first consumer, and one with a
// generic ephemeral volume, get a node like any other pod, but the
// provisioner does not bind them: it nominates them to the node and the
// scheduler's binding cycle binds them, so VolumeBinding chooses the node
// for their claims (selected-node) and a provisioner makes their volumes
// there before the pod is bound. A pod without volumes, nominated beside
// them, is bound directly. The external provisioner is simulated: it
// makes a PersistentVolume on the selected node for each claim of its
// StorageClass, as a CSI provisioner would.
func TestPodsThatNeedTheBindingCycleAreBoundByTheScheduler(t *testing.T) {
	t.Parallel()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "wffc"}, Provisioner: fakeProvisioner, VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	go provisionVolumes(ctx, t, cs, "wffc")
	createZonalPool(t, kube, "volumes")

	claimSpec := corev1.PersistentVolumeClaimSpec{
		StorageClassName: ptr.To("wffc"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"}, Spec: claimSpec,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	volumes := map[string][]corev1.Volume{
		"volumes-pvc": {{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		"volumes-ephemeral": {{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: claimSpec}}}}},
		"volumes-none": nil,
	}
	for name, vols := range volumes {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "volumes"}},
			Spec: corev1.PodSpec{
				SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"pool": "volumes"}, Volumes: vols,
				Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
			}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := settled(t, cs, kube, "volumes", len(volumes))
	if len(p.pending) != 0 {
		t.Fatalf("%d pods pending", len(p.pending))
	}

	for name, vols := range volumes {
		pod, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var node corev1.Node
		if err := kube.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &node); err != nil {
			t.Fatal(err)
		}
		if node.Labels[v1alpha1.LabelNodePool] != "volumes" {
			t.Errorf("pod %s runs on %s, not a node of pool volumes", name, node.Name)
		}
		reasons, notes, err := podEvents(ctx, cs, name)
		if err != nil {
			t.Fatal(err)
		}
		// The scheduler writes a Scheduled Event for each pod it binds;
		// the provisioner writes none for the pods it binds directly.
		byScheduler := slices.Contains(reasons, "Scheduled")
		if len(vols) == 0 {
			if byScheduler || slices.Contains(reasons, v1alpha1.ReasonHandedOff) {
				t.Errorf("pod %s without volumes: events %v; want it bound by the provisioner, not handed off", name, reasons)
			}
			continue
		}
		if !byScheduler || !slices.Contains(reasons, v1alpha1.ReasonHandedOff) {
			t.Errorf("pod %s with a volume to provision: events %v %q; want it handed off and bound by the scheduler", name, reasons, notes)
		}
		claim := vols[0].Name
		if vols[0].PersistentVolumeClaim != nil {
			claim = vols[0].PersistentVolumeClaim.ClaimName
		} else {
			claim = name + "-" + claim // the ephemeral volume controller's name for it
		}
		pvc, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Status.Phase != corev1.ClaimBound || pvc.Annotations[annSelectedNode] != node.Name {
			t.Errorf("claim %s of pod %s: phase %s, selected node %q; want Bound, on %s", claim, name, pvc.Status.Phase, pvc.Annotations[annSelectedNode], node.Name)
		}
	}
}

// provisionVolumes is a simulated external provisioner for class: for
// each claim the scheduler has chosen a node for, it makes a volume on
// that node bound to the claim, as a CSI provisioner would; the PV
// controller then binds the claim.
func provisionVolumes(ctx context.Context, t testing.TB, cs kubernetes.Interface, class string) {
	for ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		claims, err := cs.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, c := range claims.Items {
			node := c.Annotations[annSelectedNode]
			if c.Spec.VolumeName != "" || node == "" || c.Annotations[annStorageProvisioner] != fakeProvisioner || ptr.Deref(c.Spec.StorageClassName, "") != class {
				continue
			}
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pvc-%s", c.UID), Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": fakeProvisioner}},
				Spec: corev1.PersistentVolumeSpec{
					StorageClassName: class, AccessModes: c.Spec.AccessModes, Capacity: c.Spec.Resources.Requests,
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
					ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: c.Namespace, Name: c.Name, UID: c.UID},
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/fake/" + string(c.UID)}},
					NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
					}}}},
				},
			}
			if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
				t.Logf("simulated provisioner: creating %s: %v", pv.Name, err)
			}
		}
	}
}

// podEvents returns the reasons and notes of a pod's Events.
func podEvents(ctx context.Context, cs kubernetes.Interface, pod string) (reasons, notes []string, err error) {
	evs, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + pod})
	if err != nil {
		return nil, nil, err
	}
	for _, e := range evs.Items {
		reasons = append(reasons, e.Reason)
		notes = append(notes, e.Note)
	}
	return reasons, notes, nil
}

// latencyPool is a pool of the default SimulatedNodeClass, any type,
// whose nodes carry label=name and are never consolidated: a benchmark's
// pods select it, and each goes through a new node.
func latencyPool(name, label string) *v1alpha1.NodePool {
	return &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodePoolSpec{
		Template: v1alpha1.NodeClaimTemplate{
			ObjectMeta: v1alpha1.NodeClaimTemplateObjectMeta{Labels: map[string]v1alpha1.LabelValue{label: v1alpha1.LabelValue(name)}},
			Spec:       v1alpha1.NodeClaimTemplateSpec{NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"}},
		},
		Disruption: v1alpha1.Disruption{ConsolidateAfter: "Never"},
	}}
}

// BenchmarkPodCreatedToRunning measures, in the sandbox, the time from a
// pod's creation to its being seen Running, for the two ways a pod gets
// to its new node: bound directly by the provisioner, or handed to the
// scheduler's binding cycle (here for a generic ephemeral volume that a
// simulated provisioner makes once the scheduler selects the node). Each
// iteration creates 10 pods on a new pool, so each is measured through a
// new node: nomination, the batch window, launch, registration, readiness
// and the bind. It reports the p50 and p99 of all pods measured.
func BenchmarkPodCreatedToRunning(b *testing.B) {
	ctx := context.Background()
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: source, BinDir: binDir})
	if err != nil {
		b.Fatal(err)
	}
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: b.TempDir(), Binaries: bins})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Stop()
	cs, kube, err := sb.Clients()
	if err != nil {
		b.Fatal(err)
	}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "wffc"}, Provisioner: fakeProvisioner, VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	agent, stop := context.WithCancel(ctx)
	defer stop()
	go provisionVolumes(agent, b, cs, "wffc")
	round := 0
	for _, path := range []string{"direct", "handoff"} {
		b.Run(path, func(b *testing.B) {
			var latencies []time.Duration
			for range b.N {
				round++
				pool := fmt.Sprintf("latency-%d", round)
				if err := kube.Create(ctx, latencyPool(pool, "pool")); err != nil {
					b.Fatal(err)
				}
				created := map[string]time.Time{}
				for i := range 10 {
					pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", pool, i), Namespace: "default"},
						Spec: corev1.PodSpec{
							SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"pool": pool}, TerminationGracePeriodSeconds: ptr.To[int64](0),
							Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
								Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
						}}
					if path == "handoff" {
						pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
							VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
								StorageClassName: ptr.To("wffc"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
								Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
							}}}}}}
					}
					if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					created[pod.Name] = time.Now()
				}
				running := map[string]time.Duration{}
				if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
					pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
					if err != nil {
						return false, nil
					}
					for _, p := range pods.Items {
						if t0, ok := created[p.Name]; ok && p.Status.Phase == corev1.PodRunning {
							if _, seen := running[p.Name]; !seen {
								running[p.Name] = time.Since(t0)
							}
						}
					}
					return len(running) == len(created), nil
				}); err != nil {
					b.Fatalf("%d of %d pods Running: %v", len(running), len(created), err)
				}
				for _, d := range running {
					latencies = append(latencies, d)
				}
			}
			slices.Sort(latencies)
			quantile := func(q float64) float64 {
				return latencies[min(len(latencies)-1, int(q*float64(len(latencies))))].Seconds()
			}
			b.ReportMetric(quantile(0.5), "p50-s")
			b.ReportMetric(quantile(0.99), "p99-s")
			b.ReportMetric(float64(len(latencies)), "pods")
		})
	}
}

// driverClass creates DeviceClass name, selecting every device of driver.
func driverClass(t *testing.T, cs kubernetes.Interface, name, driver string) {
	t.Helper()
	if _, err := cs.ResourceV1().DeviceClasses().Create(context.Background(), &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestResourceClaimIsAllocatedByTheScheduler: a pod with a ResourceClaim
// for a device of a fake DRA driver (a network-attached device, published
// in a ResourceSlice for all nodes, so a node not yet launched can reach it)
// is nominated, its node launched, and then handed to the scheduler, whose
// DynamicResources allocates the device and reserves it for the pod before
// binding: the claim ends allocated and reserved for the pod, the pod
// Running, and the provisioner never bound it itself.
func TestResourceClaimIsAllocatedByTheScheduler(t *testing.T) {
	t.Parallel()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	ctx := context.Background()
	const driver = "fake.example.com"
	driverClass(t, cs, "fake-device", driver)
	if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "fake-network-devices"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: driver, Pool: resourcev1.ResourcePool{Name: "network", Generation: 1, ResourceSliceCount: 1},
			AllNodes: ptr.To(true),
			Devices:  []resourcev1.Device{{Name: "dev-0"}, {Name: "dev-1"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.ResourceV1().ResourceClaims("default").Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "device", Namespace: "default"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "device", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "fake-device"},
		}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createZonalPool(t, kube, "devices")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "devices-0", Namespace: "default", Labels: map[string]string{"app": "devices"}},
		Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"pool": "devices"},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "device", ResourceClaimName: ptr.To("device")}},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
				Claims:   []corev1.ResourceClaim{{Name: "device"}}}}},
		}}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := settled(t, cs, kube, "devices", 1)
	if len(p.pending) != 0 || len(p.claims) != 1 {
		t.Fatalf("%d pods pending, %d nodeclaims; want the pod Running on one node", len(p.pending), len(p.claims))
	}
	reasons, notes, err := podEvents(ctx, cs, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "(nodeclaim ") }) || !slices.Contains(reasons, v1alpha1.ReasonHandedOff) {
		t.Errorf("pod with a ResourceClaim: events %v %q; want it handed off and bound by the scheduler", reasons, notes)
	}
	claim, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, "device", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == created.UID }) {
		t.Errorf("claim device: allocation %v, reserved for %v; want allocated and reserved for pod %s", claim.Status.Allocation, claim.Status.ReservedFor, created.UID)
	}
}
