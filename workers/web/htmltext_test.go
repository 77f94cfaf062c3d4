package web

import (
	"net/url"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHTMLToText(t *testing.T) {
	t.Parallel()
	base, _ := url.Parse("https://example.com/docs/page.html")
	tests := []struct {
		name, html, want string
	}{
		{"empty", "", ""},
		{"plain", "hello   world", "hello world"},
		{"document",
			`<!DOCTYPE html><html><head><title>The Title</title><meta charset="utf-8">
			<style>body { color: red }</style><script>var x = "<p>not text</p>";</script></head>
			<body><h1>Heading</h1><p>First   paragraph
			on two lines.</p><p>Second.</p></body></html>`,
			"The Title\n\n# Heading\n\nFirst paragraph on two lines.\n\nSecond."},
		{"entities", "<p>a &amp; b &lt;c&gt; &quot;d&quot; &#233;&eacute; caf&#xE9;&nbsp;x</p>", `a & b <c> "d" éé café x`},
		{"inline tags", "<p>some <b>bold</b>, <i>italic</i> and <code>code</code>.</p>", "some bold, italic and code."},
		{"lists", "<ul><li>one</li><li>two <b>2</b></li><li></li></ul><ol><li>three</ol>", "- one\n- two 2\n- three"},
		{"list of paragraphs", "<ul><li><p>a</p></li><li><p>b</p></li></ul>", "- a\n\n- b"},
		{"headings", "<h2>Two</h2>text<h3>Three</h3>", "## Two\n\ntext\n\n### Three"},
		{"br", "line one<br>line two<br/>line three", "line one\nline two\nline three"},
		{"divs", "<div>a</div><div>b<div>c</div></div>", "a\nb\nc"},
		{"table", "<table><tr><th>h1</th><th>h2</th></tr><tr><td>a</td><td>b</td></tr></table>after", "h1 | h2\na | b\n\nafter"},
		{"pre", "<p>x</p><pre>\n  indented\n    more\n\nend</pre><p>y</p>", "x\n\n  indented\n    more\n\nend\n\ny"},
		{"links", `<p>See <a href="/other">the other page</a>, <a href="sub/x?y=1">a relative one</a>,
			<a href="https://go.dev/">Go</a>, <a href="#top">top</a>, <a href="mailto:a@b.c">mail</a>,
			<a href="javascript:void(0)">js</a> and <a>no href</a>.</p>`,
			"See [the other page](https://example.com/other), [a relative one](https://example.com/docs/sub/x?y=1), [Go](https://go.dev/), top, mail, js and no href."},
		{"link around blocks", `<a href="/card"><div><h3>Card</h3><p>teaser</p></div></a>`, "### [Card teaser](https://example.com/card)"},
		{"base href", `<head><base href="https://cdn.example/d/"></head><a href="x">x</a> <a href="/y">y</a>`, "[x](https://cdn.example/d/x) [y](https://cdn.example/y)"},
		{"base ignored unless http", `<base href="javascript:x"><a href="x">x</a>`, "[x](https://example.com/docs/x)"},
		{"empty link", `<a href="/img"><img src="x.png"></a>text`, "text"},
		{"unclosed link", `<a href="/x">open`, "[open](https://example.com/x)"},
		{"nested links", `<a href="/1">one<a href="/2">two</a>`, "[one](https://example.com/1)[two](https://example.com/2)"},
		{"skipped", `a<noscript>enable js</noscript><template><p>t</p></template><svg><text>s</text><svg>in</svg>still</svg><select><option>o</option></select>b`, "ab"},
		{"hidden", `<div hidden><p>secret</p><div>x</div></div>shown<p hidden>p is not skipped`, "shown\n\np is not skipped"},
		{"iframe", `x<iframe src="y">fallback</iframe>z`, "xz"},
		{"comments", "a<!-- hidden -->b<!-- c", "ab"},
		{"unclosed script", "a<script>var x;", "a"},
		{"cdata and doctype", "<!DOCTYPE html><![CDATA[x]]>text", "text"},
		{"malformed", "<p <b>x</b> <<>> </ p> &bogus; <", "x <<>> &bogus; <"},
		{"unicode spaces", "a\u00a0\u00a0b\u2003c\td\r\ne", "a b c d e"},
		{"blank lines collapse", "<p>a</p><p></p><p></p><hr><p>b</p>", "a\n\nb"},
		{"uppercase tags", "<P>A</P><SCRIPT>x</SCRIPT><UL><LI>B</UL>", "A\n\n- B"},
		{"nul", "a\x00b", "a\x00b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, cut := htmlToText(tt.html, base, 1<<20)
			if got != tt.want || cut {
				t.Fatalf("htmlToText:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
	if got, _ := htmlToText(`<a href="/x">x</a>`, nil, 1<<20); got != "x" {
		t.Fatalf("relative link with no base: %q", got)
	}
}

// The text stops at the limit, on a rune boundary, however much the links
// made absolute add to the markup.
func TestHTMLToTextLimit(t *testing.T) {
	t.Parallel()
	base, _ := url.Parse("https://example.com/" + strings.Repeat("d", 4000) + "/")
	tests := []struct {
		name  string
		html  string
		limit int
		want  string // "" checks only the size
		cut   bool
	}{
		{"fits", "<p>ab</p><p>cd</p>", 6, "ab\n\ncd", false},
		{"one over", "<p>ab</p><p>cde</p>", 6, "ab\n\ncd", true},
		{"trailing space dropped", "ab cd", 3, "ab", true},
		{"rune kept whole", "a€b", 2, "a", true},
		{"zero", "<p>x</p>", 0, "", true},
		{"long base", strings.Repeat("<a href=a>b</a>", 1000), 10000, "", true},
		{"long base element", `<base href="https://example.com/` + strings.Repeat("q", 1<<20) + `/">` + strings.Repeat("<a href=a>b</a>", 1000), 10000, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, cut := htmlToText(tt.html, base, tt.limit)
			if cut != tt.cut || len(got) > tt.limit || tt.want != "" && got != tt.want || !utf8.ValidString(got) {
				t.Fatalf("limit %d: %d bytes %.80q, cut %v", tt.limit, len(got), got, cut)
			}
		})
	}
}

// A page that repeats <a href> or <base href> without text against a long
// base URL costs work linear in its size: links are resolved when their
// text is written, and only the first <base> counts. Resolving at every tag
// allocated a copy of the base per tag (gigabytes here, and hours of CPU
// for an 8 MiB page past any fetch timeout).
func TestHTMLToTextLinearWork(t *testing.T) {
	// Not parallel: it measures the process's allocations.
	base, _ := url.Parse("https://example.com/")
	long := `<base href="https://example.com/` + strings.Repeat("q", 64<<10) + `/">`
	tests := []struct{ name, html, want string }{
		{"anchors without text", long + strings.Repeat("<a href=a>", 5000) + "</a>end", "end"},
		{"repeated base", long + strings.Repeat("<base href=b>", 5000) + `<a href="/x">x</a>`, "[x](https://example.com/x)"},
		{"empty anchors then text", long + strings.Repeat("<a href=a></a>", 5000) + `<a href="/y">y</a>`, "[y](https://example.com/y)"},
	}
	for _, tt := range tests {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, _ := htmlToText(tt.html, base, 1<<20)
		runtime.ReadMemStats(&after)
		if got != tt.want {
			t.Errorf("%s: %.80q, want %q", tt.name, got, tt.want)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
			t.Errorf("%s: %d MiB allocated for a %d KiB page", tt.name, alloc>>20, len(tt.html)>>10)
		}
	}
	if got, _ := htmlToText(`<base href="https://a.example/d/"><base href="https://b.example/"><a href="x">x</a>`, base, 1<<20); got != "[x](https://a.example/d/x)" {
		t.Errorf("first base: %q", got)
	}
}

func TestDecodeText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		body        []byte
		contentType string
		truncated   bool
		want        string
	}{
		{"utf-8", []byte("héllo"), "text/plain", false, "héllo"},
		{"utf-8 declared", []byte("héllo"), "text/plain; charset=UTF-8", false, "héllo"},
		{"latin-1", []byte("caf\xe9"), "text/plain; charset=iso-8859-1", false, "café"},
		{"windows-1252", []byte("\x93quoted\x94"), "text/plain; charset=windows-1252", false, "\u201cquoted\u201d"},
		{"utf-16 bom", []byte("\xff\xfeh\x00i\x00"), "text/plain", false, "hi"},
		{"utf-8 bom", []byte("\xef\xbb\xbfhi"), "application/json", false, "hi"},
		{"invalid bytes", []byte("a\xffb\xc3"), "text/plain", false, "a\uFFFDb\uFFFD"},
		{"cut rune", []byte("ab\xe2\x82"), "text/plain", true, "ab"},
		{"cut rune declared", []byte("ab\xe2\x82"), "text/plain; charset=utf-8", true, "ab"},
		{"unknown charset", []byte("abc\xff"), "text/plain; charset=x-nonsense", false, "abc\uFFFD"},
		{"html meta", []byte(`<meta charset="iso-8859-1"><p>caf` + "\xe9"), "text/html", false, `<meta charset="iso-8859-1"><p>café`},
		{"html utf-8 after 1 KiB", []byte("<p>" + strings.Repeat("a", 1100) + "café"), "text/html", false, "<p>" + strings.Repeat("a", 1100) + "café"},
		{"html utf-8 after 1 KiB cut", []byte("<p>" + strings.Repeat("a", 1100) + "café\xe2\x82"), "text/html", true, "<p>" + strings.Repeat("a", 1100) + "café"},
		{"html no charset, not utf-8", []byte("<p>" + strings.Repeat("a", 1100) + "caf\xe9"), "text/html", false, "<p>" + strings.Repeat("a", 1100) + "café"},
		{"html meta windows-1252 late", []byte(`<meta charset="windows-1252"><p>` + strings.Repeat("a", 1100) + "\x93q\x94"), "text/html", false, `<meta charset="windows-1252"><p>` + strings.Repeat("a", 1100) + "\u201cq\u201d"},
		{"html header wins", []byte(`<meta charset="iso-8859-1">é`), "text/html; charset=utf-8", false, `<meta charset="iso-8859-1">é`},
	}
	for _, tt := range tests {
		mt, cs := mediaType(tt.contentType)
		got := decodeText(tt.body, tt.contentType, mt, cs, tt.truncated)
		if got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("%s: invalid UTF-8", tt.name)
		}
	}
}

func TestMediaType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ct, mt, cs string
		text, html bool
	}{
		{"text/html; charset=UTF-8", "text/html", "UTF-8", true, true},
		{"TEXT/PLAIN", "text/plain", "", true, false},
		{"application/json", "application/json", "", true, false},
		{"application/vnd.api+json", "application/vnd.api+json", "", true, false},
		{"application/atom+xml", "application/atom+xml", "", true, false},
		{"application/xhtml+xml", "application/xhtml+xml", "", true, true},
		{"image/svg+xml", "image/svg+xml", "", true, false},
		{"image/png", "image/png", "", false, false},
		{"application/pdf", "application/pdf", "", false, false},
		{"application/octet-stream", "application/octet-stream", "", false, false},
		{"text/html; charset", "text/html", "", true, true}, // broken parameters
		{"", "", "", false, false},
		{"garbage", "", "", false, false},
	}
	for _, tt := range tests {
		mt, cs := mediaType(tt.ct)
		if mt != tt.mt || cs != tt.cs || isText(mt) != tt.text || isHTML(mt) != tt.html {
			t.Errorf("%q: %q %q text=%v html=%v", tt.ct, mt, cs, isText(mt), isHTML(mt))
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	s := "aé€😀"
	for n := -1; n <= len(s)+1; n++ {
		got := clip(s, n)
		if len(got) > max(n, 0) || !utf8.ValidString(got) || !strings.HasPrefix(s, got) {
			t.Errorf("clip(%q, %d) = %q", s, n, got)
		}
	}
}
