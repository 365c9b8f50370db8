package main

import (
	"slices"
	"testing"
)

// TestEachRuleCatchesItsImport: each rule names an import that breaks it,
// and lets through the imports the architecture allows.
func TestEachRuleCatchesItsImport(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	pkgs := []pkg{
		{ImportPath: m("plugin/virtualnodes"), Imports: []string{m("nodeshape"), m("simulator"), m("provisioner/repack")}},
		{ImportPath: m("simulator"), Imports: []string{"k8s.io/kubernetes/pkg/scheduler", m("plugin/registry")}},
		{ImportPath: m("provisioner/controllers/nodeclaim"), Imports: []string{m("provisioner/cluster"), m("provisioner/controllers/disruption")}},
		{ImportPath: m("provisioner/controllers/disruption/sub"), Imports: []string{m("provisioner/controllers/disruption")}},
		{ImportPath: m("cmd/provisioner/app"), Imports: []string{m("provisioner/controllers/nodeclaim")},
			Deps: []string{m("provisioner/cluster"), m("internal/sandbox/sandboxtest"), m("test/e2e")}},
		{ImportPath: m("internal/sandbox"), Imports: []string{m("cmd/provisioner/app")}},
		{ImportPath: m("provisioner/cloudprovider/aws"), Imports: []string{m("internal/crashpoint")}, Deps: []string{m("internal/crashpoint"), m("internal/sandbox/ec2fake")}},
		{ImportPath: m("internal/sandbox/regioncatalog"), Imports: []string{m("provisioner/cloudprovider/aws/pricing"), m("provisioner/cloudprovider/aws")}},
		{ImportPath: m("provisioner/limits"), Imports: []string{m("test/testobj")}},
		{ImportPath: m("test/testobj"), Imports: []string{m("provisioner/cluster")}},
		{ImportPath: "example.com/other", Imports: []string{m("provisioner/controllers/nodeclaim")}},
	}
	want := []string{
		"a plugin imports the provisioner: plugin/virtualnodes imports provisioner/repack",
		"the simulator imports a plugin: simulator imports plugin/registry",
		"a controller imports another controller: provisioner/controllers/nodeclaim imports provisioner/controllers/disruption",
		"a shipped program depends on test code: cmd/provisioner/app imports internal/sandbox/sandboxtest",
		"a shipped program depends on test code: cmd/provisioner/app imports test/e2e",
		"a package imports a program's: internal/sandbox imports cmd/provisioner/app",
		"a program depends on the sandbox: provisioner/cloudprovider/aws imports internal/sandbox/ec2fake",
		"a program depends on the sandbox: cmd/provisioner/app imports internal/sandbox/sandboxtest",
		"the sandbox imports a provider: internal/sandbox/regioncatalog imports provisioner/cloudprovider/aws",
		"a package imports test code: provisioner/limits imports test/testobj",
	}
	got := check(pkgs)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("broken imports:\n%q\nwant\n%q", got, want)
	}
}

// TestOnePackageOneName: a package imported under two names is reported
// with the files of the less used one; an alias equal to the package's
// name, blank imports and the standard library are not.
func TestOnePackageOneName(t *testing.T) {
	pkgs := map[string]pkg{
		"k8s.io/api/core/v1":      {Name: "v1"},
		"os":                      {Name: "os", Standard: true},
		module + "/apis/v1alpha1": {Name: "v1alpha1"},
	}
	uses := []use{
		{"a.go", "k8s.io/api/core/v1", "corev1"},
		{"b.go", "k8s.io/api/core/v1", "corev1"},
		{"c.go", "k8s.io/api/core/v1", ""},
		{"d.go", "k8s.io/api/core/v1", "_"},
		{"a.go", "os", ""},
		{"b.go", "os", "goos"},
		{"a.go", module + "/apis/v1alpha1", "v1alpha1"},
		{"b.go", module + "/apis/v1alpha1", ""},
	}
	got := checkNames(uses, pkgs)
	want := []string{"one name per package: k8s.io/api/core/v1 is corev1 in 2 files, v1 in c.go"}
	if !slices.Equal(got, want) {
		t.Errorf("names: %q, want %q", got, want)
	}
}
