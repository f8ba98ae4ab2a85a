// Package k8sbins only exists so that the go command treats this directory as a module
// whose tool directive builds kube-apiserver, kube-controller-manager and kube-scheduler.
package k8sbins
