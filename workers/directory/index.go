package directory

import (
	"strings"

	"github.com/iii-on-nats/iii/engine/wire"
)

// IndexPreamble opens the index markdown: how a model uses the links
// below it.
const IndexPreamble = "Each line links a skill document. Before you first call a function, read its skill with " +
	GetFunction + ` {"id": "<link>"}.`

// WorkerIndex is one worker's entry of the index.
type WorkerIndex struct {
	// Worker is the worker's name.
	Worker string `json:"worker"`
	// Overview is the body of the worker's overview skill
	// ("<worker>/overview") when there is one, otherwise a generated list
	// with one line per skill: "- [title](iii://id): description".
	Overview string `json:"overview"`
	// Skills are the ids of the worker's other skills, sorted.
	Skills []string `json:"skills"`
}

// Index is the skills index (directory::skills::index).
type Index struct {
	// Workers has one entry per worker with skills, sorted by name.
	Workers []WorkerIndex `json:"workers"`
	// Markdown is the whole index as one compact markdown document, meant
	// for a system prompt: [IndexPreamble], then per worker a "## worker"
	// heading, the overview skill's one-line description with its link
	// (when there is an overview skill), and one line per other skill.
	// It is "" when there are no skills.
	Markdown string `json:"markdown"`
	// Truncated is set when the index did not fit the server's max
	// payload: the workers' overviews were left out ("") and, if that was
	// not enough, the markdown was cut after a whole line and ends with
	// [IndexTruncatedNote].
	Truncated bool `json:"truncated,omitempty"`
}

// IndexTruncatedNote ends the markdown of an index cut to fit the
// server's max payload.
const IndexTruncatedNote = "\n(The index is cut here: list the other skills with " + ListFunction + ".)\n"

// fitIndex is idx as it fits budget bytes in codec: whole when it fits;
// else without the workers' overviews; else with the markdown also cut
// after a whole line (and, when not one line fits beside them, the
// workers' skill lists emptied).
func fitIndex(idx Index, codec wire.Codec, budget int) (Index, error) {
	size := func(x Index) (int, error) {
		b, err := codec.Marshal(x)
		if err != nil {
			return 0, wire.Wrap(wire.CodeInternal, err, "skills index does not encode")
		}
		return len(b), nil
	}
	n, err := size(idx)
	if err != nil || n <= budget {
		return idx, err
	}
	out := Index{Workers: make([]WorkerIndex, len(idx.Workers)), Markdown: idx.Markdown, Truncated: true}
	for i, wi := range idx.Workers {
		out.Workers[i] = WorkerIndex{Worker: wi.Worker, Skills: wi.Skills}
	}
	md, bare := idx.Markdown, false
	for {
		if n, err = size(out); err != nil || n <= budget {
			return out, err
		}
		// Keep the share of the markdown that fits, to the line before.
		keep := max(len(md)-(n-budget)-len(IndexTruncatedNote), 0)
		if keep >= len(md) {
			keep = len(md) - 1
		}
		cut := strings.LastIndexByte(md[:keep], '\n')
		if cut <= 0 {
			// Not even one line fits beside the workers: leave their
			// skill lists out too.
			if !bare {
				bare = true
				for i := range out.Workers {
					out.Workers[i].Skills = []string{}
				}
				out.Markdown, md = idx.Markdown, idx.Markdown
				continue
			}
			out.Markdown = strings.TrimPrefix(IndexTruncatedNote, "\n")
			return out, nil
		}
		md = md[:cut+1]
		out.Markdown = md + IndexTruncatedNote
	}
}

// buildIndex builds the index of skills (sorted by id, so grouped by
// worker).
func buildIndex(skills []Skill) Index {
	idx := Index{Workers: []WorkerIndex{}}
	if len(skills) == 0 {
		return idx
	}
	var md strings.Builder
	md.WriteString("# Skills\n\n")
	md.WriteString(IndexPreamble)
	md.WriteString("\n")
	for i := 0; i < len(skills); {
		worker := skills[i].Worker
		j := i
		for j < len(skills) && skills[j].Worker == worker {
			j++
		}
		wi, section := workerIndex(worker, skills[i:j])
		idx.Workers = append(idx.Workers, wi)
		md.WriteString("\n## ")
		md.WriteString(worker)
		md.WriteString("\n")
		md.WriteString(section)
		i = j
	}
	idx.Markdown = md.String()
	return idx
}

// workerIndex is the index entry of one worker's skills and its section
// of the markdown (lines after the heading).
func workerIndex(worker string, skills []Skill) (WorkerIndex, string) {
	wi := WorkerIndex{Worker: worker, Skills: []string{}}
	var overview *Skill
	var lines strings.Builder
	for k := range skills {
		s := &skills[k]
		if s.ID == worker+"/"+OverviewName {
			overview = s
			continue
		}
		wi.Skills = append(wi.Skills, s.ID)
		lines.WriteString(skillLine(s))
		lines.WriteString("\n")
	}
	var section strings.Builder
	if overview != nil {
		wi.Overview = strings.TrimSpace(overview.Body)
		if d := truncate(overview.Description, MaxDescriptionLen); d != "" {
			section.WriteString(d)
			section.WriteString(" ")
		}
		section.WriteString("([overview](")
		section.WriteString(escapeDest(overview.Link))
		section.WriteString("))\n")
	} else {
		wi.Overview = strings.TrimSuffix(lines.String(), "\n")
	}
	section.WriteString(lines.String())
	return wi, section.String()
}

// skillLine is "- [title](iii://id): description" (no ": description"
// when there is none).
func skillLine(s *Skill) string {
	var b strings.Builder
	b.WriteString("- [")
	b.WriteString(escapeText(s.Title))
	b.WriteString("](")
	b.WriteString(escapeDest(s.Link))
	b.WriteString(")")
	if d := truncate(s.Description, MaxDescriptionLen); d != "" {
		b.WriteString(": ")
		b.WriteString(d)
	}
	return b.String()
}

var (
	textEscaper = strings.NewReplacer(`\`, `\\`, `[`, `\[`, `]`, `\]`)
	destEscaper = strings.NewReplacer(`\`, `\\`, `(`, `\(`, `)`, `\)`, `<`, `\<`, `>`, `\>`)
)

// escapeText escapes what would end a markdown link text.
func escapeText(s string) string { return textEscaper.Replace(s) }

// escapeDest escapes what would end a markdown link destination (a skill
// id has no whitespace).
func escapeDest(s string) string { return destEscaper.Replace(s) }
