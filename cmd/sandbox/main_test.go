package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFeatureGatesFlag: --feature-gates defaults to
// $NODEFORGE_FEATURE_GATES, the flag wins over it, and a malformed value
// is refused naming where it came from.
func TestFeatureGatesFlag(t *testing.T) {
	t.Setenv(featureGatesEnv, "GenericWorkload=true,TopologyAwareWorkloadScheduling=true")
	for _, tc := range []struct {
		name    string
		args    []string
		want    map[string]bool
		wantErr string
	}{
		{name: "the environment's gates when no flag is given", want: map[string]bool{"GenericWorkload": true, "TopologyAwareWorkloadScheduling": true}},
		{name: "the flag wins over the environment", args: []string{"--feature-gates=GenericWorkload=false"}, want: map[string]bool{"GenericWorkload": false}},
		{name: "an empty flag turns the environment's gates off", args: []string{"--feature-gates="}, want: map[string]bool{}},
		{name: "a malformed value is refused", args: []string{"--feature-gates=GenericWorkload"}, wantErr: `--feature-gates (or $NODEFORGE_FEATURE_GATES): feature gate "GenericWorkload": want name=true or name=false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("up", flag.ContinueOnError)
			gates := featureGatesFlag(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := gates()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("gates %v, error %v; want %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("gates (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestProgramEnvLeavesTheSandboxsOwn: NODEFORGE_FEATURE_GATES is the
// sandbox's (every component gets the gates), so it does not reach the
// provisioner alone as its flag's variable; other NODEFORGE_ variables do.
func TestProgramEnvLeavesTheSandboxsOwn(t *testing.T) {
	t.Setenv(featureGatesEnv, "GenericWorkload=true")
	t.Setenv("NODEFORGE_REGISTRATION_TTL", "5s")
	env := strings.Join(programEnv(), "\n")
	if strings.Contains(env, featureGatesEnv) || !strings.Contains(env, "NODEFORGE_REGISTRATION_TTL=5s") {
		t.Errorf("the programs' environment:\n%s", env)
	}
}
