package directory

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// ParseDocument never panics; its body is always a suffix of the
// normalised text; a document it parsed whole renders back (frontmatter
// as YAML, then the body) into the same document; and a skill built from
// any input has one-line, bounded, valid UTF-8 summary fields.
func FuzzParseDocument(f *testing.F) {
	for _, seed := range []string{
		"", "body", "---", "---\n", "---\n---\n", "---\ntitle: T\n---\nB",
		"---\r\ntitle: T\r\n---\r\nB\r\n", "---\ntitle: T\n---\na\n---\nb",
		"---\n[\n---\n", "---\ntitle: [a]\n---\n", "\ufeff---\ntitle: x\n...\n",
		"---\na: &a [*a]\n---\n", "---\ndescription: |\n  x\n  y\n---\n# H\n\ntext. more",
		"---\ntitle: !!binary /w==\n---\n", "\r\r\n", "---\n\r\n---\r\n", "---\ntitle: T\n---\n\r\r\nX\r",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		doc, err := ParseDocument(in)
		norm := normalizeNewlines(strings.TrimPrefix(in, "\ufeff"))
		if normalizeNewlines(norm) != norm {
			t.Fatalf("normalizing %q twice changes it", in)
		}
		if !strings.HasSuffix(norm, doc.Body) {
			t.Fatalf("body %q is not a suffix of %q", doc.Body, norm)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformedFrontmatter) || doc.Body != norm || doc.Frontmatter != (Frontmatter{}) {
				t.Fatalf("malformed: %v, %+v", err, doc)
			}
		} else if strings.HasPrefix(norm, fmOpen) && doc.Frontmatter != (Frontmatter{}) {
			y, merr := yaml.Marshal(doc.Frontmatter)
			if merr != nil {
				t.Fatalf("marshal %+v: %v", doc.Frontmatter, merr)
			}
			again, err := ParseDocument("---\n" + string(y) + "---\n" + doc.Body)
			if err != nil {
				t.Fatalf("rendered document does not parse: %v", err)
			}
			if again.Frontmatter != doc.Frontmatter || again.Body != doc.Body {
				t.Fatalf("round trip: %+v %q → %+v %q", doc.Frontmatter, doc.Body, again.Frontmatter, again.Body)
			}
		}
		s, _ := newSkill(ID{"w", "f"}, in, SourcePublished)
		for _, v := range []string{s.Title, s.Type, s.Description} {
			if !utf8.ValidString(v) || strings.ContainsAny(v, "\n\r\t") {
				t.Fatalf("summary field %q", v)
			}
		}
		if s.Title == "" || s.Type == "" || utf8.RuneCountInString(s.Title) > maxTitleLen {
			t.Fatalf("title %q type %q", s.Title, s.Type)
		}
		_ = buildIndex([]Skill{s})
	})
}

// ParseID never panics; what it accepts prints back, as an id and as a
// link, into the same id.
func FuzzParseID(f *testing.F) {
	for _, seed := range []string{
		"iii://sandbox/fs::read", "sandbox/fs::read", "w/a/b", "", "/", "iii://", "iii:///x",
		"w/", "/f", "w/f::", "w/ f", "iii://iii://w/f", "w\x00/f", "w/\xff",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		id, err := ParseID(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ParseID(%q): %v does not wrap ErrInvalidID", in, err)
			}
			return
		}
		for _, s := range []string{id.String(), id.Link()} {
			again, err := ParseID(s)
			if err != nil || again != id {
				t.Fatalf("ParseID(%q) = %+v; ParseID(%q) = %+v, %v", in, id, s, again, err)
			}
		}
		if in != id.String() && in != id.Link() {
			t.Fatalf("ParseID(%q) = %+v: input is neither form", in, id)
		}
	})
}
