package manifests_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/manifests"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

// guide is the install guide, whose first NodePool is an example too.
const guide = "../docs/install.md"

// examplePool reads the NodePool of an example file, or the first of the
// guide's YAML blocks.
func examplePool(t *testing.T, file string) *v1alpha1.NodePool {
	t.Helper()
	var raw []byte
	var err error
	if file == guide {
		raw, err = os.ReadFile(file)
		raw = []byte(strings.Join(regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllString(string(raw), -1), "\n---\n"))
		raw = []byte(strings.NewReplacer("```yaml\n", "", "```", "").Replace(string(raw)))
	} else {
		raw, err = manifests.FS.ReadFile(file)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var np v1alpha1.NodePool
		if err := yaml.Unmarshal([]byte(doc), &np); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if np.Kind == "NodePool" {
			return &np
		}
	}
	t.Fatalf("%s holds no NodePool", file)
	return nil
}

// accepts reports whether pool np may launch the instance type called
// name, labelled as its name says, on demand.
func accepts(t *testing.T, np *v1alpha1.NodePool, name string) bool {
	t.Helper()
	it := &v1alpha1.InstanceType{Name: name, Labels: v1alpha1.InstanceNameLabels(name)}
	ok, err := nodeshape.Accepts(nodeshape.ForPool(np), np.Spec.Template.Spec.Requirements, it, "zone-a", v1alpha1.CapacityTypeOnDemand)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestExamplePoolsBuyOnlyWhatTheyMean: every example pool, and the install
// guide's first pool, caps both cpu
// and memory, and launches compute, general-purpose and memory-optimised
// types of a generation above 2 only: no GPU, accelerator, burstable,
// metal-only family or old generation, so that a pod selecting a
// p5.48xlarge cannot buy one from it. The simulated pools still launch
// most of the simulated catalog, its GPU types aside.
func TestExamplePoolsBuyOnlyWhatTheyMean(t *testing.T) {
	catalog, err := simulated.LoadCatalog("")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"examples/default.yaml", "examples/apps.yaml", "examples/aws.yaml", guide} {
		t.Run(file, func(t *testing.T) {
			np := examplePool(t, file)
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if q, ok := np.Spec.Limits[r]; !ok || q.IsZero() {
					t.Errorf("pool %s sets no %s limit: %v", np.Name, r, np.Spec.Limits)
				}
			}
			for _, name := range []string{"c7.large", "m7g.xlarge", "r7.2xlarge", "m5.large", "c7i.large"} {
				if !accepts(t, np, name) {
					t.Errorf("pool %s refuses %s", np.Name, name)
				}
			}
			for _, name := range []string{"p5.48xlarge", "p4d.24xlarge", "g6.xlarge", "g4dn.xlarge", "inf2.xlarge", "trn1.32xlarge", "t3.medium", "x2iedn.32xlarge", "u-6tb1.metal", "m1.small", "c1.medium"} {
				if accepts(t, np, name) {
					t.Errorf("pool %s accepts %s", np.Name, name)
				}
			}
			if np.Spec.Template.Spec.NodeClassRef.Kind != "SimulatedNodeClass" {
				return
			}
			kept, err := nodeshape.FilterInstanceTypes(nodeshape.ForPool(np), np.Spec.Template.Spec.Requirements, catalog)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range kept {
				if _, gpu := it.Capacity[simulated.ResourceGPU]; gpu {
					t.Errorf("pool %s launches %s, a GPU type", np.Name, it.Name)
				}
			}
			if len(kept) < len(catalog)*3/4 {
				t.Errorf("pool %s launches %d of the simulated catalog's %d types", np.Name, len(kept), len(catalog))
			}
		})
	}
}
