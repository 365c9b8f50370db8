package nodeshape

import "testing"

// TestHashFormatIsFixed pins Hash's format: the first 8 bytes of the
// SHA-256 of the JSON encoding (map keys sorted), in hex. Every pool hash,
// node class spec hash and launch template name already stamped on a
// cluster is this; another format would drift every node on upgrade. The
// expected value is sha256('{"a":"x","b":2}'), worked out apart from Go.
func TestHashFormatIsFixed(t *testing.T) {
	got, err := Hash(map[string]any{"b": 2, "a": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "768ca668c0f84dd3"; got != want {
		t.Errorf("Hash = %s, want %s", got, want)
	}
}
