// Package mpioperatorbin only exists so that the go command builds mpi-operator's main package
// (github.com/kubeflow/mpi-operator/cmd/mpi-operator, the tool directive in go.mod) from this module.
package mpioperatorbin
