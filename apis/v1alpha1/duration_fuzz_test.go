package v1alpha1_test

import (
	"regexp"
	"strings"
	"testing"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/manifests"
)

// durationPattern and durationMaxLength are NillableDuration's schema, as
// the CRDs carry it (TestDurationSchemaIsTheOneFuzzed checks that).
const (
	durationPattern   = `^(([0-9]{1,6}(s|m|h))+|Never)$`
	durationMaxLength = 12
)

// FuzzAcceptedDurationsParse: every value the API server accepts for a
// NillableDuration parses, so no accepted pool can make a controller fail
// on it over and over.
func FuzzAcceptedDurationsParse(f *testing.F) {
	for _, seed := range []string{"30s", "1h30m", "720h", "Never", "999999h9999h", "9999999999h", "0s", "1h1h1h1h", "", "h", "-1h", "1.5h"} {
		f.Add(seed)
	}
	accepted := regexp.MustCompile(durationPattern)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > durationMaxLength || !accepted.MatchString(s) {
			return
		}
		d, ok, err := v1alpha1.NillableDuration(s).Duration()
		if err != nil {
			t.Fatalf("%q is accepted by the API but does not parse: %v", s, err)
		}
		if ok != (s != "Never") || d < 0 {
			t.Fatalf("%q: %v, ok=%v", s, d, ok)
		}
	})
}

// TestDurationSchemaIsTheOneFuzzed: the generated CRDs carry the rule
// and length the fuzz test assumes.
func TestDurationSchemaIsTheOneFuzzed(t *testing.T) {
	raw, err := manifests.FS.ReadFile("crd/nodeforge.dev_nodepools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := string(raw)
	if !strings.Contains(crd, "rule: self.matches('"+durationPattern+"')") || !strings.Contains(crd, "maxLength: 12") {
		t.Errorf("the NodePool CRD does not carry rule self.matches('%s') with maxLength %d for durations", durationPattern, durationMaxLength)
	}
}
