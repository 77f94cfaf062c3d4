package sessiontree

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// ExportHTML renders the path to the leaf (the active leaf by default) as
// one self-contained HTML page: inline CSS, no scripts, no external
// resources. Every text is escaped by html/template; images are inlined
// as data: URLs only for png, jpeg, gif and webp with valid base64.
func (s *Store) ExportHTML(ctx context.Context, req ReadRequest) (ExportHTMLResponse, error) {
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	m, p, err := s.readPath(ctx, req)
	if err != nil {
		return ExportHTMLResponse{}, err
	}
	page, err := renderHTML(m, p)
	if err != nil {
		return ExportHTMLResponse{}, wire.Wrap(wire.CodeInternal, err, "render session %s", m.SessionID)
	}
	resp := ExportHTMLResponse{HTML: page}
	if len(p) > 0 {
		resp.Leaf = p[len(p)-1].id()
		resp.LastEntryID = resp.Leaf
	}
	return resp, nil
}

// exportPage is the answer of session::export_html to req, encoded in
// codec in at most limit bytes: the page from the entry after req.After
// (from its head without one) as far as it fits, whole entries only, the
// end of the page with the last entry. An entry too large for an answer
// of its own comes with its texts cut, saying how much was left out. A
// page that fits whole is rendered and encoded once.
func (s *Store) exportPage(ctx context.Context, req ExportHTMLRequest, codec wire.Codec, limit int) (engine.Raw, error) {
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	m, p, err := s.pagePath(ctx, ReadRequest{SessionID: req.SessionID, Leaf: req.Leaf}, req.After != "")
	if err != nil {
		return nil, err
	}
	resp := ExportHTMLResponse{}
	if len(p) > 0 {
		resp.Leaf = p[len(p)-1].id()
	}
	start := 0
	if req.After != "" {
		i := slices.IndexFunc(p, func(n node) bool { return n.id() == req.After })
		if i < 0 {
			return nil, invalid("after %s is not an entry of the path to %s", req.After, req.Leaf)
		}
		start = i + 1
	} else {
		if resp.HTML, err = renderHTML(m, p); err != nil {
			return nil, wire.Wrap(wire.CodeInternal, err, "render session %s", m.SessionID)
		}
		resp.LastEntryID = resp.Leaf
		body, err := codec.Marshal(resp)
		if err != nil {
			return nil, wire.Wrap(wire.CodeInternal, err, "encode the export of session %s", m.SessionID)
		}
		if len(body) <= limit {
			s.keepPath(p, false)
			return body, nil
		}
	}
	render := func(name string, data any) (string, int, error) {
		var b strings.Builder
		if err := pageTemplate.ExecuteTemplate(&b, name, data); err != nil {
			return "", 0, wire.Wrap(wire.CodeInternal, err, "render session %s", m.SessionID)
		}
		enc, err := codec.Marshal(b.String())
		if err != nil {
			return "", 0, wire.Wrap(wire.CodeInternal, err, "encode the export of session %s", m.SessionID)
		}
		return b.String(), len(enc), nil
	}
	var parts []string
	used := 0
	if start == 0 {
		head, n, err := render("head", newHTMLPage(m, len(p)))
		if err != nil {
			return nil, err
		}
		parts, used = append(parts, head), n
	}
	// The end of the page is small: room is kept for it on every part.
	foot, footSize, err := render("foot", nil)
	if err != nil {
		return nil, err
	}
	i := start
	for ; i < len(p); i++ {
		e := htmlEntryOf(&p[i])
		sec, n, err := render("entry", e)
		if err != nil {
			return nil, err
		}
		if used+n+footSize > limit {
			if i > start {
				break
			}
			if sec, n, err = cutSection(e, limit-used-footSize, render); err != nil {
				return nil, err
			}
		}
		parts, used = append(parts, sec), used+n
	}
	if i > start {
		resp.LastEntryID = p[i-1].id()
	}
	if resp.Truncated = i < len(p); !resp.Truncated {
		if len(p) == 0 {
			empty, _, err := render("empty", nil)
			if err != nil {
				return nil, err
			}
			parts = append(parts, empty)
		}
		parts = append(parts, foot)
	}
	resp.HTML = strings.Join(parts, "")
	body, err := codec.Marshal(resp)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode the export of session %s", m.SessionID)
	}
	s.keepPath(p, resp.Truncated)
	return body, nil
}

