// Package egress decides which network addresses the manager may connect to on behalf of a tenant
// (DESIGN rule 11). It is pure: a Policy holds prefixes and answers Check for one address; the caller
// enforces the answer where the address is final, in net.Dialer.Control, which receives the resolved
// "ip:port" right before connect(2). A check there cannot be bypassed by DNS rebinding (a name that
// resolved to an allowed address while validating and to a denied one when dialing) or by a host
// written as an IPv4-mapped IPv6 literal ([::ffff:127.0.0.1]): the address is unmapped first
// (netip.Addr.Unmap) and its IPv6 zone dropped.
//
// A Policy has four sources of prefixes:
//
//   - the built-in default deny set (DefaultDeny): loopback, link-local (where most cloud metadata
//     services live), unspecified, multicast and the metadata addresses of clouds that serve them
//     outside link-local (AWS and EKS Pod Identity over IPv6, GCP over IPv6, Alibaba Cloud, Oracle
//     Cloud, Scaleway over IPv6);
//   - the API server's own addresses (SetAPIServer), also denied by default;
//   - Config.Allow (the manager flag --destination-allow-cidrs), which lifts default denials;
//   - Config.Deny (--destination-deny-cidrs), which adds denials.
//
// Precedence: the most specific (longest) matching prefix decides, as in a routing table. On equal
// length Config.Deny beats Config.Allow, and Config.Allow beats the defaults and the API server
// addresses (each of which is one /32 or /128 entry). An address no prefix matches is allowed. So
// --destination-allow-cidrs=127.0.0.1/32 opens 127.0.0.1 even when the API server listens there (as in
// envtest and make run-local), while --destination-allow-cidrs=10.0.0.0/8 does not open an API server at
// 10.0.0.1, and --destination-deny-cidrs=10.0.5.0/24 closes part of an allowed 10.0.0.0/8 again.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
)

// Source names where a prefix of the policy came from.
type Source string

// Sources of policy entries, in increasing precedence at equal prefix length.
const (
	// SourceDefault is the built-in default deny set (DefaultDeny).
	SourceDefault Source = "default"
	// SourceAPIServer is one of the API server's own addresses (SetAPIServer).
	SourceAPIServer Source = "api-server"
	// SourceAllow is Config.Allow (--destination-allow-cidrs).
	SourceAllow Source = "allow"
	// SourceDeny is Config.Deny (--destination-deny-cidrs).
	SourceDeny Source = "deny"
)

// Flag names that set Config.Allow and Config.Deny; error messages name them.
const (
	FlagAllow = "--destination-allow-cidrs"
	FlagDeny  = "--destination-deny-cidrs"
)

// DefaultRule is one entry of the built-in deny set.
type DefaultRule struct {
	// Prefix is the denied range.
	Prefix netip.Prefix
	// Why says in a few words what lives there.
	Why string
}

// DefaultDeny is the built-in deny set: addresses that reach the manager's own pod or node, or cloud
// metadata services, rather than a destination. RFC 6890 (special-purpose registries), RFC 4291
// (IPv6), RFC 5771 (IPv4 multicast). Most clouds serve instance metadata at 169.254.169.254 (AWS,
// Azure, GCP, Oracle, DigitalOcean, OpenStack) or elsewhere in 169.254.0.0/16 (EKS Pod Identity at
// 169.254.170.23, Scaleway at 169.254.42.42), all inside the link-local entry; the single-address
// entries after it are the metadata addresses outside link-local, each named by its provider's
// documentation. Each is one /32 or /128 so that its neighbours (fd00:ec2::253, the AWS DNS resolver,
// or the rest of 100.64.0.0/10) stay reachable.
var DefaultDeny = []DefaultRule{
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local, where cloud metadata services answer (169.254.169.254)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (\"this host\")"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "AWS IPv6 instance metadata"},
	{netip.MustParsePrefix("fd00:ec2::23/128"), "EKS Pod Identity agent, IPv6"},
	{netip.MustParsePrefix("fd20:ce::254/128"), "GCP IPv6 instance metadata"},
	{netip.MustParsePrefix("100.100.100.200/32"), "Alibaba Cloud instance metadata"},
	{netip.MustParsePrefix("192.0.0.192/32"), "Oracle Cloud instance metadata"},
	{netip.MustParsePrefix("fd00:42::42/128"), "Scaleway IPv6 instance metadata"},
}

// Config is the admin's part of a policy.
type Config struct {
	// Allow lifts default denials (DefaultDeny and the API server addresses) for addresses it
	// contains, unless a longer default prefix matches (see the package documentation).
	Allow []netip.Prefix
	// Deny adds denials; it wins over Allow at equal prefix length.
	Deny []netip.Prefix
}

type rule struct {
	prefix netip.Prefix
	source Source
	why    string
}

// Policy is an egress policy. The zero value and nil are not usable; build one with New. Safe for
// concurrent use: SetAPIServer may run while Check does.
type Policy struct {
	rules     []rule // DefaultDeny, Config.Allow, Config.Deny; fixed after New
	apiServer atomic.Pointer[[]netip.Addr]
}

