// Command testreport reads `go test -json` on its standard input and
// prints what a person reading CI needs: each package's result line, the
// whole output of every test that failed, how long each package took, the
// tests over their time budget by name, and one closing count line.
//
// Budgets are reported, never enforced: a test's wall time on a busy
// 2-core machine is not something a test run may fail on (speed is
// measured in benchmarks), but a test that grows past its budget must be
// seen before the suite outgrows CI's time limit.
//
//	go test -json ./... | go run ./hack/testreport -test-budget 3m -package-budget ./test/e2e=12m
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
	// ImportPath names the package of build-output and build-fail events.
	ImportPath string
}

// budgets maps a package import path (or a suffix of it, as ./test/e2e)
// to its wall-time budget.
type budgets map[string]time.Duration

func (b budgets) String() string { return fmt.Sprint(map[string]time.Duration(b)) }

func (b budgets) Set(v string) error {
	pkg, d, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want PACKAGE=DURATION", v)
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		return err
	}
	b[strings.TrimPrefix(pkg, ".")] = dur
	return nil
}

func (b budgets) of(pkg string) (time.Duration, bool) {
	for p, d := range b {
		if pkg == p || strings.HasSuffix(pkg, p) {
			return d, true
		}
	}
	return 0, false
}

type testKey struct{ pkg, test string }

// report is what has been read so far.
type report struct {
	out io.Writer
	// output of each running test, kept until it passes (dropped) or
	// fails (printed).
	output map[testKey][]string
	// pkgOutput is a package's own output (TestMain's), kept until the
	// package passes (dropped) or fails (printed).
	pkgOutput map[string][]string
	elapsed   map[testKey]float64
	pkgTime   map[string]float64
	pkgFail   map[string]bool
	passed    int
	failed    int
	skipped   int
	skips     []string // each skipped test and its reason
}

func newReport(out io.Writer) *report {
	return &report{out: out, output: map[testKey][]string{}, pkgOutput: map[string][]string{}, elapsed: map[testKey]float64{}, pkgTime: map[string]float64{}, pkgFail: map[string]bool{}}
}

func (r *report) add(e event) {
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.out, e.Output)
		return
	case "build-fail":
		r.pkgFail[e.ImportPath] = true
		return
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			// Package-level lines: TestMain's own output, kept until the
			// package ends, and the result line, printed at once.
			r.pkgOutput[e.Package] = append(r.pkgOutput[e.Package], e.Output)
		case "pass", "fail", "skip":
			r.pkgTime[e.Package] = e.Elapsed
			r.pkgFail[e.Package] = e.Action == "fail"
			// As go test does: a passing package's own output is not
			// shown, a failed one's is; the result line always is.
			for _, line := range r.pkgOutput[e.Package] {
				if e.Action == "fail" || isResultLine(line) {
					fmt.Fprint(r.out, line)
				}
			}
			delete(r.pkgOutput, e.Package)
			if e.Action == "fail" {
				r.unfinished(e.Package)
			}
		}
		return
	}
	switch e.Action {
	case "output":
		if strings.HasPrefix(e.Output, "=== ") {
			return // RUN, PAUSE, CONT, NAME: noise once the test is done
		}
		r.output[k] = append(r.output[k], e.Output)
	case "pass":
		r.passed++
		r.done(k, e.Elapsed)
	case "skip":
		r.skipped++
		// The reason a test gives (t.Skip's message) is its last line
		// before go test's own "--- SKIP".
		why := ""
		for _, line := range slices.Backward(r.output[k]) {
			if !strings.HasPrefix(strings.TrimSpace(line), "--- ") {
				why = strings.TrimSpace(line)
				break
			}
		}
		r.skips = append(r.skips, fmt.Sprintf("  %s %s: %s", k.pkg, k.test, why))
		r.done(k, e.Elapsed)
	case "fail":
		r.failed++
		// A parent's output follows its subtests'; print each failed
		// test's own lines as soon as it ends.
		fmt.Fprint(r.out, strings.Join(r.output[k], ""))
		r.done(k, e.Elapsed)
	}
}

