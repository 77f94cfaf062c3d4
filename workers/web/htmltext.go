package web

import (
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// htmlToText turns an HTML document (UTF-8) into readable text: scripts,
// styles, templates, embedded media and hidden elements are dropped, tags
// are removed, whitespace is collapsed; block elements break lines,
// paragraphs and headings are separated by a blank line, headings get
// "#" marks, list items "- ", table cells " | ", <pre> keeps its layout,
// and links become [text](absolute url) when base (or the document's
// <base href>) resolves them to http(s).
// It never fails: malformed markup is read the way the tokenizer reads it.
// The text stops at limit bytes (cut reports it): links made absolute can
// make it far longer than the markup, as when every 15-byte <a href=a>
// repeats a long base URL.
// Its work is linear in src and limit: a link is resolved only when its
// text is written, and only the first <base href> is read (as browsers
// do), so markup that repeats <a href> or <base href> without text cannot
// make it resolve a long base URL once per tag.
func htmlToText(src string, base *url.URL, limit int) (text string, cut bool) {
	z := html.NewTokenizer(strings.NewReader(src))
	c := converter{base: base}
	for done := false; !done && c.w.Len() <= limit; {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			c.endLink()
			done = true
		case html.TextToken:
			if c.skip != "" {
				continue
			}
			if c.pre > 0 {
				c.preText(string(z.Text()))
			} else {
				c.text(string(z.Text()))
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			if c.skip != "" {
				if tt == html.StartTagToken && string(name) == c.skip {
					c.skipDepth++
				}
				continue
			}
			a := atom.Lookup(name)
			var href string
			hidden := false
			for hasAttr {
				var k, v []byte
				k, v, hasAttr = z.TagAttr()
				switch string(k) {
				case "href":
					href = string(v)
				case "hidden":
					hidden = true
				}
			}
			c.start(a, string(name), href, hidden, tt == html.SelfClosingTagToken)
		case html.EndTagToken:
			name, _ := z.TagName()
			if c.skip != "" {
				if string(name) == c.skip {
					if c.skipDepth--; c.skipDepth == 0 {
						c.skip = ""
					}
				}
				continue
			}
			c.end(atom.Lookup(name))
		}
	}
	text = c.w.String()
	if len(text) > limit {
		text, cut = clip(text, limit), true
	}
	return strings.TrimRightFunc(text, unicode.IsSpace), cut
}

// skipped are the elements whose content is not text for a reader.
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Svg: true, atom.Math: true, atom.Canvas: true, atom.Iframe: true,
	atom.Object: true, atom.Select: true, atom.Noembed: true, atom.Noframes: true,
}

// voids are elements that never have an end tag.
var voids = map[atom.Atom]bool{
	atom.Area: true, atom.Base: true, atom.Br: true, atom.Col: true, atom.Embed: true,
	atom.Hr: true, atom.Img: true, atom.Input: true, atom.Link: true, atom.Meta: true,
	atom.Source: true, atom.Track: true, atom.Wbr: true,
}

// optionalEnd are elements whose end tag may be left out; a hidden one is
// not skipped, since its end is not reliably marked.
var optionalEnd = map[atom.Atom]bool{
	atom.P: true, atom.Li: true, atom.Dt: true, atom.Dd: true, atom.Option: true,
	atom.Optgroup: true, atom.Tr: true, atom.Td: true, atom.Th: true, atom.Thead: true,
	atom.Tbody: true, atom.Tfoot: true, atom.Colgroup: true, atom.Caption: true,
	atom.Rb: true, atom.Rt: true, atom.Rp: true, atom.Rtc: true, atom.Html: true,
	atom.Head: true, atom.Body: true,
}

// paragraphs are separated from what surrounds them by a blank line.
var paragraphs = map[atom.Atom]bool{
	atom.P: true, atom.Pre: true, atom.Blockquote: true, atom.Table: true,
	atom.Title: true, atom.Hr: true, atom.Figure: true,
	atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true,
}

// lines start and end on a line of their own.
var lines = map[atom.Atom]bool{
	atom.Address: true, atom.Article: true, atom.Aside: true, atom.Body: true,
	atom.Caption: true, atom.Center: true, atom.Dd: true, atom.Details: true,
	atom.Dialog: true, atom.Div: true, atom.Dl: true, atom.Dt: true,
	atom.Fieldset: true, atom.Figcaption: true, atom.Footer: true, atom.Form: true,
	atom.Header: true, atom.Hgroup: true, atom.Legend: true, atom.Li: true,
	atom.Main: true, atom.Menu: true, atom.Nav: true, atom.Ol: true,
	atom.Section: true, atom.Summary: true, atom.Tbody: true, atom.Tfoot: true,
	atom.Thead: true, atom.Tr: true, atom.Ul: true, atom.Textarea: true,
}

var headingMarks = map[atom.Atom]string{
	atom.H1: "# ", atom.H2: "## ", atom.H3: "### ", atom.H4: "#### ", atom.H5: "##### ", atom.H6: "###### ",
}

