package iamfake_test

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/nodeforge/nodeforge/internal/sandbox/iamfake"
)

// These tests drive every action through the real SDK client over loopback
// HTTP and check what the SDK decodes, which is the proof that the fake
// speaks IAM's wire shapes.

// start serves a fake and returns it with the real SDK client for it, in
// us-east-1 with static credentials, retrying quickly.
func start(t *testing.T) (*iamfake.Server, *iam.Client, string) {
	t.Helper()
	s := iamfake.New()
	u, stop, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c := iam.New(iam.Options{
		Region:       "us-east-1",
		BaseEndpoint: sdkaws.String(u),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 3
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		}),
	})
	return s, c, u
}

var ctx = context.Background()

// apiError returns the code, message and HTTP status of an SDK error.
func apiError(t *testing.T, err error) (code, message string, status int) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an API error", err)
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return ae.ErrorCode(), ae.ErrorMessage(), status
}

func tagMap(tags []iamtypes.Tag) map[string]string {
	out := map[string]string{}
	for _, tg := range tags {
		out[sdkaws.ToString(tg.Key)] = sdkaws.ToString(tg.Value)
	}
	return out
}

// TestInstanceProfileLifecycle: create with a path and tags, read back,
// add a role, refuse a second role and a delete while a role is held,
// remove the role, delete; the SDK decodes every answer.
func TestInstanceProfileLifecycle(t *testing.T) {
	s, c, _ := start(t)
	role := s.AddRole("NodeRole")
	other := s.AddRole("OtherRole")
	before := time.Now().Add(-time.Second)

	created, err := c.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{
		InstanceProfileName: sdkaws.String("nodeforge_prod_default"),
		Path:                sdkaws.String("/nodeforge/"),
		Tags:                []iamtypes.Tag{{Key: sdkaws.String("nodeforge.dev/cluster"), Value: sdkaws.String("prod")}, {Key: sdkaws.String("team"), Value: sdkaws.String("")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := created.InstanceProfile
	if sdkaws.ToString(p.InstanceProfileName) != "nodeforge_prod_default" || sdkaws.ToString(p.Path) != "/nodeforge/" ||
		sdkaws.ToString(p.Arn) != "arn:aws:iam::000000000000:instance-profile/nodeforge/nodeforge_prod_default" {
		t.Errorf("created %s at %s as %s", sdkaws.ToString(p.InstanceProfileName), sdkaws.ToString(p.Path), sdkaws.ToString(p.Arn))
	}
	if id := sdkaws.ToString(p.InstanceProfileId); !strings.HasPrefix(id, "AIPA") || len(id) != 21 {
		t.Errorf("InstanceProfileId = %q, want AIPA and 17 characters", id)
	}
	if p.CreateDate == nil || p.CreateDate.Before(before) || p.CreateDate.After(time.Now().Add(time.Second)) {
		t.Errorf("CreateDate = %v, want about now", p.CreateDate)
	}
	if diff := cmp.Diff(map[string]string{"nodeforge.dev/cluster": "prod", "team": ""}, tagMap(p.Tags)); diff != "" {
		t.Errorf("created tags (-want,+got):\n%s", diff)
	}
	if len(p.Roles) != 0 {
		t.Errorf("a new profile holds roles %v", p.Roles)
	}
	// The wire form: lists flattened as Tags.member.N.
	reqs := s.Requests()
	if got := reqs[len(reqs)-1].Params; got.Get("Tags.member.1.Key") != "nodeforge.dev/cluster" || got.Get("Version") != "2010-05-08" {
		t.Errorf("CreateInstanceProfile was sent as %v", got)
	}

	if _, err := c.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: sdkaws.String("nodeforge_prod_default"), RoleName: sdkaws.String("NodeRole")}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: sdkaws.String("nodeforge_prod_default")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.InstanceProfile.Roles) != 1 {
		t.Fatalf("roles after adding one: %+v", got.InstanceProfile.Roles)
	}
	r := got.InstanceProfile.Roles[0]
	if sdkaws.ToString(r.RoleName) != "NodeRole" || sdkaws.ToString(r.Arn) != role.ARN || sdkaws.ToString(r.RoleId) != role.ID || sdkaws.ToString(r.Path) != "/" || r.CreateDate == nil {
		t.Errorf("role in profile = %+v, want %+v", r, role)
	}
	if diff := cmp.Diff(tagMap(p.Tags), tagMap(got.InstanceProfile.Tags)); diff != "" {
		t.Errorf("GetInstanceProfile tags (-want,+got):\n%s", diff)
	}

	_, err = c.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: sdkaws.String("nodeforge_prod_default"), RoleName: sdkaws.String(other.Name)})
	var limit *iamtypes.LimitExceededException
	if !errors.As(err, &limit) {
		t.Errorf("a second role: %v, want LimitExceeded", err)
	} else if _, _, status := apiError(t, err); status != http.StatusConflict {
		t.Errorf("LimitExceeded came with HTTP %d, want 409", status)
	}
	_, err = c.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: sdkaws.String("nodeforge_prod_default")})
	var conflict *iamtypes.DeleteConflictException
	if !errors.As(err, &conflict) {
		t.Errorf("deleting a profile that holds a role: %v, want DeleteConflict", err)
	}

	if _, err := c.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{InstanceProfileName: sdkaws.String("nodeforge_prod_default"), RoleName: sdkaws.String("NodeRole")}); err != nil {
		t.Fatal(err)
	}
	if ps := s.InstanceProfiles(); len(ps) != 1 || len(ps[0].Roles) != 0 {
		t.Errorf("after removing the role: %+v", ps)
	}
	if _, err := c.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: sdkaws.String("nodeforge_prod_default")}); err != nil {
		t.Fatal(err)
	}
	if ps := s.InstanceProfiles(); len(ps) != 0 {
		t.Errorf("after deletion, profiles %+v remain", ps)
	}
	_, err = c.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: sdkaws.String("nodeforge_prod_default")})
	var missing *iamtypes.NoSuchEntityException
	if !errors.As(err, &missing) {
		t.Errorf("GetInstanceProfile after deletion: %v, want NoSuchEntity", err)
	}
	if s.Calls("GetInstanceProfile") != 2 || s.Calls("") != 8 {
		t.Errorf("recorded %d GetInstanceProfile and %d calls in all, want 2 and 8", s.Calls("GetInstanceProfile"), s.Calls(""))
	}
}

