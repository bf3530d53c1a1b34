package admission

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/envtestutil"
)

const (
	oauthExclusive  = "auth.oauth2 sends its own Authorization header: remove auth.bearerToken and auth.basic"
	oauthAuthHeader = "auth.oauth2 sends its own Authorization header: remove the auth.headers entry named Authorization"
	tokenUserinfo   = "auth.oauth2.tokenURL may not contain userinfo"   //nolint:gosec // G101: an error message, not a credential
	tokenFragment   = "auth.oauth2.tokenURL may not contain a fragment" //nolint:gosec // G101: an error message, not a credential
	tokenScheme     = "should match '^https?://[^\\s]+$'"
	paramsReserved  = "auth.oauth2.endpointParams may not set grant_type, scope, client_id, client_secret or audience"
	paramsLong      = "auth.oauth2.endpointParams values must be at most 2048 characters long"
	signingOne      = "signing takes exactly one of signing.standardWebhooks or signing.hmac"
	hmacIdem        = "signing.hmac.header may not be the idempotency header"
	stdIdem         = "idempotency.header may not be webhook-timestamp or webhook-signature with signing.standardWebhooks"
	hmacHeader      = "signing.hmac.header may not be a hop-by-hop or framing header, Authorization, Content-Type or a webhook-* header"
	hmacPayload     = "signing.hmac.payload must be set: KeyTimestampBody"
	hmacTSHeader    = "signing.hmac.timestampHeader may not be a hop-by-hop or framing header"
	hmacTSSame      = "signing.hmac.timestampHeader (default X-Signature-Timestamp) may not be signing.hmac.header"
	hmacTSIdem      = "signing.hmac.timestampHeader (default X-Signature-Timestamp) may not be the idempotency header"
)

func oauth2(mutate func(*actionsv1alpha1.OAuth2ClientCredentials)) *actionsv1alpha1.OAuth2ClientCredentials {
	o := &actionsv1alpha1.OAuth2ClientCredentials{ //nolint:gosec // G101: Secret references, not credentials
		TokenURL:     "https://auth.example/oauth2/token",
		ClientID:     actionsv1alpha1.SecretKeySelector{Name: "oauth", Key: "client-id"},
		ClientSecret: actionsv1alpha1.SecretKeySelector{Name: "oauth", Key: "client-secret"},
	}
	if mutate != nil {
		mutate(o)
	}
	return o
}