// New builds a policy from the default deny set and cfg. Prefixes are masked (10.1.2.3/8 becomes
// 10.0.0.0/8) and IPv4-mapped IPv6 prefixes of length >= 96 are unmapped, so that they match the
// unmapped addresses Check compares.
func New(cfg Config) *Policy {
	p := &Policy{}
	for _, d := range DefaultDeny {
		p.rules = append(p.rules, rule{prefix: d.Prefix, source: SourceDefault, why: d.Why})
	}
	for _, a := range cfg.Allow {
		p.rules = append(p.rules, rule{prefix: normalize(a), source: SourceAllow, why: FlagAllow})
	}
	for _, d := range cfg.Deny {
		p.rules = append(p.rules, rule{prefix: normalize(d), source: SourceDeny, why: FlagDeny})
	}
	empty := []netip.Addr{}
	p.apiServer.Store(&empty)
	return p
}

func normalize(p netip.Prefix) netip.Prefix {
	a := p.Addr().WithZone("")
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return netip.PrefixFrom(a, p.Bits()).Masked()
}

// SetAPIServer replaces the API server's addresses, each denied as a single-address entry of source
// SourceAPIServer. Invalid addresses are skipped; mapped addresses are unmapped.
func (p *Policy) SetAPIServer(addrs []netip.Addr) {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a = a.Unmap().WithZone(""); a.IsValid() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	p.apiServer.Store(&out)
}

// APIServer returns the API server addresses last set, sorted.
func (p *Policy) APIServer() []netip.Addr {
	return slices.Clone(*p.apiServer.Load())
}

// DeniedError is the error of a denied address. Its text names the address, the matching prefix and
// what to change; it never contains more than the address (no host name, URL or port).
type DeniedError struct {
	// Addr is the denied address, unmapped.
	Addr netip.Addr
	// Prefix is the entry that denied it; invalid when Addr itself is invalid.
	Prefix netip.Prefix
	// Source is where Prefix came from.
	Source Source
	// Why describes Prefix (what lives there, or the flag that set it).
	Why string
}

// Error describes the denial and the flag that changes it.
func (e *DeniedError) Error() string {
	switch {
	case !e.Addr.IsValid():
		return "egress denied: not a valid IP address"
	case e.Source == SourceDeny:
		return fmt.Sprintf("egress denied: %s is in %s, listed in the manager's %s", e.Addr, e.Prefix, FlagDeny)
	case e.Source == SourceAPIServer:
		return fmt.Sprintf("egress denied: %s is an address of the Kubernetes API server (denied by default; "+
			"the manager's %s=%s lifts it)", e.Addr, FlagAllow, e.Prefix)
	}
	return fmt.Sprintf("egress denied: %s is in %s (%s, denied by default; the manager's %s lifts it)",
		e.Addr, e.Prefix, e.Why, FlagAllow)
}

// IsDenied reports whether err's chain holds a *DeniedError.
func IsDenied(err error) bool {
	var d *DeniedError
	return errors.As(err, &d)
}

// Check returns nil when the policy allows connecting to addr, else a *DeniedError. addr is unmapped
// (::ffff:127.0.0.1 is checked as 127.0.0.1) and its zone dropped first; an invalid addr is denied.
func (p *Policy) Check(addr netip.Addr) error {
	a := addr.Unmap().WithZone("")
	if !a.IsValid() {
		return &DeniedError{Addr: a}
	}
	var best *rule
	better := func(r *rule) bool {
		if best == nil || r.prefix.Bits() > best.prefix.Bits() {
			return true
		}
		return r.prefix.Bits() == best.prefix.Bits() && rank(r.source) > rank(best.source)
	}
	for i := range p.rules {
		if r := &p.rules[i]; r.prefix.Contains(a) && better(r) {
			best = r
		}
	}
	for _, s := range *p.apiServer.Load() {
		if s == a {
			r := &rule{prefix: netip.PrefixFrom(s, s.BitLen()), source: SourceAPIServer, why: "Kubernetes API server"}
			if better(r) {
				best = r
			}
		}
	}
	if best == nil || best.source == SourceAllow {
		return nil
	}
	return &DeniedError{Addr: a, Prefix: best.prefix, Source: best.source, Why: best.why}
}

func rank(s Source) int {
	switch s {
	case SourceDeny:
		return 3
	case SourceAllow:
		return 2
	}
	return 1
}

// CheckAddrPort checks an "ip:port" string as net.Dialer.Control receives it ("127.0.0.1:80",
// "[::1]:443", "[fe80::1%eth0]:80"). A string that is not an IP address and port is denied.
func (p *Policy) CheckAddrPort(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &DeniedError{}
	}
	return p.Check(ap.Addr())
}

// Control is a net.Dialer.Control function: it refuses to connect to a denied address, before any
// packet is sent. The dialer wraps the *DeniedError in a *net.OpError (Op "dial"); with several
// addresses for one name, the dialer goes on with the next one.
func (p *Policy) Control(_, address string, _ syscall.RawConn) error {
	return p.CheckAddrPort(address)
}

// ParseCIDRs parses a comma-separated list of CIDR prefixes ("10.0.0.0/8,fd00::/8"), as the flags take
// it. Spaces around entries and empty entries are ignored. A bare address is refused, with a message
// that says to add /32 or /128, so that a missing length is never guessed.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(f)
		if err != nil {
			if a, aerr := netip.ParseAddr(f); aerr == nil {
				return nil, fmt.Errorf("%q is an address, not a CIDR: write %s/%d for this one address", f, a, a.BitLen())
			}
			return nil, fmt.Errorf("%q is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8: %w", f, err)
		}
		out = append(out, pfx)
	}
	return out, nil
}
