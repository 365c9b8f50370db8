package awsfake

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMembers(t *testing.T) {
	form := url.Values{
		"Filter.1.Name":         {"a"},
		"Filter.1.Value.1":      {"x"},
		"Filter.10.Name":        {"c"},
		"Filter.3.Name":         {"b"},
		"Filter.0.Name":         {"not a member: indexes start at 1"},
		"Filter.x.Name":         {"not a member: not an index"},
		"Filters.2.Name":        {"another list"},
		"Tags.member.2.Key":     {"k2"},
		"Tags.member.1.Key":     {"k1"},
		"Tags.member.1.Value":   {"v1"},
		"Tags.membership.1.Key": {"another list"},
	}
	for _, tc := range []struct {
		name   string
		prefix string
		want   []string
	}{
		{"EC2's Name.N lists are read in index order, gaps and all", "Filter", []string{"Filter.1", "Filter.3", "Filter.10"}},
		{"IAM's Name.member.N lists are read with the member in the prefix", "Tags.member", []string{"Tags.member.1", "Tags.member.2"}},
		{"a list that is not there has no members", "Overrides", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Members(form, tc.prefix)); diff != "" {
				t.Errorf("Members(%q) (-want,+got):\n%s", tc.prefix, diff)
			}
		})
	}
}

func TestTags(t *testing.T) {
	form := url.Values{
		"Tags.member.1.Key":   {"team"},
		"Tags.member.1.Value": {"nodes"},
		"Tags.member.2.Value": {"no key"},
		"Tags.member.3.Key":   {"empty"},
	}
	want := []Tag{
		{Member: "Tags.member.1", Key: "team", Value: "nodes", HasKey: true},
		{Member: "Tags.member.2", Value: "no key"},
		{Member: "Tags.member.3", Key: "empty", HasKey: true},
	}
	if diff := cmp.Diff(want, Tags(form, "Tags.member")); diff != "" {
		t.Errorf("Tags (-want,+got):\n%s", diff)
	}
}

func TestSigV4(t *testing.T) {
	const scope = "AWS4-HMAC-SHA256 Credential=AKID/20261122/%s/%s/aws4_request, SignedHeaders=host, Signature=abc"
	header := func(region, service string) string {
		return strings.Replace(strings.Replace(scope, "%s", region, 1), "%s", service, 1)
	}
	for _, tc := range []struct {
		name   string
		check  SigV4
		header string
		want   *SigV4Error
		msg    string
		code   string
	}{
		{"a request signed for the service and region passes", SigV4{Service: "ssm", Region: "us-west-2"}, header("us-west-2", "ssm"), nil, "", ""},
		{"a global service passes any region", SigV4{Service: "iam"}, header("eu-west-1", "iam"), nil, "", ""},
		{"no header is unsigned", SigV4{Service: "ssm", Region: "us-west-2"}, "",
			&SigV4Error{Fault: Unsigned}, "Request is missing Authentication Token", "MissingAuthenticationTokenException"},
		{"another scheme is unsigned", SigV4{Service: "ssm", Region: "us-west-2"}, "Bearer abc",
			&SigV4Error{Fault: Unsigned}, "Request is missing Authentication Token", "MissingAuthenticationTokenException"},
		{"a header without a credential has no scope", SigV4{Service: "ssm", Region: "us-west-2"}, "AWS4-HMAC-SHA256 Signature=abc",
			&SigV4Error{Fault: NoScope}, "Authorization header has no valid Credential scope", "InvalidSignatureException"},
		{"a scope without its terminator has no scope", SigV4{Service: "ssm", Region: "us-west-2"}, "AWS4-HMAC-SHA256 Credential=AKID/20261122/us-west-2/ssm",
			&SigV4Error{Fault: NoScope}, "Authorization header has no valid Credential scope", "InvalidSignatureException"},
		{"the region is checked before the service", SigV4{Service: "ssm", Region: "us-west-2"}, header("eu-west-1", "ec2"),
			&SigV4Error{Fault: WrongRegion, Region: "eu-west-1", Service: "ec2"}, "Credential should be scoped to a valid region, not 'eu-west-1'.", "InvalidSignatureException"},
		{"another service's credential is refused", SigV4{Service: "eks", Region: "us-west-2"}, header("us-west-2", "ec2"),
			&SigV4Error{Fault: WrongService, Region: "us-west-2", Service: "ec2"}, "Credential should be scoped to correct service: 'eks'.", "InvalidSignatureException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			got := tc.check.Check(r)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("Check = %+v, want nil", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("Check = nil, want %+v", tc.want)
			}
			if got.Fault != tc.want.Fault || got.Region != tc.want.Region || got.Service != tc.want.Service {
				t.Errorf("Check = fault %d scoped to %s/%s, want fault %d scoped to %s/%s",
					got.Fault, got.Region, got.Service, tc.want.Fault, tc.want.Region, tc.want.Service)
			}
			if got.Error() != tc.msg || got.Code() != tc.code {
				t.Errorf("Check = %s %q, want %s %q", got.Code(), got.Error(), tc.code, tc.msg)
			}
		})
	}
}

