package v1alpha1_test

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the budget schedule's XValidation markers in nodepool_types.go from scheduleRules")

// The budget schedule's CEL rules are regular expressions made here, from
// robfig/cron's grammar (v1alpha1.ParseSchedule): CEL cannot loop over the
// pieces of a string within the API server's cost limits (a list made by
// split or findAll has elements of unknown length, which the estimate
// takes as unbounded), but one regular expression per field, run on that
// field alone, is cheap. What is not regular, that a range does not run
// backwards, is spelled out: for each start, the ends at or above it.
//
// cron's grammar, per field: a list split on commas, empty items dropped;
// an item is a range with an optional /step; a range is * or ? (anything
// after a '-' then ignored), a value, or value-value; a value is a name
// (month and day of week; cron lower-cases it with strings.ToLower, so
// İ reads as i) or a number as strconv.Atoi reads it ('+' and leading
// zeros allowed); a step is a number from 1 to 2^63-1. Fields are split
// on whitespace as strings.Fields splits (unicode.IsSpace).

// cronField is one of the five fields.
type cronField struct {
	name, nth      string
	lo, hi         int
	names          []string // names[v-lo] names value v
	example, steps string   // for the message
}

var cronFields = []cronField{
	{name: "minute", nth: "first", lo: 0, hi: 59, example: "0-29", steps: "*/15 or 0-29/5"},
	{name: "hour", nth: "second", lo: 0, hi: 23, example: "9-17", steps: "*/6 or 9-17/2"},
	{name: "day of month", nth: "third", lo: 1, hi: 31, example: "1-15", steps: "*/10 or 1-15/7"},
	{name: "month", nth: "fourth", lo: 1, hi: 12, names: strings.Fields("jan feb mar apr may jun jul aug sep oct nov dec"), example: "jan-jun", steps: "*/3 or 1-6/2"},
	{name: "day of week", nth: "fifth", lo: 0, hi: 6, names: strings.Fields("sun mon tue wed thu fri sat"), example: "mon-fri", steps: "*/2 or 1-5/2"},
}

// space is unicode.IsSpace as a character class; token is a field.
const (
	space = `[\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]`
	token = `[^\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]+`
)

// scheduleRule is one XValidation rule of the schedule.
type scheduleRule struct{ message, rule string }

// scheduleRules returns the schedule's rules: its shape (five fields or
// a descriptor), then one per field. A field's rule passes a schedule of
// another shape, so each refusal names one thing.
func scheduleRules() []scheduleRule {
	descriptors := []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
	quoted := make([]string, len(descriptors))
	for i, d := range descriptors {
		quoted[i] = "'" + d + "'"
	}
	fields := `size(self.findAll(r'` + token + `'))`
	rules := []scheduleRule{{
		message: "schedule must be a cron schedule in UTC: five fields separated by spaces (minute hour day-of-month month day-of-week), such as '0 9 * * mon-fri', or one of " +
			strings.Join(descriptors[:len(descriptors)-1], ", ") + " and " + descriptors[len(descriptors)-1],
		rule: "self.startsWith('@') ? self in [" + strings.Join(quoted, ", ") + "] : " + fields + " == 5",
	}}
	for i, f := range cronFields {
		values := fmt.Sprintf("a number from %d to %d", f.lo, f.hi)
		if f.name == "day of week" {
			values += " (0 is Sunday; 7 is not accepted)"
		}
		if f.names != nil {
			values += fmt.Sprintf(" or a name %s to %s", f.names[0], f.names[len(f.names)-1])
		}
		rules = append(rules, scheduleRule{
			message: fmt.Sprintf("schedule's %s, its %s field, must be *, %s, a range such as %s (its start not after its end), a step such as %s, or a comma-separated list of these",
				f.name, f.nth, values, f.example, f.steps),
			rule: fmt.Sprintf("self.startsWith('@') || %s != 5 || self.find(r'^%s*(%s%s+){%d}%s').find(r'%s$').matches(r'%s')",
				fields, space, token, space, i, token, token, f.regexp()),
		})
	}
	return rules
}

// regexp is what the field accepts: a list of items, each followed by a
// comma or the field's end.
func (f cronField) regexp() string {
	star := `[*?](-[^,/]*)?`
	item := "(" + star + "|" + f.value(f.lo) + "|" + f.ranges() + ")(/" + step() + ")?"
	return "^(,|" + item + "(,|$))*$"
}

// value matches the values from v up to hi.
func (f cronField) value(v int) string {
	alts := []string{`[+]?0*(` + digits(v, f.hi) + `)`}
	for n := v; n <= f.hi && f.names != nil; n++ {
		alts = append(alts, spell(f.names[n-f.lo]))
	}
	return strings.Join(alts, "|")
}

