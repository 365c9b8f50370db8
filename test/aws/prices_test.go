package aws

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

// providerWith is the test region's provider with its own price table,
// options and event recorder.
func (r *region) providerWith(t *testing.T, prices *pricing.Table, opts aws.Options) *aws.Provider {
	t.Helper()
	opts.Region, opts.ClusterName, opts.ClusterEndpoint, opts.KubernetesVersion = "us-west-2", "conformance", "https://api.conformance.example", "1.37"
	p, err := aws.New(r.client, kube, prices, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func priceTable(t *testing.T, regions string) *pricing.Table {
	t.Helper()
	table, err := pricing.Parse([]byte(`{"source":"test","currency":"USD","regions":{` + regions + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

func price(t *testing.T, o *v1alpha1.Offering) float64 {
	t.Helper()
	p, err := strconv.ParseFloat(o.Price, 64)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// countOfferings counts the offerings of a capacity type.
func countOfferings(types []v1alpha1.InstanceType, ct v1alpha1.CapacityType) int {
	n := 0
	for _, it := range types {
		for _, o := range it.Offerings {
			if o.CapacityType == ct {
				n++
			}
		}
	}
	return n
}

// TestAFailedSpotRefreshStillOffersOnDemand: DescribeSpotPriceHistory
// denied before any spot price was read leaves out the spot offerings, not
// the on-demand ones; it is asked again once its retry is due, and a later
// failure keeps the spot prices read before.
func TestAFailedSpotRefreshStillOffersOnDemand(t *testing.T) {
	r := newRegion(t, nil, nil)
	ctx := context.Background()
	r.ec2.Deny("DescribeSpotPriceHistory", true)
	t.Cleanup(func() { r.ec2.Deny("DescribeSpotPriceHistory", false) })

	t.Run("the first refresh fails: on-demand only, and no retry before it is due", func(t *testing.T) {
		p := r.providerWith(t, mustPrices(t), aws.Options{}) // spot TTL 15m: retry after 1m
		types, err := p.InstanceTypes(ctx, r.pool())
		if err != nil {
			t.Fatalf("InstanceTypes failed with spot prices denied: %v", err)
		}
		if n := countOfferings(types, v1alpha1.CapacityTypeOnDemand); n == 0 {
			t.Fatal("no on-demand offerings were published")
		}
		if n := countOfferings(types, v1alpha1.CapacityTypeSpot); n != 0 {
			t.Errorf("%d spot offerings without a spot price", n)
		}
		r.ec2.Deny("DescribeSpotPriceHistory", false)
		types, _ = p.InstanceTypes(ctx, r.pool())
		if n := countOfferings(types, v1alpha1.CapacityTypeSpot); n != 0 {
			t.Errorf("spot prices were asked again before the retry was due (%d spot offerings)", n)
		}
		r.ec2.Deny("DescribeSpotPriceHistory", true)
	})

	t.Run("the retry succeeds, and a later failure keeps those prices", func(t *testing.T) {
		p := r.providerWith(t, mustPrices(t), aws.Options{SpotPricesTTL: time.Millisecond})
		if _, err := p.InstanceTypes(ctx, r.pool()); err != nil {
			t.Fatal(err)
		}
		r.ec2.Deny("DescribeSpotPriceHistory", false)
		time.Sleep(5 * time.Millisecond)
		types, err := p.InstanceTypes(ctx, r.pool())
		if err != nil {
			t.Fatal(err)
		}
		spot := countOfferings(types, v1alpha1.CapacityTypeSpot)
		if spot == 0 {
			t.Fatal("no spot offerings once DescribeSpotPriceHistory answered")
		}
		r.ec2.Deny("DescribeSpotPriceHistory", true)
		time.Sleep(5 * time.Millisecond)
		types, err = p.InstanceTypes(ctx, r.pool())
		if err != nil {
			t.Fatal(err)
		}
		if n := countOfferings(types, v1alpha1.CapacityTypeSpot); n != spot {
			t.Errorf("%d spot offerings after a failed refresh, want the %d priced before", n, spot)
		}
	})
}

// TestTypesWithoutAnOnDemandPriceAreOfferedLast: the table has no
// us-west-2 prices; us-west-1's (the closest region it has) stand in, and
// types neither has are offered at pricing.UnknownPrice, never dropped, and
// named in a Warning event on the pool.
func TestTypesWithoutAnOnDemandPriceAreOfferedLast(t *testing.T) {
	r := newRegion(t, nil, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name, table string
		// want: type → on-demand price in us-west-2a.
		want map[string]float64
		// inEvent must all appear in the event's note.
		inEvent []string
	}{
		{
			name:  "the closest region's prices stand in, not us-east-1's",
			table: `"us-east-1":{"m5.large":0.096,"m5.xlarge":0.192,"t3.medium":0.0416},"us-west-1":{"m5.large":0.112,"t3.medium":0.052}`,
			want:  map[string]float64{"m5.large": 0.112, "t3.medium": 0.052, "m5.xlarge": pricing.UnknownPrice},
			inEvent: []string{
				"at us-west-1's prices", "m5.large", "t3.medium",
				"in the price table neither for us-west-2 nor for us-west-1", "m5.xlarge",
			},
		},
		{
			name:    "the region's own table lacks a type",
			table:   `"us-east-1":{"m5.xlarge":0.192},"us-west-2":{"m5.large":0.096}`,
			want:    map[string]float64{"m5.large": 0.096, "m5.xlarge": pricing.UnknownPrice},
			inEvent: []string{"not in the price table for us-west-2", "m5.xlarge"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			p := r.providerWith(t, priceTable(t, tc.table), aws.Options{Recorder: rec})
			types, err := p.InstanceTypes(ctx, r.pool())
			if err != nil {
				t.Fatal(err)
			}
			known := 0.0
			for name, want := range tc.want {
				_, od := offering(types, name, "us-west-2a", "on-demand")
				if od == nil {
					t.Errorf("%s is not offered on demand", name)
					continue
				}
				if got := price(t, od); got != want {
					t.Errorf("%s on demand = %v, want %v", name, got, want)
				}
			}
			for _, it := range types {
				for i := range it.Offerings {
					if p := price(t, &it.Offerings[i]); p != pricing.UnknownPrice {
						known = max(known, p)
					}
				}
			}
			if known >= pricing.UnknownPrice {
				t.Errorf("a known price %v is not below UnknownPrice", known)
			}
			select {
			case e := <-rec.Events:
				if !strings.HasPrefix(e, "Warning "+v1alpha1.ReasonOnDemandPricesUnknown+" ") {
					t.Errorf("event = %q, want a Warning %s", e, v1alpha1.ReasonOnDemandPricesUnknown)
				}
				for _, s := range tc.inEvent {
					if !strings.Contains(e, s) {
						t.Errorf("event does not say %q:\n%s", s, e)
					}
				}
				if len(e) > 1024 {
					t.Errorf("event note is %d bytes, over the API's 1 KB", len(e))
				}
			default:
				t.Error("no event names the types without a price")
			}
		})
	}
	t.Run("every type priced: no event", func(t *testing.T) {
		all := map[string]float64{}
		full, err := pricing.Shipped()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range full.InstanceTypes("us-east-1") {
			all[name], _ = full.OnDemand("us-east-1", name)
		}
		var b strings.Builder
		for name, p := range all {
			if b.Len() > 0 {
				b.WriteString(",")
			}
			b.WriteString(strconv.Quote(name) + ":" + strconv.FormatFloat(p, 'f', -1, 64))
		}
		// Every type of the fake's world is in us-east-1's shipped table.
		rec := events.NewFakeRecorder(10)
		p := r.providerWith(t, priceTable(t, `"us-west-2":{`+b.String()+`}`), aws.Options{Recorder: rec})
		if _, err := p.InstanceTypes(ctx, r.pool()); err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-rec.Events:
			t.Errorf("event with every type priced: %s", e)
		default:
		}
	})
}

// TestTheClassSaysWhichTypesLackTheirRegionsPrice: in us-west-2, which the
// shipped table lacks, the class stays Ready and its OnDemandPricesKnown
// condition says the types are priced at the closest region's figures.
func TestTheClassSaysWhichTypesLackTheirRegionsPrice(t *testing.T) {
	r := newRegion(t, nil, nil)
	c := meta.FindStatusCondition(r.class.Status.Conditions, aws.ConditionOnDemandPricesKnown)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "StandInPrices" || !strings.Contains(c.Message, "us-east-1's prices") || !strings.Contains(c.Message, "m5.large") {
		t.Errorf("%s = %+v, want False, StandInPrices, naming us-east-1 and m5.large", aws.ConditionOnDemandPricesKnown, c)
	}
	if rc := ready(r.class); rc == nil || rc.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v; prices standing in are no reason not to launch", rc)
	}
}