// isResultLine says whether a package-level line is go test's result
// line for the package: "ok  \tpkg\t1.2s", "FAIL\tpkg ...", "?   \tpkg [no
// test files]".
func isResultLine(line string) bool {
	for _, prefix := range []string{"ok  \t", "FAIL\t", "?   \t"} {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// unfinished prints the output of the tests of a failed package that
// never ended: the test binary panicked or timed out while they ran.
func (r *report) unfinished(pkg string) {
	var keys []testKey
	for k := range r.output {
		if k.pkg == pkg {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b testKey) int { return strings.Compare(a.test, b.test) })
	for _, k := range keys {
		fmt.Fprintf(r.out, "--- UNFINISHED: %s (the package failed while it ran)\n%s", k.test, strings.Join(r.output[k], ""))
		delete(r.output, k)
	}
}

func (r *report) done(k testKey, elapsed float64) {
	delete(r.output, k)
	r.elapsed[k] = elapsed
}

// leaves are the tests that ran no subtests: a parent's time is its
// subtests', run one after another or side by side, so budgets and the
// slowest list are about leaves.
func (r *report) leaves() []testKey {
	parents := map[testKey]bool{}
	for k := range r.elapsed {
		if i := strings.LastIndex(k.test, "/"); i > 0 {
			parents[testKey{k.pkg, k.test[:i]}] = true
		}
	}
	var out []testKey
	for k := range r.elapsed {
		if !parents[k] {
			out = append(out, k)
		}
	}
	return out
}

// summary prints package times, slow tests and the closing count line.
func (r *report) summary(testBudget time.Duration, pkgBudgets budgets) {
	pkgs := make([]string, 0, len(r.pkgTime))
	for p := range r.pkgTime {
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b string) int { return cmp.Compare(r.pkgTime[b], r.pkgTime[a]) })
	fmt.Fprintln(r.out, "\nPackage times, slowest first:")
	for _, p := range pkgs {
		note := ""
		if b, ok := pkgBudgets.of(p); ok {
			note = fmt.Sprintf("  (budget %s)", b)
			if time.Duration(r.pkgTime[p]*float64(time.Second)) > b {
				note = fmt.Sprintf("  OVER BUDGET %s", b)
			}
		}
		fmt.Fprintf(r.out, "  %8.1fs  %s%s\n", r.pkgTime[p], p, note)
	}
	tests := r.leaves()
	slices.SortFunc(tests, func(a, b testKey) int { return cmp.Compare(r.elapsed[b], r.elapsed[a]) })
	fmt.Fprintln(r.out, "Slowest tests:")
	for _, k := range tests[:min(len(tests), 10)] {
		fmt.Fprintf(r.out, "  %8.1fs  %s %s\n", r.elapsed[k], k.pkg, k.test)
	}
	var over []string
	for _, k := range tests {
		if testBudget > 0 && time.Duration(r.elapsed[k]*float64(time.Second)) > testBudget {
			over = append(over, fmt.Sprintf("  %8.1fs  %s %s", r.elapsed[k], k.pkg, k.test))
		}
	}
	if len(over) > 0 {
		fmt.Fprintf(r.out, "Tests over their budget of %s:\n%s\n", testBudget, strings.Join(over, "\n"))
	}
	if len(r.skips) > 0 {
		slices.Sort(r.skips)
		fmt.Fprintf(r.out, "Skipped, not counted as passed:\n%s\n", strings.Join(r.skips, "\n"))
	}
	fmt.Fprintf(r.out, "tests: %d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
}

func (r *report) ok() bool {
	if r.failed > 0 {
		return false
	}
	for _, f := range r.pkgFail {
		if f {
			return false
		}
	}
	return true
}

func main() {
	testBudget := flag.Duration("test-budget", 3*time.Minute, "wall-time budget of each test that has no subtests; those over it are named")
	pkgBudgets := budgets{}
	flag.Var(pkgBudgets, "package-budget", "PACKAGE=DURATION: a package's wall-time budget (repeatable); PACKAGE may be a path suffix such as ./test/e2e")
	flag.Parse()
	r := newReport(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// go test's own lines (build failures, "no test files"
			// before -json takes over) pass through.
			fmt.Fprintf(os.Stdout, "%s\n", line)
			continue
		}
		r.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "reading go test -json:", err)
		os.Exit(2)
	}
	r.summary(*testBudget, pkgBudgets)
	if !r.ok() {
		os.Exit(1)
	}
}
