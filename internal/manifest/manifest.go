// Package manifest reads the ExternalActions out of a manifest file as kubectl would: every document of a
// multi-document YAML stream (separated by "---") or a JSON stream, and the items of any List kind
// (v1 List, ExternalActionList), recursively. Everything that is not an ExternalAction is reported as
// skipped, with its kind, name and the reason, so that a caller can say what it did not look at.
//
// Documents are split and converted to JSON by k8s.io/apimachinery/pkg/util/yaml (the reader kubectl and
// client-go use); each ExternalAction is then decoded strictly (an unknown field is an error, as the API
// server's strict field validation would report it).
package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Skipped is one object of the file that is not an ExternalAction, or an ExternalAction that could not be
// decoded (Err is then set).
type Skipped struct {
	// Document is the 1-based position of the document among the non-empty documents of the stream; items of a
	// List share their List's number.
	Document int
	// Kind and Name are the object's kind and metadata.name as written (either may be empty).
	Kind, Name string
	// Reason says why it was skipped, in words.
	Reason string
	// Err is set when an ExternalAction (or the document itself) could not be decoded.
	Err error
}

// String renders the entry as "Kind/name (document N): reason".
func (s Skipped) String() string {
	id := s.Kind
	if id == "" {
		id = `kind ""`
	}
	if s.Name != "" {
		id += "/" + s.Name
	}
	return fmt.Sprintf("%s (document %d): %s", id, s.Document, s.Reason)
}

// Result is what Read found, in file order.
type Result struct {
	Actions []*actionsv1alpha1.ExternalAction
	Skipped []Skipped
}

// Invalid reports whether some document or ExternalAction could not be decoded.
func (r *Result) Invalid() bool {
	for _, s := range r.Skipped {
		if s.Err != nil {
			return true
		}
	}
	return false
}

// maxListDepth bounds nested Lists (a List of Lists is legal but rare; this stops a pathological file).
const maxListDepth = 8

type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

// Read decodes every document of r. It fails only when the stream itself cannot be split into documents
// (a YAML or JSON syntax error); the documents read before the error are returned with the error.
func Read(r io.Reader) (*Result, error) {
	res := &Result{}
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return res, nil
			}
			return res, fmt.Errorf("document %d is not valid YAML or JSON: %w", doc, err)
		}
		res.add(doc, raw, 0)
	}
}

func (r *Result) add(doc int, raw json.RawMessage, depth int) {
	if s := strings.TrimSpace(string(raw)); s == "" || s == "null" {
		return // an empty document, such as a trailing "---"
	}
	var h header
	if err := json.Unmarshal(raw, &h); err != nil {
		r.Skipped = append(r.Skipped, Skipped{Document: doc, Reason: "not a Kubernetes object: " + err.Error(), Err: err})
		return
	}
	switch {
	case h.Kind == "ExternalAction":
		xa := &actionsv1alpha1.ExternalAction{}
		if err := yaml.UnmarshalStrict(raw, xa); err != nil {
			r.Skipped = append(r.Skipped, Skipped{Document: doc, Kind: h.Kind, Name: h.Metadata.Name,
				Reason: "not a valid ExternalAction: " + err.Error(), Err: err})
			return
		}
		if h.APIVersion != "" && h.APIVersion != actionsv1alpha1.GroupVersion.String() {
			r.Skipped = append(r.Skipped, Skipped{Document: doc, Kind: h.Kind, Name: h.Metadata.Name,
				Reason: fmt.Sprintf("apiVersion %q, want %s", h.APIVersion, actionsv1alpha1.GroupVersion)})
			return
		}
		r.Actions = append(r.Actions, xa)
	case strings.HasSuffix(h.Kind, "List") && h.Items != nil:
		if depth >= maxListDepth {
			r.Skipped = append(r.Skipped, Skipped{Document: doc, Kind: h.Kind, Reason: "Lists nested too deeply"})
			return
		}
		for _, item := range h.Items {
			r.add(doc, item, depth+1)
		}
	default:
		r.Skipped = append(r.Skipped, Skipped{Document: doc, Kind: h.Kind, Name: h.Metadata.Name,
			Reason: "not an ExternalAction"})
	}
}
