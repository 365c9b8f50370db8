package ssmfake_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sandbox/ssmfake"
)

// These tests drive the fake through the real SDK client over loopback HTTP
// and check what the SDK decodes: the proof that the fake speaks SSM's
// wire shapes.

const region = "us-west-2"

// start serves a fake and returns it with the real client built as
// production builds it (NewFromConfig, BaseEndpoint at the fake), with a
// retryer that retries up to four attempts without waiting.
func start(t *testing.T) (*ssmfake.Server, *ssm.Client) {
	t.Helper()
	s, err := ssmfake.New(region)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, client(s.URL(), region)
}

func client(url, region string) *ssm.Client {
	cfg := sdkaws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		Retryer: func() sdkaws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 4
				o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
			})
		},
	}
	return ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.BaseEndpoint = sdkaws.String(url) })
}

// param is a Parameter as the SDK decodes it, flattened for cmp.Diff.
type param struct {
	Name, Type, Value, ARN, DataType string
	Version                          int64
	LastModified                     time.Time
}

func flatten(ps ...types.Parameter) []param {
	out := make([]param, 0, len(ps))
	for _, p := range ps {
		out = append(out, param{Name: sdkaws.ToString(p.Name), Type: string(p.Type), Value: sdkaws.ToString(p.Value), ARN: sdkaws.ToString(p.ARN),
			DataType: sdkaws.ToString(p.DataType), Version: p.Version, LastModified: sdkaws.ToTime(p.LastModifiedDate)})
	}
	return out
}

func names(ps []types.Parameter) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, sdkaws.ToString(p.Name))
	}
	return out
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func get(c *ssm.Client, name string) (*types.Parameter, error) {
	out, err := c.GetParameter(context.Background(), &ssm.GetParameterInput{Name: sdkaws.String(name)})
	if err != nil {
		return nil, err
	}
	return out.Parameter, nil
}

// LastModifiedDate goes over the wire as epoch seconds with milliseconds.
var approxTime = cmpopts.EquateApproxTime(time.Millisecond)

// TestGetParameter: every member of a parameter reaches the SDK; Put
// bumps the version; DataType follows the value; a missing or deleted
// parameter is ParameterNotFound.
func TestGetParameter(t *testing.T) {
	s, c := start(t)
	const name = "/nodeforge/sandbox/image"
	first := s.Put(name, "ami-0123456789abcdef0")
	got, err := get(c, name)
	if err != nil {
		t.Fatal(err)
	}
	want := param{Name: name, Type: "String", Value: "ami-0123456789abcdef0", Version: 1, DataType: "aws:ec2:image",
		ARN: "arn:aws:ssm:us-west-2:000000000000:parameter/nodeforge/sandbox/image", LastModified: first.LastModified}
	if diff := cmp.Diff([]param{want}, flatten(*got), approxTime); diff != "" {
		t.Errorf("GetParameter as the SDK decodes it (-want,+got):\n%s", diff)
	}
	if time.Since(first.LastModified) > time.Minute {
		t.Errorf("LastModified = %v, want the time of the Put", first.LastModified)
	}

	second := s.Put(name, "not an image")
	got, err = get(c, name)
	if err != nil {
		t.Fatal(err)
	}
	want.Value, want.Version, want.DataType, want.LastModified = "not an image", 2, "text", second.LastModified
	if diff := cmp.Diff([]param{want}, flatten(*got), approxTime); diff != "" {
		t.Errorf("after a second Put (-want,+got):\n%s", diff)
	}
	if p, ok := s.Get(name); !ok || p.Version != 2 || p.Value != "not an image" {
		t.Errorf("Get = %+v, %v; want version 2 with the new value", p, ok)
	}

	s.Put("flat", "x")
	if got, err := get(c, "flat"); err != nil || sdkaws.ToString(got.ARN) != "arn:aws:ssm:us-west-2:000000000000:parameter/flat" {
		t.Errorf("a name without a slash: %v, %v; want ARN ...:parameter/flat", got, err)
	}

	_, err = get(c, "/missing")
	var nf *types.ParameterNotFound
	if !errors.As(err, &nf) || nf.ErrorMessage() != "Parameter /missing not found." || httpStatus(err) != http.StatusBadRequest {
		t.Errorf("GetParameter(/missing) = %v, want a 400 *types.ParameterNotFound with its message", err)
	}
	s.Delete(name)
	if _, err := get(c, name); !errors.As(err, new(*types.ParameterNotFound)) {
		t.Errorf("GetParameter of a deleted parameter = %v, want ParameterNotFound", err)
	}
	if _, ok := s.Get(name); ok {
		t.Error("Get finds a deleted parameter")
	}
}

