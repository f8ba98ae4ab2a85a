// Package trainingoperatorbin only exists so that the go command builds the Kubeflow
// training-operator's main package (the tool directive in go.mod) from this module.
package trainingoperatorbin