// cutSection renders e alone in at most room encoded bytes: its texts
// cut, its images left out, a note saying how much.
func cutSection(e htmlEntry, room int, render func(string, any) (string, int, error)) (string, int, error) {
	longest := len(e.Note)
	for _, b := range e.Blocks {
		longest = max(longest, len(b.Text))
	}
	for n := longest / 2; ; n /= 2 {
		sec, size, err := render("entry", cutEntry(e, n))
		if err != nil || size <= room || n == 0 {
			return sec, size, err
		}
	}
}

// cutEntry is e with every text (its note included) cut to at most n
// bytes and its images left out, noting how many bytes it left out.
func cutEntry(e htmlEntry, n int) htmlEntry {
	left := 0
	cut := func(s string) string {
		if len(s) <= n {
			return s
		}
		k := n
		for k > 0 && !utf8.RuneStart(s[k]) {
			k--
		}
		left += len(s) - k
		return s[:k] + "…"
	}
	out := e
	out.Blocks = make([]htmlBlock, len(e.Blocks))
	for i, b := range e.Blocks {
		if b.Kind == "image" {
			left += len(b.Image)
			b = htmlBlock{Kind: "text", Text: "[image not shown]"}
		} else {
			b.Text = cut(b.Text)
		}
		out.Blocks[i] = b
	}
	out.Note = cut(e.Note)
	if out.Note != "" {
		out.Note += " · "
	}
	out.Note += strconv.Itoa(left) + " bytes of this entry left out: it is larger than one answer of session::export_html can hold"
	return out
}

type htmlPage struct {
	Title string
	Meta  Meta
	// Count is the number of entries on the path.
	Count int
}

// newHTMLPage is the head of the page of a path of count entries of
// session m, titled with its display name, or its id.
func newHTMLPage(m Meta, count int) htmlPage {
	p := htmlPage{Title: m.DisplayName, Meta: m, Count: count}
	if p.Title == "" {
		p.Title = "Session " + m.SessionID
	}
	return p
}

type htmlEntry struct {
	ID, ParentID, Time string
	Class, Heading     string
	Blocks             []htmlBlock
	Note               string
}

type htmlBlock struct {
	Kind  string // text, thinking, call, image, json
	Title string
	Text  string
	Image template.URL
}

// renderHTML is the whole page of path p of session m: its head, an
// entry after another, its end (session::export_html may send them in
// several parts).
func renderHTML(m Meta, p []node) (string, error) {
	var b bytes.Buffer
	if err := pageTemplate.ExecuteTemplate(&b, "head", newHTMLPage(m, len(p))); err != nil {
		return "", err
	}
	for i := range p {
		if err := pageTemplate.ExecuteTemplate(&b, "entry", htmlEntryOf(&p[i])); err != nil {
			return "", err
		}
	}
	if len(p) == 0 {
		if err := pageTemplate.ExecuteTemplate(&b, "empty", nil); err != nil {
			return "", err
		}
	}
	if err := pageTemplate.ExecuteTemplate(&b, "foot", nil); err != nil {
		return "", err
	}
	return b.String(), nil
}

func htmlEntryOf(n *node) htmlEntry {
	r := &n.rec
	e := htmlEntry{ID: n.id(), ParentID: r.ParentID, Time: time.UnixMilli(r.Timestamp).UTC().Format(time.RFC3339)}
	switch r.Type {
	case TypeMessage:
		msg := r.Message
		e.Class, e.Heading = string(msg.Role), string(msg.Role)
		if msg.Role == agent.RoleAssistant && msg.Model != "" {
			e.Heading += " · " + msg.Model
		}
		if msg.Role == agent.RoleFunctionResult {
			e.Heading += " · " + msg.FunctionID
			if msg.IsError {
				e.Class += " error"
				e.Heading += " (error)"
			}
		}
		if msg.ErrorMessage != "" {
			e.Note = msg.ErrorMessage
		}
		for _, c := range msg.Content {
			e.Blocks = append(e.Blocks, htmlBlockOf(c))
		}
		if msg.Details != nil {
			e.Blocks = append(e.Blocks, htmlBlock{Kind: "json", Title: "details", Text: prettyJSON(msg.Details)})
		}
	case TypeCompaction:
		e.Class, e.Heading = "summary", "compaction"
		e.Blocks = []htmlBlock{{Kind: "text", Text: r.Summary}}
		if r.FirstKeptEntryID != "" {
			e.Note = "kept from " + r.FirstKeptEntryID
		}
	case TypeBranchSummary:
		e.Class, e.Heading = "summary", "branch summary"
		e.Blocks = []htmlBlock{{Kind: "text", Text: r.Summary}}
		e.Note = "from " + r.FromEntryID
	case TypeCustom:
		e.Class, e.Heading = "custom", "custom · "+r.CustomType
		if r.Data != nil {
			e.Blocks = []htmlBlock{{Kind: "json", Text: prettyJSON(r.Data)}}
		}
	}
	return e
}

