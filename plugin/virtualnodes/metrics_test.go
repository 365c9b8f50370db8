package virtualnodes

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-base/metrics/testutil"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// decisionCounts reads, by their exported labels, the series a decision
// writes: nominations and decision durations per result, refusals per
// reason, and the open claims.
type decisionCounts struct {
	nominations, durations map[string]float64
	refused                map[string]float64
	open                   float64
}

func readDecisionCounts(t *testing.T) decisionCounts {
	t.Helper()
	c := decisionCounts{nominations: map[string]float64{}, durations: map[string]float64{}, refused: map[string]float64{}}
	for _, r := range resultNames {
		n, err := testutil.GetCounterMetricValue(nominationsTotal.WithLabelValues(r))
		if err != nil {
			t.Fatal(err)
		}
		d, err := testutil.GetHistogramMetricCount(decisionDuration.WithLabelValues(r))
		if err != nil {
			t.Fatal(err)
		}
		c.nominations[r], c.durations[r] = n, float64(d)
	}
	for _, why := range refusalNames[1:] {
		n, err := testutil.GetCounterMetricValue(podsRefused.WithLabelValues(why))
		if err != nil {
			t.Fatal(err)
		}
		c.refused[why] = n
	}
	open, err := testutil.GetGaugeMetricValue(claimsOpen)
	if err != nil {
		t.Fatal(err)
	}
	c.open = open
	return c
}

// since returns what was counted after before, leaving out the zeros.
func (c decisionCounts) since(before decisionCounts) map[string]float64 {
	out := map[string]float64{}
	for label, m := range map[string][2]map[string]float64{
		"nominations": {c.nominations, before.nominations}, "durations": {c.durations, before.durations}, "refused": {c.refused, before.refused},
	} {
		for k, v := range m[0] {
			if d := v - m[1][k]; d != 0 {
				out[label+"/"+k] = d
			}
		}
	}
	if d := c.open - before.open; d != 0 {
		out["open"] = d
	}
	return out
}

// TestMetricsCountEachDecision: a pod nominated to a new claim, a second
// pod to the same open claim, the first tried again (it keeps its claim),
// a pod no type holds; each is one nomination of its result, one decision
// duration of that result, the refusal counted under TooLarge; the claim
// counts open until the provisioner closes it.
func TestMetricsCountEachDecision(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	a := testPod("a", "1", "1Gi")
	for _, step := range []struct {
		name string
		pod  *corev1.Pod
		want map[string]float64
	}{
		{"a new claim", a, map[string]float64{"nominations/newClaim": 1, "durations/newClaim": 1, "open": 1}},
		{"the open claim", testPod("b", "1", "1Gi"), map[string]float64{"nominations/existingClaim": 1, "durations/existingClaim": 1}},
		{"tried again", a, map[string]float64{"nominations/kept": 1, "durations/kept": 1}},
		{"too large", testPod("huge", "500", "1Gi"), map[string]float64{"nominations/refused": 1, "durations/refused": 1, "refused/TooLarge": 1}},
	} {
		before := readDecisionCounts(t)
		h.schedule(ctx, step.pod)
		if got := readDecisionCounts(t).since(before); !equalCounts(got, step.want) {
			t.Errorf("%s: counted %v, want %v", step.name, got, step.want)
		}
	}
	before := readDecisionCounts(t)
	closed := h.plugin.book.openClaims()[0].object()
	closed.Status.Phase = v1alpha1.NodeClaimLaunching
	h.plugin.claimChanged(closed)
	if got, want := readDecisionCounts(t).since(before), map[string]float64{"open": -1}; !equalCounts(got, want) {
		t.Errorf("the provisioner closed the claim: counted %v, want %v", got, want)
	}
}

// TestMetricsCountRefusalReasons: each way VirtualNodes refuses a pod is
// counted under its reason, once a pod.
func TestMetricsCountRefusalReasons(t *testing.T) {
	limited := benchPool(t)
	limited.np.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("4")}
	for _, tc := range []struct {
		name  string
		pools []*pool
		edit  func(*harness)
		pod   *corev1.Pod
		want  string
	}{
		{"no pool", nil, nil, testPod("a", "1", "1Gi"), "NoNodePool"},
		{"over the pool's cpu limit", []*pool{limited}, nil, testPod("a", "5", "1Gi"), "LimitReached"},
		{"no type matches the pod's selector", []*pool{benchPool(t)}, nil,
			func() *corev1.Pod {
				p := testPod("a", "1", "1Gi")
				p.Spec.NodeSelector = map[string]string{corev1.LabelInstanceTypeStable: "no-such-type"}
				return p
			}(), "NoInstanceTypeMatches"},
		{"not synced", []*pool{benchPool(t)}, func(h *harness) { h.plugin.synced = make(chan struct{}) }, testPod("a", "1", "1Gi"), "NotSynced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.pools)
			if tc.edit != nil {
				tc.edit(h)
			}
			before := readDecisionCounts(t)
			if _, s := h.schedule(context.Background(), tc.pod); s.IsSuccess() {
				t.Fatal("nominated")
			}
			want := map[string]float64{"nominations/refused": 1, "durations/refused": 1, "refused/" + tc.want: 1}
			if got := readDecisionCounts(t).since(before); !equalCounts(got, want) {
				t.Errorf("counted %v, want %v", got, want)
			}
		})
	}
}

func equalCounts(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// BenchmarkDecisionMetrics is what counting one decision adds to
// PostFilter: no allocation, no lock.
func BenchmarkDecisionMetrics(b *testing.B) {
	m := pluginMetrics()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.observe(result(i%int(numResults)), refusalTooLarge, time.Duration(i)*time.Microsecond)
	}
}