// TestErrors: every error the fake models reaches the SDK as IAM's code,
// typed where the SDK has a type for it, with IAM's HTTP status and a
// message a person can act on.
func TestErrors(t *testing.T) {
	s, c, _ := start(t)
	s.AddRole("NodeRole")
	if _, err := s.AddInstanceProfile(iamfake.InstanceProfile{Name: "Existing", Roles: []string{"noderole"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddInstanceProfile(iamfake.InstanceProfile{Name: "Empty"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		call    func() error
		code    string
		status  int
		message string
	}{
		{"creating a profile that exists", func() error {
			_, err := c.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: sdkaws.String("Existing")})
			return err
		}, "EntityAlreadyExists", 409, "Instance Profile Existing already exists."},
		{"names are unique regardless of case", func() error {
			_, err := c.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: sdkaws.String("EXISTING")})
			return err
		}, "EntityAlreadyExists", 409, "already exists"},
		{"getting a missing profile", func() error {
			_, err := c.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: sdkaws.String("gone")})
			return err
		}, "NoSuchEntity", 404, "Instance Profile gone cannot be found."},
		{"adding a missing role", func() error {
			_, err := c.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: sdkaws.String("Empty"), RoleName: sdkaws.String("NoSuchRole")})
			return err
		}, "NoSuchEntity", 404, "The role with name NoSuchRole cannot be found."},
		{"adding a role to a missing profile", func() error {
			_, err := c.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: sdkaws.String("gone"), RoleName: sdkaws.String("NodeRole")})
			return err
		}, "NoSuchEntity", 404, "Instance Profile gone cannot be found."},
		{"adding the role a profile already holds", func() error {
			_, err := c.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: sdkaws.String("Existing"), RoleName: sdkaws.String("NodeRole")})
			return err
		}, "LimitExceeded", 409, "InstanceSessionsPerInstanceProfile: 1"},
		{"removing a role the profile does not hold", func() error {
			_, err := c.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{InstanceProfileName: sdkaws.String("Empty"), RoleName: sdkaws.String("NodeRole")})
			return err
		}, "NoSuchEntity", 404, "is not in instance profile Empty"},
		{"deleting a missing profile", func() error {
			_, err := c.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: sdkaws.String("gone")})
			return err
		}, "NoSuchEntity", 404, "cannot be found"},
		{"deleting a profile that holds a role", func() error {
			_, err := c.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: sdkaws.String("Existing")})
			return err
		}, "DeleteConflict", 409, "must remove roles from instance profile first"},
		{"a name IAM does not accept", func() error {
			_, err := c.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: sdkaws.String("no spaces")})
			return err
		}, "ValidationError", 400, "regular expression pattern"},
		{"a name longer than 128", func() error {
			_, err := c.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: sdkaws.String(strings.Repeat("a", 129))})
			return err
		}, "ValidationError", 400, "length"},
		{"a path that does not end in a slash", func() error {
			_, err := c.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: sdkaws.String("p"), Path: sdkaws.String("/nodeforge")})
			return err
		}, "ValidationError", 400, "'path'"},
		{"a tag key reserved for AWS", func() error {
			_, err := c.TagInstanceProfile(ctx, &iam.TagInstanceProfileInput{InstanceProfileName: sdkaws.String("Empty"), Tags: []iamtypes.Tag{{Key: sdkaws.String("aws:x"), Value: sdkaws.String("y")}}})
			return err
		}, "InvalidInput", 400, "aws:"},
		{"tagging a missing profile", func() error {
			_, err := c.TagInstanceProfile(ctx, &iam.TagInstanceProfileInput{InstanceProfileName: sdkaws.String("gone"), Tags: []iamtypes.Tag{{Key: sdkaws.String("a"), Value: sdkaws.String("b")}}})
			return err
		}, "NoSuchEntity", 404, "cannot be found"},
		{"a bad path prefix", func() error {
			_, err := c.ListInstanceProfiles(ctx, &iam.ListInstanceProfilesInput{PathPrefix: sdkaws.String("nodeforge/")})
			return err
		}, "ValidationError", 400, "pathPrefix"},
		{"getting a missing role", func() error {
			_, err := c.GetRole(ctx, &iam.GetRoleInput{RoleName: sdkaws.String("NoSuchRole")})
			return err
		}, "NoSuchEntity", 404, "The role with name NoSuchRole cannot be found."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatalf("succeeded, want %s", tc.code)
			}
			code, msg, status := apiError(t, err)
			if code != tc.code || status != tc.status || !strings.Contains(msg, tc.message) {
				t.Errorf("got %s (HTTP %d) %q, want %s (HTTP %d) containing %q", code, status, msg, tc.code, tc.status, tc.message)
			}
		})
	}
	// The typed errors the provider relies on.
	_, err := c.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: sdkaws.String("gone")})
	var nse *iamtypes.NoSuchEntityException
	if !errors.As(err, &nse) {
		t.Errorf("NoSuchEntity decoded as %T, want *types.NoSuchEntityException", err)
	}
	_, err = c.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: sdkaws.String("Existing")})
	var eae *iamtypes.EntityAlreadyExistsException
	if !errors.As(err, &eae) {
		t.Errorf("EntityAlreadyExists decoded as %T, want *types.EntityAlreadyExistsException", err)
	}
	if ps := s.InstanceProfiles(); len(ps) != 2 || len(ps[1].Roles) != 1 || ps[1].Roles[0] != "NodeRole" {
		t.Errorf("failed calls changed the profiles: %+v", ps)
	}
}

