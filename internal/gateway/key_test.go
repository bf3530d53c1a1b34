package gateway

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("a", MaxKeyLength)
	cases := []struct {
		name    string
		values  []string
		want    string
		wantErr string
	}{
		{"absent", nil, "", "missing"},
		{"empty", []string{"  "}, "", "missing"},
		{"sf-string", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{"sf-string with space and escapes", []string{`"order 19 \"a\" \\ b"`}, `order 19 "a" \ b`, ""},
		{"bare token", []string{"order-19.v2"}, "order-19.v2", ""},
		{"token with tchars", []string{"A_b~c!#$%&'*+^`|"}, "A_b~c!#$%&'*+^`|", ""},
		{"twice", []string{"a", "b"}, "", "more than once"},
		{"unterminated", []string{`"abc`}, "", "no closing quote"},
		{"parameters", []string{`"abc";x=1`}, "", "after its closing quote"},
		{"bad escape", []string{`"a\nb"`}, "", "invalid escape"},
		{"control char", []string{"\"a\x01b\""}, "", "printable ASCII"},
		{"non-ascii", []string{"\"caf\xc3\xa9\""}, "", "printable ASCII"},
		{"space in token", []string{"a b"}, "", "neither a quoted string nor a token"},
		{"empty quoted", []string{`""`}, "", "empty"},
		{"longest", []string{long}, long, ""},
		{"too long", []string{long + "a"}, "", "more than 255"},
		// A co-worker's non-name key "Order 19" is stored under ObjectName("Order 19"); spelling that name as a key
		// must not reach its action (the tenancy issue's row 9).
		{"a hashed name", []string{ObjectName("Order 19")}, "", "reserves"},
		{"a hashed name, quoted", []string{`"` + ObjectName("Order 19") + `"`}, "", "reserves"},
		{"k- and 31 hex digits", []string{ObjectName("Order 19")[:33]}, ObjectName("Order 19")[:33], ""},
		{"k- and 32 upper-case hex digits", []string{strings.ToUpper(ObjectName("Order 19"))}, strings.ToUpper(ObjectName("Order 19")), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseKey(c.values)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("ParseKey(%q) = %q, %v; want an error containing %q", c.values, got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", c.values, got, err, c.want)
			}
		})
	}
}

// Every hashed name is reserved, and a key ParseKey accepts never has a hashed name's form.
func TestIsHashedName(t *testing.T) {
	for _, key := range []string{"Order-19", "order 19", "-x", strings.Repeat("a", 254)} {
		if n := ObjectName(key); !IsHashedName(n) {
			t.Errorf("IsHashedName(ObjectName(%q) = %q) = false", key, n)
		}
	}
	for _, s := range []string{"order-19", "k-", "k-0123456789abcdef0123456789abcdeg", "k-0123456789abcdef0123456789abcdef0", "x-0123456789abcdef0123456789abcdef"} {
		if IsHashedName(s) {
			t.Errorf("IsHashedName(%q) = true", s)
		}
	}
}

// holdsKey: an object under a hashed name answers only the key it was made for.
func TestHoldsKey(t *testing.T) {
	named := ObjectName("Order 19")
	mk := func(name, annotated string) *actionsv1alpha1.ExternalAction {
		xa := &actionsv1alpha1.ExternalAction{}
		xa.Name = name
		if annotated != "" {
			xa.Annotations = map[string]string{AnnotationKey: annotated}
		}
		return xa
	}
	cases := []struct {
		xa   *actionsv1alpha1.ExternalAction
		key  string
		want bool
	}{
		{mk("order-19", ""), "order-19", true},               // kubectl-made, the key is the name
		{mk("order-19", "order-19"), "order-19", true},       // gateway-made
		{mk(named, "Order 19"), "Order 19", true},            // gateway-made under a hashed name
		{mk(named, ""), "Order 19", false},                   // made by other means under that hashed name
		{mk(named, "order 19 (another)"), "Order 19", false}, // made for another key
	}
	for _, c := range cases {
		if got := holdsKey(c.xa, c.key); got != c.want {
			t.Errorf("holdsKey(%s annotated %q, %q) = %v, want %v", c.xa.Name, c.xa.Annotations[AnnotationKey], c.key, got, c.want)
		}
	}
}

func TestObjectName(t *testing.T) {
	cases := map[string]string{
		"order-19":    "order-19",
		"a.b.c":       "a.b.c",
		"Order-19":    "k-",
		"order 19":    "k-",
		"-x":          "k-",
		"8e03978e-40": "8e03978e-40",
	}
	for key, want := range cases {
		got := ObjectName(key)
		if want == "k-" {
			if !strings.HasPrefix(got, "k-") || len(got) != 34 {
				t.Errorf("ObjectName(%q) = %q, want k- and 32 hex digits", key, got)
			}
			continue
		}
		if got != want {
			t.Errorf("ObjectName(%q) = %q, want %q", key, got, want)
		}
	}
	// sha256("Order-19") starts with these 32 hex digits; the name must not depend on anything else.
	if a, b := ObjectName("Order-19"), ObjectName("Order-19"); a != b || a == ObjectName("Order-20") {
		t.Errorf("hashed names are not a function of the key: %q %q %q", a, b, ObjectName("Order-20"))
	}
	if got := ObjectName(strings.Repeat("a", 254)); !strings.HasPrefix(got, "k-") {
		t.Errorf("a 254-character key is not a valid name and must be hashed, got %q", got)
	}
}

func TestWaitPreference(t *testing.T) {
	def, limit := 10*time.Second, 60*time.Second
	cases := []struct {
		name    string
		values  []string
		want    time.Duration
		applied bool
	}{
		{"absent", nil, def, false},
		{"wait", []string{"wait=5"}, 5 * time.Second, true},
		{"zero", []string{"wait=0"}, 0, true},
		{"with others", []string{"respond-async, wait=3"}, 3 * time.Second, true},
		{"case and spaces", []string{"Wait = 7 ; x=y"}, 7 * time.Second, true},
		{"quoted", []string{`wait="4"`}, 4 * time.Second, true},
		{"capped", []string{"wait=3600"}, limit, true},
		{"first wins", []string{"wait=2", "wait=9"}, 2 * time.Second, true},
		{"negative", []string{"wait=-1"}, def, false},
		{"garbage", []string{"wait=soon"}, def, false},
		{"huge", []string{"wait=99999999999999999999"}, def, false},
		{"other preference", []string{"return=minimal"}, def, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, applied := WaitPreference(c.values, def, limit)
			if got != c.want || applied != c.applied {
				t.Fatalf("WaitPreference(%q) = %s, %v; want %s, %v", c.values, got, applied, c.want, c.applied)
			}
		})
	}
}

func TestRunRefusesUnsafeListeners(t *testing.T) {
	for _, c := range []struct {
		name string
		o    RunOptions
		want string
	}{
		{"plain HTTP on every interface", RunOptions{Insecure: true, BindAddress: ":9443"}, "loopback"},
		{"plain HTTP on a non-loopback address", RunOptions{Insecure: true, BindAddress: "192.0.2.1:9443"}, "loopback"},
		{"TLS without files", RunOptions{BindAddress: "127.0.0.1:0"}, "--tls-cert-file"},
		{"TLS with missing files", RunOptions{BindAddress: "127.0.0.1:0", TLSCertFile: "/nonexistent.crt",
			TLSKeyFile: "/nonexistent.key"}, "serving certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Run(t.Context(), &rest.Config{Host: "https://127.0.0.1:1"}, c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v, want an error about %s", err, c.want)
			}
		})
	}
}
