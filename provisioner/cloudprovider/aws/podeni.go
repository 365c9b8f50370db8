package aws

import (
	_ "embed"
	"strconv"
	"strings"
	"sync"
)

//go:embed podeni.txt
var podENITable string

var (
	podENIOnce sync.Once
	podENIs    map[string]int64
)

// branchENIs is how many pods with security groups of their own a node of
// the type holds (vpc.amazonaws.com/pod-eni), 0 for a type that cannot
// trunk. The VPC resource controller advertises it from its own table, as
// EC2's API does not publish it; podeni.txt holds that table's figures.
func branchENIs(instanceType string) int64 {
	podENIOnce.Do(func() {
		podENIs = map[string]int64{}
		for _, line := range strings.Split(podENITable, "\n") {
			name, n, ok := strings.Cut(strings.TrimSpace(line), " ")
			if !ok || strings.HasPrefix(name, "#") {
				continue
			}
			if v, err := strconv.ParseInt(n, 10, 64); err == nil {
				podENIs[name] = v
			}
		}
	})
	return podENIs[instanceType]
}
