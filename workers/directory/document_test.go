package directory

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseDocument(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		in        string
		fm        Frontmatter
		body      string
		malformed bool
	}{
		{name: "no frontmatter", in: "# Read\nReads a file.\n", body: "# Read\nReads a file.\n"},
		{name: "empty", in: "", body: ""},
		{
			name: "all fields",
			in:   "---\ntitle: Read a file\ntype: function\nfunction_id: fs::read\ndescription: Reads.\n---\nBody.\n",
			fm:   Frontmatter{Title: "Read a file", Type: "function", FunctionID: "fs::read", Description: "Reads."},
			body: "Body.\n",
		},
		{name: "unknown keys ignored", in: "---\ntitle: T\ntags: [a, b]\nnested: {x: 1}\n---\nB", fm: Frontmatter{Title: "T"}, body: "B"},
		{name: "empty frontmatter", in: "---\n---\nB\n", body: "B\n"},
		{name: "blank lines after frontmatter dropped", in: "---\ntitle: T\n---\n\n\nB\n", fm: Frontmatter{Title: "T"}, body: "B\n"},
		{name: "no body", in: "---\ntitle: T\n---", fm: Frontmatter{Title: "T"}, body: ""},
		{name: "dots close", in: "---\ntitle: T\n...\nB", fm: Frontmatter{Title: "T"}, body: "B"},
		{name: "trailing blanks on delimiters", in: "---  \ntitle: T\n--- \t\nB", fm: Frontmatter{Title: "T"}, body: "B"},
		{
			name: "CRLF",
			in:   "---\r\ntitle: T\r\ndescription: D\r\n---\r\nline 1\r\nline 2\r\n",
			fm:   Frontmatter{Title: "T", Description: "D"},
			body: "line 1\nline 2\n",
		},
		{name: "CRLF without frontmatter", in: "a\r\nb\r\n", body: "a\nb\n"},
		{name: "BOM", in: "\ufeff---\ntitle: T\n---\nB", fm: Frontmatter{Title: "T"}, body: "B"},
		{
			name: "body containing ---",
			in:   "---\ntitle: T\n---\nabove\n---\nbelow\n---\n",
			fm:   Frontmatter{Title: "T"},
			body: "above\n---\nbelow\n---\n",
		},
		{name: "rule later in a document without frontmatter", in: "text\n---\nmore\n", body: "text\n---\nmore\n"},
		{name: "indented opener is not frontmatter", in: " ---\ntitle: T\n---\n", body: " ---\ntitle: T\n---\n"},
		{name: "four dashes is not frontmatter", in: "----\ntitle: T\n----\nB", body: "----\ntitle: T\n----\nB"},
		{name: "scalars become strings", in: "---\ntitle: 42\ndescription: true\n---\nB", fm: Frontmatter{Title: "42", Description: "true"}, body: "B"},
		{name: "null fields", in: "---\ntitle: ~\n---\nB", body: "B"},
		{name: "multi-line description", in: "---\ndescription: |\n  one\n  two\n---\nB", fm: Frontmatter{Description: "one\ntwo\n"}, body: "B"},
		// Malformed: the whole text is the body.
		{name: "unclosed", in: "---\ntitle: T\nbody", body: "---\ntitle: T\nbody", malformed: true},
		{name: "only opener", in: "---", body: "---", malformed: true},
		{name: "opener and newline", in: "---\n", body: "---\n", malformed: true},
		{name: "not a mapping", in: "---\njust words\n---\nB", body: "---\njust words\n---\nB", malformed: true},
		{name: "a list", in: "---\n- a\n---\nB", body: "---\n- a\n---\nB", malformed: true},
		{name: "title is a list", in: "---\ntitle: [a]\n---\nB", body: "---\ntitle: [a]\n---\nB", malformed: true},
		{name: "duplicate key", in: "---\ntitle: a\ntitle: b\n---\nB", body: "---\ntitle: a\ntitle: b\n---\nB", malformed: true},
		{name: "bad yaml", in: "---\ntitle: \"open\n---\nB", body: "---\ntitle: \"open\n---\nB", malformed: true},
		{name: "malformed CRLF normalised", in: "---\r\n: :\r\n---\r\nB", body: "---\n: :\n---\nB", malformed: true},
	} {
		doc, err := ParseDocument(tc.in)
		if tc.malformed != errors.Is(err, ErrMalformedFrontmatter) || (!tc.malformed && err != nil) {
			t.Errorf("%s: error %v, malformed want %v", tc.name, err, tc.malformed)
		}
		if doc.Frontmatter != tc.fm || doc.Body != tc.body {
			t.Errorf("%s: ParseDocument(%q) = %+v %q; want %+v %q", tc.name, tc.in, doc.Frontmatter, doc.Body, tc.fm, tc.body)
		}
	}
}

func TestNewSkillDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		id      ID
		doc     string
		want    Summary
		problem bool
	}{
		{
			name: "function, no frontmatter",
			id:   ID{"sandbox", "fs::read"},
			doc:  "# fs::read\n\nReads a file. Paths are relative.\n",
			want: Summary{Title: "fs::read", Type: TypeFunction, FunctionID: "fs::read", Description: "Reads a file."},
		},
		{
			name: "frontmatter wins",
			id:   ID{"sandbox", "fs::read"},
			doc:  "---\ntitle: \" Read\n  a file \"\ntype: guide\nfunction_id: fs::stat\ndescription: Long\n  text.\n---\nBody.",
			want: Summary{Title: "Read a file", Type: "guide", FunctionID: "fs::stat", Description: "Long text."},
		},
		{
			name: "overview",
			id:   ID{"sandbox", OverviewName},
			doc:  "The sandbox runs commands!\nMore.",
			want: Summary{Title: OverviewName, Type: TypeOverview, Description: "The sandbox runs commands!"},
		},
		{
			name: "guide without function",
			id:   ID{"sandbox", "getting-started"},
			doc:  "---\ntype: guide\n---\n- first, a bullet? yes\n",
			want: Summary{Title: "getting-started", Type: "guide", Description: "first, a bullet?"},
		},
		{
			name:    "invalid function_id dropped",
			id:      ID{"w", "f"},
			doc:     "---\nfunction_id: \"a b\"\n---\nx",
			want:    Summary{Title: "f", Type: TypeFunction, FunctionID: "f", Description: "x"},
			problem: true,
		},
		{
			name:    "malformed frontmatter is body",
			id:      ID{"w", "f"},
			doc:     "---\n[\n---\nx",
			want:    Summary{Title: "f", Type: TypeFunction, FunctionID: "f", Description: "["},
			problem: true,
		},
		{
			name: "headings, fences, rules and tables skipped",
			id:   ID{"w", "f"},
			doc:  "# H\n***\n```\ncode. here\n```\n| a | b |\n> Quoted. Rest",
			want: Summary{Title: "f", Type: TypeFunction, FunctionID: "f", Description: "Quoted."},
		},
		{
			name: "empty body",
			id:   ID{"w", "f"},
			doc:  "---\ntitle: T\n---\n",
			want: Summary{Title: "T", Type: TypeFunction, FunctionID: "f"},
		},
	} {
		s, err := newSkill(tc.id, tc.doc, SourceFolder)
		if (err != nil) != tc.problem {
			t.Errorf("%s: problem %v", tc.name, err)
		}
		tc.want.ID, tc.want.Link, tc.want.Worker = tc.id.String(), tc.id.Link(), tc.id.Worker
		if s.Summary != tc.want || s.Source != SourceFolder {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, s.Summary, tc.want)
		}
	}
}

func TestDescriptionBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("word ", 100)
	s, _ := newSkill(ID{"w", "f"}, long, SourcePublished)
	if n := utf8.RuneCountInString(s.Description); n != MaxDescriptionLen || !strings.HasSuffix(s.Description, "…") {
		t.Fatalf("description %d runes: %q", n, s.Description)
	}
	s, _ = newSkill(ID{"w", "f"}, strings.Repeat("é", 500), SourcePublished)
	if n := utf8.RuneCountInString(s.Description); n != MaxDescriptionLen || !utf8.ValidString(s.Description) {
		t.Fatalf("description %d runes: %q", n, s.Description)
	}
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "ab…"},
		{"ab cd", 4, "ab…"},
		{"abcd", 1, "…"},
		{"abcd", 0, "abcd"},
	} {
		if got := truncate(tc.in, tc.max); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q; want %q", tc.in, tc.max, got, tc.want)
		}
	}
	if got := oneLine(" a\t\nb \x00 c\xff ", 0); got != "a b c\uFFFD" {
		t.Errorf("oneLine = %q", got)
	}
}
