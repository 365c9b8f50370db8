package nodeclaim

import "testing"

func TestBudgetNodes(t *testing.T) {
	for _, tc := range []struct {
		nodes string
		total int
		want  int
	}{
		{"10%", 5, 1}, {"10%", 20, 2}, {"10%", 21, 3}, {"0%", 10, 0}, {"100%", 7, 7}, {"3", 10, 3}, {"0", 10, 0},
	} {
		if got := budgetNodes(tc.nodes, tc.total); got != tc.want {
			t.Errorf("budgetNodes(%q, %d) = %d, want %d", tc.nodes, tc.total, got, tc.want)
		}
	}
}
