package orchestrator

import (
	"strings"

	"github.com/iii-on-nats/iii/agent"
)

// promptParts are the pieces of a run's assembled system prompt.
type promptParts struct {
	Mode agent.Mode
	// Index is the directory's skills index (markdown), "" when no
	// directory answered.
	Index string
	// Skills are the documents of the run's default skills.
	Skills []skillDoc
	// Sandbox is the run's sandbox, nil without one.
	Sandbox *sandboxCreated
}

// skillDoc is one skill as directory::skills::get answers it.
type skillDoc struct {
	ID    string `json:"id"`
	Link  string `json:"link"`
	Title string `json:"title"`
	Body  string `json:"body"`
}

// identityPreamble teaches the model how it acts in iii.
const identityPreamble = "You are an agent running in iii, a harness whose capabilities are functions on a shared bus. " +
	"You act by calling functions (ids like `fs::read`); their results come back to you as function results. " +
	"Every call passes a permission policy, and some wait for a human's approval: a denial is an answer, not an obstacle to work around, " +
	"so do not retry a denied call unchanged. " +
	"Before you call a function for the first time, read its skill with `directory::skills::get {\"id\": \"iii://<worker>/<function id>\"}` " +
	"(the links below): it says what the function does, its arguments and its pitfalls."

// modeParagraph says what the run may do.
func modeParagraph(m agent.Mode) string {
	switch m {
	case agent.ModePlan:
		return "Mode: plan. Change nothing: no writes and no commands with effects. Investigate with read-only functions, " +
			"then answer with a numbered plan the user can approve."
	case agent.ModeAsk:
		return "Mode: ask. Answer the user's question directly. Call functions only to look things up; change nothing."
	default:
		return "Mode: agent. Work on the user's request until it is done: plan briefly, act through functions, check what they return, " +
			"and finish with a short report of what you did and what is left."
	}
}

// assemblePrompt builds the system prompt of a run that did not bring its
// own: identity preamble, mode paragraph, the skills index, the run's
// default skills, then the sandbox's workspace. The result is frozen in
// the run's record at provisioning.
func assemblePrompt(p promptParts) string {
	var b strings.Builder
	b.WriteString(identityPreamble)
	b.WriteString("\n\n")
	b.WriteString(modeParagraph(p.Mode))
	if p.Sandbox != nil {
		b.WriteString("\n\n")
		b.WriteString(workspacePrompt(*p.Sandbox))
	}
	if idx := strings.TrimSpace(p.Index); idx != "" {
		// The directory's index brings its own heading ("# Skills").
		b.WriteString("\n\n")
		b.WriteString(idx)
	}
	if len(p.Skills) > 0 {
		b.WriteString("\n\n# Skills for this run")
		for _, s := range p.Skills {
			title := s.Title
			if title == "" {
				title = s.ID
			}
			b.WriteString("\n\n## ")
			b.WriteString(title)
			if s.Link != "" {
				b.WriteString(" (")
				b.WriteString(s.Link)
				b.WriteString(")")
			}
			b.WriteString("\n\n")
			b.WriteString(strings.TrimSpace(s.Body))
		}
	}
	return b.String()
}

// offeredIndex keeps of the directory's index markdown the skills of the
// functions the run offers the model (agent.RunStart.Offers) that live
// reports registered (nil: all of them), and the sections of workers with
// at least one of them: the prompt lists what the model can call, not the
// harness's own machinery, nor functions no worker serves any more (their
// skills stay published in the skills bucket). Lines it does not
// recognise are kept.
func offeredIndex(md string, run agent.RunStart, live func(fn string) bool) string {
	var out, section []string
	keep, kept, inSections := false, false, false
	flush := func() {
		if keep {
			out, kept = append(out, section...), true
		}
		section, keep = nil, false
	}
	for _, line := range strings.Split(md, "\n") {
		switch fn, ok := indexedFunction(line); {
		case strings.HasPrefix(line, "## "):
			flush()
			inSections = true
			section = append(section, line)
		case !inSections:
			out = append(out, line)
		case ok && fn != "" && (!run.Offers(fn) || live != nil && !live(fn)):
			// a function the run does not offer, or that is gone
		default:
			keep = keep || (ok && fn != "")
			section = append(section, line)
		}
	}
	flush()
	if inSections && !kept {
		return "" // no worker left: no index
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

// indexedFunction reads the function id of an index line
// "- [title](iii://worker/function): …": ok for a skill line, with fn ""
// for a worker's page that is not a function (its overview).
func indexedFunction(line string) (fn string, ok bool) {
	_, rest, found := strings.Cut(line, "](iii://")
	if !found || !strings.HasPrefix(strings.TrimSpace(line), "- [") {
		return "", false
	}
	id, _, found := strings.Cut(rest, ")")
	if !found {
		return "", false
	}
	_, name, found := strings.Cut(id, "/")
	if !found {
		return "", false
	}
	if !strings.Contains(name, "::") {
		return "", true // a page such as <worker>/overview
	}
	return name, true
}
