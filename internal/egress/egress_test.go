package egress

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
)

func prefixes(t testing.TB, s string) []netip.Prefix {
	t.Helper()
	p, err := ParseCIDRs(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheck(t *testing.T) {
	type tc struct {
		allow, deny string
		api         []string
		addr        string
		denied      bool
		source      Source
		prefix      string
	}
	cases := map[string]tc{
		"public v4":                 {addr: "93.184.215.14"},
		"public v6":                 {addr: "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"private v4 is not default": {addr: "10.1.2.3"},
		"loopback":                  {addr: "127.0.0.1", denied: true, source: SourceDefault, prefix: "127.0.0.0/8"},
		"loopback other":            {addr: "127.0.0.2", denied: true, source: SourceDefault, prefix: "127.0.0.0/8"},
		"loopback v6":               {addr: "::1", denied: true, source: SourceDefault, prefix: "::1/128"},
		"mapped loopback":           {addr: "::ffff:127.0.0.1", denied: true, source: SourceDefault, prefix: "127.0.0.0/8"},
		"mapped metadata":           {addr: "::ffff:169.254.169.254", denied: true, source: SourceDefault, prefix: "169.254.0.0/16"},
		"metadata":                  {addr: "169.254.169.254", denied: true, source: SourceDefault, prefix: "169.254.0.0/16"},
		"aws v6 metadata":           {addr: "fd00:ec2::254", denied: true, source: SourceDefault, prefix: "fd00:ec2::254/128"},
		"aws v6 neighbour":          {addr: "fd00:ec2::253"},
		"eks pod identity v4":       {addr: "169.254.170.23", denied: true, source: SourceDefault, prefix: "169.254.0.0/16"},
		"eks pod identity v6":       {addr: "fd00:ec2::23", denied: true, source: SourceDefault, prefix: "fd00:ec2::23/128"},
		"gcp v6 metadata":           {addr: "fd20:ce::254", denied: true, source: SourceDefault, prefix: "fd20:ce::254/128"},
		"gcp v6 neighbour":          {addr: "fd20:ce::253"},
		"alibaba metadata":          {addr: "100.100.100.200", denied: true, source: SourceDefault, prefix: "100.100.100.200/32"},
		"mapped alibaba metadata":   {addr: "::ffff:100.100.100.200", denied: true, source: SourceDefault, prefix: "100.100.100.200/32"},
		"alibaba neighbour":         {addr: "100.100.100.201"},
		"oracle metadata":           {addr: "192.0.0.192", denied: true, source: SourceDefault, prefix: "192.0.0.192/32"},
		"oracle neighbour":          {addr: "192.0.0.193"},
		"scaleway v4 metadata":      {addr: "169.254.42.42", denied: true, source: SourceDefault, prefix: "169.254.0.0/16"},
		"scaleway v6 metadata":      {addr: "fd00:42::42", denied: true, source: SourceDefault, prefix: "fd00:42::42/128"},
		"allow lifts alibaba":       {allow: "100.100.100.200/32", addr: "100.100.100.200"},
		"link-local v6 zoned":       {addr: "fe80::1%eth0", denied: true, source: SourceDefault, prefix: "fe80::/10"},
		"unspecified v4":            {addr: "0.0.0.0", denied: true, source: SourceDefault, prefix: "0.0.0.0/8"},
		"this network":              {addr: "0.1.2.3", denied: true, source: SourceDefault, prefix: "0.0.0.0/8"},
		"unspecified v6":            {addr: "::", denied: true, source: SourceDefault, prefix: "::/128"},
		"multicast v4":              {addr: "239.1.1.1", denied: true, source: SourceDefault, prefix: "224.0.0.0/4"},
		"multicast v6":              {addr: "ff02::1", denied: true, source: SourceDefault, prefix: "ff00::/8"},
		"allow lifts loopback /32":  {allow: "127.0.0.1/32", addr: "127.0.0.1"},
		"allow /32 only that one":   {allow: "127.0.0.2/32", addr: "127.0.0.1", denied: true, source: SourceDefault, prefix: "127.0.0.0/8"},
		"allow lifts mapped":        {allow: "127.0.0.1/32", addr: "::ffff:127.0.0.1"},
		"allow as mapped prefix":    {allow: "::ffff:127.0.0.1/128", addr: "127.0.0.1"},
		"shorter allow loses":       {allow: "0.0.0.0/0", addr: "127.0.0.1", denied: true, source: SourceDefault, prefix: "127.0.0.0/8"},
		"equal allow lifts default": {allow: "169.254.0.0/16", addr: "169.254.169.254"},
		"deny adds":                 {deny: "10.0.0.0/8", addr: "10.1.2.3", denied: true, source: SourceDeny, prefix: "10.0.0.0/8"},
		"deny masks":                {deny: "10.1.2.3/8", addr: "10.200.0.1", denied: true, source: SourceDeny, prefix: "10.0.0.0/8"},
		"longer deny in allow":      {allow: "10.0.0.0/8", deny: "10.0.5.0/24", addr: "10.0.5.9", denied: true, source: SourceDeny, prefix: "10.0.5.0/24"},
		"allow outside longer deny": {allow: "10.0.0.0/8", deny: "10.0.5.0/24", addr: "10.0.6.9"},
		"longer allow in deny":      {allow: "10.0.5.9/32", deny: "10.0.0.0/8", addr: "10.0.5.9"},
		"deny beats allow on tie":   {allow: "10.0.0.0/8", deny: "10.0.0.0/8", addr: "10.0.0.1", denied: true, source: SourceDeny, prefix: "10.0.0.0/8"},
		"api server":                {api: []string{"10.96.0.1"}, addr: "10.96.0.1", denied: true, source: SourceAPIServer, prefix: "10.96.0.1/32"},
		"api server mapped":         {api: []string{"10.96.0.1"}, addr: "::ffff:10.96.0.1", denied: true, source: SourceAPIServer, prefix: "10.96.0.1/32"},
		"api server v6":             {api: []string{"fd00::1"}, addr: "fd00::1", denied: true, source: SourceAPIServer, prefix: "fd00::1/128"},
		"api server neighbour":      {api: []string{"10.96.0.1"}, addr: "10.96.0.2"},
		"range allow keeps api":     {allow: "10.0.0.0/8", api: []string{"10.96.0.1"}, addr: "10.96.0.1", denied: true, source: SourceAPIServer, prefix: "10.96.0.1/32"},
		"exact allow lifts api":     {allow: "127.0.0.1/32", api: []string{"127.0.0.1"}, addr: "127.0.0.1"},
		"invalid":                   {addr: "", denied: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := New(Config{Allow: prefixes(t, c.allow), Deny: prefixes(t, c.deny)})
			var api []netip.Addr
			for _, a := range c.api {
				api = append(api, netip.MustParseAddr(a))
			}
			p.SetAPIServer(api)
			var addr netip.Addr
			if c.addr != "" {
				addr = netip.MustParseAddr(c.addr)
			}
			err := p.Check(addr)
			if (err != nil) != c.denied {
				t.Fatalf("Check(%s) = %v, want denied %v", c.addr, err, c.denied)
			}
			if err == nil {
				return
			}
			var d *DeniedError
			if !errors.As(err, &d) || !IsDenied(err) {
				t.Fatalf("error %T is not a *DeniedError", err)
			}
			if c.prefix != "" && (d.Source != c.source || d.Prefix.String() != c.prefix) {
				t.Errorf("denied by %s %s, want %s %s", d.Source, d.Prefix, c.source, c.prefix)
			}
			if c.addr != "" && !strings.Contains(err.Error(), d.Addr.String()) {
				t.Errorf("message %q does not name the address", err)
			}
			if d.Source != SourceDeny && c.addr != "" && !strings.Contains(err.Error(), FlagAllow) {
				t.Errorf("message %q does not name %s", err, FlagAllow)
			}
		})
	}
}

func TestCheckAddrPort(t *testing.T) {
	p := New(Config{Allow: prefixes(t, "127.0.0.2/32")})
	for addr, denied := range map[string]bool{
		"127.0.0.1:80":             true,
		"127.0.0.2:80":             false,
		"[::1]:443":                true,
		"[::ffff:127.0.0.1]:443":   true,
		"[::ffff:127.0.0.2]:443":   false,
		"[fe80::1%eth0]:80":        true,
		"93.184.215.14:443":        false,
		"localhost:80":             true, // not an address: fail closed
		"127.0.0.2":                true, // no port
		"":                         true,
		"[2001:db8::1]:8080":       false,
		"[fd00:ec2::254]:80":       true,
		"169.254.169.254:80":       true,
		"0.0.0.0:80":               true,
		"255.255.255.255:80":       false,
		"[::ffff:169.254.1.1]:443": true,
	} {
		if err := p.CheckAddrPort(addr); (err != nil) != denied {
			t.Errorf("CheckAddrPort(%q) = %v, want denied %v", addr, err, denied)
		}
		if err := p.Control("tcp", addr, nil); (err != nil) != denied {
			t.Errorf("Control(%q) = %v, want denied %v", addr, err, denied)
		}
	}
}

func TestParseCIDRs(t *testing.T) {
	got, err := ParseCIDRs(" 10.0.0.0/8, ,fd00::/8,")
	if err != nil || len(got) != 2 || got[0].String() != "10.0.0.0/8" || got[1].String() != "fd00::/8" {
		t.Fatalf("ParseCIDRs = %v, %v", got, err)
	}
	if got, err := ParseCIDRs(""); err != nil || got != nil {
		t.Fatalf("ParseCIDRs(\"\") = %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"127.0.0.1":     "write 127.0.0.1/32",
		"::1":           "write ::1/128",
		"10.0.0.0/33":   "not a CIDR prefix",
		"example.com/8": "not a CIDR prefix",
		"10.0.0.0/8;x":  "not a CIDR prefix",
	} {
		if _, err := ParseCIDRs(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCIDRs(%q) error = %v, want it to contain %q", in, err, want)
		}
	}
}

func TestSetAPIServer(t *testing.T) {
	p := New(Config{})
	p.SetAPIServer([]netip.Addr{netip.MustParseAddr("::ffff:10.0.0.2"), netip.MustParseAddr("10.0.0.1"),
		{}, netip.MustParseAddr("10.0.0.2")})
	if got := p.APIServer(); len(got) != 2 || got[0].String() != "10.0.0.1" || got[1].String() != "10.0.0.2" {
		t.Fatalf("APIServer() = %v, want [10.0.0.1 10.0.0.2]", got)
	}
	if p.Check(netip.MustParseAddr("10.0.0.2")) == nil {
		t.Error("10.0.0.2 allowed after SetAPIServer")
	}
	p.SetAPIServer(nil)
	if err := p.Check(netip.MustParseAddr("10.0.0.2")); err != nil {
		t.Errorf("10.0.0.2 still denied after SetAPIServer(nil): %v", err)
	}
	// Concurrent replacement and checks (run with -race).
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 200 {
				if i%2 == 0 {
					p.SetAPIServer([]netip.Addr{netip.AddrFrom4([4]byte{10, 0, byte(i), byte(j)})}) //nolint:gosec // G115: i, j < 256
				} else {
					_ = p.Check(netip.MustParseAddr("10.0.0.1"))
				}
			}
		})
	}
	wg.Wait()
}

