package sandbox

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestPodArgsMapMountsAndPorts: mount paths become the pod's directories
// and listeners on every interface at a container port move to loopback
// at the mapped port; anything else is passed as written.
func TestPodArgsMapMountsAndPorts(t *testing.T) {
	c := corev1.Container{Args: []string{
		"--config=/etc/nodeforge/scheduler/config.yaml",
		"--scheduler-config=/etc/nodeforge/scheduler",
		"--metrics-bind-address=:8080",
		"--health-probe-bind-address=0.0.0.0:8081",
		"--other-bind-address=:9999", // not a container port
		"--cluster-name=/etc/nodeforge/schedulerx",
		"--cluster-ca-file=/tmp/sb/pki/ca.crt", // the sandbox's, under /tmp
		"--v=2",
	}}
	// The pod's directories are under /tmp, itself a mount path.
	mounts := map[string]string{"/etc/nodeforge/scheduler": "/tmp/sb/pods/p/volumes/config", "/etc": "/tmp/sb/pods/p/volumes/etc", "/tmp": "/tmp/sb/pods/p/volumes/tmp"}
	ports := map[int32]int{8080: 41000, 8081: 41001}
	got := podArgs(c, mounts, ports, "/tmp/sb")
	want := []string{
		"--config=/tmp/sb/pods/p/volumes/config/config.yaml",
		"--scheduler-config=/tmp/sb/pods/p/volumes/config",
		"--metrics-bind-address=127.0.0.1:41000",
		"--health-probe-bind-address=127.0.0.1:41001",
		"--other-bind-address=:9999",
		"--cluster-name=/tmp/sb/pods/p/volumes/etc/nodeforge/schedulerx",
		"--cluster-ca-file=/tmp/sb/pki/ca.crt",
		"--v=2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("podArgs:\n got %q\nwant %q", got, want)
	}
}

// TestContainerEnvResolvesValuesAndPodFields, and refuses what it cannot
// resolve instead of passing an empty value.
func TestContainerEnvResolvesValuesAndPodFields(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-1", Namespace: "nodeforge", UID: "u-1"}, Spec: corev1.PodSpec{NodeName: "n", ServiceAccountName: "sa"}}
	c := corev1.Container{Name: "provisioner", Env: []corev1.EnvVar{
		{Name: "A", Value: "1"},
		{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}}
	got, err := containerEnv(pod, c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=1", "POD=p-1", "NODE=n"}; !slices.Equal(got, want) {
		t.Errorf("env %q, want %q", got, want)
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}})
	if _, err := containerEnv(pod, c); err == nil || !strings.Contains(err.Error(), "env S") {
		t.Errorf("a secretKeyRef was not refused by name: %v", err)
	}
}

// TestReadinessUsesTheProbeOnTheMappedPort, by port name and number.
func TestReadinessUsesTheProbeOnTheMappedPort(t *testing.T) {
	c := corev1.Container{Name: "provisioner", Ports: []corev1.ContainerPort{{Name: "http-health", ContainerPort: 8081}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http-health")}}}}
	if _, err := readiness(c, map[int32]int{8081: 1}); err != nil {
		t.Errorf("probe by port name: %v", err)
	}
	c.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(9000)
	if _, err := readiness(c, map[int32]int{8081: 1}); err == nil {
		t.Error("a probe on a port the container does not declare was accepted")
	}
	c.ReadinessProbe = nil
	if _, err := readiness(c, nil); err == nil {
		t.Error("a container without a readiness probe was accepted")
	}
}

// TestCRIWriterWritesKubeletLogLines: one line per complete line, in the
// format kwok's log reader (the kubelet's) parses, split writes joined and
// an unfinished last line written on Close.
func TestCRIWriterWritesKubeletLogLines(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	w := &criWriter{mu: &mu, w: &out, stream: "stderr"}
	for _, chunk := range []string{"I1125 first li", "ne\nsecond\n", "partial"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z stderr F (.*)$`)
	var texts []string
	for _, l := range lines {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("not a CRI log line: %q", l)
		}
		texts = append(texts, m[2])
	}
	if want := []string{"I1125 first line", "second", "partial"}; !slices.Equal(texts, want) {
		t.Errorf("lines %q, want %q", texts, want)
	}
}
