// Package schedulerpluginsbin only exists so that the go command builds scheduler-plugins' scheduler
// (sigs.k8s.io/scheduler-plugins/cmd/scheduler, the tool directive in go.mod) from this module.
package schedulerpluginsbin
