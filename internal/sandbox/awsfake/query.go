package awsfake

import (
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The AWS Query protocol sends a request as form parameters, flattening
// lists as Name.N (EC2) or Name.member.N (IAM and the other Query
// services) and structures as Name.Field, so that a nested value such as
// Tags.member.2.Key is just a key. The functions below read such a form;
// the checks a service makes of the values stay with its fake.

// Members returns the prefixes of the members of the list at prefix, in
// index order: "Filter.1", "Filter.2" for Filter.1.Name, Filter.2.Value.1
// and so on. A list of Name.member.N is read with the prefix
// "Name.member". Indexes need not be contiguous; the SDK always sends 1..N,
// but a hand-made request might not.
func Members(form map[string][]string, prefix string) []string {
	seen := map[int]bool{}
	for k := range form {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		idx, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(idx); err == nil && n > 0 {
			seen[n] = true
		}
	}
	var out []string
	for _, n := range slices.Sorted(maps.Keys(seen)) {
		out = append(out, prefix+"."+strconv.Itoa(n))
	}
	return out
}

// Tag is one member of a flattened list of tags, as sent: Tag.N.Key and
// Tag.N.Value in EC2, Tags.member.N.Key and Tags.member.N.Value in IAM.
type Tag struct {
	// Member is the member's prefix, e.g. Tags.member.2, for messages.
	Member     string
	Key, Value string
	// HasKey is false when the member has no Key parameter at all.
	HasKey bool
}

// Tags returns the tags of the list at prefix (as for Members), in index
// order, for the fake to check as its service does.
func Tags(form map[string][]string, prefix string) []Tag {
	q := url.Values(form)
	var out []Tag
	for _, m := range Members(form, prefix) {
		out = append(out, Tag{Member: m, Key: q.Get(m + ".Key"), Value: q.Get(m + ".Value"), HasKey: q.Has(m + ".Key")})
	}
	return out
}

// CloneForm returns a deep copy of form, for a log that must not share
// the request's slices.
func CloneForm(form url.Values) url.Values {
	out := make(url.Values, len(form))
	for k, v := range form {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// WriteXML answers with status and doc encoded as an XML document.
func WriteXML(w http.ResponseWriter, status int, contentType string, doc any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(doc)
}

// Query is the AWS Query protocol's XML answers as IAM gives them (and
// STS, SNS and CloudFormation): a result as <ActionResponse
// xmlns=Namespace><ActionResult>...</ActionResult><ResponseMetadata>
// <RequestId>...</RequestId></ResponseMetadata></ActionResponse>, and an
// error as <ErrorResponse><Error><Type/><Code/><Message/></Error>
// <RequestId/></ErrorResponse>. The envelope is smithy-go's
// (transport/http/protocol/awsquery), which finds the result element by
// name and takes the error's Code and Message from <Error> wherever it is.
// EC2 answers in a protocol of its own, which ec2fake writes.
type Query struct {
	// Namespace is the XML namespace of every response, e.g.
	// https://iam.amazonaws.com/doc/2010-05-08/.
	Namespace string
	// InternalCode is the code of a 500 the fake answers for an error of
	// its own, e.g. ServiceFailure.
	InternalCode string
}

// WriteError answers with err as the service's error document; an error
// that is not an *Error is a 500 with InternalCode.
func (p Query) WriteError(w http.ResponseWriter, requestID string, err error) {
	e := AsError(err, p.InternalCode)
	fault := "Sender"
	if e.Status >= 500 {
		fault = "Receiver"
	}
	WriteXML(w, e.Status, "text/xml", struct {
		XMLName   xml.Name `xml:"ErrorResponse"`
		Xmlns     string   `xml:"xmlns,attr"`
		Type      string   `xml:"Error>Type"`
		Code      string   `xml:"Error>Code"`
		Message   string   `xml:"Error>Message"`
		RequestID string   `xml:"RequestId"`
	}{Xmlns: p.Namespace, Type: fault, Code: e.Code, Message: e.Message, RequestID: requestID})
}

// WriteResult answers action with result as the members of its
// <ActionResult> element, leaving the element out when result is nil, as
// services do for actions without a result.
func (p Query) WriteResult(w http.ResponseWriter, action, requestID string, result any) {
	var buf strings.Builder
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	start := xml.StartElement{Name: xml.Name{Local: action + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: p.Namespace}}}
	err := enc.EncodeToken(start)
	if err == nil && result != nil {
		err = enc.EncodeElement(result, xml.StartElement{Name: xml.Name{Local: action + "Result"}})
	}
	if err == nil {
		meta := struct {
			RequestID string `xml:"RequestId"`
		}{requestID}
		err = enc.EncodeElement(meta, xml.StartElement{Name: xml.Name{Local: "ResponseMetadata"}})
	}
	if err == nil {
		err = enc.EncodeToken(start.End())
	}
	if err == nil {
		err = enc.Flush()
	}
	if err != nil {
		p.WriteError(w, requestID, fmt.Errorf("encoding %s response: %w", action, err))
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	_, _ = w.Write([]byte(buf.String()))
}
