package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemContentType is the media type of every error answer (RFC 9457 section 3).
const ProblemContentType = "application/problem+json"

// ProblemTypePrefix starts the problem type URIs (RFC 9457 section 3.1.1, an RFC 4151 tag URI: it names the
// problem without pretending to be a page to fetch). docs/gateway.md lists them.
const ProblemTypePrefix = "tag:actionledger.dev,2026:problem:"

// Problem is an RFC 9457 problem details object with the action's phase and reason as extension members.
type Problem struct {
	// Type is ProblemTypePrefix + a short slug (missing-key, key-reused, in-progress, ...).
	Type string `json:"type"`
	// Title is the short, fixed description of the type.
	Title string `json:"title"`
	// Status is the HTTP status code of the answer.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Instance is the status resource of the action, when there is one.
	Instance string `json:"instance,omitempty"`
	// Phase is the ExternalAction's phase, when there is an action.
	Phase string `json:"phase,omitempty"`
	// Reason is the reason of the action's condition (or the gateway's own reason).
	Reason string `json:"reason,omitempty"`
}

// writeProblem writes p as application/problem+json with status p.Status.
func writeProblem(w http.ResponseWriter, p Problem) {
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", ProblemContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

func problem(status int, slug, title, detail string) Problem {
	return Problem{Type: ProblemTypePrefix + slug, Title: title, Status: status, Detail: detail}
}
