package gateway

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
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
