package v1alpha1

import (
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
