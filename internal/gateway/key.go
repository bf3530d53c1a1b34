package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxKeyLength bounds the Idempotency-Key value, in bytes, after unquoting.
const MaxKeyLength = 255

// HashedNamePrefix starts the object name of a key that is not itself a valid object name.
const HashedNamePrefix = "k-"

var errNoKey = errors.New("the Idempotency-Key header is missing")

// ParseKey returns the idempotency key carried by the Idempotency-Key header values (at most one).
//
// The header is an RFC 9651 (Structured Field Values) sf-string, as draft-ietf-httpapi-idempotency-key-header
// section 2 defines it: a quoted string of printable ASCII (0x20-0x7E) in which only \" and \\ are escapes.
// A bare RFC 9110 token (section 5.6.2) is accepted as well, since many clients send one. Parameters (";x=y")
// are not allowed. The key is 1 to MaxKeyLength bytes. Errors say what is wrong, for a 400 answer.
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", errNoKey
	case 1:
	default:
		return "", errors.New("the Idempotency-Key header appears more than once; send one key")
	}
	v := strings.TrimSpace(values[0])
	if v == "" {
		return "", errNoKey
	}
	var key string
	if v[0] == '"' {
		k, err := parseSFString(v)
		if err != nil {
			return "", err
		}
		key = k
	} else {
		for i := 0; i < len(v); i++ {
			if !isTChar(v[i]) {
				return "", fmt.Errorf("the Idempotency-Key is neither a quoted string nor a token: character %q at %d "+
					"is not allowed; quote the key (\"...\") or use letters, digits and -._~", v[i], i)
			}
		}
		key = v
	}
	if key == "" {
		return "", errors.New("the Idempotency-Key is empty")
	}
	if len(key) > MaxKeyLength {
		return "", fmt.Errorf("the Idempotency-Key is %d bytes, more than %d", len(key), MaxKeyLength)
	}
	if IsHashedName(key) {
		return "", fmt.Errorf("the Idempotency-Key has the form of a hashed object name (%s and 32 lower-case hex "+
			"digits), which the gateway reserves for keys that are not object names; use another key", HashedNamePrefix)
	}
	return key, nil
}

// hashedNameLength is the length of a name ObjectName hashes: HashedNamePrefix and 32 hex digits.
const hashedNameLength = len(HashedNamePrefix) + 32

// IsHashedName reports whether s has the form ObjectName gives a key that is not an object name:
// HashedNamePrefix followed by exactly 32 lower-case hex digits. ParseKey refuses such a key, so that no caller
// can name, by spelling its hash, the ExternalAction of another caller's key.
func IsHashedName(s string) bool {
	if len(s) != hashedNameLength || !strings.HasPrefix(s, HashedNamePrefix) {
		return false
	}
	for i := len(HashedNamePrefix); i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}

// parseSFString parses a whole RFC 9651 section 4.2.5 sf-string.
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", errors.New(`the quoted Idempotency-Key has an invalid escape: only \" and \\ are allowed`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", errors.New("the quoted Idempotency-Key has characters after its closing quote " +
					"(parameters are not allowed)")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("the quoted Idempotency-Key contains byte 0x%02x: only printable ASCII is allowed", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("the quoted Idempotency-Key has no closing quote")
}

// isTChar reports whether c is an RFC 9110 section 5.6.2 tchar.
func isTChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// ObjectName returns the ExternalAction name for key: the key itself when it is a valid Kubernetes object name
// (an RFC 1123 subdomain of at most 253 characters, validation.IsDNS1123Subdomain), else HashedNamePrefix plus
// the first 32 hex digits (128 bits) of the key's SHA-256. The key itself is kept in AnnotationKey.
func ObjectName(key string) string {
	if len(validation.IsDNS1123Subdomain(key)) == 0 {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return HashedNamePrefix + hex.EncodeToString(sum[:])[:32]
}