var imageMime = regexp.MustCompile(`^image/(png|jpeg|gif|webp)$`)

func htmlBlockOf(c agent.Content) htmlBlock {
	switch c.Type {
	case agent.ContentThinking:
		return htmlBlock{Kind: "thinking", Title: "thinking", Text: c.Text}
	case agent.ContentFunctionCall:
		return htmlBlock{Kind: "call", Title: c.FunctionID + " (" + c.ID + ")", Text: prettyJSON(c.Arguments)}
	case agent.ContentImage:
		if imageMime.MatchString(c.Mime) {
			if _, err := base64.StdEncoding.DecodeString(c.Data); err == nil {
				// The mime is one of four fixed strings and the data is
				// base64: the URL cannot leave the attribute.
				return htmlBlock{Kind: "image", Image: template.URL("data:" + c.Mime + ";base64," + c.Data)}
			}
		}
		return htmlBlock{Kind: "text", Text: "[image " + c.Mime + " not shown]"}
	default:
		return htmlBlock{Kind: "text", Text: c.Text}
	}
}

// prettyJSON is v as indented JSON, '<' and '&' left as they are (the
// template escapes them).
func prettyJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return "(not JSON)"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

var pageTemplate = template.Must(template.New("session").Funcs(template.FuncMap{
	"ms": func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) },
}).Parse(`{{define "head"}}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>{{.Title}}</title>
<style>
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{padding:1.2em 2em;background:#1d2330;color:#f6f7f9}
header h1{margin:0;font-size:1.3em}
header p{margin:.3em 0 0;opacity:.75;font-size:.85em}
main{max-width:58em;margin:1.5em auto;padding:0 1em}
section{background:#fff;border-radius:8px;margin:0 0 1em;padding:.8em 1.1em;border-left:4px solid #9aa3b5;box-shadow:0 1px 2px rgba(0,0,0,.06)}
section.user{border-color:#3b7ddd}
section.assistant{border-color:#2f9e6e}
section.function_result{border-color:#b08900}
section.error{border-color:#d64545}
section.summary{border-color:#8a5cd6;background:#faf7ff}
section.custom{border-color:#9aa3b5;background:#fbfbfc}
h2{font-size:.8em;text-transform:uppercase;letter-spacing:.05em;margin:0 0 .4em;color:#5b6475;display:flex;justify-content:space-between;gap:1em}
h2 span.id{font-family:ui-monospace,monospace;text-transform:none;letter-spacing:0}
.text{white-space:pre-wrap;word-wrap:break-word}
pre{background:#f1f3f6;padding:.6em .8em;border-radius:6px;overflow-x:auto;font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;margin:.4em 0}
details{margin:.4em 0;color:#5b6475}
summary{cursor:pointer;font-size:.85em}
img{max-width:100%;border-radius:6px}
.note{font-size:.8em;color:#5b6475;margin-top:.4em}
.empty{color:#5b6475;text-align:center}
</style>
</head>
<body>
<header>
<h1>{{.Title}}</h1>
<p>session {{.Meta.SessionID}} · created {{ms .Meta.CreatedAt}} · {{.Count}} entries on this path{{with .Meta.ForkedFrom}} · forked from {{.SessionID}}{{with .EntryID}} at {{.}}{{end}}{{end}}</p>
</header>
<main>{{end}}
{{- define "entry"}}
<section class="{{.Class}}" id="{{.ID}}">
<h2><span>{{.Heading}}</span><span class="id">{{.ID}} · {{.Time}}</span></h2>
{{- range .Blocks}}
{{- if eq .Kind "thinking"}}
<details><summary>{{.Title}}</summary><div class="text">{{.Text}}</div></details>
{{- else if eq .Kind "call"}}
<details open><summary>call {{.Title}}</summary><pre>{{.Text}}</pre></details>
{{- else if eq .Kind "json"}}
<details><summary>{{or .Title "data"}}</summary><pre>{{.Text}}</pre></details>
{{- else if eq .Kind "image"}}
<img src="{{.Image}}" alt="image">
{{- else}}
<div class="text">{{.Text}}</div>
{{- end}}
{{- end}}
{{- with .Note}}
<div class="note">{{.}}</div>
{{- end}}
</section>{{end}}
{{- define "empty"}}
<p class="empty">This session has no entries.</p>{{end}}
{{- define "foot"}}
</main>
</body>
</html>
{{end}}`))
