package fidelity

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// podBuilder makes the pods of a scenario: podOf("web").Req("1", "1Gi").Obj().
type podBuilder struct{ p *corev1.Pod }

func podOf(app string) *podBuilder {
	return &podBuilder{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: app + "-", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			SchedulerName:                 "nodeforge-scheduler",
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}}
}

func (b *podBuilder) Obj() *corev1.Pod { return b.p.DeepCopy() }

func (b *podBuilder) Req(cpu, mem string) *podBuilder {
	b.p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	return b
}

func (b *podBuilder) Extended(name corev1.ResourceName, n string) *podBuilder {
	r := &b.p.Spec.Containers[0].Resources
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	r.Requests[name] = resource.MustParse(n)
	r.Limits = corev1.ResourceList{name: resource.MustParse(n)}
	return b
}

func (b *podBuilder) Label(k, v string) *podBuilder { b.p.Labels[k] = v; return b }

func (b *podBuilder) Selector(k, v string) *podBuilder {
	if b.p.Spec.NodeSelector == nil {
		b.p.Spec.NodeSelector = map[string]string{}
	}
	b.p.Spec.NodeSelector[k] = v
	return b
}

func (b *podBuilder) affinity() *corev1.Affinity {
	if b.p.Spec.Affinity == nil {
		b.p.Spec.Affinity = &corev1.Affinity{}
	}
	return b.p.Spec.Affinity
}

// NodeAffinityIn adds a required node affinity term key In values.
func (b *podBuilder) NodeAffinityIn(key string, values ...string) *podBuilder {
	a := b.affinity()
	a.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}},
	}}}}
	return b
}

// PreferNodeAffinityIn adds a preferred node affinity term key In values.
func (b *podBuilder) PreferNodeAffinityIn(key string, values ...string) *podBuilder {
	a := b.affinity()
	a.NodeAffinity = &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}},
	}}}}
	return b
}

func (b *podBuilder) Toleration(key, value string, effect corev1.TaintEffect) *podBuilder {
	b.p.Spec.Tolerations = append(b.p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpEqual, Value: value, Effect: effect})
	return b
}

// Spread adds a topology spread constraint over pods with the same app label.
func (b *podBuilder) Spread(key string, maxSkew int32, when corev1.UnsatisfiableConstraintAction, edit ...func(*corev1.TopologySpreadConstraint)) *podBuilder {
	c := corev1.TopologySpreadConstraint{MaxSkew: maxSkew, TopologyKey: key, WhenUnsatisfiable: when,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": b.p.Labels["app"]}}}
	for _, e := range edit {
		e(&c)
	}
	b.p.Spec.TopologySpreadConstraints = append(b.p.Spec.TopologySpreadConstraints, c)
	return b
}

// PodAffinity adds a required affinity to pods labelled app=app within key.
func (b *podBuilder) PodAffinity(app, key string) *podBuilder {
	a := b.affinity()
	a.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, TopologyKey: key}}}
	return b
}

// PodAntiAffinity adds a required anti-affinity to pods labelled app=app within key.
func (b *podBuilder) PodAntiAffinity(app, key string) *podBuilder {
	a := b.affinity()
	a.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, TopologyKey: key}}}
	return b
}

func (b *podBuilder) HostPort(port int32) *podBuilder {
	b.p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP}}
	return b
}

// Init adds an init container with the given requests.
func (b *podBuilder) Init(cpu, mem string, sidecar bool) *podBuilder {
	c := corev1.Container{Name: "init" + string(rune('a'+len(b.p.Spec.InitContainers))), Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}
	if sidecar {
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	}
	b.p.Spec.InitContainers = append(b.p.Spec.InitContainers, c)
	return b
}

func (b *podBuilder) RuntimeClass(name string) *podBuilder {
	b.p.Spec.RuntimeClassName = ptr.To(name)
	return b
}

func (b *podBuilder) PVC(claim string) *podBuilder {
	b.p.Spec.Volumes = append(b.p.Spec.Volumes, corev1.Volume{Name: claim, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	return b
}

func (b *podBuilder) Owner(kind, name string, uid string) *podBuilder {
	b.p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: typesUID(uid), Controller: ptr.To(true)}}
	return b
}

// times returns n copies of the pod.
func times(n int, b *podBuilder) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = b.Obj()
	}
	return out
}
