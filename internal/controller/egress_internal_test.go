package controller

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/actionledger/actionledger/internal/egress"
)

type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ss, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// The validator's egress verdict: IP literals are checked as written (unmapped), names by what they
// resolve to (denied only when every address is), and a name that does not resolve is not judged.
func TestCheckEgress(t *testing.T) {
	r := &DestinationReconciler{
		Egress: egress.New(egress.Config{}),
		Resolver: fakeResolver{
			"localhost":     {"127.0.0.1", "::1"},
			"metadata.test": {"169.254.169.254"},
			"mixed.test":    {"127.0.0.1", "93.184.215.14"},
			"public.test":   {"93.184.215.14"},
			"empty.test":    {},
		},
	}
	for host, want := range map[string]struct {
		denied, name bool
		msg          string
	}{
		"127.0.0.1":        {denied: true, msg: "spec.url host 127.0.0.1: egress denied: 127.0.0.1 is in 127.0.0.0/8"},
		"::ffff:127.0.0.1": {denied: true, msg: "egress denied: 127.0.0.1 is in 127.0.0.0/8"},
		"169.254.169.254":  {denied: true, msg: "169.254.0.0/16"},
		"fe80::1%eth0":     {denied: true, msg: "fe80::/10"},
		"93.184.215.14":    {},
		"localhost":        {denied: true, name: true, msg: "spec.url host localhost resolves only to denied addresses (2)"},
		"metadata.test":    {denied: true, name: true, msg: "169.254.169.254"},
		"mixed.test":       {name: true},
		"public.test":      {name: true},
		"unknown.test":     {name: true},
		"empty.test":       {name: true},
	} {
		isName, err := r.checkEgress(context.Background(), "spec.url", host)
		if (err != nil) != want.denied || isName != want.name {
			t.Errorf("checkEgress(%q) = %v, %v; want denied %v, name %v", host, isName, err, want.denied, want.name)
			continue
		}
		if err != nil && (!egress.IsDenied(err) || !strings.Contains(err.Error(), want.msg) ||
			!strings.Contains(err.Error(), egress.FlagAllow)) {
			t.Errorf("checkEgress(%q) error %q: want an egress denial containing %q and %s", host, err, want.msg, egress.FlagAllow)
		}
	}
	if isName, err := (&DestinationReconciler{}).checkEgress(context.Background(), "spec.url", "127.0.0.1"); err != nil || isName {
		t.Errorf("without a policy: %v, %v; want no verdict", isName, err)
	}
}
