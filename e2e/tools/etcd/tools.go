// Package etcdbin only exists so that the go command builds etcd's server main from this module.
package etcdbin
