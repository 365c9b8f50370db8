package cloudprovider_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
)

// TestDeadlineEndsACallTheCloudDoesNotAnswer: a Create that would take an
// hour returns a deadline error naming the call; a quick one is untouched.
func TestDeadlineEndsACallTheCloudDoesNotAnswer(t *testing.T) {
	slow := cloudfake.New()
	slow.CreateDelay = time.Hour
	bounded := cloudprovider.WithDeadline(slow, 10*time.Millisecond)
	_, err := bounded.Create(context.Background(), cloudprovider.Launch{ClaimUID: "a"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "cloud provider Create did not answer within 10ms") {
		t.Errorf("slow Create: %v, want a deadline error naming Create", err)
	}
	if _, err := cloudprovider.WithDeadline(cloudfake.New(), time.Minute).List(context.Background()); err != nil {
		t.Errorf("quick List: %v", err)
	}
}
