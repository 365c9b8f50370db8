// Command importrules checks the module's import rules (CONTRIBUTING.md,
// ARCHITECTURE.md) over `go list -deps`, and exits 1 naming each import
// that breaks one. `make lint` runs it.
//
//   - No package under plugin/ imports one under provisioner/.
//   - simulator imports no plugin.
//   - No package under provisioner/controllers/ imports another
//     controller: what two of them need lives below both
//     (provisioner/cluster, provisioner/limits, nodeshape, apis/).
//   - No shipped program (cmd/...) depends on a package under test/, or
//     on internal/sandbox/sandboxtest, which imports testing.
//   - Nothing but the programs imports a program's package (cmd/...).
//   - Nothing but tests imports a package under test/ (test/testobj,
//     the objects and fake client they are built from).
//   - The programs other than nodeforge-sandbox, and the packages they are
//     built from, depend on nothing under internal/sandbox/ (the sandbox
//     and its fakes): internal/ holds what the programs use (crashpoint,
//     skew) and, under internal/sandbox/, what only the sandbox and the
//     tests use.
//   - Nothing under internal/ imports the provisioner: the sandbox's fakes
//     compute what a node reports from the published facts themselves,
//     so that tests hold the providers against something else. The one
//     exception is the aws provider's price table (aws/pricing), which is
//     published data, not arithmetic.
//   - One name per imported package across the module's files, tests
//     included (k8s.io/api/core/v1 is corev1 everywhere): blank and dot
//     imports, the standard library and generated zz_generated files
//     aside.
//
// The package rules skip test files: a benchmark may compare with another
// package.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// module is the module's path; rules speak of paths below it.
const module = "github.com/nodeforge/nodeforge"

// pkg is a package as `go list -json -deps` reports it: its own imports and
// everything it depends on.
type pkg struct {
	ImportPath string
	Name       string
	Imports    []string
	Deps       []string
	Standard   bool
}

// rule says what is wrong with p importing (or depending on) dep, or "".
type rule struct {
	name string
	// deps: the rule is over every dependency, not only direct imports.
	deps  bool
	check func(p, dep string) bool
}

func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// controllerOf is the controller a path is in ("nodeclaim" for
// provisioner/controllers/nodeclaim/...), or "".
func controllerOf(path string) string {
	rest, ok := strings.CutPrefix(path, "provisioner/controllers/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

var rules = []rule{
	{name: "a plugin imports the provisioner", check: func(p, dep string) bool {
		return under(p, "plugin") && under(dep, "provisioner")
	}},
	{name: "the simulator imports a plugin", check: func(p, dep string) bool {
		return under(p, "simulator") && under(dep, "plugin")
	}},
	{name: "a controller imports another controller", check: func(p, dep string) bool {
		a, b := controllerOf(p), controllerOf(dep)
		return a != "" && b != "" && a != b
	}},
	{name: "a shipped program depends on test code", deps: true, check: func(p, dep string) bool {
		return under(p, "cmd") && (under(dep, "test") || under(dep, "internal/sandbox/sandboxtest"))
	}},
	{name: "a package imports a program's", check: func(p, dep string) bool {
		return under(dep, "cmd") && !under(p, "cmd")
	}},
	{name: "the sandbox imports a provider", check: func(p, dep string) bool {
		return under(p, "internal") && under(dep, "provisioner") && dep != "provisioner/cloudprovider/aws/pricing"
	}},
	{name: "a package imports test code", check: func(p, dep string) bool {
		return under(dep, "test") && !under(p, "test")
	}},
	{name: "a program depends on the sandbox", deps: true, check: func(p, dep string) bool {
		program := under(p, "cmd/scheduler") || under(p, "cmd/provisioner") || under(p, "cmd/convert") ||
			under(p, "plugin") || under(p, "provisioner") || under(p, "simulator") || under(p, "nodeshape") || under(p, "apis")
		return program && under(dep, "internal/sandbox")
	}},
}

// check returns one line for each import of pkgs that breaks a rule.
func check(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		from, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue
		}
		for _, r := range rules {
			list := p.Imports
			if r.deps {
				list = p.Deps
			}
			for _, d := range list {
				to, ok := strings.CutPrefix(d, module+"/")
				if ok && r.check(from, to) {
					out = append(out, fmt.Sprintf("%s: %s imports %s", r.name, from, to))
				}
			}
		}
	}
	return out
}

