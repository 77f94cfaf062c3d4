package directory

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/subjects"
)

// Where a served skill came from.
const (
	// SourcePublished: a worker published it to the skills bucket
	// (subjects.SkillsBucket).
	SourcePublished = "published"
	// SourceFolder: a file of the skills folder; it overrides a published
	// skill of the same id.
	SourceFolder = "folder"
)

// Skill types the directory assigns when a document's frontmatter names
// none; authors may use other words.
const (
	// TypeFunction is a skill that documents one function.
	TypeFunction = "function"
	// TypeOverview is a worker's overview skill ([OverviewName]).
	TypeOverview = "overview"
)

// MaxDescriptionLen bounds a description, in characters: a derived one
// (the body's first sentence) and every description the index prints.
const MaxDescriptionLen = 200

// maxTitleLen bounds a title, in characters.
const maxTitleLen = 200

// Summary is a skill without its body: an entry of directory::skills::list.
type Summary struct {
	// ID is "<worker>/<name>".
	ID string `json:"id"`
	// Link is "iii://<worker>/<name>".
	Link string `json:"link"`
	// Worker owns the skill.
	Worker string `json:"worker"`
	// Title is the frontmatter's title, else the function id, else the
	// skill's name.
	Title string `json:"title"`
	// Type is the frontmatter's type, else [TypeOverview] for
	// "<worker>/overview" and [TypeFunction] for any other name.
	Type string `json:"type,omitempty"`
	// FunctionID is the frontmatter's function_id, else, for a skill of
	// type [TypeFunction], its name.
	FunctionID string `json:"function_id,omitempty"`
	// Description is the frontmatter's description, else the body's first
	// sentence (at most [MaxDescriptionLen] characters); one line.
	Description string `json:"description,omitempty"`
}

// Skill is one skill document as the directory serves it
// (directory::skills::get).
type Skill struct {
	Summary
	// Body is the markdown after the frontmatter.
	Body string `json:"body"`
	// Source is [SourcePublished] or [SourceFolder].
	Source string `json:"source"`
}

// newSkill builds the skill id from its document. The skill is always
// usable; the error, when not nil, says what was ignored (a malformed
// frontmatter, an invalid function_id) and is for the log.
func newSkill(id ID, markdown, source string) (Skill, error) {
	doc, err := ParseDocument(markdown)
	var problems []error
	if err != nil {
		problems = append(problems, err)
	}
	s := Skill{
		Summary: Summary{
			ID:          id.String(),
			Link:        id.Link(),
			Worker:      id.Worker,
			Type:        oneLine(doc.Type, maxTitleLen),
			Title:       oneLine(doc.Title, maxTitleLen),
			FunctionID:  strings.TrimSpace(doc.FunctionID),
			Description: oneLine(doc.Description, 0),
		},
		Body:   doc.Body,
		Source: source,
	}
	if s.Type == "" {
		s.Type = TypeFunction
		if id.Name == OverviewName {
			s.Type = TypeOverview
		}
	}
	if s.FunctionID != "" {
		if verr := subjects.ValidateFunctionID(s.FunctionID); verr != nil {
			problems = append(problems, fmt.Errorf("function_id ignored: %w", verr))
			s.FunctionID = ""
		}
	}
	if s.FunctionID == "" && s.Type == TypeFunction {
		s.FunctionID = id.Name
	}
	if s.Title == "" {
		s.Title = s.FunctionID
		if s.Title == "" {
			s.Title = id.Name
		}
	}
	if s.Description == "" {
		s.Description = firstSentence(s.Body)
	}
	return s, errors.Join(problems...)
}

// oneLine makes s one line of valid UTF-8: runs of whitespace and control
// characters become one space, ends trimmed; max > 0 bounds it in
// characters (cut with "…").
func oneLine(s string, max int) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	n := 0
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			n++
			space = false
		}
		b.WriteRune(r)
		n++
	}
	return truncate(b.String(), max)
}

// truncate cuts s to max characters, the last one "…"; max <= 0 keeps s.
func truncate(s string, max int) string {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	i, n := 0, 0
	for i = range s {
		if n == max-1 {
			break
		}
		n++
	}
	return strings.TrimRightFunc(s[:i], unicode.IsSpace) + "…"
}

// firstSentence is the description a body implies: its first line of prose
// (headings, rules, fences, tables, quotes' markers and list bullets
// skipped), cut after the first sentence and bounded by
// [MaxDescriptionLen].
func firstSentence(body string) string {
	fenced := false
	for line := range strings.SplitSeq(body, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced || t == "" || strings.HasPrefix(t, "#") || strings.HasPrefix(t, "|") || isRule(t) || strings.HasPrefix(t, "<!--") {
			continue
		}
		t = strings.TrimLeft(t, "> ")
		for _, bullet := range []string{"- ", "* ", "+ "} {
			t = strings.TrimPrefix(t, bullet)
		}
		t = oneLine(t, 0)
		if t == "" {
			continue
		}
		return truncate(cutSentence(t), MaxDescriptionLen)
	}
	return ""
}

// cutSentence keeps s up to and including its first sentence end: '.',
// '!' or '?' followed by a space.
func cutSentence(s string) string {
	for i := 0; i+1 < len(s); i++ {
		switch s[i] {
		case '.', '!', '?':
			if s[i+1] == ' ' {
				return s[:i+1]
			}
		}
	}
	return s
}

// isRule reports whether t is a markdown thematic break ("---", "***",
// "___", possibly spaced).
func isRule(t string) bool {
	if len(t) < 3 {
		return false
	}
	c := t[0]
	if c != '-' && c != '*' && c != '_' {
		return false
	}
	n := 0
	for i := 0; i < len(t); i++ {
		switch t[i] {
		case c:
			n++
		case ' ', '\t':
		default:
			return false
		}
	}
	return n >= 3
}