// TestGetParameters: found parameters come back once each, the missing
// ones are listed in InvalidParameters; more than ten names are refused.
func TestGetParameters(t *testing.T) {
	s, c := start(t)
	s.Put("/a", "1")
	s.Put("/b", "2")
	out, err := c.GetParameters(context.Background(), &ssm.GetParametersInput{Names: []string{"/a", "/missing", "/b", "/a"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/a", "/b"}, names(out.Parameters)); diff != "" {
		t.Errorf("Parameters (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/missing"}, out.InvalidParameters); diff != "" {
		t.Errorf("InvalidParameters (-want,+got):\n%s", diff)
	}
	if v := sdkaws.ToString(out.Parameters[1].Value); v != "2" {
		t.Errorf("/b = %q, want 2", v)
	}

	eleven := make([]string, 11)
	for i := range eleven {
		eleven[i] = fmt.Sprintf("/p%d", i)
	}
	_, err = c.GetParameters(context.Background(), &ssm.GetParametersInput{Names: eleven})
	if !errors.As(err, new(*types.ValidationException)) {
		t.Errorf("GetParameters of 11 names = %v, want ValidationException", err)
	}
}

// TestGetParametersByPath: one level or every level below a path, in name
// order, never the path itself nor a sibling sharing its prefix; pages of
// MaxResults joined by NextToken, through the SDK's paginator; bad tokens
// and limits refused.
func TestGetParametersByPath(t *testing.T) {
	ctx := context.Background()
	s, c := start(t)
	for _, name := range []string{"/p", "/p/b", "/p/a", "/p/c/d", "/p/c/e/f", "/pq/x", "/other/y"} {
		s.Put(name, "v")
	}
	all := func(path string, recursive bool, max int32) (got []string, pages []int) {
		t.Helper()
		in := &ssm.GetParametersByPathInput{Path: sdkaws.String(path), Recursive: sdkaws.Bool(recursive)}
		if max > 0 {
			in.MaxResults = sdkaws.Int32(max)
		}
		p := ssm.NewGetParametersByPathPaginator(c, in)
		for p.HasMorePages() {
			if len(pages) == 20 {
				t.Fatalf("GetParametersByPath(%s) is still paging after 20 pages: %v", path, got)
			}
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatalf("GetParametersByPath(%s): %v", path, err)
			}
			got = append(got, names(page.Parameters)...)
			pages = append(pages, len(page.Parameters))
		}
		return got, pages
	}
	for _, tc := range []struct {
		name      string
		path      string
		recursive bool
		max       int32
		want      []string
		pages     []int
	}{
		{name: "one level below the path", path: "/p", want: []string{"/p/a", "/p/b"}, pages: []int{2}},
		{name: "a trailing slash changes nothing", path: "/p/", want: []string{"/p/a", "/p/b"}, pages: []int{2}},
		{name: "every level when recursive", path: "/p", recursive: true, want: []string{"/p/a", "/p/b", "/p/c/d", "/p/c/e/f"}, pages: []int{4}},
		{name: "pages of two", path: "/p", recursive: true, max: 2, want: []string{"/p/a", "/p/b", "/p/c/d", "/p/c/e/f"}, pages: []int{2, 2}},
		{name: "pages of three", path: "/p", recursive: true, max: 3, want: []string{"/p/a", "/p/b", "/p/c/d", "/p/c/e/f"}, pages: []int{3, 1}},
		{name: "the root, one level", path: "/", want: []string{"/p"}, pages: []int{1}},
		{name: "nothing under the path", path: "/nothing", want: nil, pages: []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, pages := all(tc.path, tc.recursive, tc.max)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("names (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.pages, pages); diff != "" {
				t.Errorf("page sizes (-want,+got):\n%s", diff)
			}
		})
	}

	// Ten is the default page size and the largest.
	for i := range 12 {
		s.Put(fmt.Sprintf("/many/%02d", i), "v")
	}
	if _, pages := all("/many", false, 0); !cmp.Equal(pages, []int{10, 2}) {
		t.Errorf("12 parameters without MaxResults came in pages of %v, want [10 2]", pages)
	}
	_, err := c.GetParametersByPath(ctx, &ssm.GetParametersByPathInput{Path: sdkaws.String("/many"), MaxResults: sdkaws.Int32(11)})
	if !errors.As(err, new(*types.ValidationException)) {
		t.Errorf("MaxResults 11 = %v, want ValidationException", err)
	}

	// A page starts after the last name of the one before, so a parameter
	// put in between, before that name, is not returned twice.
	first, err := c.GetParametersByPath(ctx, &ssm.GetParametersByPathInput{Path: sdkaws.String("/p"), Recursive: sdkaws.Bool(true), MaxResults: sdkaws.Int32(2)})
	if err != nil || first.NextToken == nil {
		t.Fatalf("first page = %+v, %v; want a NextToken", first, err)
	}
	s.Put("/p/0", "v")
	next, err := c.GetParametersByPath(ctx, &ssm.GetParametersByPathInput{Path: sdkaws.String("/p"), Recursive: sdkaws.Bool(true), MaxResults: sdkaws.Int32(2), NextToken: first.NextToken})
	if err != nil || !cmp.Equal(names(next.Parameters), []string{"/p/c/d", "/p/c/e/f"}) || next.NextToken != nil {
		t.Errorf("second page = %v, %v, %v; want /p/c/d, /p/c/e/f and no NextToken", names(next.Parameters), next.NextToken, err)
	}

	for _, tc := range []struct {
		name string
		in   ssm.GetParametersByPathInput
		code string
	}{
		{"a token that is not one", ssm.GetParametersByPathInput{Path: sdkaws.String("/p"), Recursive: sdkaws.Bool(true), NextToken: sdkaws.String("garbage!")}, "InvalidNextToken"},
		{"a token for another path", ssm.GetParametersByPathInput{Path: sdkaws.String("/other"), Recursive: sdkaws.Bool(true), NextToken: first.NextToken}, "InvalidNextToken"},
		{"a path without a leading slash", ssm.GetParametersByPathInput{Path: sdkaws.String("p")}, "ValidationException"},
		{"parameter filters, which are not modelled", ssm.GetParametersByPathInput{Path: sdkaws.String("/p"), ParameterFilters: []types.ParameterStringFilter{{Key: sdkaws.String("Type"), Values: []string{"String"}}}}, "ValidationException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.GetParametersByPath(ctx, &tc.in)
			if errorCode(err) != tc.code || httpStatus(err) != http.StatusBadRequest {
				t.Errorf("got %v, want a 400 %s", err, tc.code)
			}
		})
	}
	if !errors.As(func() error {
		_, err := c.GetParametersByPath(ctx, &ssm.GetParametersByPathInput{Path: sdkaws.String("/p"), NextToken: sdkaws.String("garbage!")})
		return err
	}(), new(*types.InvalidNextToken)) {
		t.Error("a bad token is not decoded as *types.InvalidNextToken")
	}
}

