// Command kwokcrds writes the CustomResourceDefinition of kwok's Logs on
// standard output, from the kwok module that is built. The sandbox applies
// it so that kwok (run with --enable-crds=Logs) serves `kubectl logs` for
// the pods whose processes run on the machine, from their log files.
package main

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/kwok/kustomize/crd"
)

func main() {
	if _, err := fmt.Println(strings.TrimSpace(string(crd.Logs))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
