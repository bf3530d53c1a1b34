// Package admission tests what the API server itself refuses through the CRDs' OpenAPI and CEL rules
// (api/v1alpha1, bounds in limits.go): request and post-check paths that would leave the destination's base
// URL, base URLs with dot segments, durations beyond their documented maxima, header names that are not RFC 9110
// tokens or are hop-by-hop, header values with control characters or over 8 KiB, and ClusterDestination keys
// without {namespace}. Each bad input is refused with a message that says what to change; each near miss is
// accepted. The tests run against a real kube-apiserver and etcd (envtest) with server-side dry-run creates.
package admission