// FuzzCheck: for any address, the mapped and unmapped forms get the same answer, and a default-denied
// address is never allowed without an allow entry.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"127.0.0.1:1", "[::ffff:127.0.0.1]:1", "[::1]:80", "169.254.169.254:80", "[fe80::1%lo]:1", "1.2.3.4:5", "x"} {
		f.Add(s, "10.0.0.0/8")
	}
	f.Fuzz(func(t *testing.T, address, cidrs string) {
		allow, err := ParseCIDRs(cidrs)
		if err != nil {
			allow = nil
		}
		def, withAllow := New(Config{}), New(Config{Allow: allow, Deny: allow})
		err = def.CheckAddrPort(address)
		ap, perr := netip.ParseAddrPort(address)
		if perr != nil {
			if err == nil {
				t.Fatalf("unparsable %q allowed", address)
			}
			return
		}
		a := ap.Addr()
		mapped := netip.AddrFrom16(a.Unmap().As16())
		if a.Unmap().Is4() && (def.Check(mapped) == nil) != (def.Check(a.Unmap()) == nil) {
			t.Fatalf("%s and %s differ", mapped, a.Unmap())
		}
		// Allow and Deny of the same prefixes: deny wins on a tie, so nothing denied becomes allowed.
		if err != nil && withAllow.Check(a) == nil {
			t.Fatalf("%s denied by default but allowed with allow=deny=%v", a, allow)
		}
	})
}

// TestDefaultDenyDocumented: every entry of DefaultDeny is listed, in backquotes, in the "Denied by
// default" table of docs/security.md, so the page cannot fall behind the code.
func TestDefaultDenyDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "### Denied by default")
	if !ok {
		t.Fatal(`docs/security.md has no "### Denied by default" section`)
	}
	table, _, _ = strings.Cut(table, "\n### ")
	for _, d := range DefaultDeny {
		if !strings.Contains(table, "`"+d.Prefix.String()+"`") {
			t.Errorf("docs/security.md, Denied by default, does not list `%s` (%s)", d.Prefix, d.Why)
		}
	}
}