// converter is the state of one htmlToText.
type converter struct {
	w    strings.Builder
	base *url.URL

	skip      string // name of the skipped element being read, "" when none
	skipDepth int    // nesting of skip inside itself
	pre       int    // depth of <pre>

	breaks int    // line breaks due before the next text (at most 2)
	nl     int    // newlines at the end of the text written
	space  bool   // a space is due before the next text on this line
	sep    string // a cell separator due before the next text on this line
	prefix string // a heading or list mark due at the start of the next line

	baseSeen bool   // a <base href> was read: later ones are ignored
	href     string // href of the open <a>, resolved when its text starts
	link     string // resolved href of the open <a>, "" when none
	linkOpen bool   // "[" was written for it
}

func (c *converter) start(a atom.Atom, name, href string, hidden, selfClosing bool) {
	if (skipped[a] || hidden && !optionalEnd[a]) && !voids[a] {
		if !selfClosing {
			c.skip, c.skipDepth = name, 1
		}
		return
	}
	switch {
	case a == atom.Br:
		c.lineBreak(1)
	case a == atom.Base:
		if href == "" || c.baseSeen {
			break
		}
		c.baseSeen = true
		if b := c.resolve(href); b != "" {
			c.base, _ = url.Parse(b)
		}
	case a == atom.A:
		c.endLink()
		c.href = href
	case a == atom.Td || a == atom.Th:
		if c.lineHas() {
			c.sep = " | "
		}
	case paragraphs[a]:
		c.lineBreak(2)
	case lines[a]:
		c.lineBreak(1)
	}
	switch {
	case a == atom.Pre && !selfClosing:
		c.pre++
	case c.linkOpen:
	case a == atom.Li:
		c.prefix = "- "
	case headingMarks[a] != "":
		c.prefix = headingMarks[a]
	}
}

func (c *converter) end(a atom.Atom) {
	switch {
	case a == atom.Br:
		c.lineBreak(1)
	case a == atom.A:
		c.endLink()
	case paragraphs[a]:
		c.lineBreak(2)
	case lines[a]:
		c.lineBreak(1)
	}
	switch {
	case a == atom.Pre && c.pre > 0:
		c.pre--
	case a == atom.Li || headingMarks[a] != "":
		c.prefix = ""
	}
}

// resolve makes href absolute against the base; "" unless it is an http(s)
// link to another page than the base's own fragment.
func (c *converter) resolve(href string) string {
	href = strings.TrimSpace(href)
	if href == "" || strings.HasPrefix(href, "#") {
		return ""
	}
	u, err := url.Parse(href)
	if err != nil {
		return ""
	}
	if c.base != nil {
		u = c.base.ResolveReference(u)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return u.String()
}

func (c *converter) endLink() {
	if c.linkOpen {
		c.w.WriteString("](")
		c.w.WriteString(c.link)
		c.w.WriteByte(')')
	}
	c.href, c.link, c.linkOpen = "", "", false
}

// lineHas reports whether the current line has text.
func (c *converter) lineHas() bool { return c.w.Len() > 0 && c.nl == 0 }

// lineBreak asks for n line breaks (n-1 blank lines) before the next text;
// inside a link it is a space, so the link stays on one line.
func (c *converter) lineBreak(n int) {
	if c.linkOpen {
		c.space = true
		return
	}
	if c.w.Len() == 0 {
		return
	}
	c.breaks = max(c.breaks, n)
	c.space, c.sep = false, ""
}

// flush writes what is due before text.
func (c *converter) flush() {
	for ; c.nl < c.breaks; c.nl++ {
		c.w.WriteByte('\n')
	}
	c.breaks = 0
	switch {
	case !c.lineHas():
		if c.prefix != "" {
			c.w.WriteString(c.prefix)
			c.nl, c.prefix = 0, ""
		}
	case c.sep != "":
		c.w.WriteString(c.sep)
	case c.space:
		c.w.WriteByte(' ')
	}
	c.space, c.sep = false, ""
	if c.href != "" && !c.linkOpen {
		// Resolved here, not at <a>: a link without text costs nothing.
		c.link, c.href = c.resolve(c.href), ""
		if c.link != "" {
			c.w.WriteByte('[')
			c.linkOpen = true
		}
	}
}

// write appends text and notes that the line has some.
func (c *converter) write(s string) {
	c.flush()
	c.w.WriteString(s)
	c.nl = 0
}

// text writes s with its whitespace collapsed.
func (c *converter) text(s string) {
	for len(s) > 0 {
		i := strings.IndexFunc(s, unicode.IsSpace)
		if i < 0 {
			c.write(s)
			return
		}
		if i > 0 {
			c.write(s[:i])
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		s = s[i+size:]
		c.space = true
	}
}

// preText writes s as it is. A newline where a block break is due anyway
// (right after <pre>) is dropped.
func (c *converter) preText(s string) {
	for len(s) > 0 {
		line, rest, nl := strings.Cut(s, "\n")
		if line != "" {
			c.write(line)
		}
		if nl && c.w.Len() > 0 && c.breaks == 0 {
			c.w.WriteByte('\n')
			c.nl++
		}
		s = rest
	}
}