// TestFaults: ThrottlingException and InternalServerError are retried by
// the SDK until they pass; an error it does not retry reaches the caller
// after one call; a fault for one action leaves the others be.
func TestFaults(t *testing.T) {
	s, c := start(t)
	s.Put("/a", "1")
	calls := func() int { return len(s.Requests()) }

	s.FailNext("GetParameter", 2, http.StatusBadRequest, "ThrottlingException")
	if _, err := get(c, "/a"); err != nil {
		t.Errorf("two throttles then success: %v, want the SDK to retry through them", err)
	}
	if calls() != 3 {
		t.Errorf("%d calls, want 3", calls())
	}

	s.FailNext("", 1, http.StatusInternalServerError, "InternalServerError")
	if _, err := get(c, "/a"); err != nil {
		t.Errorf("an internal error then success: %v", err)
	}
	if calls() != 5 {
		t.Errorf("%d calls, want 5", calls())
	}

	s.FailNext("GetParameter", 1, http.StatusBadRequest, "AccessDeniedException")
	_, err := get(c, "/a")
	if errorCode(err) != "AccessDeniedException" {
		t.Errorf("with an access-denied fault: %v, want AccessDeniedException", err)
	}
	if calls() != 6 {
		t.Errorf("%d calls, want 6: access denied is not retried", calls())
	}

	s.FailNext("GetParametersByPath", 5, http.StatusBadRequest, "ThrottlingException")
	if _, err := get(c, "/a"); err != nil {
		t.Errorf("a fault for GetParametersByPath failed GetParameter: %v", err)
	}
	if r := s.Requests(); r[len(r)-1].Action != "GetParameter" || r[len(r)-1].Body["Name"] != "/a" {
		t.Errorf("last request = %+v, want GetParameter of /a", r[len(r)-1])
	}
}

