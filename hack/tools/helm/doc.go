// Package helm pins Helm, which lints and renders Nodeforge's chart
// (manifests/) in the tests and in the sandbox, in a module of its own: its
// Kubernetes libraries are newer than kwok's, and sharing hack/tools'
// module would move kwok's.
package helm
