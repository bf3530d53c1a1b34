// Package gateway is actionledger's HTTP front door ("actionledger gateway"): it turns a request carrying an
// Idempotency-Key (draft-ietf-httpapi-idempotency-key-header) into an ExternalAction and answers with the
// action's recorded outcome. It holds no state of its own, so any number of replicas can serve the same keys:
// the ledger is the ExternalAction (and its ActionTombstone), and the API server's atomic create is the
// reservation of a key.
//
// Routes (docs/gateway.md has the full answer table and curl examples):
//
//	POST|PUT|PATCH|DELETE /v1/namespaces/{namespace}/destinations/{name}/{path...}
//	POST|PUT|PATCH|DELETE /v1/namespaces/{namespace}/clusterdestinations/{name}/{path...}
//	GET                   /v1/namespaces/{namespace}/actions/{name}
//	GET                   /healthz, /readyz (no authentication)
//
// A request is handled in this order:
//
//  1. The bearer token is authenticated with a TokenReview, through k8s.io/apiserver's delegating
//     authenticator (decisions cached briefly); nothing of the token is parsed here.
//  2. The key is parsed (ParseKey) and the body read (at most MaxBodyBytes, JSON); the spec the request
//     would create is built and fingerprinted with internal/fingerprint, exactly as the controller does.
//     Nothing is read from the cluster yet, so none of these answers depends on whether the key exists.
//  3. The caller is authorized for "get externalactions" on the key's object (ObjectName) with a
//     SubjectAccessReview (the delegating authorizer, cached briefly), before any cache or tombstone read:
//     every later answer can carry a recorded outcome, and a caller who may not get receives the same
//     bytes for a known and an unknown key.
//  4. The key's object is looked up in the informer cache, then its tombstone. Found: the fingerprint
//     decides between a replay, 409 and 422. Not found: the gateway creates the object as the caller
//     (constrained impersonation, ImpersonatingConfig), so the API server's RBAC decides whether the caller
//     may create (no SubjectAccessReview for it), its admission sees the caller (the requested-by
//     annotation is set from request.userInfo by config/admission/requested_by_policy.yaml) and its audit
//     log names the caller. The create is the reservation: AlreadyExists means another request (maybe on
//     another replica) holds the key, and the request continues as a repeat, read live from the API
//     server, again as the caller. A new object may still be answered from a tombstone the gateway does not
//     see (the controller's replay, e.g. from the PostgreSQL store), which is why get is asked of every
//     request and not only of repeats.
//  5. The request that created the object waits for a terminal phase (Prefer: wait, RFC 7240) on the
//     informer's events, never by polling, and answers the outcome, or 202 with the status resource.
//
// Every error is an RFC 9457 problem (application/problem+json) naming the action's phase and reason.
package gateway
