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
//  1. The bearer token is authenticated with a TokenReview and the caller authorized with a
//     SubjectAccessReview, both through k8s.io/apiserver's delegating authenticator and authorizer (the
//     decisions are cached briefly); nothing of the token is parsed here.
//  2. The key is parsed (ParseKey) and the body read (at most MaxBodyBytes, JSON); the spec the request
//     would create is built and fingerprinted with internal/fingerprint, exactly as the controller does.
//  3. The key's object (ObjectName) is looked up in the informer cache, then its tombstone. Found: the
//     caller needs "get externalactions", and the fingerprint decides between a replay, 409 and 422.
//     Not found: the caller needs "create externalactions" and the gateway creates the object. The create
//     is the reservation: AlreadyExists means another request (maybe on another replica) holds the key,
//     and the request continues as a repeat, read live from the API server.
//  4. The request that created the object waits for a terminal phase (Prefer: wait, RFC 7240) on the
//     informer's events, never by polling, and answers the outcome, or 202 with the status resource.
//
// Every error is an RFC 9457 problem (application/problem+json) naming the action's phase and reason.
package gateway
