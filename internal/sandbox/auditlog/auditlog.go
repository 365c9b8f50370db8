// Package auditlog counts the API requests in the sandbox's audit log
// (sandbox.AuditLog) by program, of them the writes, and by verb and
// resource, as the scale benchmarks of test/e2e report them.
package auditlog

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SimulatedCloud is the program the simulated cloud's requests are
// counted as. They come with the provisioner's service account, and
// their user agent (simulatedCloudAgent) tells them apart: they play the
// cloud's API, the kubelets and the cloud controller manager, and a
// provisioner on a real cloud makes none of them.
const SimulatedCloud = "simulated-cloud"

// simulatedCloudAgent is the user agent the simulated cloud's clients send
// (the simulated provider's UserAgent; a test holds the two equal, so the
// sandbox names it without importing a provider).
const simulatedCloudAgent = "nodeforge-simulated-cloud"

// Counts are API requests counted in an audit log.
type Counts struct {
	// Total and Writes are by program: the name of the service account,
	// every replica's requests together, or SimulatedCloud.
	Total, Writes map[string]int
	// By is by "program verb resource".
	By map[string]int
}

// Read counts the requests whose answer was complete between from and
// to, in the audit log at path and the files the API server rotated it
// to (at 100 MB, <name>-<time>.log beside it).
func Read(path string, from, to time.Time) (Counts, error) {
	c := Counts{Total: map[string]int{}, Writes: map[string]int{}, By: map[string]int{}}
	rotated, err := filepath.Glob(strings.TrimSuffix(path, ".log") + "-*.log")
	if err != nil {
		return c, err
	}
	for _, p := range append(rotated, path) {
		if err := c.add(p, from, to); err != nil {
			return c, err
		}
	}
	return c, nil
}

// event is the part of an audit.k8s.io/v1 Event that is counted.
type event struct {
	Verb           string
	User           struct{ Username string }
	UserAgent      string
	ObjectRef      *struct{ Resource, Subresource string }
	StageTimestamp metav1.MicroTime
}

// add adds the requests of one audit log file.
func (c Counts) add(path string, from, to time.Time) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	for {
		var ev event
		if err := dec.Decode(&ev); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		at := ev.StageTimestamp.Time
		if at.Before(from) || at.After(to) {
			continue
		}
		program := programOf(ev)
		resource := "(none)"
		if ev.ObjectRef != nil {
			resource = ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				resource += "/" + ev.ObjectRef.Subresource
			}
		}
		c.Total[program]++
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			c.Writes[program]++
		}
		c.By[program+" "+ev.Verb+" "+resource]++
	}
}

// programOf is SimulatedCloud for a request whose user agent's product
// is simulatedCloudAgent (whatever version follows), else the name of
// the service account that made it.
func programOf(ev event) string {
	if product, _, _ := strings.Cut(ev.UserAgent, "/"); product == simulatedCloudAgent {
		return SimulatedCloud
	}
	return ev.User.Username[strings.LastIndexByte(ev.User.Username, ':')+1:]
}

// Top lists the n largest counts by verb and resource, one a line.
func (c Counts) Top(n int) string {
	keys := slices.Collect(maps.Keys(c.By))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(c.By[b], c.By[a]), cmp.Compare(a, b)) })
	var sb strings.Builder
	for _, k := range keys[:min(n, len(keys))] {
		fmt.Fprintf(&sb, "  %6d %s\n", c.By[k], k)
	}
	return sb.String()
}
