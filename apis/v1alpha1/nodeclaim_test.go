package v1alpha1

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLastNominationTimeKeepsSubSeconds: the batch window is measured from
// the last nomination as the API server stores it; a time cut to the
// second there would shorten a 1 s window by up to all of it.
func TestLastNominationTimeKeepsSubSeconds(t *testing.T) {
	at := time.Date(2026, 11, 23, 16, 0, 0, 900_000_000, time.UTC)
	raw, err := json.Marshal(NodeClaimSpec{LastNominationTime: &metav1.MicroTime{Time: at}})
	if err != nil {
		t.Fatal(err)
	}
	var back NodeClaimSpec
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.LastNominationTime.Time; !got.Equal(at) {
		t.Errorf("lastNominationTime %s after a round trip (%s); want %s", got.Format(time.RFC3339Nano), raw, at.Format(time.RFC3339Nano))
	}
}
