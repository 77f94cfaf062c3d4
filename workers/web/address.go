package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// rule is one refused address range.
type rule struct {
	prefix netip.Prefix
	reason string
}

func rules(pairs ...string) []rule {
	out := make([]rule, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, rule{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return out
}

// v4Rules are the refused IPv4 ranges: everything that is not the public
// internet (IANA special-purpose registry, minus what is globally
// reachable). Order matters only for the reason: broadcast before 240/4.
var v4Rules = rules(
	"0.0.0.0/8", "unspecified (0.0.0.0/8, \"this network\")",
	"10.0.0.0/8", "private (RFC 1918, 10.0.0.0/8)",
	"100.64.0.0/10", "shared address space (CGNAT, 100.64.0.0/10)",
	"127.0.0.0/8", "loopback (127.0.0.0/8)",
	"169.254.0.0/16", "link-local (169.254.0.0/16, home of the cloud metadata service)",
	"172.16.0.0/12", "private (RFC 1918, 172.16.0.0/12)",
	"192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24)",
	"192.0.2.0/24", "documentation (TEST-NET-1, 192.0.2.0/24)",
	"192.168.0.0/16", "private (RFC 1918, 192.168.0.0/16)",
	"198.18.0.0/15", "benchmarking (198.18.0.0/15)",
	"198.51.100.0/24", "documentation (TEST-NET-2, 198.51.100.0/24)",
	"203.0.113.0/24", "documentation (TEST-NET-3, 203.0.113.0/24)",
	"224.0.0.0/4", "multicast (224.0.0.0/4)",
	"255.255.255.255/32", "broadcast (255.255.255.255)",
	"240.0.0.0/4", "reserved (240.0.0.0/4)",
)

// v6Rules are the refused IPv6 ranges: those of the IANA special-purpose
// registry that are not globally reachable, but for 2001::/23 (IETF
// protocol assignments), which also holds Teredo and globally reachable
// anycast services; only its benchmarking range is refused. The forms
// that embed an IPv4 address (mapped, compatible, NAT64, 6to4) are
// unwrapped first by [refusedReason] and judged by the IPv4 rules.
var v6Rules = rules(
	"::/128", "unspecified (::)",
	"::1/128", "loopback (::1)",
	"64:ff9b:1::/48", "local-use NAT64 (64:ff9b:1::/48)",
	"100::/64", "discard-only (100::/64)",
	"100:0:0:1::/64", "dummy prefix (100:0:0:1::/64)",
	"2001:2::/48", "benchmarking (2001:2::/48)",
	"2001:db8::/32", "documentation (2001:db8::/32)",
	"3fff::/20", "documentation (3fff::/20)",
	"5f00::/16", "SRv6 segment identifiers (5f00::/16)",
	"fc00::/7", "unique local (ULA, fc00::/7)",
	"fe80::/10", "link-local (fe80::/10)",
	"fec0::/10", "site-local (fec0::/10, deprecated)",
	"ff00::/8", "multicast (ff00::/8)",
)

// Prefixes of IPv6 forms that carry an IPv4 address in their low 32 bits
// (6to4 carries it in bits 16..48).
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	ipv4Compatible = netip.MustParsePrefix("::/96")
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
)

// refusedReason says why ip is refused, or "" when it is a public address
// the fetcher may dial. A zone is ignored.
func refusedReason(ip netip.Addr) string {
	if !ip.IsValid() {
		return "not an IP address"
	}
	ip = ip.WithZone("")
	if ip.Is4In6() {
		if r := refusedReason(ip.Unmap()); r != "" {
			return "IPv4-mapped " + r
		}
		return ""
	}
	if ip.Is4() {
		for _, r := range v4Rules {
			if r.prefix.Contains(ip) {
				return r.reason
			}
		}
		return ""
	}
	for _, r := range v6Rules {
		if r.prefix.Contains(ip) {
			return r.reason
		}
	}
	b := ip.As16()
	embedded := func(form string, v4 netip.Addr) string {
		if r := refusedReason(v4); r != "" {
			return form + " " + r
		}
		return ""
	}
	switch {
	case nat64WellKnown.Contains(ip):
		return embedded("NAT64", netip.AddrFrom4([4]byte(b[12:16])))
	case ipv4Compatible.Contains(ip):
		return embedded("IPv4-compatible", netip.AddrFrom4([4]byte(b[12:16])))
	case ipv4Translated.Contains(ip):
		return embedded("IPv4-translated", netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(ip):
		return embedded("6to4", netip.AddrFrom4([4]byte(b[2:6])))
	}
	return ""
}

// addressError is a refused connection: the cause of a forbidden fetch.
type addressError struct {
	host   string
	addr   netip.Addr
	reason string
}

func (e *addressError) Error() string {
	if e.host != "" && e.host != e.addr.String() {
		return fmt.Sprintf("%s resolves to %s, refused: %s; web::fetch reaches only public internet addresses", e.host, e.addr, e.reason)
	}
	return fmt.Sprintf("%s is refused: %s; web::fetch reaches only public internet addresses", e.addr, e.reason)
}

func (e *addressError) Unwrap() error { return ErrRefusedAddress }

// guard dials only addresses the fetcher allows. It resolves a name
// itself, drops refused addresses and dials the rest by IP, so the
// address checked is the address dialed (a DNS answer that changes
// between two lookups cannot slip through); the dialer's Control hook
// checks again on the socket's own address.
type guard struct {
	allowPrivate bool
	exempt       map[netip.AddrPort]bool
	lookup       lookupFunc
	dialer       net.Dialer
}

func newGuard(o options) *guard {
	g := &guard{allowPrivate: o.allowPrivate, exempt: o.exempt, lookup: o.lookup}
	g.dialer = net.Dialer{
		Timeout:   MaxTimeout,
		KeepAlive: 30 * time.Second,
		Control:   g.control,
	}
	return g
}

// check refuses ap unless private addresses are allowed, ap is exempt or
// its IP is public.
func (g *guard) check(host string, ap netip.AddrPort) error {
	if g.allowPrivate || g.exempt[ap] {
		return nil
	}
	if r := refusedReason(ap.Addr()); r != "" {
		return &addressError{host: host, addr: ap.Addr(), reason: r}
	}
	return nil
}

// control is the dialer's last word, on the address of the socket about
// to connect.
func (g *guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &addressError{reason: "unparsable (" + address + ")"}
	}
	return g.check("", ap)
}

// DialContext is the transport's dialer.
func (g *guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("web: bad port %q", portStr)
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else if addrs, err = g.lookup(ctx, host); err != nil {
		return nil, err
	}
	var refused, last error
	allowed := make([]netip.AddrPort, 0, len(addrs))
	for _, ip := range addrs {
		ap := netip.AddrPortFrom(ip, uint16(port))
		if err := g.check(host, ap); err != nil {
			if refused == nil {
				refused = err
			}
			continue
		}
		allowed = append(allowed, ap)
	}
	for i, ap := range allowed {
		conn, err := g.dialAddr(ctx, network, ap, len(allowed)-i)
		if err == nil {
			return conn, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	switch {
	case last != nil:
		return nil, last
	case refused != nil:
		return nil, refused
	default:
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
}

// minAttempt is the least time one of several addresses gets.
const minAttempt = 2 * time.Second

// dialAddr dials ap; when left addresses remain to try, it gets only its
// share of the time left (as net.Dialer does for a serial fallback), so an
// unreachable first address does not use up the whole budget.
func (g *guard) dialAddr(ctx context.Context, network string, ap netip.AddrPort, left int) (net.Conn, error) {
	if dl, ok := ctx.Deadline(); ok && left > 1 {
		share := time.Until(dl) / time.Duration(left)
		if share < minAttempt {
			share = min(minAttempt, time.Until(dl))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, share)
		defer cancel()
	}
	return g.dialer.DialContext(ctx, network, ap.String())
}

// asAddressError finds a refusal in err's chain.
func asAddressError(err error) (*addressError, bool) {
	var ae *addressError
	ok := errors.As(err, &ae)
	return ae, ok
}