// auth.oauth2: a token URL like the base URL (http or https, no userinfo or fragment), bounded scopes and
// parameters that do not override the grant's own, and no second Authorization source.
func TestOAuth2Admission(t *testing.T) {
	ns := env.Namespace(t)
	withAuth := func(a *actionsv1alpha1.AuthConfig) client.Object {
		return destination(ns, func(s *actionsv1alpha1.DestinationSpec) { s.Auth = a })
	}
	withOAuth := func(mutate func(*actionsv1alpha1.OAuth2ClientCredentials)) client.Object {
		return withAuth(&actionsv1alpha1.AuthConfig{OAuth2: oauth2(mutate)})
	}
	sel := &actionsv1alpha1.SecretKeySelector{Name: "t", Key: "k"}
	manyScopes := make([]string, 33)
	manyParams := map[string]string{}
	for i := range manyScopes {
		manyScopes[i] = fmt.Sprintf("s%d", i)
	}
	for i := range 17 {
		manyParams[fmt.Sprintf("p%d", i)] = "v"
	}
	longValue := fmt.Sprintf("%02049d", 0)
	cases := []admissionCase{
		{"oauth2 minimal", withOAuth(nil), ""},
		{"oauth2 full", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) {
			o.Scopes = []string{"orders:write", "https://api.example/.default"}
			o.Audience = "https://api.example"
			o.EndpointParams = map[string]string{"resource": "urn:orders"}
		}), ""},
		{"oauth2 http token URL", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.TokenURL = "http://auth.example/token" }), ""},
		{"oauth2 on a ClusterDestination", clusterDestination(func(s *actionsv1alpha1.DestinationSpec) {
			s.Auth = &actionsv1alpha1.AuthConfig{OAuth2: oauth2(nil)}
		}), ""},
		{"oauth2 with bearerToken", withAuth(&actionsv1alpha1.AuthConfig{OAuth2: oauth2(nil), BearerToken: sel}), oauthExclusive},
		{"oauth2 with basic", withAuth(&actionsv1alpha1.AuthConfig{OAuth2: oauth2(nil), Basic: &actionsv1alpha1.SecretReference{Name: "b"}}), oauthExclusive},
		{"oauth2 with an Authorization header", withAuth(&actionsv1alpha1.AuthConfig{OAuth2: oauth2(nil),
			Headers: []actionsv1alpha1.HeaderFromSecret{{Name: "authorization", ValueFrom: *sel}}}), oauthAuthHeader},
		{"oauth2 with an API key header", withAuth(&actionsv1alpha1.AuthConfig{OAuth2: oauth2(nil),
			Headers: []actionsv1alpha1.HeaderFromSecret{{Name: "X-Api-Key", ValueFrom: *sel}}}), ""},
		{"token URL ftp", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.TokenURL = "ftp://auth.example/token" }), tokenScheme},
		{"token URL relative", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.TokenURL = "/oauth2/token" }), tokenScheme},
		{"token URL with userinfo", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) {
			o.TokenURL = "https://client:secret@auth.example/token"
		}), tokenUserinfo},
		{"token URL with fragment", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.TokenURL = "https://auth.example/token#x" }), tokenFragment},
		{"token URL with @ in the query", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) {
			o.TokenURL = "https://auth.example/token?tenant=a@b"
		}), ""},
		{"no client secret", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.ClientSecret = actionsv1alpha1.SecretKeySelector{} }),
			"clientSecret.name"},
		{"scope with a space", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.Scopes = []string{"orders write"} }), "scopes[0]"},
		{"scope with a quote", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.Scopes = []string{`say"hi"`} }), "scopes[0]"},
		{"empty scope", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.Scopes = []string{""} }), "scopes[0]"},
		{"33 scopes", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.Scopes = manyScopes }), "must have at most 32 items"},
		{"endpointParams grant_type", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) {
			o.EndpointParams = map[string]string{"grant_type": "password"}
		}), paramsReserved},
		{"endpointParams scope", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) {
			o.EndpointParams = map[string]string{"scope": "all"}
		}), paramsReserved},
		{"endpointParams audience", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) {
			o.EndpointParams = map[string]string{"audience": "x"}
		}), paramsReserved},
		{"17 endpointParams", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) { o.EndpointParams = manyParams }),
			"must have at most 16 items"},
		{"endpointParams value too long", withOAuth(func(o *actionsv1alpha1.OAuth2ClientCredentials) {
			o.EndpointParams = map[string]string{"resource": longValue}
		}), paramsLong},
	}
	run(t, cases)
}

