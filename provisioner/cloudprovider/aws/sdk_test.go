package aws

import (
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// testRetryer is the provisioner's retryer (cmd/provisioner/app's
// loadSDKConfig: the standard one, DefaultMaxAttempts tries) with a 1 ms
// backoff, so that a retried test stays quick. The test envs' clients use
// it with sdkhttp.GuardClosedBodyRace, as the provisioner's do.
func testRetryer() sdkaws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = DefaultMaxAttempts
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})
}
