package web

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/", "http://[::1]:80/x?y#z", "HTTP://A.B", "file:///etc/passwd",
		"http://user:pw@h/", "http:h", "//h/", "http://h:0/", "http://h:65536/", "http://%zz/",
		"http://h/\x00", " http://h ", "javascript:x", "http://[fe80::1%25eth0]/", "http://h/" + strings.Repeat("%41", 10),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := parseURL(raw)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("a refusal without a reason")
			}
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.Opaque != "" || u.Fragment != "" {
			t.Fatalf("%q accepted as %#v", raw, u)
		}
		if len(strings.TrimSpace(raw)) > MaxURLLength {
			t.Fatalf("%d bytes accepted", len(raw))
		}
		// What a fetch sends, a redirect to it would pass too.
		s := u.String()
		if len(s) > MaxURLLength {
			return
		}
		again, err := parseURL(s)
		if err != nil {
			t.Fatalf("%q accepted, its form %q refused: %v", raw, s, err)
		}
		if again.String() != s {
			t.Fatalf("%q → %q → %q", raw, s, again)
		}
	})
}

func FuzzHTMLToText(f *testing.F) {
	for _, s := range []string{
		"", "plain text", "<p>a</p><p>b</p>", "<ul><li>x<li>y</ul>", `<a href="/x">link</a>`,
		"<pre>\n a\n\n b</pre>", "<script>x</script>", "<svg><svg></svg>", "<div hidden>x",
		"<table><tr><td>a<td>b</table>", "&amp;&#0;&#xD800;&bogus", "<a href=x><a href=y>z",
		"<plaintext><p>", "<title>t</title><h1>h</h1>", "a\u00a0b\u2028c",
	} {
		f.Add(s)
	}
	base, _ := url.Parse("https://example.com/dir/page")
	f.Fuzz(func(t *testing.T, src string) {
		out, _ := htmlToText(src, base, 1<<20)
		if again, _ := htmlToText(src, base, 1<<20); out != again {
			t.Fatal("not deterministic")
		}
		if short, _ := htmlToText(src, base, 64); len(short) > 64 || !strings.HasPrefix(out, short) {
			t.Fatalf("limit 64: %q from %q", short, out)
		}
		if !utf8.ValidString(src) {
			return
		}
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 %q from %q", out, src)
		}
		// Only <pre> keeps leading spaces; nothing keeps trailing ones.
		if strings.TrimRightFunc(out, unicode.IsSpace) != out || strings.HasPrefix(out, "\n") {
			t.Fatalf("untrimmed %q", out)
		}
		// Text with no markup is its words, single-spaced.
		if !strings.ContainsAny(src, "<&\r") {
			if want := strings.Join(strings.Fields(src), " "); out != want {
				t.Fatalf("%q: got %q, want %q", src, out, want)
			}
		}
	})
}

func FuzzDecodeText(f *testing.F) {
	f.Add([]byte("caf\xe9"), "text/plain; charset=latin1", false)
	f.Add([]byte("\xff\xfeh\x00"), "text/plain", true)
	f.Add([]byte(`<meta charset="shift_jis">\x82\xa0`), "text/html", false)
	f.Add([]byte("a\xe2\x82"), "application/json; charset=utf-8", true)
	f.Fuzz(func(t *testing.T, body []byte, contentType string, truncated bool) {
		mt, cs := mediaType(contentType)
		out := decodeText(body, contentType, mt, cs, truncated)
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 from %q (%s)", body, contentType)
		}
	})
}

// An IPv4 address and every IPv6 form carrying it get the same verdict.
func FuzzRefusedReason(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "8.8.8.8", "169.254.169.254", "100.64.0.1", "255.255.255.255", "0.0.0.0"} {
		f.Add(netip.MustParseAddr(s).AsSlice())
	}
	f.Add(netip.MustParseAddr("fe80::1").AsSlice())
	f.Fuzz(func(t *testing.T, b []byte) {
		ip, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		reason := refusedReason(ip)
		if !ip.Is4() {
			return
		}
		for _, form := range embeddings(ip.As4()) {
			if (refusedReason(form) == "") != (reason == "") {
				t.Fatalf("%v: %q, its form %v: %q", ip, reason, form, refusedReason(form))
			}
		}
	})
}
