package app

import (
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// inClusterNamespaceFile holds the pod's namespace (the ServiceAccount token volume), where the leader Lease lives
// when --leader-election-namespace is not set, as controller-runtime reads it.
var inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaderElectionTimeout is the timeout of the leader-election client's requests: controller-runtime's
// max(RenewDeadline/2, 1 s) with its default RenewDeadline of 10 s, so one hung request never costs the lease.
const leaderElectionTimeout = 5 * time.Second

// LeaderIdentity returns the leader Lease's holder identity for pod: "<pod>_<uuid>", the form controller-runtime
// gives "<host name>_<uuid>".
func LeaderIdentity(pod string) string { return pod + "_" + string(uuid.NewUUID()) }

// leaderLock returns the leader-election lock of a manager in a pod ($POD_NAME set: config/manager and the chart
// set it from the downward API): a Lease named id whose holder identity names the pod (LeaderIdentity).
// controller-runtime names the host instead (os.Hostname), which on the node's network (hostNetwork: true) is the
// node's name for every replica, so `kubectl get lease` could not say which pod leads. nil (controller-runtime's
// own lock) without leader election or without $POD_NAME. The lock records no Events ("became leader"), which
// controller-runtime's does; the Lease and the manager's log say the same.
func leaderLock(cfg *rest.Config, o Options, id string) (resourcelock.Interface, error) {
	pod := os.Getenv(PodNameEnv)
	if !o.LeaderElection || pod == "" {
		return nil, nil
	}
	ns := o.LeaderElectionNamespace
	if ns == "" {
		b, err := os.ReadFile(inClusterNamespaceFile)
		if err != nil {
			return nil, fmt.Errorf("finding the leader election namespace (set --leader-election-namespace): %w", err)
		}
		ns = strings.TrimSpace(string(b))
	}
	c := rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	c.Timeout = leaderElectionTimeout
	coord, err := coordinationv1client.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("creating the leader election client: %w", err)
	}
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: id},
		Client:     coord,
		LockConfig: resourcelock.ResourceLockConfig{Identity: LeaderIdentity(pod)},
	}, nil
}