// decode reads the stream of JSON objects `go list -json` writes.
func decode(r io.Reader) ([]pkg, error) {
	var pkgs []pkg
	dec := json.NewDecoder(bufio.NewReader(r))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// use is one file's import of a package, under the name it gives it.
type use struct{ file, path, name string }

// names reads the imports of every .go file under root (bin and hidden
// directories aside).
func names(root string) ([]use, error) {
	var out []use
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasPrefix(d.Name(), "zz_generated") {
			return nil // generated code names its imports as its generator does
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			name := ""
			if im.Name != nil {
				name = im.Name.Name
			}
			out = append(out, use{file: p, path: path, name: name})
		}
		return nil
	})
	return out, err
}

// checkNames returns one line for each package imported under more than
// one name, with the files of every name but the most used. pkgs give the
// packages' own names and which are the standard library's; an alias
// equal to the package's name is no alias.
func checkNames(uses []use, pkgs map[string]pkg) []string {
	byPath := map[string]map[string][]string{}
	for _, u := range uses {
		p, known := pkgs[u.path]
		if u.name == "_" || u.name == "." || (known && p.Standard) || !known && !strings.Contains(strings.Split(u.path, "/")[0], ".") {
			continue
		}
		name := u.name
		if name == "" || (known && name == p.Name) {
			name = p.Name
			if !known {
				name = u.path[strings.LastIndex(u.path, "/")+1:]
			}
		}
		if byPath[u.path] == nil {
			byPath[u.path] = map[string][]string{}
		}
		byPath[u.path][name] = append(byPath[u.path][name], u.file)
	}
	var out []string
	for _, path := range slices.Sorted(maps.Keys(byPath)) {
		m := byPath[path]
		if len(m) < 2 {
			continue
		}
		ns := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return len(m[b]) - len(m[a]) })
		for _, n := range ns[1:] {
			out = append(out, fmt.Sprintf("one name per package: %s is %s in %d files, %s in %s", path, ns[0], len(m[ns[0]]), n, strings.Join(m[n], ", ")))
		}
	}
	return out
}

func main() {
	var out, errb bytes.Buffer
	cmd := exec.Command("go", "list", "-deps", "-test", "-json=ImportPath,Name,Imports,Deps,Standard", "./...")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "importrules: go list: %v\n%s", err, errb.String())
		os.Exit(2)
	}
	pkgs, err := decode(&out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "importrules: reading go list: %v\n", err)
		os.Exit(2)
	}
	byPath := map[string]pkg{}
	var own []pkg
	for _, p := range pkgs {
		// -test lists each package again as compiled with its tests
		// ("p [p.test]") and its test binary ("p.test"): the rules read
		// the package alone.
		if strings.Contains(p.ImportPath, " ") || strings.HasSuffix(p.ImportPath, ".test") {
			continue
		}
		byPath[p.ImportPath] = p
		if strings.HasPrefix(p.ImportPath, module+"/") {
			own = append(own, p)
		}
	}
	uses, err := names(".")
	if err != nil {
		fmt.Fprintf(os.Stderr, "importrules: reading imports: %v\n", err)
		os.Exit(2)
	}
	broken := append(check(own), checkNames(uses, byPath)...)
	for _, b := range broken {
		fmt.Println(b)
	}
	if len(broken) > 0 {
		fmt.Printf("importrules: %d imports break the rules in hack/importrules/main.go\n", len(broken))
		os.Exit(1)
	}
}