// signing: exactly one kind; an HMAC header of its own, a known algorithm and a printable prefix.
func TestSigningAdmission(t *testing.T) {
	ns := env.Namespace(t)
	sel := actionsv1alpha1.SecretKeySelector{Name: "sig", Key: "secret"}
	withSigning := func(sc *actionsv1alpha1.SigningConfig) client.Object {
		return destination(ns, func(s *actionsv1alpha1.DestinationSpec) { s.Signing = sc })
	}
	withHMAC := func(mutate func(*actionsv1alpha1.HMACSigning)) client.Object {
		h := &actionsv1alpha1.HMACSigning{Header: "X-Hub-Signature-256", SecretRef: sel, Prefix: "sha256=",
			Payload: actionsv1alpha1.HMACPayloadKeyTimestampBody}
		if mutate != nil {
			mutate(h)
		}
		return withSigning(&actionsv1alpha1.SigningConfig{HMAC: h})
	}
	std := &actionsv1alpha1.StandardWebhooksSigning{SecretRef: sel}
	cases := []admissionCase{
		{"standardWebhooks", withSigning(&actionsv1alpha1.SigningConfig{StandardWebhooks: std}), ""},
		{"standardWebhooks on a ClusterDestination", clusterDestination(func(s *actionsv1alpha1.DestinationSpec) {
			s.Signing = &actionsv1alpha1.SigningConfig{StandardWebhooks: std}
		}), ""},
		{"standardWebhooks without secretRef", withSigning(&actionsv1alpha1.SigningConfig{StandardWebhooks: &actionsv1alpha1.StandardWebhooksSigning{}}),
			"secretRef.name"},
		{"hmac sha256 with prefix", withHMAC(nil), ""},
		{"hmac sha512", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Algorithm = actionsv1alpha1.HMACSHA512; h.Prefix = "" }), ""},
		{"both kinds", withSigning(&actionsv1alpha1.SigningConfig{StandardWebhooks: std,
			HMAC: &actionsv1alpha1.HMACSigning{Header: "X-Signature", SecretRef: sel, Payload: actionsv1alpha1.HMACPayloadBody}}), signingOne},
		{"no kind", withSigning(&actionsv1alpha1.SigningConfig{}), signingOne},
		{"hmac header Authorization", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Header = "Authorization" }), hmacHeader},
		{"hmac header webhook-signature", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Header = "Webhook-Signature" }), hmacHeader},
		{"hmac header Content-Length", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Header = "content-length" }), hmacHeader},
		{"hmac header with a space", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Header = "X Signature" }), tokenName},
		{"hmac without header", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Header = "" }), "signing.hmac.header"},
		{"hmac md5", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Algorithm = "md5" }), `supported values: "sha256", "sha512"`},
		{"hmac header is the default idempotency header", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Header = "idempotency-key" }), hmacIdem},
		{"hmac header is the idempotency header", destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Header: "X-Request-Key"}
			s.Signing = &actionsv1alpha1.SigningConfig{HMAC: &actionsv1alpha1.HMACSigning{Header: "x-request-key", SecretRef: sel,
				Payload: actionsv1alpha1.HMACPayloadBody}}
		}), hmacIdem},
		{"hmac header Idempotency-Key with another idempotency header", destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Header: "X-Request-Key"}
			s.Signing = &actionsv1alpha1.SigningConfig{HMAC: &actionsv1alpha1.HMACSigning{Header: "Idempotency-Key", SecretRef: sel,
				Payload: actionsv1alpha1.HMACPayloadKeyTimestampBody}}
		}), ""},
		{"standardWebhooks with idempotency header webhook-signature", destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Header: "Webhook-Signature"}
			s.Signing = &actionsv1alpha1.SigningConfig{StandardWebhooks: std}
		}), stdIdem},
		{"standardWebhooks with idempotency header webhook-id", destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Header: "webhook-id"}
			s.Signing = &actionsv1alpha1.SigningConfig{StandardWebhooks: std}
		}), ""},
		{"hmac prefix with a space", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Prefix = "sha256 =" }), "signing.hmac.prefix"},
		// Row 7 of issue 23: a new signing.hmac says what it signs; the timestamp has a header of its own.
		{"hmac without payload", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Payload = "" }), hmacPayload},
		{"hmac payload Body", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Payload = actionsv1alpha1.HMACPayloadBody }), ""},
		{"hmac payload Key", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Payload = "Key" }),
			`supported values: "KeyTimestampBody", "Body"`},
		{"hmac timestampHeader", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.TimestampHeader = "X-Hub-Timestamp" }), ""},
		{"hmac timestampHeader Authorization", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.TimestampHeader = "authorization" }), hmacTSHeader},
		{"hmac timestampHeader is the header", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.TimestampHeader = "x-hub-signature-256" }), hmacTSSame},
		{"hmac header is the default timestampHeader", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.Header = actionsv1alpha1.DefaultHMACTimestampHeader }), hmacTSSame},
		{"hmac header is the default timestampHeader with payload Body", withHMAC(func(h *actionsv1alpha1.HMACSigning) {
			h.Header, h.Payload = actionsv1alpha1.DefaultHMACTimestampHeader, actionsv1alpha1.HMACPayloadBody
		}), ""},
		{"hmac timestampHeader is the default idempotency header", withHMAC(func(h *actionsv1alpha1.HMACSigning) { h.TimestampHeader = "Idempotency-Key" }), hmacTSIdem},
		{"hmac default timestampHeader is the idempotency header", destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Header: "x-signature-timestamp"}
			s.Signing = &actionsv1alpha1.SigningConfig{HMAC: &actionsv1alpha1.HMACSigning{Header: "X-Signature", SecretRef: sel,
				Payload: actionsv1alpha1.HMACPayloadKeyTimestampBody}}
		}), hmacTSIdem},
	}
	run(t, cases)
}

// The OAuth2 and signing samples in config/samples are accepted as they are.
func TestAuthSamplesAreAccepted(t *testing.T) {
	ns := env.Namespace(t)
	var cases []admissionCase
	for _, f := range []string{"actions_v1alpha1_destination_oauth2.yaml", "actions_v1alpha1_destination_signed.yaml"} {
		raw, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "samples", f))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			u.SetNamespace(ns)
			cases = append(cases, admissionCase{name: f + "/" + u.GetKind() + "/" + u.GetName(), obj: u})
		}
	}
	if len(cases) != 5 {
		t.Fatalf("%d objects in the samples, want 5", len(cases))
	}
	run(t, cases)
}
