package web

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestRefusedReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want string // a word of the reason; "" means allowed
	}{
		// Public addresses are allowed, in every form.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.215.14", ""},
		{"100.63.255.255", ""}, // just below CGNAT
		{"100.128.0.0", ""},    // just above CGNAT
		{"172.15.255.255", ""}, // just below 172.16/12
		{"172.32.0.0", ""},     // just above
		{"169.253.255.255", ""},
		{"223.255.255.255", ""},
		{"2001:4860:4860::8888", ""},
		{"2606:4700:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", ""},  // 6to4 of 8.8.8.8
		{"2001::1", ""},          // Teredo is not refused

		// Loopback.
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "IPv4-mapped loopback"},
		{"::127.0.0.1", "IPv4-compatible loopback"},
		{"64:ff9b::7f00:1", "NAT64 loopback"},
		{"2002:7f00:1::", "6to4 loopback"},
		{"::ffff:0:7f00:1", "IPv4-translated loopback"},
		// Private (RFC 1918) and ULA.
		{"10.0.0.1", "RFC 1918"},
		{"10.255.255.255", "RFC 1918"},
		{"172.16.0.1", "RFC 1918"},
		{"172.31.255.255", "RFC 1918"},
		{"192.168.1.1", "RFC 1918"},
		{"::ffff:10.1.2.3", "IPv4-mapped private"},
		{"::ffff:172.20.0.1", "IPv4-mapped private"},
		{"::ffff:192.168.0.1", "IPv4-mapped private"},
		{"64:ff9b::a00:1", "NAT64 private"},
		{"2002:c0a8:101::1", "6to4 private"},
		{"fc00::1", "unique local"},
		{"fd12:3456:789a::1", "unique local"},
		// Link-local, with the cloud metadata address.
		{"169.254.169.254", "link-local"},
		{"169.254.0.1", "link-local"},
		{"::ffff:169.254.169.254", "IPv4-mapped link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"febf::1", "link-local"},
		{"fd00:ec2::254", "unique local"}, // AWS IPv6 metadata
		// Unspecified.
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"::ffff:0.0.0.0", "IPv4-mapped unspecified"},
		// Multicast.
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"ff0e::1", "multicast"},
		{"::ffff:224.0.0.251", "IPv4-mapped multicast"},
		// CGNAT.
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"::ffff:100.100.100.100", "IPv4-mapped shared address space (CGNAT"},
		// Broadcast and reserved.
		{"255.255.255.255", "broadcast"},
		{"::ffff:255.255.255.255", "IPv4-mapped broadcast"},
		{"240.0.0.1", "reserved"},
		// The other special-purpose ranges.
		{"192.0.0.8", "IETF"},
		{"192.0.2.1", "documentation"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"3fff:fff:ffff::1", "documentation"},
		{"2001:2::1", "benchmarking"},
		{"2001:2:0:ffff::1", "benchmarking"},
		{"5f00::1", "SRv6"},
		{"100:0:0:1::1", "dummy"},
		{"2001:3::1", ""}, // AMT anycast is public
		{"100::1", "discard-only"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"fec0::1", "site-local"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			got := refusedReason(netip.MustParseAddr(tt.addr))
			switch {
			case tt.want == "" && got != "":
				t.Fatalf("refused (%s), want allowed", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Fatalf("reason %q, want one containing %q", got, tt.want)
			}
		})
	}
	if refusedReason(netip.Addr{}) == "" {
		t.Fatal("the zero Addr is allowed")
	}
}

// Every IPv6 form that embeds an IPv4 address is judged as that address.
func TestRefusedReasonEmbeddedForms(t *testing.T) {
	t.Parallel()
	for _, r := range v4Rules {
		v4 := r.prefix.Addr().As4()
		for _, form := range embeddings(v4) {
			if got := refusedReason(form); got == "" {
				t.Errorf("%v (embedding %v, %s) is allowed", form, r.prefix.Addr(), r.reason)
			}
		}
	}
}

// embeddings returns the IPv6 forms that carry v4.
func embeddings(v4 [4]byte) []netip.Addr {
	mapped := netip.AddrFrom4(v4)
	var compat, nat64, translated, sixToFour [16]byte
	copy(compat[12:], v4[:])
	nat64 = netip.MustParseAddr("64:ff9b::").As16()
	copy(nat64[12:], v4[:])
	translated = netip.MustParseAddr("::ffff:0:0:0").As16()
	copy(translated[12:], v4[:])
	sixToFour[0], sixToFour[1] = 0x20, 0x02
	copy(sixToFour[2:6], v4[:])
	return []netip.Addr{
		netip.AddrFrom16(mapped.As16()), netip.AddrFrom16(compat), netip.AddrFrom16(nat64),
		netip.AddrFrom16(translated), netip.AddrFrom16(sixToFour),
	}
}

func TestGuardControl(t *testing.T) {
	t.Parallel()
	o, err := buildOptions([]Option{withExempt(netip.MustParseAddrPort("127.0.0.1:8080"))})
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(o)
	tests := []struct {
		address string
		refused bool
	}{
		{"8.8.8.8:443", false},
		{"[2606:4700:4700::1111]:443", false},
		{"127.0.0.1:8080", false}, // exempt
		{"127.0.0.1:8081", true},  // same IP, other port
		{"169.254.169.254:80", true},
		{"[::ffff:10.0.0.1]:80", true},
		{"[fe80::1%lo]:80", true},
		{"not an address", true},
	}
	for _, tt := range tests {
		err := g.control("tcp", tt.address, nil)
		if (err != nil) != tt.refused {
			t.Errorf("control(%s) = %v, refused want %v", tt.address, err, tt.refused)
		}
		if err != nil && !errors.Is(err, ErrRefusedAddress) {
			t.Errorf("control(%s) = %v, not ErrRefusedAddress", tt.address, err)
		}
	}
	open := newGuard(options{allowPrivate: true})
	if err := open.control("tcp", "127.0.0.1:1", nil); err != nil {
		t.Fatalf("allow_private: %v", err)
	}
}
