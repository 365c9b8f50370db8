package v1alpha1_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// scheduleCorpus: schedules and whether cron (v1alpha1.ParseSchedule)
// takes them. It pins the grammar as well as the agreement: a cron
// upgrade that changed it would fail here too.
var scheduleCorpus = []struct {
	schedule string
	valid    bool
}{
	// The usual forms.
	{"* * * * *", true},
	{"0 9 * * *", true},
	{"0 9 * * mon-fri", true},
	{"0 9 * * MON-FRI", true},
	{"0 9 * * Mon,Wed,Fri", true},
	{"30 2 * * 1-5", true},
	{"*/15 * * * *", true},
	{"0-29/5 * * * *", true},
	{"5/10 * * * *", true}, // 5-59/10
	{"0,15,30,45 * * * *", true},
	{"0 8-18/2 * * *", true},
	{"0 0 1 * *", true},
	{"59 23 31 12 6", true},
	{"0 0 1 jan *", true},
	{"0 0 1 JAN-jun *", true},
	{"0 0 1 */3 *", true},
	{"0 0 1 1-6/2 *", true},
	{"0 0 1 feb-dec/2 *", true},
	{"0 22 * * sat", true},
	{"0 0 * * sun-sat", true},
	{"0 0 * * 0", true},
	{"0 0 1-1 * *", true},
	{"0 9 ? * *", true},
	{"@yearly", true},
	{"@annually", true},
	{"@monthly", true},
	{"@weekly", true},
	{"@daily", true},
	{"@midnight", true},
	{"@hourly", true},
	// cron's leniencies, accepted by both.
	{"  0 9 * * *  ", true},
	{"0\t9\t*\t*\t*", true},
	{"0 9  *   * *", true},
	{"0\u00a09 *\u3000* *", true}, // strings.Fields splits on Unicode spaces
	{"+5 * * * *", true},
	{"05 09 * * *", true},
	{"0 0 1,,15 * *", true},
	{", * * * *", true},                          // an empty list: never fires
	{"*/100 * * * *", true},                      // a step past the range: minute 0 only
	{"*/9223372036854775807 * * * *", true},      // the largest step strconv.Atoi reads
	{"*/000000000000000000000002 * * * *", true}, // leading zeros are not digits that count
	{"*-5 * * * *", true},                        // after *, a '-' and anything are ignored
	{"0 9 * * FR\u0130", true},                   // strings.ToLower reads İ as i
	{"0 0 31 2 *", true},                         // parses; never fires
	// Refused by both.
	{"0 25 * * *", false},
	{"60 * * * *", false},
	{"0 24 * * *", false},
	{"* * 0 * *", false},
	{"* * 32 * *", false},
	{"* * * 0 *", false},
	{"* * * 13 *", false},
	{"* * * * 7", false},
	{"*/0 * * * *", false},
	{"*/+0 * * * *", false},
	{"*/-1 * * * *", false},
	{"*/9223372036854775808 * * * *", false},
	{"*/99999999999999999999 * * * *", false},
	{"1-70 * * * *", false},
	{"5-3 * * * *", false},
	{"0 22 * * sat-sun", false}, // a range does not wrap
	{"0 0 1 jun-jan *", false},
	{"-1 * * * *", false},
	{"1- * * * *", false},
	{"1-2-3 * * * *", false},
	{"*/5/2 * * * *", false},
	{"*/ * * * *", false},
	{"/5 * * * *", false},
	{"1.5 * * * *", false},
	{"0x10 * * * *", false},
	{"a * * * *", false},
	{"0 9 * * mon-fry", false},
	{"0 9 * * monday", false},
	{"0 0 1 january *", false},
	{"0 0 * * 1/mon", false},
	{"0 0 mon * *", false}, // names only in their own field
	{"@dailyX", false},
	{"@daily ", false},
	{" @daily", false},
	{"@every 1h", false},
	{"@reboot", false},
	{"@fortnightly", false},
	{"CRON_TZ=UTC 0 9 * * *", false},
	{"TZ=UTC 0 9 * * *", false},
	{"", false},
	{"   ", false},
	{"* * * *", false},
	{"* * * * * *", false},
	{"0 9 * * 1 # weekdays", false},
	{"0\u200b9 * * * *", false}, // a zero-width space is not a space
	// MaxScheduleLength counts characters, as the schema's maxLength does.
	{"0" + strings.Repeat(",0", 59) + "\u3000*\u3000*\u3000*\u3000*\u3000", true},
	{"0" + strings.Repeat(",0", 60) + "\u3000*\u3000*\u3000*\u3000*", false},
}

// budgetPool is a valid pool whose one budget has schedule s.
func budgetPool(s string) map[string]any {
	return map[string]any{
		"apiVersion": "nodeforge.dev/v1alpha1", "kind": "NodePool",
		"metadata": map[string]any{"name": "p"},
		"spec": map[string]any{
			"template": map[string]any{"spec": map[string]any{
				"nodeClassRef": map[string]any{"group": "nodeforge.dev", "kind": "SimulatedNodeClass", "name": "default"},
			}},
			"disruption": map[string]any{"consolidateAfter": "0s", "budgets": []any{
				map[string]any{"nodes": "1", "schedule": s, "duration": "1h"},
			}},
		},
	}
}

