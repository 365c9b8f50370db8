package v1alpha1

import (
	"maps"
	"testing"
	"time"
)

func TestIsReservedKey(t *testing.T) {
	for key, want := range map[string]bool{
		"nodeforge.dev/nodepool":           true,
		"team.nodeforge.dev/owner":         true,
		"nodeforge.dev.example.com/x":      false,
		"notnodeforge.dev/x":               false,
		"intent":                           false,
		"node.kubernetes.io/instance-type": false,
	} {
		if got := IsReservedKey(key); got != want {
			t.Errorf("IsReservedKey(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestNillableDuration(t *testing.T) {
	for _, tc := range []struct {
		in     NillableDuration
		want   time.Duration
		wantOK bool
		err    bool
	}{
		{in: "30s", want: 30 * time.Second, wantOK: true},
		{in: "1h30m", want: 90 * time.Minute, wantOK: true},
		{in: "720h", want: 720 * time.Hour, wantOK: true},
		{in: Never, wantOK: false},
		{in: "soon", err: true},
	} {
		got, ok, err := tc.in.Duration()
		if (err != nil) != tc.err || ok != tc.wantOK || got != tc.want {
			t.Errorf("%q.Duration() = %v, %v, %v; want %v, %v, error %v", tc.in, got, ok, err, tc.want, tc.wantOK, tc.err)
		}
	}
}

// TestInstanceNameLabels reads instance type names as Karpenter's
// instance-category, -family, -generation and -size labels read them.
func TestInstanceNameLabels(t *testing.T) {
	for name, want := range map[string][4]string{ // category, family, generation, size
		"c7g.xlarge":         {"c", "c7g", "7", "xlarge"},
		"m5.large":           {"m", "m5", "5", "large"},
		"inf2.24xlarge":      {"inf", "inf2", "2", "24xlarge"},
		"trn1n.32xlarge":     {"trn", "trn1n", "1", "32xlarge"},
		"u-6tb1.metal":       {"u", "u-6tb1", "1", "metal"},
		"u7i-12tb.224xlarge": {"u", "u7i-12tb", "7", "224xlarge"},
		"mac2-m2pro.metal":   {"mac", "mac2-m2pro", "2", "metal"},
		"g4dn.metal-24xl":    {"g", "g4dn", "4", "metal-24xl"},
		"x2iedn.32xlarge":    {"x", "x2iedn", "2", "32xlarge"},
		"p5e.48xlarge":       {"p", "p5e", "5", "48xlarge"},
		"hpc7a.96xlarge":     {"hpc", "hpc7a", "7", "96xlarge"},
		"r8gd.metal-48xl":    {"r", "r8gd", "8", "metal-48xl"},
		"t3.medium":          {"t", "t3", "3", "medium"},
		"c7.large":           {"c", "c7", "7", "large"},
	} {
		got := InstanceNameLabels(name)
		wantMap := map[string]string{LabelInstanceCategory: want[0], LabelInstanceFamily: want[1], LabelInstanceGeneration: want[2], LabelInstanceSize: want[3]}
		if !maps.Equal(got, wantMap) {
			t.Errorf("%s: %v, want %v", name, got, wantMap)
		}
	}
	if got := InstanceNameLabels("nodot"); len(got) != 0 {
		t.Errorf("a name without a size: %v, want no labels", got)
	}
}
