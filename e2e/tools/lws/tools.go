// Package lwsbin only exists so that the go command builds the LeaderWorkerSet controller manager
// (sigs.k8s.io/lws/cmd, the tool directive in go.mod) from this module.
package lwsbin
