//go:build tools

// Package tools pins the Kubernetes commands built by hack/build-controlplane.sh: kube-apiserver
// and kubectl for envtest, and (CLUSTER=1) kubelet, kube-controller-manager and kube-scheduler
// for the real single-node cluster of hack/cluster.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
