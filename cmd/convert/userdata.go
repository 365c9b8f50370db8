package main

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"net/textproto"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// The MIME types of the user data parts nodeadm reads on Amazon Linux
// 2023, and Nodeforge's own boundary, which a class's userData may not
// contain (provisioner/cloudprovider/aws, UserData).
const (
	shellScript       = "text/x-shellscript"
	nodeConfig        = "application/node.eks.aws"
	nodeforgeBoundary = "//nodeforge//"
	maxUserData       = 16384
)

// part is one part of the user data.
type part struct {
	contentType string
	body        string
}

// userData converts a class's user data (at path) for images of family.
//
// Karpenter (AL2023) puts each part of MIME user data, or all of it as one
// part (a NodeConfig if it is a YAML object, else a shell script), before
// the NodeConfig it writes. Nodeforge puts its userData, as one part,
// before its own NodeConfig: typed a NodeConfig when it mentions
// node.eks.aws/, a shell script otherwise. So user data of one part whose
// type Nodeforge would give it too converts to that part's body; anything
// else cannot be carried over.
func (c *converter) userData(path *field.Path, s, family string) (string, bool) {
	if family != familyAL2023 && family != familyCustom {
		c.drop(path, fmt.Sprintf("it is written for %s images, and Nodeforge boots Amazon Linux 2023", cmp.Or(family, "other")))
		return "", false
	}
	parts, err := userDataParts(s)
	if err != nil {
		c.drop(path, fmt.Sprintf("it looks like MIME but cannot be read as such (%v); write it as one shell script or one NodeConfig", err))
		return "", false
	}
	if len(parts) == 0 {
		c.carry(s) // nothing to run, in either
		return "", false
	}
	if len(parts) > 1 {
		types := make([]string, len(parts))
		for i, p := range parts {
			types[i] = p.contentType
		}
		c.drop(path, fmt.Sprintf("a MIME document of %d parts (%s); Nodeforge's userData is one part, which it wraps in MIME itself: merge them into one shell script or one NodeConfig", len(parts), strings.Join(types, ", ")))
		return "", false
	}
	p := parts[0]
	nodeforgeType := shellScript
	if strings.Contains(p.body, "node.eks.aws/") {
		nodeforgeType = nodeConfig
	}
	switch {
	case p.contentType != shellScript && p.contentType != nodeConfig:
		c.drop(path, fmt.Sprintf("a part of type %s; Nodeforge's userData is a shell script or a NodeConfig", p.contentType))
	case p.contentType != nodeforgeType:
		c.drop(path, fmt.Sprintf("a %s that Nodeforge would pass to nodeadm as a %s (it takes user data that mentions node.eks.aws/ for a NodeConfig)", p.contentType, nodeforgeType))
	case strings.Contains(p.body, nodeforgeBoundary):
		c.drop(path, fmt.Sprintf("it contains %s, the MIME boundary of Nodeforge's user data", nodeforgeBoundary))
	case len(p.body) > maxUserData:
		c.drop(path, fmt.Sprintf("%d characters; Nodeforge's userData is at most %d", len(p.body), maxUserData))
	default:
		c.carry(s)
		return p.body, true
	}
	return "", false
}

// userDataParts splits user data into its parts as Karpenter does for
// AL2023: MIME if it starts with a MIME header, else one part.
func userDataParts(s string) ([]part, error) {
	trimmed := strings.TrimSpace(s)
	lower := strings.ToLower(trimmed) // header names are not case-sensitive
	if !strings.HasPrefix(lower, "mime-version:") && !strings.HasPrefix(lower, "content-type:") {
		if strings.TrimSpace(s) == "" {
			return nil, nil
		}
		if yaml.Unmarshal([]byte(s), &map[string]any{}) == nil {
			return []part{{contentType: nodeConfig, body: s}}, nil
		}
		return []part{{contentType: shellScript, body: s}}, nil
	}
	msg, err := mail.ReadMessage(strings.NewReader(trimmed + "\n"))
	if err != nil {
		return nil, err
	}
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(mediaType, "multipart/") {
		body, err := decodeBody(textproto.MIMEHeader(msg.Header), msg.Body)
		if err != nil {
			return nil, err
		}
		return []part{{contentType: mediaType, body: body}}, nil
	}
	r := multipart.NewReader(msg.Body, params["boundary"])
	var parts []part
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			return parts, nil
		}
		if err != nil {
			return nil, err
		}
		ct, _, err := mime.ParseMediaType(cmp.Or(p.Header.Get("Content-Type"), "text/plain"))
		if err != nil {
			return nil, err
		}
		body, err := decodeBody(p.Header, p)
		if err != nil {
			return nil, err
		}
		parts = append(parts, part{contentType: ct, body: body})
	}
}

// decodeBody reads a part's body, decoding base64 (quoted-printable the
// multipart reader decodes itself).
func decodeBody(h textproto.MIMEHeader, r io.Reader) (string, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	if strings.EqualFold(h.Get("Content-Transfer-Encoding"), "base64") {
		dec, err := io.ReadAll(base64.NewDecoder(base64.StdEncoding, bytes.NewReader(bytes.Join(bytes.Fields(raw), nil))))
		if err != nil {
			return "", err
		}
		raw = dec
	}
	return strings.TrimRight(string(raw), "\r\n") + "\n", nil
}