// ranges matches start-end, start not after end.
func (f cronField) ranges() string {
	var alts []string
	for v := f.lo; v <= f.hi; v++ {
		start := strconv.Itoa(v)
		if f.names != nil {
			start = `([+]?0*` + start + "|" + spell(f.names[v-f.lo]) + ")"
		}
		alts = append(alts, start+"-("+f.value(v)+")")
	}
	if f.names == nil {
		return `[+]?0*(` + strings.Join(alts, "|") + ")"
	}
	return strings.Join(alts, "|")
}

// spell matches a name as strings.ToLower reads it.
func spell(name string) string {
	var b strings.Builder
	for _, c := range name {
		upper := strings.ToUpper(string(c))
		if c == 'i' {
			upper += `\x{130}`
		}
		b.WriteString("[" + string(c) + upper + "]")
	}
	return b.String()
}

// digits matches the numbers from lo to hi (at most 99), without leading
// zeros: one digit, then each ten, whole tens in a run as one class.
func digits(lo, hi int) string {
	class := func(a, b int) string {
		if a == b {
			return strconv.Itoa(a)
		}
		return fmt.Sprintf("[%d-%d]", a, b)
	}
	var alts []string
	if lo <= 9 {
		alts = append(alts, class(lo, min(hi, 9)))
	}
	whole := func(t int) bool { return lo <= t*10 && t*10+9 <= hi }
	for t := max(lo/10, 1); t <= hi/10; t++ {
		if whole(t) {
			u := t
			for whole(u + 1) {
				u++
			}
			alts = append(alts, class(t, u)+"[0-9]")
			t = u
			continue
		}
		alts = append(alts, strconv.Itoa(t)+class(max(lo, t*10)-t*10, min(hi, t*10+9)-t*10))
	}
	return strings.Join(alts, "|")
}

// step matches the numbers from 1 to 2^63-1, strconv.Atoi's largest.
func step() string {
	const top = "9223372036854775807"
	alts := []string{`[1-9][0-9]{0,17}`}
	for i := range len(top) {
		if d := top[i] - '0'; d > 0 && !(i == 0 && d == 1) {
			low := "0"
			if i == 0 {
				low = "1"
			}
			alts = append(alts, fmt.Sprintf("%s[%s-%d][0-9]{%d}", top[:i], low, d-1, len(top)-i-1))
		}
	}
	alts = append(alts, top)
	return `[+]?0*(` + strings.Join(alts, "|") + ")"
}

// marker is the kubebuilder marker of a rule.
func (r scheduleRule) marker() string {
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return fmt.Sprintf(`	// +kubebuilder:validation:XValidation:message="%s",rule="%s"`, esc.Replace(r.message), esc.Replace(r.rule))
}

// TestScheduleMarkersAreGenerated: the schedule's markers in
// nodepool_types.go are scheduleRules'. go test -run
// TestScheduleMarkersAreGenerated -update rewrites them; then run make
// generate.
func TestScheduleMarkersAreGenerated(t *testing.T) {
	for _, f := range cronFields {
		if _, err := regexp.Compile(f.regexp()); err != nil {
			t.Fatalf("the %s's expression: %v", f.name, err)
		}
	}
	const file = "nodepool_types.go"
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	first, last := -1, -1
	for i, l := range lines {
		if strings.HasPrefix(l, `	// +kubebuilder:validation:XValidation:message="schedule`) {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		t.Fatalf("%s has no schedule markers", file)
	}
	var want []string
	for _, r := range scheduleRules() {
		want = append(want, r.marker())
	}
	got := lines[first : last+1]
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	if !*update {
		t.Fatalf("the schedule's markers in %s are not scheduleRules': run go test -run TestScheduleMarkersAreGenerated -update, then make generate", file)
	}
	out := append(append(append([]string{}, lines[:first]...), want...), lines[last+1:]...)
	if err := os.WriteFile(file, []byte(strings.Join(out, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote the schedule's markers in %s: run make generate", file)
}

// TestDigits: digits matches exactly the numbers of its range.
func TestDigits(t *testing.T) {
	for lo := 0; lo <= 99; lo++ {
		for hi := lo; hi <= 99; hi++ {
			re := regexp.MustCompile("^(" + digits(lo, hi) + ")$")
			for n := range 1000 {
				if re.MatchString(strconv.Itoa(n)) != (n >= lo && n <= hi) {
					t.Fatalf("digits(%d, %d) = %s, wrong on %d", lo, hi, digits(lo, hi), n)
				}
			}
		}
	}
}
