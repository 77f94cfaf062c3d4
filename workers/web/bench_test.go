package web

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// page returns an HTML page of about size bytes: navigation, scripts,
// paragraphs with links, a table.
func page(size int) string {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html><html><head><title>Bench</title><style>p{margin:0}</style><script>var a=1;</script></head><body><nav><ul>`)
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&b, `<li><a href="/nav/%d">Section %d</a></li>`, i, i)
	}
	b.WriteString(`</ul></nav><main>`)
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, `<h2>Part %d</h2><p>Some   <b>text</b> with &amp; entities and <a href="rel/%d?q=1">a link</a>,
			spread over lines.</p><table><tr><td>%d</td><td>cell</td></tr></table><script>track(%d)</script>`, i, i, i, i)
	}
	b.WriteString(`</main></body></html>`)
	return b.String()
}

func BenchmarkHTMLToText(b *testing.B) {
	base, _ := url.Parse("https://example.com/docs/")
	for _, size := range []int{16 << 10, 1 << 20} {
		src := page(size)
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				_, _ = htmlToText(src, base, 1<<30)
			}
		})
	}
}

func BenchmarkRefusedReason(b *testing.B) {
	for _, s := range []string{"8.8.8.8", "2606:4700:4700::1111", "::ffff:169.254.169.254"} {
		ip := netip.MustParseAddr(s)
		b.Run("addr="+s, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = refusedReason(ip)
			}
		})
	}
}

// BenchmarkFetch is one fetch of a 16 KiB page from a loopback server, HTML
// conversion included, over a kept-alive connection.
func BenchmarkFetch(b *testing.B) {
	src := page(16 << 10)
	srv := newBenchServer(b, src)
	f, err := NewFetcher(WithAllowPrivate(true))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := f.Fetch(ctx, FetchRequest{URL: srv}); err != nil {
			b.Fatal(err)
		}
	}
}

func newBenchServer(b *testing.B, body string) string {
	b.Helper()
	ts := httptest.NewServer(text("text/html; charset=utf-8", body))
	b.Cleanup(ts.Close)
	return ts.URL
}
