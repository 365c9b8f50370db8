// Command nodeforge-convert turns Karpenter v1 NodePools (karpenter.sh/v1),
// EC2NodeClasses (karpenter.k8s.aws/v1) and NodeOverlays
// (karpenter.sh/v1alpha1) into Nodeforge's
// (nodeforge.dev/v1alpha1), for a cluster moving from Karpenter. It reads
// YAML from the files named (or standard input), writes the converted
// objects to standard output, and every field it could not carry over, and
// why, to standard error. It is exact or loud: each field, at any depth,
// is converted into one Nodeforge acts on in the same way, or reported by
// its path; an object Nodeforge could not use at all (an EC2NodeClass of
// Bottlerocket images, say) is reported and not written. It exits 0 when
// everything was carried over, 3 when something was left behind (the
// output is still written), and 1 on an error.
//
// It is a binary of its own, not a subcommand of nodeforge-sandbox, so
// that a cluster operator needs neither the sandbox nor its Kubernetes
// components to use it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nodeforge-convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: nodeforge-convert [FILE...] > nodeforge.yaml\n\nConverts Karpenter v1 NodePools and EC2NodeClasses, and v1alpha1 NodeOverlays, to Nodeforge's; reports every field left behind on standard error (exit 3).")
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 1
	}
	inputs := []io.Reader{stdin}
	if fs.NArg() > 0 {
		inputs = nil
		for _, name := range fs.Args() {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			defer f.Close()
			inputs = append(inputs, f)
		}
	}
	left := 0
	for i, in := range inputs {
		res, err := Convert(in)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if i > 0 && len(res.Out) > 0 {
			fmt.Fprintln(stdout, "---")
		}
		if _, err := stdout.Write(res.Out); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		for _, d := range res.Dropped {
			fmt.Fprintln(stderr, d)
		}
		left += len(res.Dropped)
	}
	if left > 0 {
		fmt.Fprintf(stderr, "%d field(s) not carried over\n", left)
		return 3
	}
	return 0
}