func TestLog(t *testing.T) {
	var l Log[string]
	if got := l.All(); got != nil || l.Len() != 0 {
		t.Errorf("an empty log: All = %#v, Len = %d; want nil and 0", got, l.Len())
	}
	l.Add("GetParameter", "first")
	l.Add("", "no action")
	l.Add("GetParameter", "second")
	all := l.All()
	if diff := cmp.Diff([]string{"first", "no action", "second"}, all); diff != "" {
		t.Errorf("All (-want,+got):\n%s", diff)
	}
	all[0] = "changed"
	if l.All()[0] != "first" {
		t.Error("All shares its slice with the log")
	}
	if l.Count("GetParameter") != 2 || l.Count("") != 1 || l.Count("PutParameter") != 0 || l.Len() != 3 {
		t.Errorf("Count = %d GetParameter, %d without action, %d PutParameter, Len = %d; want 2, 1, 0, 3",
			l.Count("GetParameter"), l.Count(""), l.Count("PutParameter"), l.Len())
	}
}

func TestFaults(t *testing.T) {
	var fs Faults
	if _, ok := fs.Take("GetParameter", ""); ok {
		t.Fatal("the zero Faults injected a fault")
	}
	throttled := Fault{Status: http.StatusBadRequest, Code: "ThrottlingException"}
	failed := Fault{Status: http.StatusInternalServerError, Code: "InternalServerError"}
	fs.FailNext("GetParameter", 2, throttled)
	fs.FailNext("", 1, failed)

	var got []string
	for range 4 {
		f, ok := fs.Take("GetParameter", "")
		got = append(got, map[bool]string{true: f.Code, false: "none"}[ok])
	}
	if diff := cmp.Diff([]string{"ThrottlingException", "ThrottlingException", "InternalServerError", "none"}, got); diff != "" {
		t.Errorf("a fault for the action is used before one for any action, each for its n calls (-want,+got):\n%s", diff)
	}

	fs.FailNext("GetParameter", 5, throttled)
	fs.FailNext("GetParameter", 0, throttled)
	if _, ok := fs.Take("GetParameter"); ok {
		t.Error("FailNext with n = 0 did not clear the fault")
	}
	fs.FailNext("GetParameter", 1, throttled)
	fs.FailNext("GetParameters", 1, throttled)
	fs.Clear()
	if _, ok := fs.Take("GetParameter", "GetParameters"); ok {
		t.Error("Clear left a fault")
	}

	fs.FailNext("GetParameter", 1, throttled)
	want := &Error{Status: http.StatusBadRequest, Code: "ThrottlingException", Message: "injected fault"}
	if diff := cmp.Diff(want, fs.Inject("GetParameter")); diff != "" {
		t.Errorf("Inject (-want,+got):\n%s", diff)
	}
	if e := fs.Inject("GetParameter"); e != nil {
		t.Errorf("Inject after the fault was used = %v, want nil", e)
	}
}

// server is a stand-in for a fake's server, for the JSON protocol tests.
type server struct{ admitted []string }

