// Package fingerprint computes the request fingerprint that binds an ExternalAction's idempotency key
// to its payload (DESIGN rule 6).
//
// The fingerprint is "sha256:" + lower-case hex of the SHA-256 of the RFC 8785 (JSON Canonicalization
// Scheme) serialization of the normalized {destinationRef, request, successWhen}. Normalization applies the
// same defaults the API server applies (kind Destination, method POST, path "/") and folds header names to
// lower case, so server-side defaulting, key order and header-name case never change the fingerprint.
package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gowebpki/jcs"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Prefix starts every fingerprint.
const Prefix = "sha256:"

// input is the normalized, fingerprinted part of a spec. Field names are part of the fingerprint: never rename.
type input struct {
	DestinationRef ref     `json:"destinationRef"`
	Request        request `json:"request"`
	SuccessWhen    string  `json:"successWhen,omitempty"`
}

type ref struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

type request struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body,omitempty"`
}

// Compute returns the fingerprint of spec. It fails only when request.body is not valid JSON.
func Compute(spec *actionsv1alpha1.ExternalActionSpec) (string, error) {
	canonical, err := Canonical(spec)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canonical)
	return Prefix + hex.EncodeToString(sum[:]), nil
}

// Canonical returns the RFC 8785 canonical JSON that Compute hashes.
func Canonical(spec *actionsv1alpha1.ExternalActionSpec) ([]byte, error) {
	in := input{
		DestinationRef: ref{Kind: spec.DestinationRef.Kind, Name: spec.DestinationRef.Name},
		Request: request{
			Method: strings.ToUpper(spec.Request.Method),
			Path:   spec.Request.Path,
		},
		SuccessWhen: strings.TrimSpace(spec.SuccessWhen),
	}
	if in.DestinationRef.Kind == "" {
		in.DestinationRef.Kind = "Destination"
	}
	if in.Request.Method == "" {
		in.Request.Method = "POST"
	}
	if in.Request.Path == "" {
		in.Request.Path = "/"
	}
	if len(spec.Request.Headers) > 0 {
		in.Request.Headers = make(map[string]string, len(spec.Request.Headers))
		for k, v := range spec.Request.Headers {
			in.Request.Headers[strings.ToLower(k)] = string(v)
		}
	}
	if spec.Request.Body != nil && len(spec.Request.Body.Raw) > 0 && string(spec.Request.Body.Raw) != "null" {
		body, err := CanonicalBody(spec.Request.Body.Raw)
		if err != nil {
			return nil, err
		}
		in.Request.Body = body
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encoding fingerprint input: %w", err)
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonicalizing fingerprint input (RFC 8785): %w", err)
	}
	return out, nil
}

// CanonicalBody returns the RFC 8785 canonical form of a JSON request body: the exact bytes sent on every attempt.
func CanonicalBody(raw []byte) ([]byte, error) {
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("request.body is not valid JSON for RFC 8785 canonicalization: %w", err)
	}
	return out, nil
}
