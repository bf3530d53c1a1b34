package httpexec

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Signer adds a signature over one request to its header. Implementations are pure and safe for concurrent
// use; a request is signed anew for each attempt.
type Signer interface {
	// Sign sets the signature headers of a request whose body is exactly body (nil: no body), whose
	// message id is id (the idempotency key) and which is signed at now.
	Sign(h http.Header, id string, body []byte, now time.Time) error
}

// StandardWebhooks signs as the Standard Webhooks specification defines (https://www.standardwebhooks.com,
// "Signature scheme"): webhook-id is the message id, webhook-timestamp the signing time in Unix seconds, and
// webhook-signature "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)). The signature is
// made by the specification's own Go library.
type StandardWebhooks struct {
	wh *standardwebhooks.Webhook
}

// NewStandardWebhooks returns a signer for secret: base64 (standard encoding, with padding) of the key bytes,
// optionally prefixed with "whsec_", as the specification's libraries accept it. The error never contains
// the secret.
func NewStandardWebhooks(secret string) (*StandardWebhooks, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, errors.New("the Standard Webhooks secret is not base64 (optionally prefixed with whsec_)")
	}
	return &StandardWebhooks{wh: wh}, nil
}

// Sign sets webhook-id, webhook-timestamp and webhook-signature.
func (s *StandardWebhooks) Sign(h http.Header, id string, body []byte, now time.Time) error {
	sig, err := s.wh.Sign(id, now, body)
	if err != nil {
		return fmt.Errorf("signing the request (Standard Webhooks): %w", err)
	}
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return nil
}

// HMAC puts prefix + lower-case hex(HMAC(key, payload)) (RFC 2104) into one header. With KeyAndTime the payload
// is id + "." + unix seconds + "." + body, the string Standard Webhooks signs (https://www.standardwebhooks.com,
// "Signature scheme"), and the unix seconds (decimal) go into the timestamp header, so that a signature binds
// the idempotency key and the signing time as well as the body; without it the payload is the body only, as
// GitHub's X-Hub-Signature-256 ("sha256=<hex>") is. The body is the exact bytes sent, empty for a request
// without one.
type HMAC struct {
	header, prefix string
	// timestampHeader is where the signing time goes; "" signs the body only.
	timestampHeader string
	key             []byte
	hash            func() hash.Hash
}

// HMACOptions shapes an HMAC signer. Header is the signature's header; Algorithm "sha256" (also for "") or
// "sha512"; Prefix goes before the hex digest; TimestampHeader, when not empty, selects the key-and-time payload
// and is the header of the signing time (empty: the body only, the weaker form).
type HMACOptions struct {
	Header, Algorithm, Prefix, TimestampHeader string
}

// NewHMAC returns an HMAC signer with key (copied) as the HMAC key.
func NewHMAC(o HMACOptions, key []byte) (*HMAC, error) {
	s := &HMAC{header: o.Header, prefix: o.Prefix, timestampHeader: o.TimestampHeader, key: append([]byte(nil), key...)}
	switch o.Algorithm {
	case "", "sha256":
		s.hash = sha256.New
	case "sha512":
		s.hash = sha512.New
	default:
		return nil, fmt.Errorf("unknown HMAC algorithm %q: use sha256 or sha512", o.Algorithm)
	}
	return s, nil
}

// Sign sets the signature header, and with the key-and-time payload the timestamp header (now in Unix
// seconds); id is the idempotency key as sent.
func (s *HMAC) Sign(h http.Header, id string, body []byte, now time.Time) error {
	m := hmac.New(s.hash, s.key)
	if s.timestampHeader != "" {
		ts := strconv.FormatInt(now.Unix(), 10)
		_, _ = m.Write([]byte(id + "." + ts + "."))
		h.Set(s.timestampHeader, ts)
	}
	_, _ = m.Write(body)
	h.Set(s.header, s.prefix+hex.EncodeToString(m.Sum(nil)))
	return nil
}