// TestRefusals: unsigned requests, requests signed for another region and
// operations the fake does not model are refused.
func TestRefusals(t *testing.T) {
	s, c := start(t)
	s.Put("/a", "1")
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/", strings.NewReader(`{"Name":"/a"}`))
	req.Header.Set("X-Amz-Target", "AmazonSSM.GetParameter")
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("unsigned request = %d, want 400", resp.StatusCode)
	}

	if _, err := get(client(s.URL(), "eu-west-1"), "/a"); errorCode(err) != "InvalidSignatureException" {
		t.Errorf("signed for eu-west-1: %v, want InvalidSignatureException", err)
	}
	_, err = c.PutParameter(context.Background(), &ssm.PutParameterInput{Name: sdkaws.String("/a"), Value: sdkaws.String("2")})
	if errorCode(err) != "UnknownOperationException" {
		t.Errorf("PutParameter = %v, want UnknownOperationException", err)
	}
	if p, _ := s.Get("/a"); p.Value != "1" {
		t.Errorf("/a = %q after a refused PutParameter, want 1", p.Value)
	}
}

var amiID = regexp.MustCompile(`^ami-[0-9a-f]{17}$`)

const al2023 = "/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/"

// TestSeedEKSOptimizedAL2023: the pinned and recommended parameters of
// every published architecture and variant, recommended at the newest
// release; reseeding and Put move recommended and the client sees it.
func TestSeedEKSOptimizedAL2023(t *testing.T) {
	ctx := context.Background()
	s, c := start(t)
	imgs, err := s.SeedEKSOptimizedAL2023("1.37", []string{"v20261101", "v20261001"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var published []string
	ids := map[string]bool{}
	for _, im := range imgs {
		published = append(published, im.Arch+"/"+im.Variant+"/"+im.Release)
		if !amiID.MatchString(im.ImageID) || ids[im.ImageID] || im.ImageID != ssmfake.DefaultImageID(im) {
			t.Errorf("%s: ImageID %q is not a distinct DefaultImageID", im.Name(), im.ImageID)
		}
		ids[im.ImageID] = true
	}
	if diff := cmp.Diff([]string{
		"x86_64/standard/v20261001", "x86_64/standard/v20261101",
		"x86_64/nvidia/v20261001", "x86_64/nvidia/v20261101",
		"x86_64/neuron/v20261001", "x86_64/neuron/v20261101",
		"arm64/standard/v20261001", "arm64/standard/v20261101",
		"arm64/nvidia/v20261001", "arm64/nvidia/v20261101",
	}, published); diff != "" {
		t.Errorf("published (-want,+got):\n%s", diff)
	}

	newest := imgs[1] // x86_64 standard v20261101
	for _, tc := range []struct{ name, want string }{
		{al2023 + "x86_64/standard/recommended/image_id", newest.ImageID},
		{al2023 + "x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.37-v20261101/image_id", newest.ImageID},
		{al2023 + "x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.37-v20261001/image_id", imgs[0].ImageID},
		{al2023 + "arm64/nvidia/recommended/image_id", imgs[9].ImageID},
		{al2023 + "x86_64/neuron/recommended/image_id", imgs[5].ImageID},
	} {
		got, err := get(c, tc.name)
		if err != nil || sdkaws.ToString(got.Value) != tc.want || sdkaws.ToString(got.DataType) != "aws:ec2:image" {
			t.Errorf("%s = %v, %v; want %s of DataType aws:ec2:image", tc.name, got, err, tc.want)
		}
	}
	if ssmfake.RecommendedImageIDParameter("1.37", "x86_64", "standard") != al2023+"x86_64/standard/recommended/image_id" ||
		newest.ImageIDParameter() != al2023+"x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.37-v20261101/image_id" {
		t.Error("the parameter name helpers do not give the published layout")
	}
	if _, err := get(c, al2023+"arm64/neuron/recommended/image_id"); !errors.As(err, new(*types.ParameterNotFound)) {
		t.Errorf("arm64 neuron = %v, want ParameterNotFound: the neuron variant is x86_64 only", err)
	}

	// A node class that lists the x86_64 images walks the tree.
	var under []string
	p := ssm.NewGetParametersByPathPaginator(c, &ssm.GetParametersByPathInput{Path: sdkaws.String(al2023 + "x86_64"), Recursive: sdkaws.Bool(true)})
	for pages := 0; p.HasMorePages(); pages++ {
		if pages == 20 {
			t.Fatalf("still paging after 20 pages: %v", under)
		}
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		under = append(under, names(page.Parameters)...)
	}
	if len(under) != 9 {
		t.Errorf("%d parameters under x86_64, want 9 (3 variants × 2 releases + 3 recommended): %v", len(under), under)
	}

	// AWS publishes a new release: recommended moves to it, at version 2;
	// the pinned parameters that did not change keep version 1.
	more, err := s.SeedEKSOptimizedAL2023("1.37", []string{"v20261001", "v20261101", "v20261201"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := get(c, al2023+"x86_64/standard/recommended/image_id")
	if err != nil || sdkaws.ToString(rec.Value) != more[2].ImageID || more[2].Release != "v20261201" || rec.Version != 2 {
		t.Errorf("recommended after a new release = %v, %v; want %s at version 2", rec, err, more[2].ImageID)
	}
	if old, err := get(c, newest.ImageIDParameter()); err != nil || old.Version != 1 {
		t.Errorf("an unchanged pinned parameter = %v, %v; want version 1", old, err)
	}

	// A test publishes its own recommended image and the client sees it.
	s.Put(al2023+"x86_64/standard/recommended/image_id", "ami-0fedcba9876543210")
	if rec, err := get(c, al2023+"x86_64/standard/recommended/image_id"); err != nil || sdkaws.ToString(rec.Value) != "ami-0fedcba9876543210" || rec.Version != 3 {
		t.Errorf("recommended after Put = %v, %v; want the new image at version 3", rec, err)
	}

	for _, bad := range []struct {
		version  string
		releases []string
	}{{"1.37", []string{"20261101"}}, {"latest", []string{"v20261101"}}} {
		if _, err := s.SeedEKSOptimizedAL2023(bad.version, bad.releases, nil); err == nil {
			t.Errorf("SeedEKSOptimizedAL2023(%q, %q) succeeded", bad.version, bad.releases)
		}
	}
}

// TestSeedFromEC2World: with IDs taken from ec2fake's default world by AMI
// name, the recommended parameters name the images EC2 describes, and
// variants the world has no image for are not published.
func TestSeedFromEC2World(t *testing.T) {
	s, c := start(t)
	byName := map[string]string{}
	for _, im := range ec2fake.DefaultWorld().Images {
		byName[im.Name] = im.ID
	}
	imgs, err := s.SeedEKSOptimizedAL2023("1.37", []string{"v20261001", "v20261101"}, ssmfake.ImageIDsByName(byName))
	if err != nil {
		t.Fatal(err)
	}
	// Standard for both architectures and both releases, NVIDIA for both
	// architectures in v20261101 and x86_64 in v20261001, Neuron in
	// v20261101.
	if len(imgs) != 8 {
		t.Errorf("published %d images, want the world's 8: %+v", len(imgs), imgs)
	}
	for _, arch := range []string{"x86_64", "arm64"} {
		want := byName["amazon-eks-node-al2023-"+arch+"-standard-1.37-v20261101"]
		if want == "" {
			t.Fatalf("ec2fake.DefaultWorld has no %s v20261101 EKS image to check against", arch)
		}
		got, err := get(c, ssmfake.RecommendedImageIDParameter("1.37", arch, "standard"))
		if err != nil || sdkaws.ToString(got.Value) != want {
			t.Errorf("recommended %s = %v, %v; want the world's v20261101 image %s", arch, got, err, want)
		}
	}
	missing := ssmfake.AL2023Image{KubernetesVersion: "1.37", Arch: "arm64", Variant: "nvidia", Release: "v20261001"}
	if _, err := get(c, missing.ImageIDParameter()); !errors.As(err, new(*types.ParameterNotFound)) {
		t.Errorf("arm64 nvidia v20261001, which the world has no image for = %v, want ParameterNotFound", err)
	}
}
