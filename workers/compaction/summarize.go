package compaction

import (
	"context"
	"strings"

	"github.com/iii-on-nats/iii/agent"
)

// SummarySections are the headings of every summary, in order.
var SummarySections = []string{
	"Goal", "Constraints", "Progress", "Decisions",
	"Function calls made", "Next steps", "Critical context", "Files",
}

// SystemPrompt is the summarizer's system prompt.
const SystemPrompt = `You maintain the working memory of an AI agent whose conversation no longer fits in its context window. You receive the oldest part of the conversation, which is about to be dropped, and, when there is one, the summary of what came before it. You write the summary that replaces all of it: the agent continues from your summary and the most recent messages only, so keep every fact it still needs — the user's goal and requirements, what was done and what failed, decisions and their reasons, exact names, paths, identifiers, commands, error messages and numbers. Drop pleasantries and repetition. Never invent anything.

Answer in Markdown with exactly these level-2 headings, in this order, and nothing before or after them:

## Goal
## Constraints
## Progress
## Decisions
## Function calls made
## Next steps
## Critical context
## Files

Write "None." under a heading with nothing to say. Under "Function calls made" list the calls that matter and their outcomes (outputs marked as pruned were large; say what they were for). Under "Files" list every file read, written or mentioned, and what happened to it.`

// Instructions closing the summarizer's user message.
const (
	summarizeInstruction = "Summarize the conversation above. Answer with the summary only."
	updateInstruction    = "Update the previous summary with the conversation above: keep what still holds, add what is new, correct what changed. Answer with the updated summary only."
)

// LatestRequestHeading starts the section a split compaction appends to
// its summary: the newest user message, verbatim, which the kept messages
// no longer contain.
const LatestRequestHeading = "## Latest user request (verbatim)"

// minChunkBytes is the smallest transcript chunk worth a model call.
const minChunkBytes = 256

// userPrompt is the summarizer's user message around a transcript chunk.
func userPrompt(prev, body string) string {
	var b strings.Builder
	b.Grow(len(prev) + len(body) + 512)
	writePromptHead(&b, prev)
	b.WriteString(body)
	writePromptTail(&b, prev)
	return b.String()
}

func writePromptHead(b *strings.Builder, prev string) {
	if prev != "" {
		b.WriteString("<previous-summary>\n")
		b.WriteString(prev)
		b.WriteString("\n</previous-summary>\n\n")
	}
	b.WriteString("<conversation>\n")
}

func writePromptTail(b *strings.Builder, prev string) {
	b.WriteString("</conversation>\n\n")
	if prev != "" {
		b.WriteString(updateInstruction)
	} else {
		b.WriteString(summarizeInstruction)
	}
}

// promptOverhead is the size of the user message without its transcript.
func promptOverhead(prev string) int {
	var b strings.Builder
	writePromptHead(&b, prev)
	writePromptTail(&b, prev)
	return b.Len()
}

// completeFunc asks the model for one summary.
type completeFunc func(ctx context.Context, system, user string, maxTokens int) (string, error)

// summarizer folds a transcript into a running summary, in as many model
// calls as the window requires.
type summarizer struct {
	complete   completeFunc
	usable     int // the model's usable window, in estimated tokens
	maxTokens  int // the summary's output bound
	pruneBytes int
	// maxBytes bounds the user message (the bus's max payload, less room
	// for the envelope); 0 means no bound.
	maxBytes int
}

// run summarizes msgs on top of prev (the previous summary, or ""). Each
// call's request (system prompt and user message) is estimated at most
// s.usable tokens: the rendered messages are packed into chunks that fit
// beside the running summary, a message too big for a chunk of its own is
// shortened, and each chunk's summary becomes the next one's previous
// summary. A request also stays under the bus's max payload (maxBytes).
// It returns the summary and the number of model calls.
func (s summarizer) run(ctx context.Context, prev string, msgs []agent.Message) (string, int, error) {
	rendered := renderMessages(msgs, s.pruneBytes)
	room := tokenBytes(s.usable - tokens(len(SystemPrompt))) // bytes of user message
	if s.maxBytes > 0 {
		room = min(room, s.maxBytes)
	}
	running, calls := prev, 0
	for i := 0; i < len(rendered); {
		if len(running) > room/2 {
			running = shorten(running, room/2)
		}
		budget := room - promptOverhead(running)
		if budget < minChunkBytes {
			return "", calls, ErrWindowTooSmall
		}
		var body strings.Builder
		for i < len(rendered) {
			r := rendered[i]
			if body.Len()+len(r) > budget {
				if body.Len() == 0 {
					body.WriteString(shorten(r, budget))
					i++
				}
				break
			}
			body.WriteString(r)
			i++
		}
		out, err := s.complete(ctx, SystemPrompt, userPrompt(running, body.String()), s.maxTokens)
		calls++
		if err != nil {
			return "", calls, err
		}
		running = out
	}
	return running, calls, nil
}

// withLatestRequest returns summary with its latest-request section
// replaced by quote (none when quote is empty).
func withLatestRequest(summary, quote string) string {
	summary = strings.TrimSpace(stripLatestRequest(summary))
	if quote == "" {
		return summary
	}
	return summary + latestRequestSep + quote
}

// latestRequestSep goes between a summary and its quote.
const latestRequestSep = "\n\n" + LatestRequestHeading + "\n\n"

// stripLatestRequest drops the latest-request section (and what follows
// it) from a summary.
func stripLatestRequest(summary string) string {
	if i := strings.Index(summary, LatestRequestHeading); i >= 0 {
		return summary[:i]
	}
	return summary
}

// latestRequest is the latest-request section of a summary, "" if none.
func latestRequest(summary string) string {
	i := strings.Index(summary, LatestRequestHeading)
	if i < 0 {
		return ""
	}
	return strings.TrimSpace(summary[i+len(LatestRequestHeading):])
}

// messageText is the text of a user message as a quote: its text blocks,
// and a line per image.
func messageText(m agent.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		switch c.Type {
		case agent.ContentText:
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(c.Text)
		case agent.ContentImage:
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString("[image " + c.Mime + "]")
		}
	}
	return b.String()
}