func TestJSON(t *testing.T) {
	p := &JSON[*server]{
		Name:            "testfake",
		Target:          "AmazonTest",
		ContentType:     "application/x-amz-json-1.0",
		BadTarget:       "InvalidAction",
		Unsupported:     "UnsupportedOperation",
		TypePrefix:      "com.amazonaws.test#",
		QueryCompatible: true,
		QueryCodes:      map[string]string{"QueueDoesNotExist": "AWS.SimpleQueueService.NonExistentQueue"},
		Actions: map[string]JSONAction[*server]{
			"Echo": func(_ *server, _ *http.Request, body map[string]any) (any, *Error) {
				return map[string]string{"Said": JSONString(body, "Say")}, nil
			},
			"Find": func(*server, *http.Request, map[string]any) (any, *Error) {
				return nil, BadRequest("QueueDoesNotExist", "no queue %s", "q")
			},
			"Crash": func(*server, *http.Request, map[string]any) (any, *Error) {
				return nil, Errorf(http.StatusInternalServerError, "InternalError", "broken")
			},
		},
	}
	for _, tc := range []struct {
		name       string
		method     string
		target     string
		body       string
		queryMode  bool
		refuse     bool // admit refuses the call
		status     int
		answer     string
		queryError string
		admitted   bool
	}{
		{"an action is answered with what it returns", http.MethodPost, "AmazonTest.Echo", `{"Say":"hi"}`, false, false,
			200, `{"Said":"hi"}`, "", true},
		{"an error is a JSON document naming its type", http.MethodPost, "AmazonTest.Find", `{}`, false, false,
			400, `{"__type":"com.amazonaws.test#QueueDoesNotExist","message":"no queue q"}`, "", true},
		{"in query mode the error's Query code is in a header too", http.MethodPost, "AmazonTest.Find", `{}`, true, false,
			400, `{"__type":"com.amazonaws.test#QueueDoesNotExist","message":"no queue q"}`, "AWS.SimpleQueueService.NonExistentQueue;Sender", true},
		{"a server error is the receiver's fault", http.MethodPost, "AmazonTest.Crash", `{}`, true, false,
			500, `{"__type":"com.amazonaws.test#InternalError","message":"broken"}`, "InternalError;Receiver", true},
		{"a GET is refused before it is admitted", http.MethodGet, "AmazonTest.Echo", ``, false, false,
			400, `{"__type":"com.amazonaws.test#InvalidAction","message":"expected POST with X-Amz-Target: AmazonTest.\u003cAction\u003e, got GET \"AmazonTest.Echo\""}`, "", false},
		{"another service's target is refused", http.MethodPost, "AmazonSSM.Echo", `{}`, false, false,
			400, `{"__type":"com.amazonaws.test#InvalidAction","message":"expected POST with X-Amz-Target: AmazonTest.\u003cAction\u003e, got POST \"AmazonSSM.Echo\""}`, "", false},
		{"a body that is not JSON is refused", http.MethodPost, "AmazonTest.Echo", `Action=Echo`, false, false,
			400, `{"__type":"com.amazonaws.test#SerializationException","message":"request body is not JSON: invalid character 'A' looking for beginning of value"}`, "", false},
		{"an action not modelled is admitted and refused", http.MethodPost, "AmazonTest.Purge", `{}`, false, false,
			400, `{"__type":"com.amazonaws.test#UnsupportedOperation","message":"testfake does not implement Purge"}`, "", true},
		{"what admit refuses is not run", http.MethodPost, "AmazonTest.Echo", `{"Say":"hi"}`, false, true,
			403, `{"__type":"com.amazonaws.test#MissingAuthenticationToken","message":"unsigned"}`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &server{}
			r := httptest.NewRequest(tc.method, "/", strings.NewReader(tc.body))
			r.Header.Set("X-Amz-Target", tc.target)
			if tc.queryMode {
				r.Header.Set("X-Amzn-Query-Mode", "true")
			}
			w := httptest.NewRecorder()
			p.Serve(w, r, s, func(_ *http.Request, action string, _ map[string]any) *Error {
				s.admitted = append(s.admitted, action)
				if tc.refuse {
					return Errorf(http.StatusForbidden, "MissingAuthenticationToken", "unsigned")
				}
				return nil
			})
			if w.Code != tc.status || strings.TrimSpace(w.Body.String()) != tc.answer {
				t.Errorf("answer = %d %s, want %d %s", w.Code, w.Body, tc.status, tc.answer)
			}
			if got := w.Header().Get("X-Amzn-Query-Error"); got != tc.queryError {
				t.Errorf("X-Amzn-Query-Error = %q, want %q", got, tc.queryError)
			}
			if ct := w.Header().Get("Content-Type"); ct != p.ContentType {
				t.Errorf("Content-Type = %q, want %q", ct, p.ContentType)
			}
			if w.Header().Get("X-Amzn-RequestId") == "" {
				t.Error("no X-Amzn-RequestId")
			}
			if admitted := len(s.admitted) > 0; admitted != tc.admitted {
				t.Errorf("admitted = %v, want %v", admitted, tc.admitted)
			}
		})
	}
}