// scheduleAgreement fails t unless the NodePool CRD accepts schedule s
// exactly when v1alpha1.ParseSchedule does, and refuses it with messages
// about the schedule.
func scheduleAgreement(t *testing.T, crd *crdSchema, s string) (parses bool) {
	t.Helper()
	_, err := v1alpha1.ParseSchedule(s)
	errs := crd.validate(budgetPool(s))
	if (err == nil) != (len(errs) == 0) {
		t.Errorf("schedule %q: the parser says %v, the API server %v", s, err, errs.ToAggregate())
	}
	for _, e := range errs {
		if e.Field != "spec.disruption.budgets[0].schedule" || !strings.HasPrefix(e.Detail, "schedule") && e.Type != field.ErrorTypeTooLong {
			t.Errorf("schedule %q: refused with %q, which does not name the schedule", s, e.Error())
		}
	}
	return err == nil
}

// TestScheduleRulesAreTheParser: the API server accepts a budget
// schedule exactly when the disruption controller's parser does, on a
// corpus of the usual forms, cron's leniencies and mistakes.
func TestScheduleRulesAreTheParser(t *testing.T) {
	crd := loadCRD(t, "nodeforge.dev_nodepools.yaml")
	for _, tc := range scheduleCorpus {
		if got := scheduleAgreement(t, crd, tc.schedule); got != tc.valid {
			t.Errorf("schedule %q: the parser says valid=%v, the corpus %v", tc.schedule, got, tc.valid)
		}
	}
}

// TestScheduleRulesAgreeOnRandomSchedules: as above, on schedules made at
// random from the grammar's pieces and its near misses.
func TestScheduleRulesAgreeOnRandomSchedules(t *testing.T) {
	crd := loadCRD(t, "nodeforge.dev_nodepools.yaml")
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	valid := 0
	for range n {
		if scheduleAgreement(t, crd, randomSchedule(rng)) {
			valid++
		}
	}
	t.Logf("%d of %d random schedules parse", valid, n)
	// Both answers must be common, or the agreement says little.
	if valid < n/10 || valid > n*9/10 {
		t.Errorf("%d of %d random schedules parse; the generator should make both kinds often", valid, n)
	}
}

// FuzzScheduleRulesAreTheParser: go test -fuzz FuzzScheduleRulesAreTheParser
// looks for a schedule on which the API server and the parser disagree.
func FuzzScheduleRulesAreTheParser(f *testing.F) {
	for _, tc := range scheduleCorpus {
		f.Add(tc.schedule)
	}
	crd := loadCRD(f, "nodeforge.dev_nodepools.yaml")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) { // the API server's JSON holds valid UTF-8 only
			return
		}
		scheduleAgreement(t, crd, s)
	})
}

// randomSchedule makes a schedule of five fields from the grammar's
// pieces, with cron's leniencies (a + or leading zeros before a number,
// names in any case, ?, empty list items, Unicode spaces); half of them
// then get one mistake (a number past its field's bounds, a range that
// runs backwards, a bad step, a word, a field too many or too few, a
// zero-width space for a space).
func randomSchedule(rng *rand.Rand) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	if rng.IntN(20) == 0 {
		return pick("@daily", "@hourly", "@weekly", "@midnight", "@every 1h", "@dailyX", "@Daily", "@yearly ")
	}
	spell := func(f cronField, v int) string {
		if f.names != nil && rng.IntN(2) == 0 {
			name := []rune(f.names[v-f.lo])
			for i := range name {
				switch {
				case name[i] == 'i' && rng.IntN(4) == 0:
					name[i] = '\u0130'
				case rng.IntN(3) == 0:
					name[i] -= 'a' - 'A'
				}
			}
			return string(name)
		}
		return pick("", "", "", "", "0", "+", "00") + strconv.Itoa(v)
	}
	item := func(f cronField) string {
		var s string
		switch rng.IntN(4) {
		case 0:
			s = pick("*", "*", "?", "*-x")
		case 1:
			s = spell(f, f.lo+rng.IntN(f.hi-f.lo+1))
		default:
			a := f.lo + rng.IntN(f.hi-f.lo+1)
			s = spell(f, a) + "-" + spell(f, a+rng.IntN(f.hi-a+1))
		}
		if rng.IntN(3) == 0 {
			s += "/" + pick("1", "2", "5", "+3", "07", "100")
		}
		return s
	}
	fields := make([]string, len(cronFields))
	for i, f := range cronFields {
		var items []string
		for range 1 + rng.IntN(3) {
			items = append(items, item(f))
		}
		fields[i] = strings.Join(items, pick(",", ",", ",,"))
	}
	if rng.IntN(2) == 0 {
		i := rng.IntN(len(fields))
		f := cronFields[i]
		switch rng.IntN(8) {
		case 0: // past a bound
			fields[i] += "," + strconv.Itoa([]int{f.lo - 1, f.hi + 1}[rng.IntN(2)])
		case 1: // backwards
			fields[i] = strconv.Itoa(f.hi) + "-" + spell(f, f.lo+rng.IntN(f.hi-f.lo))
		case 2: // a bad step
			fields[i] += "/" + pick("0", "-1", "", "x", "9223372036854775808", "2/2")
		case 3: // a word, or a name in the wrong field
			fields[i] = pick("x", "1.5", "-1", "1-2-3", "monday", "jan", "sun", "1-", "*/")
		case 4:
			fields = append(fields, "*")
		case 5:
			fields = fields[1:]
		case 6:
			fields[i] += "\u200b*"
		case 7: // an item of another field's bounds
			fields[i] = item(cronFields[rng.IntN(len(cronFields))])
		}
	}
	var b strings.Builder
	for i, f := range fields {
		if i > 0 || rng.IntN(10) == 0 {
			b.WriteString(pick(" ", " ", " ", " ", "  ", "\t", "\u00a0", "\u2003"))
		}
		b.WriteString(f)
	}
	return b.String()
}
