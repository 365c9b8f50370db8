// Package tools pins the developer tools Nodeforge builds from source in a
// module of their own, so their dependency versions never leak into the
// binaries that ship: controller-gen (make generate) and kwok (the sandbox's
// node and pod simulator).
package tools
