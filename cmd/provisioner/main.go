// Command nodeforge-provisioner turns NodeClaims into instances, adopts
// their nodes and disrupts nodes safely (package app). Every flag can also
// be set from the environment: --cloud-provider from
// NODEFORGE_CLOUD_PROVIDER, and so on.
package main

import "github.com/nodeforge/nodeforge/cmd/provisioner/app"

func main() { app.Main() }
