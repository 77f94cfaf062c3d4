package directory

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Frontmatter is the metadata block that may open a skill document. Keys
// it does not name are ignored.
type Frontmatter struct {
	// Title is the skill's display title.
	Title string `yaml:"title,omitempty"`
	// Type classifies the skill ("function", "overview", or a word of the
	// author's choosing such as "guide").
	Type string `yaml:"type,omitempty"`
	// FunctionID is the function the skill documents.
	FunctionID string `yaml:"function_id,omitempty"`
	// Description is a one-line summary for lists and the index.
	Description string `yaml:"description,omitempty"`
}

// Document is a skill document split into its frontmatter and its
// markdown body.
type Document struct {
	Frontmatter
	// Body is the markdown after the frontmatter (the whole text when there
	// is none), with CRLF line endings turned into LF.
	Body string
}

// Frontmatter delimiters: the opening line is "---"; the closing one is
// "---" or YAML's end-of-document "...". Trailing blanks are allowed.
const (
	fmOpen     = "---"
	fmCloseAlt = "..."
)

// ParseDocument splits markdown into its optional YAML frontmatter and its
// body. A frontmatter is a first line "---", YAML lines, and a closing line
// "---" (or "..."); a later "---" line (a markdown rule) belongs to the
// body. Line endings are normalised to LF, and a leading byte order mark
// is dropped.
//
// A document without frontmatter is all body. A frontmatter that is not
// closed or does not parse as a YAML mapping of the [Frontmatter] fields
// makes ParseDocument return the whole text as Body together with an error
// wrapping [ErrMalformedFrontmatter]: the document stays usable, and the
// caller decides whether to log.
func ParseDocument(markdown string) (Document, error) {
	text := normalizeNewlines(strings.TrimPrefix(markdown, "\ufeff"))
	first, rest, ok := strings.Cut(text, "\n")
	if strings.TrimRight(first, " \t") != fmOpen {
		return Document{Body: text}, nil
	}
	if !ok {
		return Document{Body: text}, fmt.Errorf("%w: opening --- is not closed", ErrMalformedFrontmatter)
	}
	yamlEnd, bodyStart := -1, -1
	for off := 0; off <= len(rest); {
		line, next, more := strings.Cut(rest[off:], "\n")
		if t := strings.TrimRight(line, " \t"); t == fmOpen || t == fmCloseAlt {
			yamlEnd = off
			bodyStart = len(rest)
			if more {
				bodyStart = off + len(line) + 1
			}
			break
		}
		if !more {
			break
		}
		off = len(rest) - len(next)
	}
	if yamlEnd < 0 {
		return Document{Body: text}, fmt.Errorf("%w: opening --- is not closed", ErrMalformedFrontmatter)
	}
	var fm Frontmatter
	if err := yaml.Unmarshal([]byte(rest[:yamlEnd]), &fm); err != nil {
		return Document{Body: text}, fmt.Errorf("%w: %v", ErrMalformedFrontmatter, err)
	}
	return Document{Frontmatter: fm, Body: strings.TrimLeft(rest[bodyStart:], "\n")}, nil
}

// normalizeNewlines turns CRLF into LF; a run of CRs before a LF goes
// with it, so normalising twice changes nothing.
func normalizeNewlines(s string) string {
	if !strings.Contains(s, "\r\n") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if s[i] != '\r' {
			b.WriteByte(s[i])
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '\r' {
			j++
		}
		if j == len(s) || s[j] != '\n' {
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}