func TestJSONStrictContentType(t *testing.T) {
	p := &JSON[*server]{Target: "AmazonSSM", ContentType: "application/x-amz-json-1.1", StrictContentType: true, BadTarget: "UnknownOperationException"}
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
	r.Header.Set("X-Amz-Target", "AmazonSSM.GetParameter")
	r.Header.Set("Content-Type", "application/x-amz-json-1.0")
	w := httptest.NewRecorder()
	p.Serve(w, r, &server{}, func(*http.Request, string, map[string]any) *Error {
		t.Error("a request of another content type was admitted")
		return nil
	})
	want := `{"__type":"UnknownOperationException","message":"expected Content-Type: application/x-amz-json-1.1, got \"application/x-amz-json-1.0\""}`
	if w.Code != http.StatusBadRequest || strings.TrimSpace(w.Body.String()) != want {
		t.Errorf("answer = %d %s, want 400 %s", w.Code, w.Body, want)
	}
}

func TestQuery(t *testing.T) {
	p := Query{Namespace: "https://iam.amazonaws.com/doc/2010-05-08/", InternalCode: "ServiceFailure"}
	type result struct {
		Name string `xml:"Name"`
	}
	for _, tc := range []struct {
		name   string
		write  func(w http.ResponseWriter)
		status int
		want   string
	}{
		{"a result is wrapped in the action's Response and Result", func(w http.ResponseWriter) {
			p.WriteResult(w, "GetRole", "req-1", result{Name: "NodeRole"})
		}, 200, `<GetRoleResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><GetRoleResult><Name>NodeRole</Name></GetRoleResult><ResponseMetadata><RequestId>req-1</RequestId></ResponseMetadata></GetRoleResponse>`},
		{"an action without a result has no Result element", func(w http.ResponseWriter) {
			p.WriteResult(w, "DeleteRole", "req-2", nil)
		}, 200, `<DeleteRoleResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ResponseMetadata><RequestId>req-2</RequestId></ResponseMetadata></DeleteRoleResponse>`},
		{"a client error is the sender's fault", func(w http.ResponseWriter) {
			p.WriteError(w, "req-3", Errorf(http.StatusNotFound, "NoSuchEntity", "gone"))
		}, 404, `<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error><Type>Sender</Type><Code>NoSuchEntity</Code><Message>gone</Message></Error><RequestId>req-3</RequestId></ErrorResponse>`},
		{"an error of the fake's own is a 500 with the internal code", func(w http.ResponseWriter) {
			p.WriteError(w, "req-4", io.ErrUnexpectedEOF)
		}, 500, `<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error><Type>Receiver</Type><Code>ServiceFailure</Code><Message>An internal error has occurred: unexpected EOF</Message></Error><RequestId>req-4</RequestId></ErrorResponse>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			tc.write(w)
			body, ok := strings.CutPrefix(w.Body.String(), `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
			if !ok {
				t.Errorf("the answer does not start with the XML header: %s", w.Body)
			}
			if w.Code != tc.status || body != tc.want {
				t.Errorf("answer = %d %s, want %d %s", w.Code, body, tc.status, tc.want)
			}
			if ct := w.Header().Get("Content-Type"); ct != "text/xml" {
				t.Errorf("Content-Type = %q, want text/xml", ct)
			}
		})
	}
}

func TestServe(t *testing.T) {
	l, err := Serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.URL(), "http://127.0.0.1:") {
		t.Errorf("URL = %s, want http://127.0.0.1:<port>", l.URL())
	}
	resp, err := http.Get(l.URL())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Errorf("answer = %q, want ok", body)
	}
	l.Close()
	l.Close()
	if resp, err := http.Get(l.URL()); err == nil {
		resp.Body.Close()
		t.Error("a closed server still answers")
	}
}