// TestTags: TagInstanceProfile adds and overwrites (keys regardless of
// case), ListInstanceProfileTags pages through them in key order, and the
// 50-tag limit holds.
func TestTags(t *testing.T) {
	s, c, _ := start(t)
	if _, err := s.AddInstanceProfile(iamfake.InstanceProfile{Name: "p", Tags: map[string]string{"Team": "a", "keep": "1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TagInstanceProfile(ctx, &iam.TagInstanceProfileInput{InstanceProfileName: sdkaws.String("p"),
		Tags: []iamtypes.Tag{{Key: sdkaws.String("team"), Value: sdkaws.String("b")}, {Key: sdkaws.String("new"), Value: sdkaws.String("2")}}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	pages := iam.NewListInstanceProfileTagsPaginator(c, &iam.ListInstanceProfileTagsInput{InstanceProfileName: sdkaws.String("p"), MaxItems: sdkaws.Int32(1)})
	n := 0
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, tg := range page.Tags {
			got = append(got, sdkaws.ToString(tg.Key)+"="+sdkaws.ToString(tg.Value))
		}
	}
	if diff := cmp.Diff([]string{"keep=1", "new=2", "team=b"}, got); diff != "" || n != 3 {
		t.Errorf("tags over %d pages (-want,+got):\n%s", n, diff)
	}
	var many []iamtypes.Tag
	for i := range 49 {
		many = append(many, iamtypes.Tag{Key: sdkaws.String(fmt.Sprintf("k%d", i)), Value: sdkaws.String("v")})
	}
	_, err := c.TagInstanceProfile(ctx, &iam.TagInstanceProfileInput{InstanceProfileName: sdkaws.String("p"), Tags: many})
	if code, _, status := apiError(t, err); code != "LimitExceeded" || status != 409 {
		t.Errorf("52 tags: %s HTTP %d, want LimitExceeded 409", code, status)
	}
	if ps := s.InstanceProfiles(); len(ps[0].Tags) != 3 {
		t.Errorf("a refused TagInstanceProfile left %d tags, want 3", len(ps[0].Tags))
	}
}

// TestListInstanceProfiles: PathPrefix selects by path, pages follow
// Marker, and tags are left out as IAM leaves them out of this list.
func TestListInstanceProfiles(t *testing.T) {
	s, c, _ := start(t)
	s.AddRole("NodeRole")
	for _, p := range []iamfake.InstanceProfile{
		{Name: "a", Path: "/nodeforge/", Tags: map[string]string{"x": "y"}, Roles: []string{"NodeRole"}},
		{Name: "b", Path: "/nodeforge/"},
		{Name: "c", Path: "/nodeforge/team/"},
		{Name: "d", Path: "/"},
		{Name: "e", Path: "/other/"},
	} {
		if _, err := s.AddInstanceProfile(p); err != nil {
			t.Fatal(err)
		}
	}
	list := func(prefix string) (names []string, pages int) {
		in := &iam.ListInstanceProfilesInput{MaxItems: sdkaws.Int32(2)}
		if prefix != "" {
			in.PathPrefix = sdkaws.String(prefix)
		}
		p := iam.NewListInstanceProfilesPaginator(c, in)
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, ip := range page.InstanceProfiles {
				names = append(names, sdkaws.ToString(ip.InstanceProfileName))
				if len(ip.Tags) != 0 {
					t.Errorf("ListInstanceProfiles gave the tags of %s", sdkaws.ToString(ip.InstanceProfileName))
				}
				if sdkaws.ToString(ip.InstanceProfileName) == "a" && (len(ip.Roles) != 1 || sdkaws.ToString(ip.Roles[0].RoleName) != "NodeRole") {
					t.Errorf("ListInstanceProfiles gave a's roles as %+v", ip.Roles)
				}
			}
		}
		return names, pages
	}
	if names, pages := list("/nodeforge/"); !cmp.Equal(names, []string{"a", "b", "c"}) || pages != 2 {
		t.Errorf("under /nodeforge/: %v in %d pages, want [a b c] in 2", names, pages)
	}
	if names, _ := list(""); !cmp.Equal(names, []string{"a", "b", "c", "d", "e"}) {
		t.Errorf("everything: %v", names)
	}
	if names, _ := list("/none/"); len(names) != 0 {
		t.Errorf("under /none/: %v", names)
	}
}

// TestRoles: CreateRole and GetRole through the SDK, with the trust policy
// URL-encoded as IAM returns it; AddRole makes one tests can use.
func TestRoles(t *testing.T) {
	s, c, _ := start(t)
	const trust = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}`
	created, err := c.CreateRole(ctx, &iam.CreateRoleInput{RoleName: sdkaws.String("Nodes"), Path: sdkaws.String("/teams/"), AssumeRolePolicyDocument: sdkaws.String(trust)})
	if err != nil {
		t.Fatal(err)
	}
	if sdkaws.ToString(created.Role.Arn) != "arn:aws:iam::000000000000:role/teams/Nodes" || !strings.HasPrefix(sdkaws.ToString(created.Role.RoleId), "AROA") {
		t.Errorf("created role %s %s", sdkaws.ToString(created.Role.Arn), sdkaws.ToString(created.Role.RoleId))
	}
	got, err := c.GetRole(ctx, &iam.GetRoleInput{RoleName: sdkaws.String("nodes")})
	if err != nil {
		t.Fatal(err)
	}
	if doc, err := url.QueryUnescape(sdkaws.ToString(got.Role.AssumeRolePolicyDocument)); err != nil || doc != trust {
		t.Errorf("trust policy = %q (%v), want %s URL-encoded", sdkaws.ToString(got.Role.AssumeRolePolicyDocument), err, trust)
	}
	_, err = c.CreateRole(ctx, &iam.CreateRoleInput{RoleName: sdkaws.String("Nodes"), AssumeRolePolicyDocument: sdkaws.String(trust)})
	var eae *iamtypes.EntityAlreadyExistsException
	if !errors.As(err, &eae) {
		t.Errorf("creating a role again: %v, want EntityAlreadyExists", err)
	}
	if r := s.AddRole("NodeRole"); r.ARN != "arn:aws:iam::000000000000:role/NodeRole" {
		t.Errorf("AddRole made %+v", r)
	}
	if again := s.AddRole("NodeRole"); again.ID != s.AddRole("NodeRole").ID {
		t.Errorf("AddRole of an existing role made another")
	}
	if _, err := c.GetRole(ctx, &iam.GetRoleInput{RoleName: sdkaws.String("NodeRole")}); err != nil {
		t.Errorf("GetRole of a role AddRole made: %v", err)
	}
}

// TestFaults: an injected AccessDenied names the permission and the
// resource as IAM's does and lasts for n calls; an injected Throttling is
// retried by the SDK; ClearFaults ends them.
func TestFaults(t *testing.T) {
	s, c, _ := start(t)
	create := func() error {
		_, err := c.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: sdkaws.String("p"), Path: sdkaws.String("/nodeforge/")})
		return err
	}
	s.FailNext("CreateInstanceProfile", 1, iamfake.Status("AccessDenied"), "AccessDenied")
	err := create()
	code, msg, status := apiError(t, err)
	if code != "AccessDenied" || status != 403 ||
		!strings.Contains(msg, "is not authorized to perform: iam:CreateInstanceProfile on resource: arn:aws:iam::000000000000:instance-profile/nodeforge/p") {
		t.Errorf("denied: %s HTTP %d %q", code, status, msg)
	}
	if len(s.InstanceProfiles()) != 0 {
		t.Error("a denied create made a profile")
	}
	if err := create(); err != nil {
		t.Fatalf("after the fault's one call: %v", err)
	}

	s.FailNext("GetInstanceProfile", 1, iamfake.Status("Throttling"), "Throttling")
	if _, err := c.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: sdkaws.String("p")}); err != nil {
		t.Errorf("one throttled call was not retried: %v", err)
	}
	if n := s.Calls("GetInstanceProfile"); n != 2 {
		t.Errorf("GetInstanceProfile reached the fake %d times, want 2 (one throttled, one retried)", n)
	}

	s.FailNext("DeleteInstanceProfile", 100, iamfake.Status("ServiceFailure"), "ServiceFailure")
	s.ClearFaults()
	if _, err := c.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: sdkaws.String("p")}); err != nil {
		t.Errorf("after ClearFaults: %v", err)
	}
}

// TestRequestsMustBeSignedAndKnown: unsigned requests, requests signed for
// another service, unknown actions and versions, and GETs are refused in
// IAM's error document.
func TestRequestsMustBeSignedAndKnown(t *testing.T) {
	s, _, u := start(t)
	signed := "AWS4-HMAC-SHA256 Credential=AKIATEST/20261122/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0"
	for _, tc := range []struct {
		name, method, auth, body, code string
		status                         int
	}{
		{"unsigned", http.MethodPost, "", "Action=ListInstanceProfiles&Version=2010-05-08", "MissingAuthenticationToken", 403},
		{"signed for EC2", http.MethodPost, strings.Replace(signed, "/iam/", "/ec2/", 1), "Action=ListInstanceProfiles&Version=2010-05-08", "IncompleteSignature", 403},
		{"an action not modelled", http.MethodPost, signed, "Action=CreateUser&Version=2010-05-08", "InvalidAction", 400},
		{"another version", http.MethodPost, signed, "Action=ListInstanceProfiles&Version=2016-11-15", "InvalidAction", 400},
		{"no action", http.MethodPost, signed, "Version=2010-05-08", "MissingAction", 400},
		{"a GET", http.MethodGet, signed, "", "InvalidAction", 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, u, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var doc struct {
				XMLName   xml.Name `xml:"ErrorResponse"`
				Type      string   `xml:"Error>Type"`
				Code      string   `xml:"Error>Code"`
				Message   string   `xml:"Error>Message"`
				RequestID string   `xml:"RequestId"`
			}
			if err := xml.Unmarshal(raw, &doc); err != nil {
				t.Fatalf("error document %s: %v", raw, err)
			}
			if resp.StatusCode != tc.status || doc.Code != tc.code || doc.Type != "Sender" || doc.Message == "" || doc.RequestID == "" {
				t.Errorf("HTTP %d %+v, want HTTP %d code %s from the Sender with a message and request ID", resp.StatusCode, doc, tc.status, tc.code)
			}
		})
	}
	if n := s.Calls(""); n != 6 {
		t.Errorf("recorded %d requests, want all 6 refused ones", n)
	}
}
